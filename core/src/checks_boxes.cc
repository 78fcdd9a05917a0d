#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "checks_internal.h"

namespace shardcheck::check_parts {

// ---- conditions 4-6 for boxes ---------------------------------------------------------
//
// Every in-tree constructor emits pieces whose views are boxes: row-major sub-blocks of F
// and of the shard. For such maps conditions 4-6 are decided on the boxes themselves,
// without one run per row: sweep the outer axes, cutting them at every box boundary into
// slabs where the same boxes are present, and decide the innermost axis of each slab
// with interval arithmetic. The proof only ever says "valid": any doubt (a piece that is
// not a box, a gap, an overlap, a cell whose holders are wrong, too much work) leaves the
// map to the run sweeps, which find the exact error and so keep the reported error
// where the contract puts it.

namespace {

using Events = std::vector<std::pair<Index, std::int32_t>>;

// Sorts events by key(event), a value in [0, keys): by counting when the keys are few
// next to the events (boxes of a grid share their boundaries), else by `less`, which
// must order them the same way up to ties. The sweeps' verdicts do not depend on the
// order of events with one key.
template <class Key, class Less>
void sort_events(BoxScratch& b, Events& ev, Index keys, Key key, Less less) {
  if (keys > static_cast<Index>(4 * ev.size() + 1024)) {
    std::sort(ev.begin(), ev.end(), less);
    return;
  }
  auto& counts = b.counts;
  counts.assign(static_cast<std::size_t>(keys) + 1, 0);
  for (const auto& e : ev) ++counts[static_cast<std::size_t>(key(e)) + 1];
  for (std::size_t k = 1; k < counts.size(); ++k) counts[k] += counts[k - 1];
  b.sorted.resize(ev.size());
  for (const auto& e : ev) b.sorted[counts[static_cast<std::size_t>(key(e))]++] = e;
  ev.swap(b.sorted);
}

// A key count for coordinates in [0, extent], each with `per` keys, or one that makes
// sort_events compare instead when that count would be huge.
Index event_keys(Index extent, Index per) {
  return extent < (Index{1} << 40) ? (extent + 1) * per : std::numeric_limits<Index>::max();
}

struct BoxSweep {
  Scratch& s;
  BoxScratch& b;
  const Index* boxes = nullptr;  // lo/hi, 2 * dims per piece from piece `first` on
  std::int32_t first = 0;
  const Extents* extents = nullptr;
  std::size_t dims = 0;
  bool full_side = false;  // conditions 5-6 (else: one rank's tiling, condition 4)
  bool count_holders = true;
  Index work = 0;
  Index budget = 0;

  Index lo(std::int32_t g, std::size_t k) const { return boxes[(static_cast<std::size_t>(g - first) * dims + k) * 2]; }
  Index hi(std::int32_t g, std::size_t k) const {
    return boxes[(static_cast<std::size_t>(g - first) * dims + k) * 2 + 1];
  }

  // The innermost axis of one slab, its boxes in `present`.
  bool leaf(const std::vector<std::int32_t>& present) {
    const std::size_t k = dims - 1;
    if (present.size() == 1) return alone_in_slab(k, present[0]);
    auto& ev = b.events[k];
    ev.clear();
    for (std::int32_t g : present) {
      ev.emplace_back(lo(g, k), g);
    }
    sort_events(
        b, ev, event_keys((*extents)[k], 1), [](const auto& e) { return e.first; },
        [](const auto& x, const auto& y) { return x < y; });
    work += static_cast<Index>(ev.size());
    const Index end = (*extents)[k];
    // Sorted by start, boxes (never empty: empty pieces are left out of every slab) tile
    // [0, end) exactly when each starts where the last ended. On a rank's side that is
    // condition 4. On the full side each segment then holds one box, and when every box
    // may hold its segment alone the sweep below would find nothing: a grid's slabs are
    // all so. Anything else goes to the sweep.
    Index cursor = 0;
    bool each_alone = true;
    for (const auto& [start, g] : ev) {
      if (start != cursor) {
        cursor = -1;
        break;
      }
      each_alone = each_alone && holds_alone(g);
      cursor = hi(g, k);
    }
    if (!full_side) return cursor == end;
    if (cursor == end && each_alone) return true;
    return leaf_segments(ev, k, end);
  }

