// Wide data movement for maps that check_map has proven valid (conditions 1-6): with
// every shard address and every element of F proven to be written as the contract
// allows, conversion needs no writer record and no read record, only row copies, and
// replica comparison of the elements replicas share. Internal to core.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "shardcheck/backend.h"
#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck::wide {

// Copies every block; blocks must write disjoint addresses (so order is free). With
// `digest_of_written`, also sums the digest terms (contract 10) of every element
// written, taking each destination address as the element's index, while the rows are
// still in cache; returns false (and copies nothing) when a destination row is not
// contiguous, so that the caller digests in a pass of its own.
bool copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                 std::uint64_t* digest_of_written = nullptr);

// Copies the blocks one after another, the last first, so that where they overlap the
// first block's value is what remains (the first writer of the strict visiting order).
void copy_blocks_last_first(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading);

// Compares each block's scaled source with what its destination holds, bitwise; the
// first mismatch in (block, row-major index) order, whatever the thread count.
std::optional<BlockMismatch> compare_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading);

// digest(F) (contract 10) of a whole buffer, summed over threads.
std::uint64_t parallel_digest(const Buffer& full, const Threading& threading);

}  // namespace shardcheck::wide
