// The device backend, written once over a `System`: where the batch's memory lives and
// which Thrust execution policy runs it. backend_omp.cc instantiates it for Thrust's
// OpenMP system (host memory, real threads), core/src/cuda/backend_cuda.cu for CUDA.
//
// A System provides:
//   static constexpr const char* kName;
//   static constexpr Index kDefaultTile;            // elements per work item
//   static constexpr bool kStreams;                 // host threads: large copies stream
//   template <class T> using vector = ...;          // memory the policy can reach
//   template <class T> static T* raw(vector<T>&);
//   template <class Fn> static void launch(const HostBatch&, int threads, Fn&& fn);
//       calls fn(policy, batch) with a Batch whose pointers the policy can reach, and
//       makes what the runs wrote visible in the caller's buffers when it returns.
//   static std::uint64_t digest(const Buffer&, Index tile, int threads);
//   static constexpr bool kHostMemory;              // its batches also reach host memory
//   static std::pair<std::byte*, std::shared_ptr<void>> allocate(std::size_t bytes);
//       device memory and what frees it;
//   static void copy(void* to, const void* from, std::size_t bytes);  // any memory to any
//   static void zero(void* at, std::size_t bytes);  // device memory
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <thrust/fill.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include "device_kernels.h"
#include "row_plan.h"
#include "shardcheck/backend.h"
#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck::device {

// A batch as the host builds it: runs and axes in host memory; the runs point into memory
// the system reaches.
struct HostBatch {
  std::vector<Run> runs;
  std::vector<detail::WalkAxis> axes;  // as make_row_plan writes them
  Index tile = 1;
  std::uint32_t element_size = 1;
  Index items = 0;
  Index bytes = 0;           // moved: what decides the thread count
  Index to_extent = 0;       // 1 + the highest destination address any run writes
  bool round_robin = false;  // see Batch::round_robin
  Index deal = 1;            // see Batch::round_robin

  Batch view() const {
    return Batch{
        runs.data(), static_cast<std::uint32_t>(runs.size()), axes.data(), tile, element_size, items, round_robin,
        deal};
  }
};

// The format a block scales in, or nullopt when the device does not run it (the legacy
// model's torch arithmetic, an optimizer power, a scale the arithmetic cannot hold):
// conversion refuses the last before it moves data, the rest stay on the CPU backend.
inline std::optional<Run> run_scaling(DType dtype, const BlockCopy& b) {
  Run run;
  if (!is_floating(dtype) || b.scale == 1.0 || b.power == 0) return run;
  if (b.arithmetic != Arithmetic::contract || (b.power != 1 && b.power != -1)) return std::nullopt;
  run.up = b.multiply == (b.power > 0);
  switch (dtype) {
    case DType::float16:
      run.format = Format::float16;
      break;
    case DType::bfloat16:
      run.format = Format::bfloat16;
      break;
    case DType::float32:
      run.format = Format::float32;
      break;
    default:
      run.format = Format::float64;
  }
  if (run.format == Format::float64) {
    if (!scaling::arithmetic_factor(b.scale, run.factor)) return std::nullopt;
  } else {
    float factor = 1.0f;
    if (!scaling::arithmetic_factor(b.scale, factor)) return std::nullopt;
    run.factor = factor;
  }
  return run;
}

// The highest destination address a block's rows reach (checked views: no overflow).
inline Index view_max(const detail::RowPlan& p, const std::vector<detail::WalkAxis>& axes) {
  Index at = p.to_offset + (p.len - 1) * std::max<Index>(0, p.to_step);
  for (std::int32_t a = 0; a < p.axes_count; ++a) {
    const detail::WalkAxis& axis = axes[static_cast<std::size_t>(p.axes_begin + a)];
    at += (axis.extent - 1) * std::max<Index>(0, axis.to_stride);
  }
  return at;
}

