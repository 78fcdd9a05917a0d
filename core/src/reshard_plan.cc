// Long file: the two planners (boxes and runs) must make the same copies, and are held to
// it by tests; they sit together so that a change to one is read beside the other.
//
// Transfer plans (contract 11): planning. See reshard.h for what is planned and what is
// refused; reshard.cc executes plans.
//
// Two planners make the same copies. Where every piece of both maps is a box of the
// logical tensor (its F view steps along logical axes, each at most once, without
// wrapping: the layouts DeepSpeed, DCP and Megatron-Core describe), a plan is made from
// the pieces alone: each target box meets the source boxes it overlaps and each overlap
// is one segment, so planning costs the pieces, not the rows. Other maps are planned on
// address runs of F: a run is a stretch of consecutive elements of F that one piece ties
// to an arithmetic progression of addresses in one rank's shard. Both maps are cut into
// runs; the source runs of each element's lowest holder tile F once (conditions 5 and 6),
// the target runs of each rank tile its shard once (condition 4), so intersecting every
// target run with the source runs gives every target address exactly once. Either way
// the pieces of the copy are then merged into strided segments wherever one view on each
// side covers two of them.
#include "shardcheck/reshard.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "reshard_internal.h"
#include "two_view_walk.h"

namespace shardcheck {

namespace {

struct PieceRef {
  Rank rank = 0;
  Index written = 0;
  const Piece* piece = nullptr;
  PieceAt at() const { return PieceAt{rank, written, piece}; }
};

struct Run {
  Index f = 0;          // first element of F
  Index len = 0;        // consecutive elements of F
  Index at = 0;         // shard address of the first element
  Index step = 1;       // shard distance between consecutive elements (1 when len is 1)
  Rank rank = 0;        // whose shard
  std::size_t ref = 0;  // the piece, in the PieceRef table

  auto key() const { return std::tie(f, rank, len, at, step); }
};

// A stretch of `len` elements read from one source shard and written to one target shard.
struct Row {
  Rank source_rank = 0;
  Rank target_rank = 0;
  Index len = 0;
  Index source_step = 1;
  Index target_step = 1;
  Index source_at = 0;
  Index target_at = 0;

  auto group() const { return std::tie(source_rank, target_rank, len, source_step, target_step); }
  auto key() const { return std::tie(source_rank, target_rank, len, source_step, target_step, target_at, source_at); }
};

// An axis of a piece or an overlap: its extent, its stride in the source view (F for a
// piece, the source shard for an overlap) and in the other (the shard, the target shard).
using Axis = detail::WalkAxis;

// The piece's runs, appended to `out`. A piece is cut along its inner axis where that axis
// is contiguous in F (after merging axes that are contiguous across each other in both
// views), else into single elements: finer runs, never a refusal.
Status cut_runs(const PieceRef& ref, std::size_t ref_index, Index budget, std::vector<Run>& out) {
  const Piece& p = *ref.piece;
  const auto numel = checked_numel(p.shape);
  if (!numel || *numel == 0) return {};
  std::vector<Axis> axes;
  for (std::size_t k = 0; k < p.shape.size(); ++k) {
    if (p.shape[k] > 1) axes.push_back({p.shape[k], p.source.strides[k], p.dest.strides[k]});
  }
  axes.resize(detail::merge_contiguous_axes(axes.data(), axes.size()));
  Index len = 1;
  Index step = 1;
  if (!axes.empty() && axes.back().from_stride == 1) {
    len = axes.back().extent;
    step = len > 1 ? axes.back().to_stride : 1;
    axes.pop_back();
  }
  const Index count = *numel / len;
  if (count > budget - static_cast<Index>(out.size())) return fault::plan_over_budget(budget);
  // Addresses stay inside the checked spans.
  detail::TwoViewWalk walk(axes.data(), static_cast<int>(axes.size()), p.source.offset, p.dest.offset);
  do {
    out.push_back(Run{walk.from(), len, walk.to(), step, ref.rank, ref_index});
  } while (walk.next());
  return {};
}

// Whether `rank` reads (and counts, for a digest) the piece's elements: it is the lowest
// of the piece's holders (locations are ascending, condition 1).
bool lowest_holder(Rank rank, const Piece& p) { return p.locations.front() == rank; }

// Every piece of `map` that `keep` selects, as PieceRefs in content order per rank (so
// that nothing below depends on the order pieces are written in).
template <class Keep>
std::vector<PieceRef> pieces_of(const Map& map, Keep&& keep) {
  std::vector<PieceRef> out;
  for (const auto& entry : map.ranks) {
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      const Piece& piece = entry.pieces[i];
      if (keep(entry.rank, piece)) out.push_back(PieceRef{entry.rank, static_cast<Index>(i), &piece});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const PieceRef& a, const PieceRef& b) {
    if (a.rank != b.rank) return a.rank < b.rank;
    return content_less(*a.piece, *b.piece);
  });
  return out;
}

// The runs of every piece, in key order. A piece's runs usually come in F order already
// (pieces of a split interleave, each in order): each piece's stretch is sorted only when
// it is not, and the stretches are merged pairwise, which costs a few linear passes where
// sorting all runs took a fifth of planning 4096 x 4096 TP 8 to TP 4.
Result<std::vector<Run>> runs_of(const std::vector<PieceRef>& refs, Index budget) {
  std::vector<Run> out;
  Index expected = 0;
  for (const PieceRef& ref : refs) {
    // A hint only (cut_runs enforces the budget): one run per element at the most.
    expected += std::min<Index>(checked_numel(ref.piece->shape).value_or(0), budget);
    if (expected > budget) break;
  }
  out.reserve(static_cast<std::size_t>(std::min(expected, budget)));
  const auto less = [](const Run& a, const Run& b) { return a.key() < b.key(); };
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < refs.size(); ++i) {
    const std::size_t start = out.size();
    if (Status status = cut_runs(refs[i], i, budget, out); !status.ok()) return std::move(status).error();
    if (out.size() == start) continue;
    if (!std::is_sorted(out.begin() + static_cast<std::ptrdiff_t>(start), out.end(), less)) {
      std::sort(out.begin() + static_cast<std::ptrdiff_t>(start), out.end(), less);
    }
    starts.push_back(start);
  }
  starts.push_back(out.size());
  std::vector<Run> spare(starts.size() > 2 ? out.size() : 0);
  while (starts.size() > 2) {
    std::vector<std::size_t> merged;
    for (std::size_t k = 0; k + 1 < starts.size(); k += 2) {
      const std::size_t lo = starts[k], mid = starts[k + 1], hi = k + 2 < starts.size() ? starts[k + 2] : mid;
      std::merge(out.begin() + static_cast<std::ptrdiff_t>(lo), out.begin() + static_cast<std::ptrdiff_t>(mid),
                 out.begin() + static_cast<std::ptrdiff_t>(mid), out.begin() + static_cast<std::ptrdiff_t>(hi),
                 spare.begin() + static_cast<std::ptrdiff_t>(lo), less);
      merged.push_back(lo);
    }
    merged.push_back(out.size());
    out.swap(spare);
    starts = std::move(merged);
  }
  return out;
}

