// Backends move and compare strided blocks of raw elements. One interface; the CPU
// backend (Eigen rows, wide row copies for batches) is always present; the device backend
// (core/src/device/: Thrust, one source) runs on OpenMP threads wherever Thrust's headers
// are found, and on CUDA when built with the toolkit and a device is present.
#pragma once

#include <memory>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck {

// The one block type of every conversion path: a piece's elements in its row-major order,
// read through `from_view` and written through `to_view`. Views are pointers (to a piece's
// own, usually) so that a plan of a million blocks copies no strides.
struct BlockCopy {
  const Extents* shape = nullptr;
  const std::byte* from = nullptr;
  const StridedView* from_view = nullptr;
  std::byte* to = nullptr;
  const StridedView* to_view = nullptr;
  // Scaling: to = from * scale^power when multiply, from / scale^power otherwise.
  // scale == 1 moves bits unchanged.
  double scale = 1.0;
  int power = 1;
  bool multiply = true;
  // Contract 1.2's arithmetic (NaN bits kept, float32 opmath for 16-bit types);
  // only the legacy model asks for torch's arithmetic instead.
  Arithmetic arithmetic = Arithmetic::contract;
  Index numel = 0;  // elements it moves: numel(*shape)
};

// The two directions of contract 1.2 a piece's elements move in.
enum class Direction {
  rebuild,  // from the shard (read through the dest view) to F (written through the source view)
  extract,  // from F (read through the source view) to the shard (written through the dest view)
};

// The block of one piece moving in `direction`, from buffer `from` into buffer `to`:
// rebuild reads the shard and writes F, dividing by scale^p; extract reads F and writes
// the shard, multiplying. Every conversion path builds its copies here.
BlockCopy block_of(const Piece& piece, Direction direction, const Buffer& from, Buffer& to, int scale_power);

// How many threads a batched call may use and from what size on; no answer depends on
// either (tests run 1, 2 and 8 threads). `tile` is the largest run of elements one work
// item moves on a backend that cuts rows into items (0: the backend's choice); it too
// changes nothing but speed.
struct Threading {
  int threads = 0;                   // 0: what OpenMP offers (OMP_NUM_THREADS or the cores)
  Index min_bytes = Index{1} << 22;  // below this many bytes moved, one thread
  Index tile = 0;
};

// Where compare_blocks found its first difference: the block (index into the span) and
// the row-major index within it. "First" is in (block, index) order, whatever the schedule.
struct BlockMismatch {
  std::size_t block = 0;
  Index k = 0;
};

// An element whose scaling overflows or flushes (contract 1.2): the first block with one,
// in span order, and in it the one with the lowest destination address (`to`, in the
// result: F for rebuild, the shard for extract), with its source address `from`.
struct ScaleFaultAt {
  std::size_t block = 0;
  Index from = 0;
  Index to = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Capability: the backend moves a whole proven plan per call (the batched entries below
  // are its own, run in parallel). Conversion then gives it maps check_map proved valid as
  // one batch; a backend without it gets one call per piece under the writer and read
  // records, which is slower but needs nothing of it beyond copy_block and compare_block.
  virtual bool runs_batches() const { return false; }

  // Copies one block; views have been checked (in bounds, unique destination).
  virtual void copy_block(DType dtype, const BlockCopy& copy) = 0;
  // Compares `from` (after scaling as in copy_block) with what `to` already holds,
  // bitwise. Returns the row-major index within the block of the first mismatch.
  virtual std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) = 0;

  // Batched entries; the defaults loop over the blocks with the calls above.
  //
  // Copies every block; the blocks write disjoint addresses (order is free). With
  // `digest_of_written`, also sums the digest terms (contract 10) of every element written,
  // taking each destination address as the element's index; returns false, copying
  // nothing, when it cannot (the caller then digests the result with digest()).
  virtual bool copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                           std::uint64_t* digest_of_written = nullptr);
  // Copies blocks that may overlap (replicas): where they do, the value of the first block
  // in span order remains, as if they were copied last to first.
  virtual void copy_blocks_first_wins(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading);
  // The first mismatch of compare_block over the blocks, in (block, index) order.
  virtual std::optional<BlockMismatch> compare_blocks(DType dtype, std::span<const BlockCopy> blocks,
                                                      const Threading& threading);
  // digest(F) of a whole buffer (contract 10).
  virtual std::uint64_t digest(const Buffer& full, const Threading& threading);
  // Contract 1.2 over blocks about to be scaled (contract arithmetic, power 1): where the
  // first overflow or flush is, or nullopt. Judged before any data moves.
  virtual std::optional<ScaleFaultAt> first_scale_fault(DType dtype, std::span<const BlockCopy> blocks,
                                                        const Threading& threading);

  // Memory. A backend reaches host memory, a device's, or both; the blocks it is handed
  // point into memory it reaches (conversion checks the buffers first).
  virtual bool reaches(Memory memory) const { return memory == Memory::host; }
  // `numel` elements in `memory`, contents unspecified (zeroed with `zeroed`): where a
  // conversion puts its result. Host memory is always given (copy_to brings results there).
  virtual Buffer allocate(DType dtype, Index numel, Memory memory, bool zeroed = false);
  // A copy of `buffer` (host memory, or memory this backend reaches) in `memory`: how
  // data gets to a device and back.
  virtual Buffer copy_to(const Buffer& buffer, Memory memory);
  // The raw bits of element i (an error message's values).
  virtual std::uint64_t element_bits(const Buffer& buffer, Index i);
};

// Throws std::invalid_argument, naming `what`, unless `backend` reaches the buffer's memory:
// a caller's mistake, not a map's.
void expect_reaches(const Backend& backend, const Buffer& buffer, std::string_view what);

std::unique_ptr<Backend> make_cpu_backend();
// The device code (core/src/device/) on Thrust's OpenMP system: host memory, real
// threads. nullptr when built without Thrust's headers (device_omp_compiled() says so).
std::unique_ptr<Backend> make_device_omp_backend();
// The same, reaching its "device" memory only, as CUDA does (tests/test_device_memory.cc
// runs the CUDA backend's control flow with it on every build). nullptr without Thrust.
std::unique_ptr<Backend> make_device_only_omp_backend();
bool device_omp_compiled();
// The same device code on CUDA; nullptr when CUDA support was not built or no device is
// present.
std::unique_ptr<Backend> make_cuda_backend();
bool cuda_compiled();

}  // namespace shardcheck
