#include "wide.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <limits>

#include <Eigen/Core>

#include "element_types.h"
#include "shardcheck/digest.h"
#include "streaming.h"
#include "threads.h"
#include "row_plan.h"
#include "two_view_walk.h"

namespace shardcheck::wide {

namespace {

static_assert(std::endian::native == std::endian::little);

using Axis = detail::WalkAxis;
using Block = BlockCopy;

using Plan = detail::RowPlan;

struct Chunk {
  std::int32_t plan;  // kEveryPlan: row_begin..row_end of every plan, row by row
  Index row_begin;
  Index row_end;
  Index from_start = 0;  // the source address of its first row (by_source order)
};

constexpr std::int32_t kEveryPlan = -1;

struct Scratch {
  Index total_bytes = 0;  // moved by the planned blocks
  std::vector<Plan> plans;
  std::vector<Axis> axes;
  std::vector<Chunk> chunks;
  std::vector<std::int32_t> side_by_side;  // plans in row order of the shared buffer (interleave)
  Index side_by_side_rows = 1;             // rows of one plan copied before the next plan's
};

// Rows of one block a rebuild copies before turning to the next block (side_by_side): its
// sources are several buffers, and reading a few hundred bytes of each in turn waits on
// every one of them. Columns of 2 KiB rows, 4096 x 4096 float32 TP 8, one thread: 1.6x a
// memcpy row by row, about 0.8x in stretches of 16 rows (as the device code deals them).
constexpr Index kSourceStretchBytes = Index{32} << 10;

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

// Calls fn(from_offset, to_offset, row) for rows [row_begin, row_end) of a plan.
template <class Fn>
void for_rows(const Plan& p, const Axis* axes, Index row_begin, Index row_end, Fn&& fn) {
  detail::TwoViewWalk rows(axes, p.axes_count, p.from_offset, p.to_offset, row_begin);
  for (Index row = row_begin; row < row_end; ++row) {
    fn(rows.from(), rows.to(), row);
    rows.next();
  }
}

struct RowOp {
  DType dtype;
  std::size_t size;
  bool scale_active;
  bool up;
  double factor;           // the scale in the arithmetic type of contract 1.2 (exact in a double)
  bool streaming = false;  // contiguous rows go around the cache (see streaming.h)
};

// Conversion refused every scale the arithmetic type cannot hold (check_scales) before
// planning, so arithmetic_factor succeeds here.
RowOp row_op(DType dtype, const Block& b) {
  RowOp op{dtype, element_size(dtype), false, b.multiply, 1.0};
  if (is_floating(dtype) && b.scale != 1.0) {
    op.scale_active = true;
    if (dtype == DType::float64) {
      scaling::arithmetic_factor(b.scale, op.factor);
    } else {
      float factor = 1.0f;
      scaling::arithmetic_factor(b.scale, factor);
      op.factor = factor;
    }
  }
  return op;
}

template <class U>
void copy_row_plain(const std::byte* from, Index fs, std::byte* to, Index ts, Index n) {
  const auto* src = reinterpret_cast<const U*>(from);
  auto* dst = reinterpret_cast<U*>(to);
  for (Index j = 0; j < n; ++j) dst[j * ts] = src[j * fs];
}

// Contract 1.2's arithmetic, one element at a time (shardcheck/scaling.h).
template <class Format>
void copy_row_scaled(const std::byte* from, Index fs, std::byte* to, Index ts, Index n, double factor, bool up) {
  using Bits = typename Format::Bits;
  const auto* src = reinterpret_cast<const Bits*>(from);
  auto* dst = reinterpret_cast<Bits*>(to);
  const auto f = static_cast<typename Format::Math>(factor);
  for (Index j = 0; j < n; ++j) dst[j * ts] = scaling::scale_element<Format>(src[j * fs], f, up).bits;
}

template <class Format>
Index compare_row_scaled(const std::byte* from, Index fs, const std::byte* to, Index ts, Index n, double factor,
                         bool up) {
  using Bits = typename Format::Bits;
  const auto* src = reinterpret_cast<const Bits*>(from);
  const auto* held = reinterpret_cast<const Bits*>(to);
  const auto f = static_cast<typename Format::Math>(factor);
  for (Index j = 0; j < n; ++j) {
    if (scaling::scale_element<Format>(src[j * fs], f, up).bits != held[j * ts]) return j;
  }
  return -1;
}

template <class U>
Index compare_row_plain(const std::byte* from, Index fs, const std::byte* to, Index ts, Index n) {
  const auto* src = reinterpret_cast<const U*>(from);
  const auto* held = reinterpret_cast<const U*>(to);
  if (fs == 1 && ts == 1 && std::memcmp(from, to, static_cast<std::size_t>(n) * sizeof(U)) == 0) return -1;
  for (Index j = 0; j < n; ++j) {
    if (src[j * fs] != held[j * ts]) return j;
  }
  return -1;
}

void copy_row(const RowOp& op, const std::byte* from, Index fs, std::byte* to, Index ts, Index n) {
  if (!op.scale_active) {
    if (fs == 1 && ts == 1) {
      detail::copy_run(to, from, static_cast<std::size_t>(n) * op.size, op.streaming);
      return;
    }
    switch (op.size) {
      case 1:
        return copy_row_plain<std::uint8_t>(from, fs, to, ts, n);
      case 2:
        return copy_row_plain<std::uint16_t>(from, fs, to, ts, n);
      case 4:
        return copy_row_plain<std::uint32_t>(from, fs, to, ts, n);
      default:
        return copy_row_plain<std::uint64_t>(from, fs, to, ts, n);
    }
  }
  detail::with_float_format(op.dtype,
                            [&]<class Format>() { copy_row_scaled<Format>(from, fs, to, ts, n, op.factor, op.up); });
}

Index compare_row(const RowOp& op, const std::byte* from, Index fs, const std::byte* to, Index ts, Index n) {
  if (!op.scale_active) {
    switch (op.size) {
      case 1:
        return compare_row_plain<std::uint8_t>(from, fs, to, ts, n);
      case 2:
        return compare_row_plain<std::uint16_t>(from, fs, to, ts, n);
      case 4:
        return compare_row_plain<std::uint32_t>(from, fs, to, ts, n);
      default:
        return compare_row_plain<std::uint64_t>(from, fs, to, ts, n);
    }
  }
  return detail::with_float_format(
      op.dtype, [&]<class Format>() { return compare_row_scaled<Format>(from, fs, to, ts, n, op.factor, op.up); });
}

int thread_count(const Threading& threading, Index bytes) {
  if (bytes < threading.min_bytes) return 1;
  return available_threads(threading.threads);  // at least 1 whatever is asked
}

// The source address of row `row` of a plan.
Index row_source(const Plan& p, const Axis* axes, Index row) {
  Index from = p.from_offset;
  for (std::int32_t k = p.axes_count; k-- > 0;) {
    from += (row % axes[k].extent) * axes[k].from_stride;
    row /= axes[k].extent;
  }
  return from;
}

// Whether single-row plan `next` continues `last` (a single row, or rows it absorbed
// before): same buffers and scaling, same row, and its offsets one step further on.
bool continues(std::span<const BlockCopy> blocks, const std::vector<Axis>& axes, const Plan& last, const Plan& next) {
  const Block& a = blocks[last.block];
  const Block& b = blocks[next.block];
  if (next.axes_count != 0 || last.axes_count > 1 || a.from != b.from || a.to != b.to || a.multiply != b.multiply ||
      std::bit_cast<std::uint64_t>(a.scale) != std::bit_cast<std::uint64_t>(b.scale) || last.len != next.len ||
      last.from_step != next.from_step || last.to_step != next.to_step) {
    return false;
  }
  if (last.axes_count == 0) return next.from_offset > last.from_offset && next.to_offset > last.to_offset;
  const Axis& rows = axes[static_cast<std::size_t>(last.axes_begin)];
  return next.from_offset == last.from_offset + rows.extent * rows.from_stride &&
         next.to_offset == last.to_offset + rows.extent * rows.to_stride;
}

// Plans the blocks (Scratch::plans, axes, total_bytes). With `merge_rows`, a run of
// one-row blocks whose offsets advance by the same steps (a gather of rows) becomes one
// plan of many rows: the same rows in the same order, without a plan and a chunk per
// row. A copy only: a comparison reports a mismatch by block.
void plan_blocks(DType dtype, std::span<const BlockCopy> blocks, Scratch& s, bool merge_rows = false) {
  s.plans.clear();
  s.axes.clear();
  const auto size = static_cast<Index>(element_size(dtype));
  Index total = 0;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    // A block's shape and views are fields of its piece, and the pieces of a large map
    // left the caches during the proof: ask for a later block's fields early.
    constexpr std::size_t kAhead = 8;
    if (i + kAhead < blocks.size()) {
      const Block& later = blocks[i + kAhead];
      __builtin_prefetch(later.shape);
      __builtin_prefetch(later.from_view);
      __builtin_prefetch(later.to_view);
    }
    Plan p;
    if (!detail::make_row_plan(blocks[i], i, s.axes, p)) continue;
    total += p.rows * p.len * size;
    if (merge_rows && !s.plans.empty() && continues(blocks, s.axes, s.plans.back(), p)) {
      Plan& last = s.plans.back();
      if (last.axes_count == 0) {
        // Its axes would be the last in s.axes: a one-row plan added none, and neither did p.
        last.axes_begin = static_cast<std::int32_t>(s.axes.size());
        last.axes_count = 1;
        s.axes.push_back(Axis{1, p.from_offset - last.from_offset, p.to_offset - last.to_offset});
      }
      ++s.axes[static_cast<std::size_t>(last.axes_begin)].extent;
      ++last.rows;
      continue;
    }
    s.plans.push_back(p);
  }
  s.total_bytes = total;
}

// Bytes of rows a chunk should hold: all of them on one thread, else enough chunks for
// eight per thread, none under 64 KiB.
Index chunk_bytes(const Scratch& s, int threads) {
  return threads <= 1 ? std::numeric_limits<Index>::max()
                      : std::max<Index>(Index{1} << 16, s.total_bytes / (Index{8} * threads));
}

// Cuts the plans into chunks of whole rows, in (plan, row) order; or, `by_source`, in
// bands of at most 16 KiB visited in the order of their source addresses, so that blocks
// gathered out of one buffer (an extract of narrow column blocks, or of rows dealt to
// ranks in turn) read it front to back instead of in one strided pass per block.
void cut_chunks(DType dtype, int threads, Scratch& s, bool by_source = false) {
  s.chunks.clear();
  const auto size = static_cast<Index>(element_size(dtype));
  Index target = chunk_bytes(s, threads);
  if (by_source) target = std::min<Index>(target, Index{1} << 14);
  for (std::size_t i = 0; i < s.plans.size(); ++i) {
    const Plan& p = s.plans[i];
    const Index row_bytes = std::max<Index>(1, p.len * size);
    const Index per_chunk = std::max<Index>(1, target / row_bytes);
    for (Index r = 0; r < p.rows; r += per_chunk) {
      const Index start = by_source ? row_source(p, s.axes.data() + p.axes_begin, r) : 0;
      s.chunks.push_back(Chunk{static_cast<std::int32_t>(i), r, std::min(p.rows, r + per_chunk), start});
    }
  }
  if (by_source) {
    std::stable_sort(s.chunks.begin(), s.chunks.end(),
                     [](const Chunk& a, const Chunk& b) { return a.from_start < b.from_start; });
  }
}

Index moved_bytes(DType dtype, std::span<const BlockCopy> blocks) {
  Index total = 0;
  for (const Block& b : blocks) total += b.numel;  // a checked map: no overflow
  return total * static_cast<Index>(element_size(dtype));
}

// How a plan's rows are copied, and with `digest`, which side of each row is summed.
struct PlanCopy {
  RowOp op;
  bool digest_source = false;
};

PlanCopy plan_copy(DType dtype, const Block& b, const Plan& p, const Scratch& s, bool digest) {
  PlanCopy out{row_op(dtype, b)};
  // An unscaled row writes the bits it reads, so a fused digest can sum the source row
  // (in cache, just read) and let the stores stream; a scaled row is summed as written,
  // which keeps it in cache.
  out.digest_source = digest && !out.op.scale_active && p.from_step == 1;
  out.op.streaming = (!digest || out.digest_source) && s.total_bytes >= detail::kStreamTotalBytes;
  return out;
}

// Copies one row of a plan to `row`, element `to` of the destination; with `digest`,
// returns the digest terms of what it wrote. An unscaled row read and written
// contiguously is copied and summed in one pass (detail::copy_digesting).
std::uint64_t copy_digest_row(const PlanCopy& copy, const std::byte* from, const Plan& p, std::byte* row, Index to,
                              bool digest) {
  const RowOp& op = copy.op;
  if (copy.digest_source && p.to_step == 1) {  // digest_source: asked for, and summable on the way
    return detail::copy_digesting(op.dtype, from, row, p.len, to,
                                  detail::streams(op.streaming, static_cast<std::size_t>(p.len) * op.size));
  }
  copy_row(op, from, p.from_step, row, p.to_step, p.len);
  return digest ? digest_elements(op.dtype, copy.digest_source ? from : row, p.len, to) : 0;
}

// Copies one chunk; with `digest`, returns the digest terms of what it wrote.
std::uint64_t copy_chunk(DType dtype, std::span<const BlockCopy> blocks, const Scratch& s, const Chunk& c, bool digest) {
  const Plan& p = s.plans[static_cast<std::size_t>(c.plan)];
  const Block& b = blocks[p.block];
  // Not a structured binding: clang 14 does not let the row lambda below capture one.
  const PlanCopy copy = plan_copy(dtype, b, p, s, digest);
  const RowOp& op = copy.op;
  const auto size = static_cast<Index>(op.size);
  std::uint64_t terms = 0;
  // Rows of up to a page far apart (a gather of narrow blocks, an extract of every
  // eighth row) leave the hardware prefetcher, which stops at page boundaries, nothing
  // to follow: ask for the row after next while this one is copied.
  const Index row_bytes = p.len * size;
  const Index ahead = p.axes_count > 0 && p.from_step == 1 && row_bytes <= 4096
                          ? 2 * s.axes[static_cast<std::size_t>(p.axes_begin + p.axes_count - 1)].from_stride * size
                          : 0;
  for_rows(p, s.axes.data() + p.axes_begin, c.row_begin, c.row_end, [&](Index from, Index to, Index) {
    if (ahead != 0) {
      const std::byte* next = b.from + from * size + ahead;
      for (Index line = 0; line < row_bytes; line += 64) __builtin_prefetch(next + line);
    }
    terms += copy_digest_row(copy, b.from + from * size, p, b.to + to * size, to, digest);
  });
  if (op.streaming) detail::stream_fence();
  return terms;
}

bool rows_contiguous_at_destination(const Scratch& s) {
  return std::all_of(s.plans.begin(), s.plans.end(), [](const Plan& p) { return p.len == 1 || p.to_step == 1; });
}

// The first mismatch within a chunk, as a row-major index within its block.
std::optional<Index> compare_chunk(DType dtype, std::span<const BlockCopy> blocks, const Scratch& s, const Chunk& c) {
  const Plan& p = s.plans[static_cast<std::size_t>(c.plan)];
  const Block& b = blocks[p.block];
  const RowOp op = row_op(dtype, b);
  const auto size = static_cast<Index>(op.size);
  std::optional<Index> found;
  // Rows are visited in order, so the first mismatch found is the chunk's lowest.
  for_rows(p, s.axes.data() + p.axes_begin, c.row_begin, c.row_end, [&](Index from, Index to, Index r) {
    if (found) return;
    const Index j = compare_row(op, b.from + from * size, p.from_step, b.to + to * size, p.to_step, p.len);
    if (j >= 0) found = r * p.len + j;
  });
  return found;
}

// Whether the plans lie side by side in the rows of the one buffer they share (the
// destination of a rebuild, the source of an extract): each has one outer axis, all have
// as many rows and the same outer stride there, their runs there are contiguous and sit
// one after another within one stride. Then copying row r of each plan in turn, then row
// r + 1, crosses that buffer once, front to back, where copying one plan after another
// crosses it once per plan in short runs far apart: rebuilding 4096 x 4096 from 64 column
// blocks of 256-byte rows took 1.2x a memcpy of the same bytes plan by plan and 0.5x row
// by row, and extracting them 1.2x and 0.7x (a stand-alone loop of the same copies).
// Fills s.side_by_side with the plans in that order. Blocks write disjoint addresses, so
// the order changes nothing but the speed.
bool side_by_side(Scratch& s, bool shared_source) {
  if (s.plans.size() < 2) return false;
  const Plan& first = s.plans.front();
  auto stride = [&](const Plan& p) {
    const Axis& a = s.axes[static_cast<std::size_t>(p.axes_begin)];
    return shared_source ? a.from_stride : a.to_stride;
  };
  auto offset = [&](const Plan& p) { return shared_source ? p.from_offset : p.to_offset; };
  for (const Plan& p : s.plans) {  // `first` is looked at first, before its stride is
    if (p.axes_count != 1 || p.rows != first.rows || stride(p) != stride(first) ||
        (shared_source ? p.from_step : p.to_step) != 1) {
      return false;
    }
  }
  s.side_by_side.resize(s.plans.size());
  for (std::size_t i = 0; i < s.plans.size(); ++i) s.side_by_side[i] = static_cast<std::int32_t>(i);
  std::sort(s.side_by_side.begin(), s.side_by_side.end(), [&](std::int32_t a, std::int32_t b) {
    return offset(s.plans[static_cast<std::size_t>(a)]) < offset(s.plans[static_cast<std::size_t>(b)]);
  });
  const Index start = offset(s.plans[static_cast<std::size_t>(s.side_by_side.front())]);
  Index end = start;
  for (std::int32_t i : s.side_by_side) {
    const Plan& p = s.plans[static_cast<std::size_t>(i)];
    if (offset(p) < end) return false;
    end = offset(p) + p.len;
  }
  return end - start <= stride(first);
}

// Chunks of whole rows of every plan (kEveryPlan), for side_by_side plans.
void chunk_side_by_side(DType dtype, int threads, Scratch& s) {
  const auto size = static_cast<Index>(element_size(dtype));
  Index row_bytes = 0;
  for (const Plan& p : s.plans) row_bytes += p.len * size;
  const Index per_chunk = std::max<Index>(1, chunk_bytes(s, threads) / std::max<Index>(1, row_bytes));
  const Index rows = s.plans.front().rows;
  s.chunks.clear();
  for (Index r = 0; r < rows; r += per_chunk) s.chunks.push_back(Chunk{kEveryPlan, r, std::min(rows, r + per_chunk)});
}

// Copies rows [row_begin, row_end) of every plan, row by row, in s.side_by_side order;
// with `digest`, returns the digest terms of what it wrote (as copy_chunk).
std::uint64_t copy_side_by_side(DType dtype, std::span<const BlockCopy> blocks, const Scratch& s, const Chunk& c,
                                bool digest) {
  const auto size = static_cast<Index>(element_size(dtype));
  // Each plan's row operation, once per chunk.
  std::vector<PlanCopy> ops;
  ops.reserve(s.side_by_side.size());
  bool streamed = false;
  for (std::int32_t i : s.side_by_side) {
    const Plan& p = s.plans[static_cast<std::size_t>(i)];
    ops.push_back(plan_copy(dtype, blocks[p.block], p, s, digest));
    streamed = streamed || ops.back().op.streaming;
  }
  std::uint64_t terms = 0;
  for (Index stretch = c.row_begin; stretch < c.row_end; stretch += s.side_by_side_rows) {
    const Index stretch_end = std::min(c.row_end, stretch + s.side_by_side_rows);
    for (std::size_t k = 0; k < ops.size(); ++k) {
      const Plan& p = s.plans[static_cast<std::size_t>(s.side_by_side[k])];
      const Block& b = blocks[p.block];
      const Axis& rows = s.axes[static_cast<std::size_t>(p.axes_begin)];
      for (Index r = stretch; r < stretch_end; ++r) {
        const std::byte* from = b.from + (p.from_offset + r * rows.from_stride) * size;
        const Index to = p.to_offset + r * rows.to_stride;
        terms += copy_digest_row(ops[k], from, p, b.to + to * size, to, digest);
      }
    }
  }
  if (streamed) detail::stream_fence();
  return terms;
}

std::uint64_t copy_any_chunk(DType dtype, std::span<const BlockCopy> blocks, const Scratch& s, const Chunk& c,
                             bool digest) {
  return c.plan == kEveryPlan ? copy_side_by_side(dtype, blocks, s, c, digest)
                              : copy_chunk(dtype, blocks, s, c, digest);
}

// The digest terms are a sum mod 2^64, so the order chunks finish in does not matter.
std::uint64_t run_copies(DType dtype, std::span<const BlockCopy> blocks, int threads, Scratch& s, bool digest) {
  const auto count = static_cast<std::int64_t>(s.chunks.size());
  std::uint64_t terms = 0;
  if (threads <= 1) {
    for (const Chunk& c : s.chunks) terms += copy_any_chunk(dtype, blocks, s, c, digest);
    return terms;
  }
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : terms)
  for (std::int64_t i = 0; i < count; ++i) {
    terms += copy_any_chunk(dtype, blocks, s, s.chunks[static_cast<std::size_t>(i)], digest);
  }
#else
  (void)count;
#endif
  return terms;
}

}  // namespace

