// The run sweeps of check_map: conditions 4-6 decided on address runs, where every
// error is found exactly (see checks_internal.h).
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "checks_internal.h"

namespace shardcheck::check_parts {

namespace {

void emit_runs(const Layout& layout, const Axis* axes, Index offset, std::int32_t piece, ScratchVector<Run>& out) {
  std::array<Index, 64> idx;
  std::fill_n(idx.begin(), layout.axes_count, Index{0});
  Index address = offset;
  while (true) {
    out.push_back(Run{address, layout.run_len, piece});
    int k = 0;
    for (; k < layout.axes_count; ++k) {
      const Axis& axis = axes[k];
      if (idx[k] + 1 < axis.extent) {
        ++idx[k];
        address += axis.stride;
        break;
      }
      // Step back rather than one past the end: the past-the-end address may overflow.
      address -= axis.stride * (axis.extent - 1);
      idx[k] = 0;
    }
    if (k == layout.axes_count) return;
  }
}

void emit_source_runs(const Scratch& s, std::int32_t g, ScratchVector<Run>& out) {
  const Layout& layout = s.layouts[static_cast<std::size_t>(g)].src;
  emit_runs(layout, s.axes.data() + layout.axes_begin, s.pieces[g].piece->source.offset, g, out);
}

void emit_dest_runs(const Scratch& s, std::int32_t g, ScratchVector<Run>& out) {
  const Layout& layout = s.layouts[static_cast<std::size_t>(g)].dst;
  emit_runs(layout, s.axes.data() + layout.axes_begin, s.pieces[g].piece->dest.offset, g, out);
}

}  // namespace

// ---- condition 4 -------------------------------------------------------------------

Status check_rank_tiling(Scratch& s, const RankInfo& r) {
  Index written = 0;
  bool overflow = false;
  for (std::int32_t g = r.first; g < r.last; ++g) {
    if (!s.pieces[g].sound) continue;
    auto sum = checked_add(written, s.pieces[g].numel);
    if (!sum) {
      overflow = true;
      break;
    }
    written = *sum;
  }
  const Rank id = r.entry->rank;
  if (overflow || written != r.shard_numel) {
    return fault::count(id, overflow ? std::nullopt : std::optional<Index>(written), r.shard_numel);
  }

  auto& runs = s.runs;
  runs.clear();
  for (std::int32_t g = r.first; g < r.last; ++g) {
    const PieceInfo& p = s.pieces[g];
    if (p.sound && p.runs_representable && !p.empty) emit_dest_runs(s, g, runs);
  }
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.start != b.start ? a.start < b.start : a.piece < b.piece; });

  // Sorted by start, the first run that begins before the furthest end so far begins
  // at the lowest address written twice.
  Index reach = 0;
  for (const Run& run : runs) {
    if (run.start < reach) {
      const Index address = run.start;
      std::int32_t a = -1, b = -1;  // the two lowest pieces writing `address`
      for (const Run& other : runs) {
        if (other.start > address) break;
        if (address - other.start >= other.len) continue;
        const std::int32_t g = other.piece;
        if (a < 0 || g < a) {
          b = a;
          a = g;
        } else if (g != a && (b < 0 || g < b)) {
          b = g;
        }
      }
      if (b < 0) b = a;  // only possible when a view overlaps itself (condition 3 planted off)
      const PieceAt other = at(s.pieces[b]);
      return fault::shard_address_twice(at(s.pieces[a]), address, &other);
    }
    reach = std::max(reach, run.start + run.len);
  }
  Index cursor = 0;
  for (const Run& run : runs) {
    if (run.start > cursor) break;
    cursor = std::max(cursor, run.start + run.len);
  }
  if (cursor < r.shard_numel) return fault::shard_address_uncovered(id, cursor);
  return {};
}

// ---- conditions 5 and 6 -------------------------------------------------------------

