// The device code of strict conversion, written once: plain structs and
// `__host__ __device__` functors that Thrust runs over work items, compiled by g++ with
// Thrust's OpenMP system (every build that finds Thrust's headers, so CI executes it on
// real threads) and by nvcc for CUDA. Addressing decodes a work item into a run of
// elements; scaling, NaN bits and the digest term come from the headers the CPU path
// uses (shardcheck/scaling.h, shardcheck/digest.h), so no rule is written twice.
//
// A batch is a list of runs, one per non-empty block: the block reduced to rows
// (detail::RowPlan), each row cut into segments of at most `tile` elements; work item i
// is one segment. Results never depend on the tile or the thread schedule: copies write
// disjoint addresses, overlapping replicas are settled by an atomic minimum (the first
// block wins), and a comparison returns the least (block, index) that differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "shardcheck/digest.h"
#include "shardcheck/host_device.h"
#include "shardcheck/scaling.h"
#include "streaming.h"
#include "walk_axis.h"

namespace shardcheck::device {

using Index = std::int64_t;

enum class Format : std::uint8_t { plain, float16, bfloat16, float32, float64 };

// One block of a batch, cut into work items.
struct Run {
  const unsigned char* from = nullptr;
  unsigned char* to = nullptr;
  Index from_offset = 0;  // element addresses of the block's first element
  Index to_offset = 0;
  Index len = 1;  // a row: len elements, from_step and to_step apart
  Index from_step = 1;
  Index to_step = 1;
  Index rows = 1;
  Index segments = 1;           // work items per row
  Index first_item = 0;         // the run's first work item in the batch
  std::int32_t axes_begin = 0;  // outer axes (outermost first) in Batch::axes
  std::int32_t axes_count = 0;
  std::uint32_t block = 0;  // the block's index in the caller's span
  Format format = Format::plain;
  bool up = true;       // multiply (extract) or divide (rebuild)
  double factor = 1.0;  // the scale in the arithmetic type, exact in a double
};

struct Batch {
  const Run* runs = nullptr;
  std::uint32_t run_count = 0;
  const detail::WalkAxis* axes = nullptr;
  Index tile = 1;
  std::uint32_t element_size = 1;
  Index items = 0;
  // Runs of equally many items may be dealt round-robin, `deal` items of each run in turn,
  // so that consecutive items walk blocks side by side (rows r to r + deal - 1 of every
  // column block of F before row r + deal) and a thread's share of the items is one
  // stretch of the buffer they share. Only for blocks with disjoint destinations.
  bool round_robin = false;
  Index deal = 1;  // divides every run's item count
};

// The run that holds work item `item`: the last one whose first item is not after it.
SHARDCHECK_HD inline const Run& run_at(const Batch& b, Index item) {
  std::uint32_t lo = 0;
  std::uint32_t hi = b.run_count;
  while (hi - lo > 1) {
    const std::uint32_t mid = lo + (hi - lo) / 2;
    if (b.runs[mid].first_item <= item) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return b.runs[lo];
}

// One work item: `count` elements from element addresses `from` and `to`, the first of
// them the block's element `k` in row-major order.
struct Segment {
  const Run* run;
  Index from;
  Index to;
  Index count;
  Index k;
};

SHARDCHECK_HD inline Segment segment_at(const Batch& b, Index item) {
  const Index stretch = item / b.deal;
  const Run& r = b.round_robin ? b.runs[stretch % b.run_count] : run_at(b, item);
  const Index local = b.round_robin ? stretch / b.run_count * b.deal + item % b.deal : item - r.first_item;
  const Index row = local / r.segments;
  const Index first = (local % r.segments) * b.tile;
  Index from = r.from_offset;
  Index to = r.to_offset;
  Index rest = row;
  for (std::int32_t a = r.axes_count - 1; a >= 0; --a) {
    const detail::WalkAxis& axis = b.axes[r.axes_begin + a];
    const Index i = rest % axis.extent;
    rest /= axis.extent;
    from += i * axis.from_stride;
    to += i * axis.to_stride;
  }
  const Index left = r.len - first;
  return Segment{&r, from + first * r.from_step, to + first * r.to_step, left < b.tile ? left : b.tile,
                 row * r.len + first};
}

SHARDCHECK_HD inline std::uint64_t load(const unsigned char* base, Index at, std::uint32_t size) {
  switch (size) {
    case 1:
      return base[at];
    case 2:
      return reinterpret_cast<const std::uint16_t*>(base)[at];
    case 4:
      return reinterpret_cast<const std::uint32_t*>(base)[at];
    default:
      return reinterpret_cast<const std::uint64_t*>(base)[at];
  }
}

SHARDCHECK_HD inline void store(unsigned char* base, Index at, std::uint32_t size, std::uint64_t bits) {
  switch (size) {
    case 1:
      base[at] = static_cast<std::uint8_t>(bits);
      break;
    case 2:
      reinterpret_cast<std::uint16_t*>(base)[at] = static_cast<std::uint16_t>(bits);
      break;
    case 4:
      reinterpret_cast<std::uint32_t*>(base)[at] = static_cast<std::uint32_t>(bits);
      break;
    default:
      reinterpret_cast<std::uint64_t*>(base)[at] = bits;
  }
}

// Contract 1.2's arithmetic on source bits `bits` as a run scales them: the bits it
// writes (NaN bits kept) and whether the value overflowed or flushed.
struct RunScaled {
  std::uint64_t bits;
  scaling::ScaleFault fault;
};

template <class Format>
SHARDCHECK_HD inline RunScaled widened(scaling::Scaled<Format> scaled) {
  return RunScaled{scaled.bits, scaled.fault};
}

SHARDCHECK_HD inline RunScaled scale_as_run(const Run& r, std::uint64_t bits) {
  using namespace scaling;
  const auto factor32 = static_cast<float>(r.factor);
  switch (r.format) {
    case Format::plain:
      return {bits, ScaleFault::none};
    case Format::float16:
      return widened(scale_element<Float16>(static_cast<std::uint16_t>(bits), factor32, r.up));
    case Format::bfloat16:
      return widened(scale_element<BFloat16>(static_cast<std::uint16_t>(bits), factor32, r.up));
    case Format::float32:
      return widened(scale_element<Float32>(static_cast<std::uint32_t>(bits), factor32, r.up));
    case Format::float64:
      return widened(scale_element<Float64>(bits, r.factor, r.up));
  }
  return {bits, ScaleFault::none};
}

// The bits a run writes for source bits `bits`.
SHARDCHECK_HD inline std::uint64_t moved(const Run& r, std::uint64_t bits) { return scale_as_run(r, bits).bits; }

// Contract 10's term of one element, the element's index being its address in F
// (digest_term is constexpr: nvcc compiles it for the device with --expt-relaxed-constexpr).
SHARDCHECK_HD inline std::uint64_t digest_term_at(Index index, std::uint64_t bits) {
  return digest_term(static_cast<std::uint64_t>(index), bits);
}

// Moves `count` elements of width sizeof(Bits) (the element type chosen once per item, not
// per element); returns the digest terms of what it wrote when `digest`.
template <class Bits>
SHARDCHECK_HD inline std::uint64_t copy_elements(const Run& r, Index from, Index to, Index count, bool digest,
                                                 bool stream) {
  const Bits* src = reinterpret_cast<const Bits*>(r.from) + from;
  Bits* dst = reinterpret_cast<Bits*>(r.to) + to;
  std::uint64_t terms = 0;
  if (r.format == Format::plain && r.from_step == 1 && r.to_step == 1) {
#if defined(__CUDA_ARCH__)
    // Element by element in the element's width: a memcpy of a run-time length is a
    // byte loop in device code (4-22x a device copy on an H200), and the GPU has no
    // streaming stores to go around its caches.
    (void)stream;
    for (Index j = 0; j < count; ++j) dst[j] = src[j];
#else
    // With `stream`, written around the caches (streaming.h: the caller fences).
    detail::copy_run(reinterpret_cast<std::byte*>(dst), reinterpret_cast<const std::byte*>(src),
                     static_cast<std::size_t>(count) * sizeof(Bits), stream);
#endif
    // The bits written are the bits read: summing the source, just read, leaves streamed
    // destination lines where they went.
    if (digest) {
      for (Index j = 0; j < count; ++j) terms += digest_term_at(to + j, src[j]);
    }
    return terms;
  }
  for (Index j = 0; j < count; ++j) {
    const auto bits = static_cast<Bits>(moved(r, src[j * r.from_step]));
    dst[j * r.to_step] = bits;
    if (digest) terms += digest_term_at(to + j * r.to_step, bits);
  }
  return terms;
}

// Copies work items [unit * group, unit * group + group) in item order; returns the
// digest terms of what it wrote when `digest`. With `stream` (host systems, batches far
// larger than the caches), contiguous plain rows are streamed and the group ends with one
// fence: a fence waits for every streamed store in flight, too slow to follow each row.
struct CopySegment {
  Batch batch;
  bool digest = false;
  bool stream = false;
  Index group = 1;
  SHARDCHECK_HD std::uint64_t operator()(Index unit) const {
    const Index first = unit * group;
    const Index last = first + group < batch.items ? first + group : batch.items;
    std::uint64_t terms = 0;
    for (Index item = first; item < last; ++item) terms += copy_item(item);
#if !defined(__CUDA_ARCH__)
    if (stream) detail::stream_fence();
#endif
    return terms;
  }

  SHARDCHECK_HD std::uint64_t copy_item(Index item) const {
    const Segment s = segment_at(batch, item);
    switch (batch.element_size) {
      case 1:
        return copy_elements<std::uint8_t>(*s.run, s.from, s.to, s.count, digest, stream);
      case 2:
        return copy_elements<std::uint16_t>(*s.run, s.from, s.to, s.count, digest, stream);
      case 4:
        return copy_elements<std::uint32_t>(*s.run, s.from, s.to, s.count, digest, stream);
      default:
        return copy_elements<std::uint64_t>(*s.run, s.from, s.to, s.count, digest, stream);
    }
  }
};

// The writer record of overlapping blocks: each destination address ends holding the
// least block index that writes it. An atomic minimum, so the result is the same
// whatever order the items run in.
SHARDCHECK_HD inline void claim(std::uint32_t* slot, std::uint32_t block) {
#if defined(__CUDA_ARCH__)
  atomicMin(slot, block);
#else
  std::uint32_t seen = __atomic_load_n(slot, __ATOMIC_RELAXED);
  while (block < seen && !__atomic_compare_exchange_n(slot, &seen, block, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
#endif
}

struct ClaimSegment {
  Batch batch;
  std::uint32_t* writer = nullptr;  // per destination address, from 0
  SHARDCHECK_HD void operator()(Index item) const {
    const Segment s = segment_at(batch, item);
    for (Index j = 0; j < s.count; ++j) claim(writer + (s.to + j * s.run->to_step), s.run->block);
  }
};

// Copies the elements of a segment whose destination its block claimed.
struct CopyClaimed {
  Batch batch;
  const std::uint32_t* writer = nullptr;
  SHARDCHECK_HD void operator()(Index item) const {
    const Segment s = segment_at(batch, item);
    const Run& r = *s.run;
    for (Index j = 0; j < s.count; ++j) {
      const Index to = s.to + j * r.to_step;
      if (writer[to] != r.block) continue;
      store(r.to, to, batch.element_size, moved(r, load(r.from, s.from + j * r.from_step, batch.element_size)));
    }
  }
};

// A position in a batch, ordered by block then row-major index; `none` is after all.
struct Position {
  std::uint32_t block;
  Index k;
};

inline constexpr Position kNoPosition{0xffffffffu, 0x7fffffffffffffffll};

struct FirstPosition {
  SHARDCHECK_HD Position operator()(const Position& a, const Position& b) const {
    if (a.block != b.block) return a.block < b.block ? a : b;
    return a.k <= b.k ? a : b;
  }
};

template <class Bits>
SHARDCHECK_HD inline Index first_difference(const Run& r, Index from, Index to, Index count) {
  const Bits* src = reinterpret_cast<const Bits*>(r.from) + from;
  const Bits* held = reinterpret_cast<const Bits*>(r.to) + to;
  for (Index j = 0; j < count; ++j) {
    if (static_cast<Bits>(moved(r, src[j * r.from_step])) != held[j * r.to_step]) return j;
  }
  return -1;
}

// The first element of a segment whose scaled source differs from what its destination holds.
struct CompareSegment {
  Batch batch;
  SHARDCHECK_HD Position operator()(Index item) const {
    const Segment s = segment_at(batch, item);
    Index j = -1;
    switch (batch.element_size) {
      case 1:
        j = first_difference<std::uint8_t>(*s.run, s.from, s.to, s.count);
        break;
      case 2:
        j = first_difference<std::uint16_t>(*s.run, s.from, s.to, s.count);
        break;
      case 4:
        j = first_difference<std::uint32_t>(*s.run, s.from, s.to, s.count);
        break;
      default:
        j = first_difference<std::uint64_t>(*s.run, s.from, s.to, s.count);
    }
    return j < 0 ? kNoPosition : Position{s.run->block, s.k + j};
  }
};

// Whether scaling `bits` as the run does overflows or flushes (contract 1.2).
SHARDCHECK_HD inline bool scale_faults(const Run& r, std::uint64_t bits) {
  return scale_as_run(r, bits).fault != scaling::ScaleFault::none;
}

// An element whose scaling faults: its block, its destination address and its source
// address, ordered by block, then destination; `kNoFault` is after all.
struct FaultPosition {
  std::uint32_t block;
  Index to;
  Index from;
};

inline constexpr FaultPosition kNoFault{0xffffffffu, 0x7fffffffffffffffll, 0};

struct FirstFault {
  SHARDCHECK_HD FaultPosition operator()(const FaultPosition& a, const FaultPosition& b) const {
    if (a.block != b.block) return a.block < b.block ? a : b;
    return a.to <= b.to ? a : b;
  }
};

// The segment's faulting element with the lowest destination address.
struct ScaleFaultSegment {
  Batch batch;
  SHARDCHECK_HD FaultPosition operator()(Index item) const {
    const Segment s = segment_at(batch, item);
    const Run& r = *s.run;
    FaultPosition lowest = kNoFault;
    for (Index j = 0; j < s.count; ++j) {
      const Index from = s.from + j * r.from_step;
      const Index to = s.to + j * r.to_step;
      if (to < lowest.to && scale_faults(r, load(r.from, from, batch.element_size))) lowest = {r.block, to, from};
    }
    return lowest;
  }
};

struct SumTerms {
  SHARDCHECK_HD std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};

// digest(F) of a contiguous buffer, `tile` elements per item.
struct DigestTile {
  const unsigned char* data = nullptr;
  Index numel = 0;
  Index tile = 1;
  std::uint32_t element_size = 1;
  SHARDCHECK_HD std::uint64_t operator()(Index item) const {
    const Index first = item * tile;
    const Index last = first + tile < numel ? first + tile : numel;
    std::uint64_t terms = 0;
    for (Index i = first; i < last; ++i) terms += digest_term_at(i, load(data, i, element_size));
    return terms;
  }
};

}  // namespace shardcheck::device
