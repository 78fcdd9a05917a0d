// Transfer plans (contract 11): planning. See reshard.h for what is planned and what is
// refused; reshard.cc executes plans.
//
// The planner works on address runs of F: a run is a stretch of consecutive elements of F
// that one piece ties to an arithmetic progression of addresses in one rank's shard. Both
// maps are cut into runs; the source runs of each element's lowest holder tile F once
// (conditions 5 and 6), the target runs of each rank tile its shard once (condition 4),
// so intersecting every target run with the source runs gives every target address
// exactly once. The intersections (rows) are merged into 2-d segments where the distance
// between rows is the same on both sides.
#include "shardcheck/reshard.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "reshard_internal.h"

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

struct Axis {
  Index extent, source_stride, dest_stride;
};

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
  // Merge an outer axis into the one inside it when both views step across the pair as
  // across one longer axis. The products stay below numel and the span, both checked.
  for (std::size_t k = axes.size(); k-- > 1;) {
    Axis& outer = axes[k - 1];
    const Axis& inner = axes[k];
    if (outer.source_stride == inner.extent * inner.source_stride &&
        outer.dest_stride == inner.extent * inner.dest_stride) {
      outer = {outer.extent * inner.extent, inner.source_stride, inner.dest_stride};
      axes.erase(axes.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  Index len = 1;
  Index step = 1;
  if (!axes.empty() && axes.back().source_stride == 1) {
    len = axes.back().extent;
    step = len > 1 ? axes.back().dest_stride : 1;
    axes.pop_back();
  }
  const Index count = *numel / len;
  if (count > budget - static_cast<Index>(out.size())) return fault::plan_over_budget(budget);
  // An odometer over the outer axes; addresses stay inside the checked spans.
  std::vector<Index> index(axes.size(), 0);
  Index f = p.source.offset;
  Index at = p.dest.offset;
  for (Index n = 0; n < count; ++n) {
    out.push_back(Run{f, len, at, step, ref.rank, ref_index});
    for (std::size_t k = axes.size(); k-- > 0;) {
      if (++index[k] < axes[k].extent) {
        f += axes[k].source_stride;
        at += axes[k].dest_stride;
        break;
      }
      f -= (axes[k].extent - 1) * axes[k].source_stride;
      at -= (axes[k].extent - 1) * axes[k].dest_stride;
      index[k] = 0;
    }
  }
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

Result<std::vector<TransferSegment>> replica_checks(const Map& source, const std::vector<PieceRef>& holders,
                                                    const std::vector<Run>& tile, const ReshardOptions& options) {
  const auto others = pieces_of(source, [](Rank rank, const Piece& p) { return !lowest_holder(rank, p); });
  auto runs = runs_of(others, options.max_segments);
  if (!runs) return runs.error();
  std::vector<Row> rows;
  for (const Run& other : runs.value()) {
    Status status = overlaps(tile, other, [&](const Run& held, Index lo, Index hi) -> Status {
      // Replicas under different scales agree only after unscaling: no bitwise comparison.
      if (holders[held.ref].piece->scale != others[other.ref].piece->scale) return {};
      if (static_cast<Index>(rows.size()) >= options.max_segments) return fault::plan_over_budget(options.max_segments);
      rows.push_back(row_of(held, other, lo, hi));
      return {};
    });
    if (!status.ok()) return std::move(status).error();
  }
  return merge_rows(std::move(rows), PlannerBugs{});
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
  // Each element is read from its lowest holder: the pieces a rank lists as the first of
  // their locations (condition 6 makes those tile F).
  const auto holders = pieces_of(source, lowest_holder);
  auto source_runs = runs_of(holders, options.max_segments);
  if (!source_runs) return source_runs.error();
  const std::vector<Run> tile = tile_of_f(std::move(source_runs).value());

  const auto writers = pieces_of(target, [](Rank, const Piece&) { return true; });
  auto target_runs = runs_of(writers, options.max_segments);
  if (!target_runs) return target_runs.error();
  // Errors name the lowest target rank, then the lowest element of F.
  std::vector<Run>& wanted = target_runs.value();
  std::sort(wanted.begin(), wanted.end(),
            [](const Run& a, const Run& b) { return std::tie(a.rank, a.f, a.at) < std::tie(b.rank, b.f, b.at); });

  Plan out;
  out.logical_shape = source.logical_shape;
  out.source_numel = shard_sizes(source);
  out.target_numel = shard_sizes(target);
  std::vector<Row> rows;
  // Where neither map has replicas, the rows are the pieces of a common refinement of two
  // tilings of F: at most one per run of either.
  rows.reserve(std::min(tile.size() + wanted.size(), static_cast<std::size_t>(options.max_segments)));
  for (const Run& run : wanted) {
    const PieceRef& writer = writers[run.ref];
    Status status = overlaps(tile, run, [&](const Run& held, Index lo, Index hi) -> Status {
      const double source_scale = holders[held.ref].piece->scale;
      if (source_scale != writer.piece->scale && !options.bugs.copy_across_scales) {
        return fault::reshard_scales_differ(writer.at(), lo, source_scale);
      }
      if (static_cast<Index>(rows.size()) >= options.max_segments) return fault::plan_over_budget(options.max_segments);
      rows.push_back(row_of(held, run, lo, hi));
      return {};
    });
    if (!status.ok()) return std::move(status).error();
  }
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
  out.segments = merge_rows(std::move(rows), options.bugs);
  std::sort(out.segments.begin(), out.segments.end(), segment_less);
  if (options.compare_replicas) {
    auto checks = replica_checks(source, holders, tile, options);
    if (!checks) return checks.error();
    out.replica_checks = std::move(checks).value();
    std::sort(out.replica_checks.begin(), out.replica_checks.end(), segment_less);
  }
  count(out);
  return out;
}

Result<std::vector<TransferSegment>> detail::replica_checks_of(const Map& map, const ReshardOptions& options) {
  const auto holders = pieces_of(map, lowest_holder);
  auto runs = runs_of(holders, options.max_segments);
  if (!runs) return runs.error();
  return replica_checks(map, holders, tile_of_f(std::move(runs).value()), options);
}

bool same_copies(const Plan& a, const Plan& b) {
  return a.logical_shape == b.logical_shape && a.source_numel == b.source_numel && a.target_numel == b.target_numel &&
         a.segments == b.segments && a.replica_checks == b.replica_checks && a.statistics == b.statistics;
}

}  // namespace shardcheck