void assign_classes(Scratch& s) {
  s.class_size.clear();
  bool single = true;      // every sound piece has one location
  bool own_single = true;  // ... and it is the piece's own rank
  for (const PieceInfo& p : s.pieces) {
    if (!p.sound) continue;
    single = single && p.one_location;
    own_single = own_single && p.one_location && p.own_ok;  // that one location is its own rank
  }
  if (own_single) {
    // Pieces are in rank order, so the classes are the ranks, in that order.
    const PieceInfo* previous = nullptr;
    for (PieceInfo& p : s.pieces) {
      if (!p.sound) continue;
      if (!previous || previous->rank != p.rank) s.class_size.push_back(1);
      p.loc_class = static_cast<std::int32_t>(s.class_size.size()) - 1;
      previous = &p;
    }
  } else if (single) {
    // A flat sort of (location, piece): the location vectors are not read again. (Some
    // piece lists one rank that is not its own, so this map is refused anyway.)
    auto& keyed = s.keyed;
    keyed.clear();
    for (std::int32_t g = 0; g < static_cast<std::int32_t>(s.pieces.size()); ++g) {
      if (s.pieces[g].sound) keyed.emplace_back(s.pieces[g].piece->locations[0], g);
    }
    std::sort(keyed.begin(), keyed.end());
    for (std::size_t k = 0; k < keyed.size(); ++k) {
      if (k == 0 || keyed[k].first != keyed[k - 1].first) s.class_size.push_back(1);
      s.pieces[keyed[k].second].loc_class = static_cast<std::int32_t>(s.class_size.size()) - 1;
    }
  } else {
    auto& order = s.order;
    order.clear();
    for (std::int32_t g = 0; g < static_cast<std::int32_t>(s.pieces.size()); ++g) {
      if (s.pieces[g].sound) order.push_back(g);
    }
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
      return s.pieces[a].piece->locations < s.pieces[b].piece->locations;
    });
    const RankList* previous = nullptr;
    for (std::int32_t g : order) {
      const auto& loc = s.pieces[g].piece->locations;
      if (!previous || *previous != loc) {
        s.class_size.push_back(static_cast<std::int32_t>(loc.size()));
        previous = &loc;
      }
      s.pieces[g].loc_class = static_cast<std::int32_t>(s.class_size.size()) - 1;
    }
  }
}

namespace {

// Counters over the pieces covering the current segment of F, kept so that a valid
// segment is recognised in O(1): all covering pieces share one locations set L, each
// names its own rank, the distinct covering ranks number |L|, and a lone piece or
// replicas (|L| >= 2) only.
struct Cover {
  std::int32_t pieces = 0;
  std::int32_t classes = 0;
  std::int32_t ranks = 0;
  std::int32_t bad_own = 0;
  std::int32_t singles = 0;
};

struct Violation {
  std::int32_t piece = std::numeric_limits<std::int32_t>::max();
  Index address = kNoAddress;
  ErrorKind kind = ErrorKind::holders;
};

Error homogeneity_error(Scratch& s, const Violation& v) {
  const PieceInfo& p = s.pieces[v.piece];
  if (v.address == kNoAddress) return fault::not_own_rank(at(p));
  // Recover who covers the address; only done once, for the reported error.
  s.holders.clear();
  std::int32_t other = -1;
  for (const Run& run : s.runs) {
    if (run.start > v.address || v.address - run.start >= run.len) continue;
    const PieceInfo& q = s.pieces[run.piece];
    s.holders.push_back(q.rank);
    if (run.piece != v.piece && q.piece->locations.size() == 1 && (other < 0 || run.piece < other)) {
      other = run.piece;
    }
  }
  std::sort(s.holders.begin(), s.holders.end());
  s.holders.erase(std::unique(s.holders.begin(), s.holders.end()), s.holders.end());
  // Two single holders of one element always leave another one to name.
  if (v.kind == ErrorKind::twice && other >= 0) return fault::claimed_twice(at(p), v.address, at(s.pieces[other]));
  return fault::holders(at(p), v.address, s.holders);
}

// The source runs of every piece, in address order.
void sorted_source_runs(Scratch& s) {
  auto& runs = s.runs;
  runs.clear();
  for (std::int32_t g = 0; g < static_cast<std::int32_t>(s.pieces.size()); ++g) {
    const PieceInfo& p = s.pieces[g];
    if (p.sound && p.runs_representable && !p.empty) emit_source_runs(s, g, runs);
  }
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.start != b.start ? a.start < b.start : a.piece < b.piece; });
}

// The state of check_full_side's sweep: the active source runs, the counters over the
// pieces they belong to, and the lowest violation so far.
struct FullSweep {
  Scratch& s;
  Cover cover;
  Violation best;
  std::uint32_t segment = 0;

  explicit FullSweep(Scratch& scratch) : s(scratch) {
    assign_classes(s);
    const std::size_t piece_count = s.pieces.size();
    s.piece_active.assign(piece_count, 0);
    s.stamp.assign(piece_count, 0);
    s.class_active.assign(s.class_size.size(), 0);
    s.rank_active.assign(s.rank_ids.size(), 0);
    s.heap.clear();
    // An empty piece not on its own rank is a violation no segment shows.
    for (std::int32_t g = 0; g < static_cast<std::int32_t>(piece_count); ++g) {
      const PieceInfo& p = s.pieces[g];
      if (p.sound && p.empty && !p.own_ok) {
        best.piece = g;
        break;
      }
    }
  }

