// Wide data movement for maps that check_map has proven valid (conditions 1-6): with
// every shard address and every element of F proven to be written as the contract
// allows, conversion needs no writer record and no read record, only row copies, and
// replica comparison of the elements replicas share. Internal to core.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck::wide {

// How many threads a conversion may use and from what size on; the answer never
// depends on either (tests run 1, 2 and 8 threads).
struct Threading {
  int threads = 0;            // 0: what OpenMP offers (OMP_NUM_THREADS or the cores)
  Index min_bytes = Index{1} << 22;  // below this many bytes moved, one thread
};

// One piece's block between two buffers, in the piece's row-major element order.
struct Block {
  const Extents* shape = nullptr;
  const std::byte* from = nullptr;
  const StridedView* from_view = nullptr;
  std::byte* to = nullptr;
  const StridedView* to_view = nullptr;
  double scale = 1.0;   // applied as to = from * scale (multiply) or from / scale
  bool multiply = true;
  Index numel = 0;      // elements it moves (the proof counted them)
};

// Copies every block; blocks must write disjoint addresses (so order is free). With
// `digest_of_written`, also sums the digest terms (contract 10) of every element
// written, taking each destination address as the element's index, while the rows are
// still in cache; returns false (and copies nothing) when a destination row is not
// contiguous, so that the caller digests in a pass of its own.
bool copy_blocks(DType dtype, const std::vector<Block>& blocks, const Threading& threading,
                 std::uint64_t* digest_of_written = nullptr);

// Copies the blocks one after another, the last first, so that where they overlap the
// first block's value is what remains (the first writer of the strict visiting order).
void copy_blocks_last_first(DType dtype, const std::vector<Block>& blocks, const Threading& threading);

struct Mismatch {
  std::size_t block = 0;  // index into the compared blocks
  Index k = 0;            // row-major index within that block
};

// Compares each block's scaled source with what its destination holds, bitwise; the
// first mismatch in (block, row-major index) order, whatever the thread count.
std::optional<Mismatch> compare_blocks(DType dtype, const std::vector<Block>& blocks, const Threading& threading);

// digest(F) (contract 10) of a whole buffer, summed over threads.
std::uint64_t parallel_digest(const Buffer& full, const Threading& threading);

}  // namespace shardcheck::wide