// Builds the batch, or returns false when a block is one the device does not run. With
// `disjoint` (the blocks write disjoint addresses), runs of equally many items are dealt
// round-robin; blocks that may overlap keep run order, so that replicas of one element are
// claimed by different threads at the same time, where a race in the writer record shows.
inline bool make_batch(DType dtype, std::span<const BlockCopy> blocks, Index tile, HostBatch& out,
                       bool disjoint = true) {
  out = HostBatch{};
  out.tile = tile;
  out.element_size = static_cast<std::uint32_t>(element_size(dtype));
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const BlockCopy& b = blocks[i];
    std::optional<Run> run = run_scaling(dtype, b);
    if (!run) return false;
    detail::RowPlan p;
    if (!detail::make_row_plan(b, i, out.axes, p)) continue;
    run->from = reinterpret_cast<const unsigned char*>(b.from);
    run->to = reinterpret_cast<unsigned char*>(b.to);
    run->from_offset = p.from_offset;
    run->to_offset = p.to_offset;
    run->len = p.len;
    run->from_step = p.from_step;
    run->to_step = p.to_step;
    run->rows = p.rows;
    run->segments = (p.len + tile - 1) / tile;
    run->first_item = out.items;
    run->axes_begin = p.axes_begin;
    run->axes_count = p.axes_count;
    run->block = static_cast<std::uint32_t>(i);
    out.items += p.rows * run->segments;
    out.bytes += b.numel * static_cast<Index>(out.element_size);
    out.to_extent = std::max(out.to_extent, view_max(p, out.axes) + 1);
    out.runs.push_back(*run);
  }
  out.round_robin = disjoint && out.runs.size() > 1 && std::all_of(out.runs.begin(), out.runs.end(), [&](const Run& r) {
                      return r.rows * r.segments == out.runs.front().rows * out.runs.front().segments;
                    });
  const bool one_source =
      std::all_of(out.runs.begin(), out.runs.end(), [&](const Run& r) { return r.from == out.runs.front().from; });
  if (out.round_robin && !one_source) {
    // Reads stay long: blocks out of different sources (a rebuild) are dealt in stretches
    // of about a tile of each, since reading a few hundred bytes of each of many sources in
    // turn costs far more than the same bytes in longer stretches (column blocks of 2 KiB
    // rows, one thread: 1.6x memcpy dealt row by row, 0.8x in stretches of 16 rows). Blocks
    // out of one source (an extract) are dealt row by row, which reads it front to back.
    Index longest = 0;
    for (const Run& r : out.runs) longest = std::max(longest, r.len);
    const Index per_run = out.runs.front().rows * out.runs.front().segments;
    out.deal = std::max<Index>(1, tile / longest);
    while (per_run % out.deal != 0) --out.deal;
  }
  return true;
}

template <class System>
class DeviceBackend final : public Backend {
 public:
  std::string_view name() const override { return System::kName; }
  bool runs_batches() const override { return true; }