// The source runs, clipped so that each element of F is read once: where runs overlap
// (two pieces of one holder over one element), the first in F order then rank order wins.
std::vector<Run> tile_of_f(std::vector<Run> runs) {
  std::size_t kept = 0;
  Index covered_end = 0;
  for (Run run : runs) {
    if (run.f < covered_end) {
      const Index skip = std::min(run.len, covered_end - run.f);
      run.f += skip;
      run.at += skip * run.step;
      run.len -= skip;
    }
    if (run.len <= 0) continue;
    if (run.len == 1) run.step = 1;
    covered_end = run.f + run.len;
    runs[kept++] = run;
  }
  runs.resize(kept);
  return runs;
}

// The rows that give `wanted`'s elements from the tiling source runs `tile`, through
// `emit(source_run, lo, hi)` for each overlap [lo, hi) in F order. An element no source
// run covers cannot happen for a valid source map; it is refused all the same.
template <class Emit>
Status overlaps(const std::vector<Run>& tile, const Run& wanted, Emit&& emit) {
  const Index end = wanted.f + wanted.len;
  auto it = std::upper_bound(tile.begin(), tile.end(), wanted.f, [](Index f, const Run& r) { return f < r.f; });
  if (it != tile.begin()) --it;
  Index next = wanted.f;
  for (; it != tile.end() && it->f < end && next < end; ++it) {
    const Index run_end = it->f + it->len;
    if (run_end <= next) continue;
    if (it->f > next) return fault::element_uncovered(next);
    const Index hi = std::min(run_end, end);
    if (Status status = emit(*it, next, hi); !status.ok()) return status;
    next = hi;
  }
  if (next < end) return fault::element_uncovered(next);
  return {};
}

Row row_of(const Run& from, const Run& to, Index lo, Index hi) {
  Row row;
  row.source_rank = from.rank;
  row.target_rank = to.rank;
  row.len = hi - lo;
  row.source_at = from.at + (lo - from.f) * from.step;
  row.target_at = to.at + (lo - to.f) * to.step;
  row.source_step = row.len > 1 ? from.step : 1;
  row.target_step = row.len > 1 ? to.step : 1;
  return row;
}

TransferSegment segment_of(const Row& first, Index rows, Index source_gap, Index target_gap) {
  TransferSegment s;
  s.source_rank = first.source_rank;
  s.target_rank = first.target_rank;
  s.source.offset = first.source_at;
  s.target.offset = first.target_at;
  if (rows > 1) {
    s.shape.push_back(rows);
    s.source.strides.push_back(source_gap);
    s.target.strides.push_back(target_gap);
  }
  if (first.len > 1 || rows == 1) {
    s.shape.push_back(first.len);
    s.source.strides.push_back(first.source_step);
    s.target.strides.push_back(first.target_step);
  }
  return s;
}