  // Conditions 5 and 6 per segment of the innermost axis k of a slab, with the
  // counters of check_full_side; `ev` are the slab's boxes sorted by start.
  bool leaf_segments(const Events& ev, std::size_t k, Index end) {
    std::vector<std::pair<Index, std::int32_t>>& heap = s.heap;
    heap.clear();
    auto greater = [](const auto& x, const auto& y) { return x.first > y.first; };
    std::int32_t pieces = 0, classes = 0, ranks = 0, bad_own = 0, lsize_sum = 0;
    auto enter = [&](std::int32_t g, int d) {
      const PieceInfo& p = s.pieces[g];
      pieces += d;
      std::int32_t& c = s.class_active[p.loc_class];
      if ((c == 0) != (c + d == 0)) classes += d;
      c += d;
      std::int32_t& r = s.rank_active[p.rank_slot];
      if ((r == 0) != (r + d == 0)) ranks += d;
      r += d;
      if (!p.own_ok) bad_own += d;
      lsize_sum += d * static_cast<std::int32_t>(p.piece->locations.size());
    };
    bool ok = true;
    Index pos = 0;
    std::size_t next = 0;
    while (ok && pos < end) {
      while (next < ev.size() && ev[next].first == pos) {
        heap.emplace_back(hi(ev[next].second, k), ev[next].second);
        std::push_heap(heap.begin(), heap.end(), greater);
        enter(ev[next].second, 1);
        ++next;
      }
      if (heap.empty()) {
        ok = false;  // a gap: uncovered
        break;
      }
      const std::int32_t lsize = pieces > 0 ? lsize_sum / pieces : 0;
      const bool holders_ok = !count_holders || ranks == lsize;
      if (!(classes == 1 && bad_own == 0 && holders_ok && (pieces == 1 || lsize >= 2))) {
        ok = false;
        break;
      }
      Index boundary = heap.front().first;
      if (next < ev.size()) boundary = std::min(boundary, ev[next].first);
      pos = boundary;
      while (!heap.empty() && heap.front().first == pos) {
        enter(heap.front().second, -1);
        std::pop_heap(heap.begin(), heap.end(), greater);
        heap.pop_back();
      }
    }
    // Leave the counters at zero for the next slab.
    for (const auto& [e, g] : heap) enter(g, -1);
    heap.clear();
    return ok;
  }

  // Whether the boxes in `present`, as listed, follow one another along axis k without
  // overlapping there (each ends where or before the next starts): then every slab holds
  // one box and no events need sorting. Pieces come in content order, which starts with
  // the source offset, so the boxes of a row-major F (a block gather of rows, a row
  // split) and often their shard boxes arrive so.
  bool in_disjoint_order(std::size_t k, const std::vector<std::int32_t>& present) const {
    for (std::size_t i = 1; i < present.size(); ++i) {
      if (hi(present[i - 1], k) > lo(present[i], k)) return false;
    }
    return true;
  }

  // Whether box g may hold a segment of F by itself: on the full side, a single holder
  // on its own rank (what the sweep's counters ask of one piece); on a rank's side,
  // always.
  bool holds_alone(std::int32_t g) const {
    if (!full_side) return true;
    const PieceInfo& p = s.pieces[g];
    return p.own_ok && (!count_holders || p.one_location);
  }

  // What level(k, {g}) decides, without building one-box lists and recursing: a box
  // alone in its slab must span every axis from k on, and hold it alone. A block
  // gather's slabs are all one box.
  bool alone_in_slab(std::size_t k, std::int32_t g) {
    for (std::size_t j = k; j < dims; ++j) {
      if (lo(g, j) != 0 || hi(g, j) != (*extents)[j]) return false;
      ++work;
    }
    if (work > budget) return false;
    return holds_alone(g);
  }

  // The sweep of `level` for boxes in disjoint order: the slabs are the boxes' own
  // intervals, which must follow one another from 0 to the extent without a gap.
  bool slabs_of_one(std::size_t k, const std::vector<std::int32_t>& present) {
    Index pos = 0;
    for (std::int32_t g : present) {
      if (lo(g, k) != pos) return false;  // a gap
      if (++work > budget) return false;
      if (!alone_in_slab(k + 1, g)) return false;
      pos = hi(g, k);
    }
    return pos == (*extents)[k];
  }

  // Whether the boxes' lengths along axis k fit in its extent: necessary for them to
  // follow one another without overlap, and cheap to rule out (boxes in bands overlap).
  bool lengths_fit(std::size_t k, const std::vector<std::int32_t>& present) const {
    const Index extent = (*extents)[k];
    Index total = 0;
    for (std::int32_t g : present) {
      if (__builtin_add_overflow(total, hi(g, k) - lo(g, k), &total) || total > extent) return false;
    }
    return true;
  }