  void enter(std::int32_t g, int delta) {
    const PieceInfo& p = s.pieces[g];
    std::int32_t& count = s.piece_active[g];
    const bool was = count > 0;
    count += delta;
    const bool is = count > 0;
    if (was == is) return;  // a self-overlapping view (condition 3 planted off)
    const int d = is ? 1 : -1;
    cover.pieces += d;
    std::int32_t& c = s.class_active[p.loc_class];
    if ((c == 0) != (c + d == 0)) cover.classes += d;
    c += d;
    std::int32_t& r = s.rank_active[p.rank_slot];
    if ((r == 0) != (r + d == 0)) cover.ranks += d;
    r += d;
    if (!p.own_ok) cover.bad_own += d;
    if (p.one_location) cover.singles += d;
  }

  // Conditions 5 and 6 on the segment starting at `pos`, covered by the active runs.
  void judge(Index pos) {
    const auto& runs = s.runs;
    const auto& heap = s.heap;
    const auto lsize = s.class_size[s.pieces[runs[heap.front().second].piece].loc_class];
    if (cover.classes == 1 && cover.bad_own == 0 && cover.ranks == lsize && (cover.pieces == 1 || lsize >= 2)) {
      return;
    }
    ++segment;
    s.holders.clear();
    for (const auto& [end, run] : heap) s.holders.push_back(s.pieces[runs[run].piece].rank);
    std::sort(s.holders.begin(), s.holders.end());
    s.holders.erase(std::unique(s.holders.begin(), s.holders.end()), s.holders.end());
    const ErrorKind kind = cover.pieces >= 2 && cover.singles >= 2 ? ErrorKind::twice : ErrorKind::holders;
    // The pieces to fix are those whose own locations are wrong (1.1); only when every
    // piece's are right (two single holders on one rank) does the pair rule name them all.
    bool some_own_fault = false;
    for (const auto& [end, run] : heap) some_own_fault |= s.pieces[runs[run].piece].piece->locations != s.holders;
    const bool pair_bad = !some_own_fault && cover.pieces >= 2 && !(cover.classes == 1 && lsize >= 2);
    for (const auto& [end, run] : heap) {
      const std::int32_t g = runs[run].piece;
      if (g >= best.piece || s.stamp[g] == segment) continue;
      s.stamp[g] = segment;
      if (pair_bad || s.pieces[g].piece->locations != s.holders) best = Violation{g, pos, kind};
    }
  }
};

}  // namespace

// Sweeps the source runs of all pieces in address order. Between consecutive run
// boundaries the set of covering pieces is constant, so coverage and holders are
// decided per segment with interval arithmetic only.
Status check_full_side(Scratch& s, Index numel_f, const PlantedBugs& bugs) {
  sorted_source_runs(s);
  const auto& runs = s.runs;
  FullSweep sweep(s);
  auto& heap = s.heap;
  auto heap_greater = [](const auto& a, const auto& b) { return a.first > b.first; };

  const bool judge_holders = !bugs.skip_homogeneity;
  Status gap;
  auto note_gap = [&](Index pos) {
    if (gap.ok() && pos < numel_f) gap = fault::element_uncovered(pos);
  };
  Index pos = 0;
  std::size_t next = 0;
  while (true) {
    if (heap.empty()) {
      if (next == runs.size()) break;
      if (runs[next].start > pos) note_gap(pos);
      pos = runs[next].start;
    }
    if (!gap.ok() && !bugs.skip_coverage) return gap;
    while (next < runs.size() && runs[next].start == pos) {
      heap.emplace_back(pos + runs[next].len, static_cast<std::int32_t>(next));
      std::push_heap(heap.begin(), heap.end(), heap_greater);
      sweep.enter(runs[next].piece, 1);
      ++next;
    }
    Index boundary = heap.front().first;
    if (next < runs.size()) boundary = std::min(boundary, runs[next].start);
    if (judge_holders) sweep.judge(pos);
    pos = boundary;
    while (!heap.empty() && heap.front().first == pos) {
      sweep.enter(runs[heap.front().second].piece, -1);
      std::pop_heap(heap.begin(), heap.end(), heap_greater);
      heap.pop_back();
    }
  }
  note_gap(pos);
  if (!gap.ok() && !bugs.skip_coverage) return gap;
  if (judge_holders && sweep.best.piece < static_cast<std::int32_t>(s.pieces.size())) {
    return homogeneity_error(s, sweep.best);
  }
  return {};
}

}  // namespace shardcheck::check_parts