// Rows of one rank pair, length and steps, taken in target address order, become one
// segment while the distance from row to row is the same on both sides (and not
// negative: views have non-negative strides).
std::vector<TransferSegment> merge_rows(std::vector<Row> all, const PlannerBugs& bugs) {
  // The rows in key order. They come in target run order, so each group (rank pair,
  // length, steps) is usually in target order already: counted into one stretch per
  // group (a stable counting sort), a stretch is sorted only when it is not (sorting all
  // rows took two thirds of planning 4096 x 4096 TP 8 to TP 4). Rows of a split cycle
  // through a few groups, so the last few groups seen are looked up first.
  using Group = std::tuple<Rank, Rank, Index, Index, Index>;
  std::map<Group, std::size_t> ids;
  std::vector<std::size_t> id_of(all.size());
  constexpr std::size_t kRecent = 16;
  std::array<std::pair<Group, std::size_t>, kRecent> recent{};
  std::size_t recent_count = 0, recent_next = 0;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Row& row = all[i];
    const Group group{row.source_rank, row.target_rank, row.len, row.source_step, row.target_step};
    std::size_t k = 0;
    while (k < recent_count && recent[k].first != group) ++k;
    if (k == recent_count) {
      const auto [at, added] = ids.try_emplace(group, ids.size());
      recent[recent_next] = {group, at->second};
      k = recent_next;
      recent_count = std::max(recent_count, recent_next + 1);
      recent_next = (recent_next + 1) % kRecent;
    }
    id_of[i] = recent[k].second;
  }
  // Stretches in group order, as a std::map of buckets would give them.
  std::vector<std::size_t> rank_of(ids.size());
  std::size_t next_rank = 0;
  for (const auto& [group, id] : ids) rank_of[id] = next_rank++;
  std::vector<std::size_t> begin(ids.size() + 1, 0);
  for (std::size_t i = 0; i < all.size(); ++i) ++begin[rank_of[id_of[i]] + 1];
  for (std::size_t g = 0; g < ids.size(); ++g) begin[g + 1] += begin[g];
  std::vector<Row> rows(all.size());
  std::vector<std::size_t> fill(begin.begin(), begin.end() - 1);
  for (std::size_t i = 0; i < all.size(); ++i) rows[fill[rank_of[id_of[i]]]++] = all[i];
  const auto less = [](const Row& a, const Row& b) { return a.key() < b.key(); };
  for (std::size_t g = 0; g < ids.size(); ++g) {
    const auto first = rows.begin() + static_cast<std::ptrdiff_t>(begin[g]);
    const auto last = rows.begin() + static_cast<std::ptrdiff_t>(begin[g + 1]);
    if (!std::is_sorted(first, last, less)) std::sort(first, last, less);
  }
  std::vector<TransferSegment> out;
  std::size_t i = 0;
  while (i < rows.size()) {
    const Row& first = rows[i];
    std::size_t j = i + 1;
    Index source_gap = 0, target_gap = 0;
    if (j < rows.size() && rows[j].group() == first.group() && rows[j].source_at >= first.source_at) {
      source_gap = rows[j].source_at - first.source_at;
      target_gap = rows[j].target_at - first.target_at;
      while (j < rows.size() && rows[j].group() == first.group() &&
             rows[j].target_at - rows[j - 1].target_at == target_gap &&
             (bugs.merge_unequal_strides || rows[j].source_at - rows[j - 1].source_at == source_gap)) {
        ++j;
      }
    }
    out.push_back(segment_of(first, static_cast<Index>(j - i), source_gap, target_gap));
    i = j;
  }
  return out;
}

bool segment_less(const TransferSegment& a, const TransferSegment& b) {
  return std::tie(a.target_rank, a.target.offset, a.source_rank, a.source.offset, a.shape, a.target.strides,
                  a.source.strides) < std::tie(b.target_rank, b.target.offset, b.source_rank, b.source.offset, b.shape,
                                               b.target.strides, b.source.strides);
}

std::map<Rank, Index> shard_sizes(const Map& map) {
  std::map<Rank, Index> out;
  for (const auto& entry : map.ranks) {
    if (entry.shard_shape) out[entry.rank] = checked_numel(*entry.shard_shape).value_or(0);
  }
  return out;
}

void count(Plan& plan) {
  PlanStatistics& s = plan.statistics;
  s = PlanStatistics{};
  s.segments = static_cast<Index>(plan.segments.size());
  s.replica_checks = static_cast<Index>(plan.replica_checks.size());
  for (const TransferSegment& segment : plan.segments) {
    const Index n = checked_numel(segment.shape).value_or(0);
    s.elements_moved += n;
    s.elements_read[segment.source_rank] += n;
    s.elements_by_pair[{segment.source_rank, segment.target_rank}] += n;
  }
}