  // One block at a time (the recorded path of conversion): a batch of one. A block whose
  // destination overlaps itself keeps its last row-major write, an order the device
  // does not promise, so such a block (and one it does not run) goes to the CPU backend.
  void copy_block(DType dtype, const BlockCopy& copy) override {
    if (!is_unique(*copy.shape, copy.to_view->strides) || !run_copies(dtype, {&copy, 1}, Threading{}, nullptr)) {
      host_fallback().copy_block(dtype, copy);
    }
  }

  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    HostBatch batch;
    if (!make_batch(dtype, {&copy, 1}, tile_of(Threading{}), batch)) return host_fallback().compare_block(dtype, copy);
    const Position first = compare(batch, Threading{});
    if (first.block == kNoPosition.block) return std::nullopt;
    return first.k;
  }

  // Returns false (nothing copied) only for blocks the device does not run, or when a
  // digest is asked of it and it cannot give one; the caller then uses the per-block path.
  bool copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                   std::uint64_t* digest_of_written) override {
    if (run_copies(dtype, blocks, threading, digest_of_written)) return true;
    return Backend::copy_blocks(dtype, blocks, threading, digest_of_written);
  }

  // The writer record settles overlaps: every destination address takes the least block
  // index writing it, then each block writes what it claimed. Blocks into different
  // buffers cannot overlap but share no record, so those go block by block.
  void copy_blocks_first_wins(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading) override {
    HostBatch batch;
    const bool one_destination =
        std::all_of(blocks.begin(), blocks.end(), [&](const BlockCopy& b) { return b.to == blocks.front().to; });
    if (!one_destination || !make_batch(dtype, blocks, tile_of(threading), batch, /*disjoint=*/false)) {
      Backend::copy_blocks_first_wins(dtype, blocks, threading);
      return;
    }
    if (batch.items == 0) return;
    typename System::template vector<std::uint32_t> writer(static_cast<std::size_t>(batch.to_extent));
    std::uint32_t* record = System::raw(writer);
    System::launch(batch, threads_for(threading, batch.bytes), [&](auto policy, const Batch& on_device) {
      thrust::fill(policy, record, record + batch.to_extent, kNoPosition.block);
      const thrust::counting_iterator<Index> first(0);
      thrust::for_each(policy, first, first + on_device.items, ClaimSegment{on_device, record});
      thrust::for_each(policy, first, first + on_device.items, CopyClaimed{on_device, record});
    });
  }

  std::optional<BlockMismatch> compare_blocks(DType dtype, std::span<const BlockCopy> blocks,
                                              const Threading& threading) override {
    HostBatch batch;
    if (!make_batch(dtype, blocks, tile_of(threading), batch)) return Backend::compare_blocks(dtype, blocks, threading);
    const Position first = compare(batch, threading);
    if (first.block == kNoPosition.block) return std::nullopt;
    return BlockMismatch{first.block, first.k};
  }

  std::uint64_t digest(const Buffer& full, const Threading& threading) override {
    return System::digest(full, tile_of(threading), threads_for(threading, static_cast<Index>(full.size_bytes())));
  }

  std::optional<ScaleFaultAt> first_scale_fault(DType dtype, std::span<const BlockCopy> blocks,
                                                const Threading& threading) override {
    if (!is_floating(dtype)) return std::nullopt;
    HostBatch batch;
    if (!make_batch(dtype, blocks, tile_of(threading), batch)) {
      return host_fallback().first_scale_fault(dtype, blocks, threading);
    }
    if (batch.items == 0) return std::nullopt;
    FaultPosition first = kNoFault;
    System::launch(batch, threads_for(threading, batch.bytes), [&](auto policy, const Batch& on_device) {
      first = thrust::transform_reduce(policy, thrust::counting_iterator<Index>(0),
                                       thrust::counting_iterator<Index>(on_device.items), ScaleFaultSegment{on_device},
                                       kNoFault, FirstFault{});
    });
    if (first.block == kNoFault.block) return std::nullopt;
    return ScaleFaultAt{first.block, first.from, first.to};
  }

  bool reaches(Memory memory) const override { return memory == Memory::device || System::kHostMemory; }

  Buffer allocate(DType dtype, Index numel, Memory memory, bool zeroed) override {
    if (memory == Memory::host) return Backend::allocate(dtype, numel, memory, zeroed);
    const auto bytes = checked_mul(numel, static_cast<Index>(element_size(dtype)));
    if (numel < 0 || !bytes) throw std::length_error("shardcheck: invalid element count");
    auto [data, owner] = System::allocate(static_cast<std::size_t>(*bytes));
    if (zeroed) System::zero(data, static_cast<std::size_t>(*bytes));
    return Buffer::in_device_memory(dtype, numel, data, std::move(owner));
  }

  // From and to either memory: a host buffer is where data for the device comes from.
  Buffer copy_to(const Buffer& buffer, Memory memory) override {
    Buffer out = allocate(buffer.dtype(), buffer.numel(), memory, false);
    if (buffer.numel() > 0) System::copy(out.data(), buffer.data(), buffer.size_bytes());
    return out;
  }

  std::uint64_t element_bits(const Buffer& buffer, Index i) override {
    if (buffer.memory() == Memory::host) return buffer.bits(i);
    if (i < 0 || i >= buffer.numel()) throw std::out_of_range("shardcheck: element_bits outside the buffer");
    Buffer one = Buffer::uninitialized(buffer.dtype(), 1);
    const std::size_t size = element_size(buffer.dtype());
    System::copy(one.data(), buffer.data() + static_cast<std::size_t>(i) * size, size);
    return one.bits(0);
  }

 private:
  // Blocks the device does not run (a destination that overlaps itself, which only a
  // planted bug lets through; a scale outside the device's arithmetic) go to the CPU
  // backend where the memory is the host's; elsewhere that is a caller's bug.
  Backend& host_fallback() {
    if (!System::kHostMemory) {
      throw std::logic_error(std::string("shardcheck: the ") + System::kName +
                             " backend was handed a block it does not run, in memory the CPU backend does not reach");
    }
    return *cpu_;
  }

  // False, copying nothing, for blocks the device does not run.
  bool run_copies(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                  std::uint64_t* digest_of_written) {
    HostBatch batch;
    if (!make_batch(dtype, blocks, tile_of(threading), batch)) return false;
    std::uint64_t terms = 0;
    if (batch.items > 0) {
      const bool digest = digest_of_written != nullptr;
      const bool stream = System::kStreams && batch.bytes >= detail::kStreamTotalBytes;
      const Index group =
          stream ? std::max<Index>(1, kStreamGroupBytes / std::max<Index>(1, batch.bytes / batch.items)) : 1;
      const Index units = (batch.items + group - 1) / group;
      System::launch(batch, threads_for(threading, batch.bytes), [&](auto policy, const Batch& on_device) {
        terms = thrust::transform_reduce(policy, thrust::counting_iterator<Index>(0),
                                         thrust::counting_iterator<Index>(units),
                                         CopySegment{on_device, digest, stream, group}, std::uint64_t{0}, SumTerms{});
      });
    }
    if (digest_of_written != nullptr) *digest_of_written = terms;
    return true;
  }

  // Bytes a streaming host thread copies between fences: enough that the fence's wait is
  // a few per cent of the copy, few enough that a 64 MiB batch is hundreds of units.
  static constexpr Index kStreamGroupBytes = Index{256} << 10;

  static Index tile_of(const Threading& threading) {
    return threading.tile > 0 ? threading.tile : System::kDefaultTile;
  }

  static int threads_for(const Threading& threading, Index bytes) {
    if (bytes < threading.min_bytes) return 1;
    return threading.threads;  // 0: the system's own choice
  }

  Position compare(const HostBatch& batch, const Threading& threading) {
    Position first = kNoPosition;
    if (batch.items == 0) return first;
    System::launch(batch, threads_for(threading, batch.bytes), [&](auto policy, const Batch& on_device) {
      first = thrust::transform_reduce(policy, thrust::counting_iterator<Index>(0),
                                       thrust::counting_iterator<Index>(on_device.items), CompareSegment{on_device},
                                       kNoPosition, FirstPosition{});
    });
    return first;
  }

  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

}  // namespace shardcheck::device