bool copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                 std::uint64_t* digest_of_written) {
  Scratch& s = scratch();
  const int threads = thread_count(threading, moved_bytes(dtype, blocks));
  // Blocks write disjoint addresses, so their chunks may go in any order: several blocks
  // out of one buffer go by source address.
  const bool one_source = blocks.size() > 1 && std::all_of(blocks.begin(), blocks.end(), [&](const Block& b) {
                            return b.from == blocks.front().from;
                          });
  plan_blocks(dtype, blocks, s, /*merge_rows=*/true);
  if (digest_of_written != nullptr && !rows_contiguous_at_destination(s)) return false;
  const bool one_destination = !one_source && std::all_of(blocks.begin(), blocks.end(),
                                                          [&](const Block& b) { return b.to == blocks.front().to; });
  if ((one_source || one_destination) && side_by_side(s, one_source)) {
    // An extract reads its one source front to back row by row; a rebuild reads each
    // source in stretches.
    Index longest = 1;
    for (const Plan& p : s.plans) longest = std::max(longest, p.len * static_cast<Index>(element_size(dtype)));
    s.side_by_side_rows = one_source ? 1 : std::max<Index>(1, kSourceStretchBytes / longest);
    chunk_side_by_side(dtype, threads, s);
  } else {
    cut_chunks(dtype, threads, s, /*by_source=*/one_source);
  }
  const std::uint64_t terms = run_copies(dtype, blocks, threads, s, digest_of_written != nullptr);
  if (digest_of_written != nullptr) *digest_of_written = terms;
  return true;
}