// ---- Plans on address runs -------------------------------------------------------------

// The runs and rows a run plan may hold on the way to its segments. The segments
// themselves are counted against max_segments after merging; this bounds the work
// before, and a larger max_segments raises it with them.
Index run_budget(const ReshardOptions& options) { return std::max(options.max_segments, Index{1} << 22); }

// The segments that copy every wanted piece's elements from their lowest holders' pieces
// (`holders`), both cut into runs: the plan's copies (`wanted`: every target piece), or,
// with `checks`, its replica checks (`wanted`: the other holders' pieces, compared with the
// lowest holder's copy where both hold it under one scale).
Result<std::vector<TransferSegment>> run_segments(const std::vector<PieceRef>& holders,
                                                  const std::vector<PieceRef>& wanted, const ReshardOptions& options,
                                                  bool checks) {
  const Index budget = run_budget(options);
  auto source_runs = runs_of(holders, budget);
  if (!source_runs) return source_runs.error();
  const std::vector<Run> tile = tile_of_f(std::move(source_runs).value());
  auto wanted_runs = runs_of(wanted, budget);
  if (!wanted_runs) return wanted_runs.error();
  // Errors name the lowest target rank, then the lowest element of F.
  std::vector<Run>& runs = wanted_runs.value();
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return std::tie(a.rank, a.f, a.at) < std::tie(b.rank, b.f, b.at); });
  std::vector<Row> rows;
  // Where neither map has replicas, the rows are the pieces of a common refinement of two
  // tilings of F: at most one per run of either.
  rows.reserve(std::min(tile.size() + runs.size(), static_cast<std::size_t>(budget)));
  for (const Run& run : runs) {
    const PieceRef& writer = wanted[run.ref];
    Status status = overlaps(tile, run, [&](const Run& held, Index lo, Index hi) -> Status {
      const double source_scale = holders[held.ref].piece->scale;
      if (source_scale != writer.piece->scale) {
        // Replicas under different scales agree only after unscaling: no bitwise comparison.
        if (checks) return {};
        if (!options.bugs.copy_across_scales) return fault::reshard_scales_differ(writer.at(), lo, source_scale);
      }
      if (static_cast<Index>(rows.size()) >= budget) return fault::plan_over_budget(budget);
      rows.push_back(row_of(held, run, lo, hi));
      return {};
    });
    if (!status.ok()) return std::move(status).error();
  }
  auto segments = merge_rows(std::move(rows), checks ? PlannerBugs{} : options.bugs);
  if (static_cast<Index>(segments.size()) > options.max_segments) return fault::plan_over_budget(options.max_segments);
  return segments;
}

// ---- Plans on boxes ---------------------------------------------------------------------

// A piece whose F view is a box of the logical tensor, in logical coordinates.
struct Box {
  std::size_t ref = 0;  // the piece, in its PieceRef table
  Rank rank = 0;
  Extents lo, hi;  // [lo, hi) along each logical axis
  Strides step;    // the shard address step along each logical axis (0 where one wide)
  Index at = 0;    // the shard address of lo
};

// The piece as a box, or nullopt where its F view is not one: an axis that steps by no
// logical axis's stride, two axes on one logical axis, or an axis that wraps into the
// next row. `f_strides` are the logical shape's row-major strides. The piece is not empty
// and inside F (check_map), so its offset is the flat index of a logical position.
std::optional<Box> box_of(const PieceRef& ref, std::size_t index, const Extents& logical, const Strides& f_strides) {
  const Piece& p = *ref.piece;
  const std::size_t d = logical.size();
  Box box{index, ref.rank, Extents(d, 0), Extents(d, 1), Strides(d, 0), p.dest.offset};
  for (std::size_t j = 0; j < d; ++j) {
    box.lo[j] = (p.source.offset / f_strides[j]) % logical[j];
    box.hi[j] = box.lo[j] + 1;
  }
  for (std::size_t k = 0; k < p.shape.size(); ++k) {
    if (p.shape[k] == 1) continue;
    // Logical axes wider than one have distinct strides, so at most one matches.
    std::size_t j = 0;
    while (j < d && !(logical[j] > 1 && f_strides[j] == p.source.strides[k])) ++j;
    if (j == d || box.hi[j] != box.lo[j] + 1 || p.shape[k] > logical[j] - box.lo[j]) return std::nullopt;
    box.hi[j] = box.lo[j] + p.shape[k];
    box.step[j] = p.dest.strides[k];
  }
  return box;
}