  // Slabs of axis k: the boxes in `present`, cut at each of their boundaries.
  bool level(std::size_t k, const std::vector<std::int32_t>& present) {
    if (k + 1 == dims) return leaf(present);
    if (in_disjoint_order(k, present)) return slabs_of_one(k, present);
    if (present.size() > 2 && lengths_fit(k, present)) {
      // Listed in another order (ranks first, say, as a gather of dealt rows is): sorted
      // by start, one key per box, they may still follow one another.
      auto& ev = b.events[k];
      ev.clear();
      for (std::int32_t g : present) ev.emplace_back(lo(g, k), g);
      sort_events(
          b, ev, event_keys((*extents)[k], 1), [](const auto& e) { return e.first; },
          [](const auto& x, const auto& y) { return x < y; });
      auto& by_start = b.by_start[k];
      by_start.clear();
      for (const auto& [start, g] : ev) by_start.push_back(g);
      if (in_disjoint_order(k, by_start)) return slabs_of_one(k, by_start);
    }
    auto& ev = b.events[k];
    ev.clear();
    for (std::int32_t g : present) {
      ev.emplace_back(lo(g, k), g);
      ev.emplace_back(hi(g, k), ~g);  // an end: complemented id
    }
    // At one coordinate, ends before starts: boxes that only touch do not overlap.
    sort_events(
        b, ev, event_keys((*extents)[k], 2), [](const auto& e) { return e.first * 2 + (e.second < 0 ? 0 : 1); },
        [](const auto& x, const auto& y) {
          if (x.first != y.first) return x.first < y.first;
          return (x.second < 0) > (y.second < 0);
        });
    auto& cur = b.active[k];
    auto& slot = b.slots[k];
    cur.clear();
    const Index end = (*extents)[k];
    Index pos = 0;
    std::size_t next = 0;
    while (pos < end) {
      while (next < ev.size() && ev[next].first == pos) {
        const std::int32_t id = ev[next].second;
        if (id < 0) {
          const std::int32_t g = ~id;
          const std::int32_t at = slot[static_cast<std::size_t>(g)];
          slot[static_cast<std::size_t>(cur.back())] = at;
          cur[static_cast<std::size_t>(at)] = cur.back();
          cur.pop_back();
        } else {
          slot[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(cur.size());
          cur.push_back(id);
        }
        ++next;
      }
      if (cur.empty()) return false;  // a gap
      work += static_cast<Index>(cur.size());
      if (work > budget) return false;
      const Index boundary = next < ev.size() ? ev[next].first : end;
      // The slab [pos, boundary) of axis k; deeper levels keep their own buffers.
      if (!level(k + 1, cur)) return false;
      pos = boundary;
    }
    return true;
  }
};

void grow_levels(BoxScratch& b, std::size_t dims, std::size_t pieces) {
  if (b.events.size() < dims) b.events.resize(dims);
  if (b.active.size() < dims) b.active.resize(dims);
  if (b.slots.size() < dims) b.slots.resize(dims);
  if (b.by_start.size() < dims) b.by_start.resize(dims);
  for (std::size_t k = 0; k < dims; ++k) {
    if (b.slots[k].size() < pieces) b.slots[k].resize(pieces);
  }
}

}  // namespace

// Whether prepare found every piece a box, on both sides. Only then can the sweeps below
// decide conditions 4-6, and no piece overlaps itself (a box of a row-major buffer never
// does, even by the conservative rule of condition 3), so no run layout is built at all.
bool all_boxes(const Scratch& s, const Map& map) {
  if (!s.boxes_looked_for || map.logical_shape.empty() || s.pieces.empty()) return false;
  for (const RankInfo& r : s.ranks) {
    if (r.first == r.last) continue;
    if (!r.shard_sound || !r.entry->shard_shape || r.entry->shard_shape->empty()) return false;
  }
  return std::all_of(s.pieces.begin(), s.pieces.end(),
                     [](const PieceInfo& p) { return p.sound && p.runs_representable && (p.empty || p.box); });
}

// True when conditions 4-6 are proven to hold on the boxes prepare found; false
// leaves the decision to the runs.
bool box_proof(Scratch& s, const Map& map, const PlantedBugs& bugs) {
  const std::size_t dims = map.logical_shape.size();
  BoxScratch& b = box_scratch();
  const std::size_t n = s.pieces.size();
  assign_classes(s);
  for (const PieceInfo& p : s.pieces) {
    if (p.empty && !p.own_ok) return false;  // a holders error of an empty piece
  }
  BoxSweep sweep{s, b};
  sweep.budget = std::max<Index>(Index{1} << 20, Index{64} * static_cast<Index>(n));

  // Condition 4, rank by rank.
  std::vector<std::int32_t>& present = s.order;
  for (const RankInfo& r : s.ranks) {
    if (!r.shard_sound) return false;
    std::optional<Index> written = 0;
    for (std::int32_t g = r.first; g < r.last && written; ++g) written = checked_add(*written, s.pieces[g].numel);
    if (written != r.shard_numel) return false;
    if (r.shard_numel == 0) continue;
    const Extents& shard = *r.entry->shard_shape;
    present.clear();
    for (std::int32_t g = r.first; g < r.last; ++g) {
      if (!s.pieces[g].empty) present.push_back(g);
    }
    grow_levels(b, shard.size(), n);
    sweep.boxes = b.dst_lo_hi.data() + r.dst_base;
    sweep.first = r.first;
    sweep.extents = &shard;
    sweep.dims = shard.size();
    sweep.full_side = false;
    if (!sweep.level(0, present)) return false;
  }

  // Conditions 5 and 6 over all pieces.
  s.class_active.assign(s.class_size.size(), 0);
  s.rank_active.assign(s.rank_ids.size(), 0);
  present.clear();
  for (std::size_t g = 0; g < n; ++g) {
    if (!s.pieces[g].empty) present.push_back(static_cast<std::int32_t>(g));
  }
  if (present.empty()) return false;
  grow_levels(b, dims, n);
  sweep.boxes = b.lo_hi.data();
  sweep.first = 0;
  sweep.extents = &map.logical_shape;
  sweep.dims = dims;
  sweep.full_side = true;
  sweep.count_holders = !bugs.box_skips_holder_count;
  return sweep.level(0, present);
}
}  // namespace shardcheck::check_parts
