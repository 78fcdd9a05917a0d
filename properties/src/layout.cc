#include "shardcheck/gen/layout.h"

#include <algorithm>
#include <stdexcept>

#include "draw.h"
#include "layout_post.h"
#include "shardcheck/constructors.h"
#include "shardcheck/gen/values.h"

namespace shardcheck::gen {

namespace {

constexpr std::string_view kNames[] = {"replicated", "contiguous_split", "sub_param",
                                       "segmented",  "block_gather",     "expert_placement"};
enum Ctor { kReplicated, kContiguous, kSubParam, kSegmented, kBlockGather, kExperts };

struct Bounds {
  Index max_elements;
  int max_dims;
  Index max_extent;
  int max_tp;
  Index min_elements = 0;  // a large layout: numel(F) at least this (see draw_any_shape)
  // A pair of layouts for resharding: both over this shape (draw_split_shape and the
  // constructors that draw a shape of their own take it instead).
  const Extents* fixed_shape = nullptr;
};

Bounds clamp_options(const LayoutOptions& o) {
  return {std::clamp<Index>(o.max_elements, 1, Index{1} << 24), std::clamp(o.max_dims, 0, 8),
          std::clamp<Index>(o.max_extent, 0, 4096), std::clamp(o.max_tp, 1, 64)};
}

// The reference model judges maps of up to this many elements (F, a shard, and all
// pieces together, replicas counted once per copy).
constexpr Index kReferenceElements = Index{1} << 22;

// A large layout's bounds for `dtype` (two bytes wide or more): F of 4 to 4.5 MiB, past
// the parallel threshold (4 MiB) and many of the wide copy's chunks (64 KiB and up), or
// with `streaming` F of 8 to 8.5 MiB, past the threshold of streaming copies
// (kStreamTotalBytes in core/src/streaming.h, 8 MiB); two or three axes, and few enough
// ranks that every copy of F stays within the reference model's reach.
Bounds large_bounds(ChoiceSource& c, const Bounds& b, DType dtype, bool streaming) {
  const auto width = static_cast<Index>(element_size(dtype));
  const Index least = streaming ? Index{8} << 20 : Index{4} << 20;
  const Index bytes = c.between(least + 1, least + (Index{1} << 19));
  Bounds large = b;
  large.min_elements = (bytes + width - 1) / width;
  large.max_elements = large.min_elements + 4096;
  large.max_dims = 3;
  large.max_tp = static_cast<int>(std::clamp<Index>(kReferenceElements / large.max_elements, 1, b.max_tp));
  return large;
}

// The dtypes of large layouts: a one-byte F of 4 MiB would be more elements than the
// reference model takes. Past the streaming threshold, eight bytes wide only: F then
// has about 2^20 elements, room for three copies of it in the reference model's reach.
constexpr DType kWideDTypes[] = {DType::float32, DType::float64, DType::float16, DType::bfloat16,
                                 DType::int16,   DType::int32,   DType::int64};
constexpr DType kEightByteDTypes[] = {DType::float64, DType::int64};

// Every non-empty piece cut in two along its last axis at `at` elements (where that
// axis is longer): the second half starts `at` elements into the row on both sides, so
// that with `at` odd and eight-byte elements its offsets are never 16-byte aligned, and
// a streaming copy's unaligned head and tail are exercised on every such row. Cutting a
// piece changes no verdict: the halves cover what it covered, with its holders and scale.
void cut_rows_at(Map& map, Index at) {
  for (auto& entry : map.ranks) {
    const std::size_t pieces = entry.pieces.size();
    for (std::size_t i = 0; i < pieces; ++i) {
      Piece& piece = entry.pieces[i];
      if (piece.shape.empty() || piece.shape.back() <= at || checked_numel(piece.shape).value_or(0) == 0) continue;
      Piece tail = piece;
      tail.shape.back() -= at;
      tail.source.offset += at * piece.source.strides.back();
      tail.dest.offset += at * piece.dest.strides.back();
      piece.shape.back() = at;
      entry.pieces.push_back(std::move(tail));
    }
  }
}

// draw_shape, or for a large layout: at least two axes, the last one taking the bulk
// (long rows: few address runs, well within what the core checks verify) and the others,
// the split axis `first` among them (never the last), of extent 1 to 64, so that numel
// lies in [min_elements, min_elements + 4096).
Extents draw_any_shape(ChoiceSource& c, int ndim, int first, const Bounds& b) {
  if (b.min_elements == 0) return detail::draw_shape(c, ndim, first, b.max_extent, b.max_elements);
  ndim = std::max({ndim, 2, first + 2});
  Extents shape(static_cast<std::size_t>(ndim), 1);
  const int bulk = ndim - 1;
  Index rest = 1;
  for (int k = 0; k < ndim; ++k) {
    if (k == bulk) continue;
    shape[static_cast<std::size_t>(k)] = c.between(1, 64);
    rest *= shape[static_cast<std::size_t>(k)];
  }
  shape[static_cast<std::size_t>(bulk)] = (b.min_elements + rest - 1) / rest;
  return shape;
}

// The split axis comes first in draw_shape so it gets the largest extent.
struct SplitShape {
  Extents shape;
  int dim = 0;
};
SplitShape draw_split_shape(ChoiceSource& c, const Bounds& b) {
  if (b.fixed_shape != nullptr) {
    // The split axis is any axis of the shape both layouts share.
    return {*b.fixed_shape, static_cast<int>(c.between(0, static_cast<Index>(b.fixed_shape->size()) - 1))};
  }
  int ndim = static_cast<int>(c.between(b.min_elements > 0 ? 2 : 1, std::max(b.max_dims, 1)));
  // A large layout splits an axis before its last (draw_any_shape).
  int dim = static_cast<int>(c.between(0, ndim - (b.min_elements > 0 ? 2 : 1)));
  return {draw_any_shape(c, ndim, dim, b), dim};
}

int draw_tp(ChoiceSource& c, const Bounds& b) { return static_cast<int>(c.between(1, b.max_tp)); }

Result<Map> make_replicated(ChoiceSource& c, const Bounds& b, double scale) {
  if (b.fixed_shape != nullptr) return replicated_map(*b.fixed_shape, draw_tp(c, b), scale);
  int ndim = static_cast<int>(c.between(0, b.max_dims));
  Extents shape = draw_any_shape(c, ndim, 0, b);
  return replicated_map(shape, draw_tp(c, b), scale);
}

Result<Map> make_contiguous(ChoiceSource& c, const Bounds& b) {
  auto [shape, dim] = draw_split_shape(c, b);
  auto sizes = detail::draw_widths(c, shape[static_cast<std::size_t>(dim)], draw_tp(c, b));
  return contiguous_split_map(shape, sizes, dim);
}

Result<Map> make_sub_param(ChoiceSource& c, const Bounds& b) {
  auto [shape, dim] = draw_split_shape(c, b);
  Index n = shape[static_cast<std::size_t>(dim)];
  int tp = draw_tp(c, b);
  int count = static_cast<int>(c.between(1, std::clamp<Index>(n, 1, 4)));
  auto sub_sizes = detail::draw_positive_widths(c, n, count);
  std::vector<std::vector<Index>> widths;
  widths.reserve(sub_sizes.size());
  for (Index size : sub_sizes) widths.push_back(detail::draw_widths(c, size, tp));
  return sub_param_map(shape, sub_sizes, widths, dim);
}

Result<Map> make_segmented(ChoiceSource& c, const Bounds& b) {
  auto [shape, dim] = draw_split_shape(c, b);
  Index n = shape[static_cast<std::size_t>(dim)];
  int tp = draw_tp(c, b);
  int count = static_cast<int>(c.between(1, std::clamp<Index>(n, 1, 4)));
  auto sizes = detail::draw_positive_widths(c, n, count);
  std::vector<Segment> segments;
  std::vector<std::vector<Index>> split_widths;
  segments.reserve(sizes.size());
  for (Index size : sizes) {
    bool replicated = c.chance(1, 3);
    segments.push_back({size, replicated});
    if (!replicated) split_widths.push_back(detail::draw_widths(c, size, tp));
  }
  return segmented_map(shape, segments, dim, tp, split_widths);
}

Result<Map> make_block_gather(ChoiceSource& c, const Bounds& b) {
  auto [shape, dim] = draw_split_shape(c, b);
  Index n = shape[static_cast<std::size_t>(dim)];
  int tp = draw_tp(c, b);
  Index block_size = n > 0 ? detail::draw_divisor(c, n) : c.between(1, 4);
  Index blocks = n / block_size;
  std::vector<std::vector<Index>> ids(static_cast<std::size_t>(tp));
  Index mode = c.between(0, 2);
  if (mode == 1) {
    // Interleaved: block b to rank (b + shift) % tp, Yuan-style.
    Index shift = c.between(0, tp - 1);
    for (Index blk = 0; blk < blocks; ++blk)
      ids[static_cast<std::size_t>((blk + shift) % tp)].push_back(blk);
    return block_gather_map(shape, ids, block_size, dim);
  }
  std::vector<Index> order(static_cast<std::size_t>(blocks));
  for (Index blk = 0; blk < blocks; ++blk) order[static_cast<std::size_t>(blk)] = blk;
  if (mode == 2) c.shuffle(order);  // unsorted ids: runs rarely merge
  auto counts = detail::draw_widths(c, blocks, tp);
  std::size_t next = 0;
  for (std::size_t r = 0; r < ids.size(); ++r) {
    ids[r].assign(
        order.begin() + static_cast<std::ptrdiff_t>(next),
        order.begin() + static_cast<std::ptrdiff_t>(next + static_cast<std::size_t>(counts[r])));
    next += static_cast<std::size_t>(counts[r]);
  }
  return block_gather_map(shape, ids, block_size, dim);
}

Result<Map> make_experts(ChoiceSource& c, const Bounds& b) {
  Extents shape;
  if (b.fixed_shape != nullptr) {
    shape = *b.fixed_shape;
  } else {
    int ndim = static_cast<int>(c.between(1, std::max(b.max_dims, 1)));
    shape = draw_any_shape(c, ndim, 0, b);
  }
  int tp = draw_tp(c, b);
  // Primaries sometimes go to a prefix of the ranks, so some ranks hold nothing.
  Index active = c.chance(1, 3) ? c.between(1, tp) : tp;
  std::vector<std::vector<Index>> lists(static_cast<std::size_t>(tp));
  std::vector<Index> others;
  others.reserve(static_cast<std::size_t>(tp));
  for (Index e = 0; e < shape[0]; ++e) {
    Index primary = c.between(0, active - 1);
    lists[static_cast<std::size_t>(primary)].push_back(e);
    if (tp < 2 || !c.chance(1, 4)) continue;
    // Extra holders: a partial Fisher-Yates over the other ranks.
    others.clear();
    for (Index r = 0; r < tp; ++r) {
      if (r != primary) others.push_back(r);
    }
    Index extra = c.between(1, tp - 1);
    for (Index i = 0; i < extra; ++i) {
      auto j = static_cast<std::size_t>(c.between(i, static_cast<Index>(others.size()) - 1));
      std::swap(others[static_cast<std::size_t>(i)], others[j]);
      lists[static_cast<std::size_t>(others[static_cast<std::size_t>(i)])].push_back(e);
    }
  }
  if (c.chance(1, 3)) {
    for (auto& list : lists) c.shuffle(list);
  }
  return expert_placement_map(shape, lists);
}

Result<Map> make_any(ChoiceSource& c, const Bounds& b, int ctor, double replicated_scale) {
  switch (ctor) {
    case kContiguous:
      return make_contiguous(c, b);
    case kSubParam:
      return make_sub_param(c, b);
    case kSegmented:
      return make_segmented(c, b);
    case kBlockGather:
      return make_block_gather(c, b);
    case kExperts:
      return make_experts(c, b);
    default:
      return make_replicated(c, b, replicated_scale);
  }
}

[[noreturn]] void generator_bug(int ctor, const Error& error) {
  // The generator only builds arguments the contract allows, so this is a bug in the
  // generator or the constructor; it must be loud, never a silently skipped case.
  throw std::logic_error("generator bug: " + std::string(kNames[ctor]) +
                         " refused generated arguments: " + error.to_string());
}

// One side of a pair: any constructor over the shared shape, post-processed as every
// generated layout is. Unscaled: the pair's scales are drawn for both sides together.
Layout layout_over(ChoiceSource& c, const Bounds& b, DType dtype) {
  const int ctor = b.fixed_shape->empty() ? kReplicated : static_cast<int>(c.between(0, 5));
  Result<Map> built = make_any(c, b, ctor, 1.0);
  if (!built) generator_bug(ctor, built.error());
  Layout out{std::string(kNames[ctor]), std::move(built).value(), dtype};
  detail::flatten_runs(c, out.map);
  detail::add_empty_pieces(c, out.map);
  detail::relabel_ranks(c, out.map);
  detail::shuffle_order(c, out.map);
  detail::transpose_shards(c, out.map);
  return out;
}

void scale_every_piece(Map& map, double scale) {
  for (auto& entry : map.ranks) {
    for (auto& piece : entry.pieces) piece.scale = scale;
  }
}

}  // namespace

std::span<const std::string_view> constructor_names() { return kNames; }

LayoutPair generate_layout_pair(ChoiceSource& c, const LayoutOptions& options) {
  Bounds b = clamp_options(options);
  const DType dtype = c.pick(kAllDTypes);
  const int ndim = static_cast<int>(c.between(0, b.max_dims));
  const Extents shape = detail::draw_shape(c, ndim, 0, b.max_extent, b.max_elements);
  b.fixed_shape = &shape;
  LayoutPair out{layout_over(c, b, dtype), layout_over(c, b, dtype)};
  // Scales (contract 11): the same scale on every piece of both sides copies plainly; one
  // side's scales drawn alone must be refused wherever they differ from the other's.
  if (carries_scales(dtype)) {
    const Index mode = c.between(0, 7);
    if (mode == 6) {
      const double scale = detail::draw_scale(c, dtype, false);
      scale_every_piece(out.source.map, scale);
      scale_every_piece(out.target.map, scale);
    } else if (mode == 7) {
      detail::draw_scales(c, c.coin() ? out.source.map : out.target.map, dtype);
    }
  }
  return out;
}

Layout generate_layout(ChoiceSource& c, const LayoutOptions& options) {
  Bounds b = clamp_options(options);
  // Every constructor but replicated needs an axis to split.
  int ctor = b.max_dims < 1 && !options.large ? kReplicated : static_cast<int>(c.between(0, 5));
  // Half the large layouts cross the streaming threshold, with misaligned rows.
  const bool streaming = options.large && c.coin();
  DType dtype = streaming ? c.pick(kEightByteDTypes) : options.large ? c.pick(kWideDTypes) : c.pick(kAllDTypes);
  if (options.large) b = large_bounds(c, b, dtype, streaming);
  // Large layouts are about sizes: scales are drawn on small ones.
  bool floating = carries_scales(dtype) && !options.large;
  double map_scale = 1.0;
  if (ctor == kReplicated && floating && c.chance(1, 4)) map_scale = detail::draw_scale(c, dtype, false);

  Result<Map> built = make_any(c, b, ctor, map_scale);
  if (!built) generator_bug(ctor, built.error());
  Layout out{std::string(kNames[ctor]), std::move(built).value(), dtype};
  if (floating && ctor != kReplicated) detail::draw_scales(c, out.map, dtype);
  if (streaming) cut_rows_at(out.map, 2 * c.between(0, 31) + 1);
  detail::add_empty_pieces(c, out.map);
  detail::relabel_ranks(c, out.map);
  detail::shuffle_order(c, out.map);
  detail::transpose_shards(c, out.map);
  return out;
}

}  // namespace shardcheck::gen