// The boxes of `refs`' pieces that hold elements, or nullopt where one is not a box.
std::optional<std::vector<Box>> boxes_of(const std::vector<PieceRef>& refs, const Extents& logical,
                                         const Strides& f_strides) {
  std::vector<Box> out;
  out.reserve(refs.size());
  for (std::size_t i = 0; i < refs.size(); ++i) {
    if (checked_numel(refs[i].piece->shape).value_or(0) == 0) continue;
    auto box = box_of(refs[i], i, logical, f_strides);
    if (!box) return std::nullopt;
    out.push_back(std::move(*box));
  }
  return out;
}

// Whether boxes that cover F (a valid map's lowest holders) hold each element once: their
// volumes add up to F's. Two pieces of one holder may overlap; the runs settle those.
bool tiles_once(const std::vector<Box>& boxes, const std::vector<PieceRef>& refs, Index numel) {
  Index volume = 0;
  for (const Box& box : boxes) {
    auto sum = checked_add(volume, checked_numel(refs[box.ref].piece->shape).value_or(0));
    if (!sum || *sum > numel) return false;
    volume = *sum;
  }
  return volume == numel;
}

// An overlap of two boxes as the run planner would see it: `count` rows (the stretch
// contiguous in F, with the axes that step as one with it on both sides, cut_runs' row;
// one element where F's inner axis is one wide), `gap` apart, merged like its rows; or,
// where more than one axis steps over rows, the whole segment in `box` (merged with none).
struct Overlap {
  Row row;  // the first row
  Index count = 1;
  Index source_gap = 0, target_gap = 0;
  std::optional<TransferSegment> box;
};

// The overlap of a source box and a wanted box; nullopt where they do not meet. `first` is
// set to its lowest element of F.
std::optional<Overlap> overlap_of(const Box& from, const Box& to, const Extents& logical, const Strides& f_strides,
                                  Index& first) {
  Overlap o;
  Row& row = o.row;
  row.source_rank = from.rank;
  row.target_rank = to.rank;
  row.source_at = from.at;
  row.target_at = to.at;
  first = 0;
  const std::size_t d = from.lo.size();
  std::size_t inner = d;  // F's inner axis: the last one wider than one
  for (std::size_t j = d; j-- > 0;) {
    if (logical[j] > 1) {
      inner = j;
      break;
    }
  }
  std::vector<Axis> axes;
  bool row_axis = false;
  for (std::size_t j = 0; j < d; ++j) {
    const Index lo = std::max(from.lo[j], to.lo[j]);
    const Index hi = std::min(from.hi[j], to.hi[j]);
    if (lo >= hi) return std::nullopt;
    // Inside both pieces' checked spans and F: no product here overflows.
    row.source_at += (lo - from.lo[j]) * from.step[j];
    row.target_at += (lo - to.lo[j]) * to.step[j];
    first += lo * f_strides[j];
    if (hi - lo > 1) {
      axes.push_back({hi - lo, from.step[j], to.step[j]});
      row_axis = j == inner;
    }
  }
  // Merged as cut_runs merges a piece's axes.
  axes.resize(detail::merge_contiguous_axes(axes.data(), axes.size()));
  row.len = 1;
  if (row_axis) {
    row.len = axes.back().extent;
    row.source_step = axes.back().from_stride;
    row.target_step = axes.back().to_stride;
    axes.pop_back();
  }
  if (axes.size() == 1) {
    o.count = axes[0].extent;
    o.source_gap = axes[0].from_stride;
    o.target_gap = axes[0].to_stride;
  } else if (axes.size() > 1) {
    TransferSegment s;
    s.source_rank = row.source_rank;
    s.target_rank = row.target_rank;
    s.source.offset = row.source_at;
    s.target.offset = row.target_at;
    for (const Axis& axis : axes) {
      s.shape.push_back(axis.extent);
      s.source.strides.push_back(axis.from_stride);
      s.target.strides.push_back(axis.to_stride);
    }
    if (row.len > 1) {
      s.shape.push_back(row.len);
      s.source.strides.push_back(row.source_step);
      s.target.strides.push_back(row.target_step);
    }
    o.box = std::move(s);
  }
  return o;
}

// Whether `next` continues `run` (rows one distance apart on both sides, the source's not
// negative), and at which distances, as merge_rows joins rows.
std::optional<std::pair<Index, Index>> continues(const Overlap& run, const Overlap& next, const PlannerBugs& bugs) {
  if (run.box || next.box || run.row.group() != next.row.group()) return std::nullopt;
  Index source_gap = run.source_gap, target_gap = run.target_gap;
  if (run.count == 1) {
    source_gap = next.row.source_at - run.row.source_at;
    target_gap = next.row.target_at - run.row.target_at;
    if (source_gap < 0) return std::nullopt;
  } else if (next.row.target_at != run.row.target_at + run.count * target_gap ||
             (next.row.source_at != run.row.source_at + run.count * source_gap && !bugs.merge_unequal_strides)) {
    return std::nullopt;
  }
  if (next.count > 1 && (next.target_gap != target_gap ||
                         (next.source_gap != source_gap && !bugs.merge_unequal_strides))) {
    return std::nullopt;
  }
  return std::pair{source_gap, target_gap};
}