void copy_blocks_last_first(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading) {
  for (std::size_t i = blocks.size(); i-- > 0;) copy_blocks(dtype, blocks.subspan(i, 1), threading);
}

std::optional<BlockMismatch> compare_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading) {
  Scratch& s = scratch();
  const int threads = thread_count(threading, moved_bytes(dtype, blocks));
  plan_blocks(dtype, blocks, s);
  cut_chunks(dtype, threads, s);
  const auto count = static_cast<std::int64_t>(s.chunks.size());
  // Chunks are in (block, row) order, so the first chunk with a mismatch holds the first
  // mismatch; a chunk after one already known to mismatch need not be looked at.
  std::atomic<std::int64_t> best{count};
  std::vector<Index> found(s.chunks.size(), -1);
  auto visit = [&](std::int64_t i) {
    if (i > best.load(std::memory_order_relaxed)) return;
    auto k = compare_chunk(dtype, blocks, s, s.chunks[static_cast<std::size_t>(i)]);
    if (!k) return;
    found[static_cast<std::size_t>(i)] = *k;
    std::int64_t seen = best.load();
    while (i < seen && !best.compare_exchange_weak(seen, i)) {
    }
  };
  if (threads <= 1) {
    for (std::int64_t i = 0; i < count && best.load() == count; ++i) visit(i);
  } else {
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (std::int64_t i = 0; i < count; ++i) visit(i);
#endif
  }
  const std::int64_t first = best.load();
  if (first == count) return std::nullopt;
  const Chunk& c = s.chunks[static_cast<std::size_t>(first)];
  return BlockMismatch{s.plans[static_cast<std::size_t>(c.plan)].block, found[static_cast<std::size_t>(first)]};
}

std::uint64_t parallel_digest(const Buffer& full, const Threading& threading) {
  const Index bytes = static_cast<Index>(full.size_bytes());
  const int threads = thread_count(threading, bytes);
  if (threads <= 1) return digest(full);
  const Index n = full.numel();
  const auto size = static_cast<Index>(element_size(full.dtype()));
  const Index parts = Index{4} * threads;
  const Index per = (n + parts - 1) / parts;
  std::uint64_t total = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) reduction(+ : total)
#endif
  for (Index part = 0; part < parts; ++part) {
    const Index begin = part * per;
    const Index end = std::min(n, begin + per);
    if (begin < end) total += digest_elements(full.dtype(), full.data() + begin * size, end - begin, begin);
  }
  return total;
}

}  // namespace shardcheck::wide