// Overlaps of one rank pair and row, taken in target address order, join while the
// distance from row to row is the same on both sides, as the run planner merges its rows
// (and into the same segments where each overlap is one row).
std::vector<TransferSegment> merge_overlaps(std::vector<Overlap> all, const PlannerBugs& bugs) {
  std::sort(all.begin(), all.end(), [](const Overlap& a, const Overlap& b) {
    return std::make_tuple(!a.box.has_value(), a.row.key()) < std::make_tuple(!b.box.has_value(), b.row.key());
  });
  std::vector<Overlap> joined;
  for (Overlap& next : all) {
    const auto gaps = joined.empty() ? std::nullopt : continues(joined.back(), next, bugs);
    if (!gaps) {
      joined.push_back(std::move(next));
      continue;
    }
    Overlap& run = joined.back();
    run.count += next.count;
    std::tie(run.source_gap, run.target_gap) = *gaps;
  }
  std::vector<TransferSegment> out;
  out.reserve(joined.size());
  for (Overlap& o : joined) {
    out.push_back(o.box ? std::move(*o.box) : segment_of(o.row, o.count, o.source_gap, o.target_gap));
  }
  return out;
}

// The segment's axes in descending order of target stride (the copy is the same set of
// address pairs in any order), with each axis merged into the one after it wherever both
// views step across the pair as across one longer axis, and axes one wide dropped.
void fold_axes(TransferSegment& s) {
  std::vector<Axis> axes;
  for (std::size_t k = 0; k < s.shape.size(); ++k) {
    if (s.shape[k] > 1) axes.push_back({s.shape[k], s.source.strides[k], s.target.strides[k]});
  }
  std::stable_sort(axes.begin(), axes.end(), [](const Axis& a, const Axis& b) {
    return std::tie(a.to_stride, a.from_stride) > std::tie(b.to_stride, b.from_stride);
  });
  axes.resize(detail::merge_contiguous_axes(axes.data(), axes.size()));
  s.shape.clear();
  s.source.strides.clear();
  s.target.strides.clear();
  for (const Axis& axis : axes) {
    s.shape.push_back(axis.extent);
    s.source.strides.push_back(axis.from_stride);
    s.target.strides.push_back(axis.to_stride);
  }
  if (s.shape.empty()) {
    s.shape.push_back(1);
    s.source.strides.push_back(1);
    s.target.strides.push_back(1);
  }
}

// Segments of one rank pair, shape and strides whose offsets step evenly on both sides
// (in target order; the source's step not negative) become one segment with one more
// axis, folded; the passes repeat while they merge. This joins what rows cannot: two
// pieces' elements interleaved in both shards, say.
std::vector<TransferSegment> stack_segments(std::vector<TransferSegment> all, const PlannerBugs& bugs) {
  const auto group = [](const TransferSegment& s) {
    return std::tie(s.source_rank, s.target_rank, s.shape, s.source.strides, s.target.strides);
  };
  for (std::size_t before = all.size() + 1; all.size() < before;) {
    before = all.size();
    std::sort(all.begin(), all.end(), [&](const TransferSegment& a, const TransferSegment& b) {
      return std::tuple_cat(group(a), std::tie(a.target.offset, a.source.offset)) <
             std::tuple_cat(group(b), std::tie(b.target.offset, b.source.offset));
    });
    std::vector<TransferSegment> out;
    for (std::size_t i = 0; i < all.size();) {
      std::size_t j = i + 1;
      const Index source_gap = j < all.size() ? all[j].source.offset - all[i].source.offset : 0;
      const Index target_gap = j < all.size() ? all[j].target.offset - all[i].target.offset : 0;
      if (source_gap >= 0) {
        while (j < all.size() && group(all[j]) == group(all[i]) &&
               all[j].target.offset - all[j - 1].target.offset == target_gap &&
               (bugs.merge_unequal_strides || all[j].source.offset - all[j - 1].source.offset == source_gap)) {
          ++j;
        }
      }
      TransferSegment merged = std::move(all[i]);
      if (j - i > 1) {
        merged.shape.push_back(static_cast<Index>(j - i));
        merged.source.strides.push_back(source_gap);
        merged.target.strides.push_back(target_gap);
        fold_axes(merged);
      }
      out.push_back(std::move(merged));
      i = j;
    }
    all = std::move(out);
  }
  return all;
}

// Two segments of one rank pair and strides, alike but along one axis, where the second
// starts on both sides where the first ends along it, become one, as DeepSpeed's planner
// joins its segments (two pieces back to back in both shards, say); axis by axis until
// none joins. Segments come folded (fold_axes), so that alike ones have one axis order.
std::vector<TransferSegment> concatenate_segments(std::vector<TransferSegment> all) {
  const auto key = [](const TransferSegment& s, std::size_t axis) {
    Extents others = s.shape;
    others.erase(others.begin() + static_cast<std::ptrdiff_t>(axis));
    return std::make_tuple(s.source_rank, s.target_rank, s.source.strides, s.target.strides, others);
  };
  for (bool joined = true; joined;) {
    joined = false;
    for (std::size_t axis = 0;; ++axis) {
      std::vector<TransferSegment> along, rest;
      for (TransferSegment& s : all) (s.shape.size() > axis ? along : rest).push_back(std::move(s));
      if (along.empty()) {
        all = std::move(rest);
        break;
      }
      std::sort(along.begin(), along.end(), [&](const TransferSegment& a, const TransferSegment& b) {
        return std::tuple_cat(key(a, axis), std::tie(a.target.offset)) <
               std::tuple_cat(key(b, axis), std::tie(b.target.offset));
      });
      for (TransferSegment& s : along) {
        if (!rest.empty() && rest.back().shape.size() > axis && key(rest.back(), axis) == key(s, axis)) {
          TransferSegment& first = rest.back();
          if (first.source.offset + first.shape[axis] * first.source.strides[axis] == s.source.offset &&
              first.target.offset + first.shape[axis] * first.target.strides[axis] == s.target.offset) {
            first.shape[axis] += s.shape[axis];
            joined = true;
            continue;
          }
        }
        rest.push_back(std::move(s));
      }
      all = std::move(rest);
    }
  }
  for (TransferSegment& s : all) fold_axes(s);
  return all;
}

// Box plans try this many (wanted, source) pairs at the most before leaving the maps to
// the runs: a bound on planning time where many boxes overlap along every axis.
constexpr Index kMaxBoxPairs = Index{1} << 24;

// The overlaps of every wanted box with the source boxes, through emit(source, wanted,
// segment, first element); false where more than kMaxBoxPairs pairs would be tried. The
// source boxes are looked up along the logical axis they are cut most finely on, sorted
// by where they start on it: those that can meet a wanted box start within the widest
// source box's width before it.
template <class Emit>
bool for_each_overlap(const std::vector<Box>& sources, const std::vector<Box>& wanted, const Extents& logical,
                      const Strides& f_strides, Emit&& emit) {
  if (sources.empty() || wanted.empty()) return true;
  const std::size_t d = sources.front().lo.size();
  std::size_t axis = 0;
  std::size_t most = 0;
  for (std::size_t j = 0; j < d; ++j) {
    std::vector<Index> starts;
    for (const Box& b : sources) starts.push_back(b.lo[j]);
    std::sort(starts.begin(), starts.end());
    const auto distinct = static_cast<std::size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > most) most = distinct, axis = j;
  }
  std::vector<std::size_t> order(sources.size());
  Index widest = 1;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    order[i] = i;
    if (d > 0) widest = std::max(widest, sources[i].hi[axis] - sources[i].lo[axis]);
  }
  const auto start = [&](std::size_t i) { return d == 0 ? Index{0} : sources[i].lo[axis]; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return start(a) < start(b); });
  Index tried = 0;
  for (const Box& w : wanted) {
    const Index lo = d == 0 ? 0 : w.lo[axis] - widest + 1;
    const Index hi = d == 0 ? 1 : w.hi[axis];
    auto it = std::lower_bound(order.begin(), order.end(), lo, [&](std::size_t i, Index v) { return start(i) < v; });
    for (; it != order.end() && start(*it) < hi; ++it) {
      if (++tried > kMaxBoxPairs) return false;
      Index first = 0;
      if (auto overlap = overlap_of(sources[*it], w, logical, f_strides, first)) {
        emit(sources[*it], w, std::move(*overlap), first);
      }
    }
  }
  return true;
}

// The box plan's copies or replica checks (`checks`): nullopt where the maps are not all
// boxes, the holders overlap, or too many pairs would be tried (the runs plan those).
std::optional<Result<std::vector<TransferSegment>>> box_segments(const std::vector<PieceRef>& holders,
                                                                 const std::vector<PieceRef>& wanted,
                                                                 const Extents& logical, const ReshardOptions& options,
                                                                 bool checks) {
  const auto numel = checked_numel(logical);
  if (!options.plan_on_boxes || !numel || *numel == 0) return std::nullopt;
  const Strides f_strides = row_major_strides(logical);
  auto held = boxes_of(holders, logical, f_strides);
  if (!held || !tiles_once(*held, holders, *numel)) return std::nullopt;
  auto writes = boxes_of(wanted, logical, f_strides);
  if (!writes) return std::nullopt;
  std::vector<Overlap> overlaps;
  // A scale refusal names the lowest target rank, then the lowest element of F, as the
  // reference does, whatever order the boxes meet in.
  std::optional<std::tuple<Rank, Index, Index, std::size_t, double>> differ;
  const bool whole = for_each_overlap(*held, *writes, logical, f_strides, [&](const Box& from, const Box& to,
                                                                                Overlap overlap, Index first) {
    const double source_scale = holders[from.ref].piece->scale;
    const PieceRef& writer = wanted[to.ref];
    if (source_scale != writer.piece->scale) {
      if (checks) return;  // replicas under different scales agree only after unscaling
      if (!options.bugs.copy_across_scales) {
        const auto found = std::make_tuple(writer.rank, first, writer.written, to.ref, source_scale);
        if (!differ || found < *differ) differ = found;
        return;
      }
    }
    overlaps.push_back(std::move(overlap));
  });
  if (!whole) return std::nullopt;
  if (differ) {
    const auto& [rank, first, written, ref, scale] = *differ;
    return Result<std::vector<TransferSegment>>(fault::reshard_scales_differ(wanted[ref].at(), first, scale));
  }
  const PlannerBugs& bugs = checks ? PlannerBugs{} : options.bugs;
  auto segments = stack_segments(merge_overlaps(std::move(overlaps), bugs), bugs);
  for (TransferSegment& segment : segments) fold_axes(segment);
  segments = concatenate_segments(std::move(segments));
  if (static_cast<Index>(segments.size()) > options.max_segments) {
    return Result<std::vector<TransferSegment>>(fault::plan_over_budget(options.max_segments));
  }
  return Result<std::vector<TransferSegment>>(std::move(segments));
}

// The plan's copies or replica checks (as run_segments): on boxes where the maps allow it,
// else on runs; within the budget.
Result<std::vector<TransferSegment>> segments_of(const std::vector<PieceRef>& holders,
                                                 const std::vector<PieceRef>& wanted, const Extents& logical,
                                                 const ReshardOptions& options, bool checks) {
  if (auto boxed = box_segments(holders, wanted, logical, options, checks)) return std::move(*boxed);
  return run_segments(holders, wanted, options, checks);
}

// The replica checks of `map` (each non-lowest holder's copy against the lowest's).
Result<std::vector<TransferSegment>> replica_checks(const Map& map, const ReshardOptions& options) {
  const auto others = pieces_of(map, [](Rank rank, const Piece& p) { return !lowest_holder(rank, p); });
  if (others.empty()) return std::vector<TransferSegment>{};
  return segments_of(pieces_of(map, lowest_holder), others, map.logical_shape, options, true);
}

}  // namespace

Result<Plan> plan(const Map& source, const Map& target, const ReshardOptions& options) {
  if (Status status = check_map(source, options.checks); !status.ok()) {
    return reworded(status.error(), "in the source map, " + status.error().sentence);
  }
  if (Status status = check_map(target, options.checks); !status.ok()) {
    return reworded(status.error(), "in the target map, " + status.error().sentence);
  }
  if (source.logical_shape != target.logical_shape) {
    return fault::reshard_shapes_differ(source.logical_shape, target.logical_shape);
  }
  Plan out;
  out.logical_shape = source.logical_shape;
  out.source_numel = shard_sizes(source);
  out.target_numel = shard_sizes(target);
  // Each element is read from its lowest holder: the pieces a rank lists as the first of
  // their locations (condition 6 makes those tile F).
  auto segments = segments_of(pieces_of(source, lowest_holder),
                              pieces_of(target, [](Rank, const Piece&) { return true; }), source.logical_shape,
                              options, false);
  if (!segments) return segments.error();
  out.segments = std::move(segments).value();
  std::sort(out.segments.begin(), out.segments.end(), segment_less);
  // Every piece counts, empty ones and other replicas' too: a conversion judges them all.
  for (const bool in_target : {false, true}) {
    const Map& map = in_target ? target : source;
    for (const PieceRef& ref : pieces_of(map, [](Rank, const Piece& p) { return p.scale != 1.0; })) {
      const bool seen = std::any_of(out.scaled_pieces.begin(), out.scaled_pieces.end(), [&](const auto& s) {
        return s.in_target == in_target && s.piece.scale == ref.piece->scale;
      });
      if (!seen) out.scaled_pieces.push_back({in_target, ref.rank, ref.written, *ref.piece});
    }
  }
  if (options.compare_replicas) {
    auto checks = replica_checks(source, options);
    if (!checks) return checks.error();
    out.replica_checks = std::move(checks).value();
    std::sort(out.replica_checks.begin(), out.replica_checks.end(), segment_less);
  }
  count(out);
  return out;
}

bool same_copies(const Plan& a, const Plan& b) {
  return a.logical_shape == b.logical_shape && a.source_numel == b.source_numel && a.target_numel == b.target_numel &&
         a.segments == b.segments && a.replica_checks == b.replica_checks && a.statistics == b.statistics;
}

Result<std::vector<TransferSegment>> detail::replica_checks_of(const Map& map, const ReshardOptions& options) {
  return replica_checks(map, options);
}

}  // namespace shardcheck
