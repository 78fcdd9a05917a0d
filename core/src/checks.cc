#include "shardcheck/checks.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "proven.h"
#include "threads.h"

namespace shardcheck {

namespace {

constexpr Index kNoAddress = std::numeric_limits<Index>::max();
constexpr std::uint8_t kNoFault = 0xff;
// Below this many pieces prepare reads them on one thread.
constexpr std::int64_t kParallelPieces = std::int64_t{1} << 15;

struct Axis {
  Index stride;
  Index extent;
};

// A view reduced to what the sweeps need. Its axes of extent > 1, sorted by stride,
// with an axis merged into the next inner one when together they are contiguous; an
// innermost stride-1 axis becomes the run length and the remaining (outer) axes,
// kept in Scratch::axes, enumerate run starts. At most 63 axes have extent > 1
// because the view's numel fits 64 bits.
struct Layout {
  std::int32_t axes_begin = 0;
  std::int32_t axes_count = 0;
  Index run_len = 1;
  Index runs = 1;
  bool unique = true;  // the conservative rule of spec 3.3, as is_unique in map.h
};

// Everything the later conditions need about one piece, computed once. Pieces are
// stored in the global check order: ranks by id, then pieces in content order, so
// "lowest rank, then lowest piece" is simply the lowest position in this vector.
struct PieceInfo {
  const Piece* piece = nullptr;
  Rank rank = 0;
  Index written = 0;     // index in the rank's list as written (what errors report)
  std::int32_t rank_slot = 0;  // dense index of `rank` among the distinct rank ids
  std::int32_t loc_class = 0;  // pieces with equal locations share a class
  std::int32_t owner = 0;      // index into Scratch::ranks
  bool sound = false;    // its addresses can be computed without overflow; only sound
                         // pieces are looked at after condition 1
  // Both views end below INT64_MAX, so "one past the last address" is representable.
  // A view ending at INT64_MAX is out of bounds (condition 2); its runs are only
  // skipped here when the bounds check is planted off.
  bool runs_representable = false;
  bool empty = true;
  bool own_ok = false;   // locations name the listing rank
  bool box = false;      // non-empty, and a box of F and of its shard (BoxScratch)
  bool one_location = false;  // and which: assign_classes groups on it
  Rank loc_first = 0;
  Index numel = 0;
  Index src_max = -1;  // the last address each view touches
  Index dst_max = -1;
  double scale = 1.0;
};

// The run layouts of one piece, built only when the run sweeps or condition 3 need them.
struct PieceLayouts {
  Layout src;
  Layout dst;
};

struct RankInfo {
  const RankEntry* entry = nullptr;
  bool shard_sound = false;
  Index shard_numel = 0;
  std::int32_t first = 0;  // its pieces are [first, last) in Scratch::pieces
  std::int32_t last = 0;
  bool box_side = false;      // its pieces' boxes are looked for (prepare)
  std::size_t dst_base = 0;   // its pieces' shard boxes in BoxScratch::dst_lo_hi
  std::size_t strides_base = 0;  // its shard's row-major strides in BoxScratch::shard_strides
};

// A contiguous address interval [start, start + len) written or read by one piece.
struct Run {
  Index start;
  Index len;
  std::int32_t piece;
};

// Reused between calls so that checking a small map allocates nothing once warm: the
// campaign checks hundreds of thousands of maps per second.
struct Scratch {
  std::vector<PieceInfo> pieces;
  std::vector<RankInfo> ranks;
  std::vector<std::int32_t> order;
  std::vector<Rank> rank_ids;
  std::vector<Run> runs;
  std::vector<PieceLayouts> layouts;  // per piece, as `pieces`
  std::vector<std::pair<Rank, std::int32_t>> keyed;  // (location, piece)
  std::vector<std::uint8_t> faults;                  // per piece: its PieceFault or kNoFault
  bool boxes_looked_for = false;                     // by the last prepare
  std::vector<Axis> axes;  // outer axes of every Layout
  std::vector<std::pair<Index, std::int32_t>> heap;  // (end, run) of active source runs
  std::vector<std::int32_t> piece_active;
  std::vector<std::int32_t> class_active;
  std::vector<std::int32_t> class_size;
  std::vector<std::int32_t> rank_active;
  std::vector<std::uint32_t> stamp;
  std::vector<Rank> holders;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

PieceAt at(const PieceInfo& p) { return PieceAt{p.rank, p.written, p.piece}; }

struct BoxScratch {
  std::vector<Index> lo_hi;  // per piece and axis: lo, hi (source side)
  std::vector<Index> dst_lo_hi;
  std::vector<std::vector<std::pair<Index, std::int32_t>>> events;  // per level
  std::vector<std::vector<std::int32_t>> active;                    // per level
  std::vector<std::vector<std::int32_t>> slots;  // per level: a box's place in `active`
  std::vector<std::vector<std::int32_t>> by_start;  // per level: boxes sorted by start
  Strides full_strides;
  Strides shard_strides;
  std::vector<std::uint32_t> counts;                  // sort_events
  std::vector<std::pair<Index, std::int32_t>> sorted;  // sort_events
};

BoxScratch& box_scratch() {
  thread_local BoxScratch b;
  return b;
}

// Writes lo/hi of the box `view` spans in a row-major buffer of `extents` (with
// `strides` = its row-major strides), or returns false when the view is not such a box.
// The caller has checked bounds, so offset < numel(extents).
bool as_box(const Extents& shape, const StridedView& view, const Extents& extents, const Index* strides,
            Index* out) {
  if (shape.size() != extents.size() || extents.empty()) return false;
  Index rest = view.offset;
  for (std::size_t k = 0; k < extents.size(); ++k) {
    if (shape[k] > 1 && view.strides[k] != strides[k]) return false;
    // The innermost stride is 1: no division there (a division is most of this loop).
    const Index start = strides[k] == 1 ? rest : strides[k] > 0 ? rest / strides[k] : 0;
    rest -= start * strides[k];
    if (start >= extents[k] || shape[k] > extents[k] - start) return false;
    out[2 * k] = start;
    out[2 * k + 1] = start + shape[k];
  }
  return rest == 0;
}

// ---- condition 1 -----------------------------------------------------------------

bool all_non_negative(std::span<const Index> values) {
  return std::all_of(values.begin(), values.end(), [](Index v) { return v >= 0; });
}

// The first structural fault of one piece, in a fixed order of fields. Sets p.sound
// once the piece's addresses can be computed without overflow. Only the fault is
// returned: its message is formatted once, for the error actually reported.
std::optional<PieceFault> piece_structure(PieceInfo& p) {
  const Piece& piece = *p.piece;
  const std::size_t n = piece.shape.size();
  if (piece.source.strides.size() != n || piece.dest.strides.size() != n) return PieceFault::axes;
  if (!all_non_negative(piece.shape)) return PieceFault::negative_extent;
  if (piece.source.offset < 0) return PieceFault::negative_source_offset;
  if (piece.dest.offset < 0) return PieceFault::negative_dest_offset;
  if (!all_non_negative(piece.source.strides)) return PieceFault::negative_source_stride;
  if (!all_non_negative(piece.dest.strides)) return PieceFault::negative_dest_stride;
  auto src = span_facts(piece.shape, piece.source);
  auto dst = span_facts(piece.shape, piece.dest);
  if (!src || !dst) return !src ? PieceFault::source_overflow : PieceFault::dest_overflow;
  // Addresses are now safe to compute; bad locations or scale do not change that,
  // which matters when structure checks are planted off.
  p.sound = true;
  p.runs_representable = src->max_address < std::numeric_limits<Index>::max() &&
                         dst->max_address < std::numeric_limits<Index>::max();
  p.src_max = src->max_address;
  p.dst_max = dst->max_address;
  p.numel = src->numel;
  p.empty = src->empty;
  const auto& loc = piece.locations;
  if (loc.empty()) return PieceFault::no_locations;
  for (std::size_t k = 0; k < loc.size(); ++k) {
    if (loc[k] < 0) return PieceFault::negative_location;
    if (k > 0 && loc[k] <= loc[k - 1]) return PieceFault::unsorted_locations;
  }
  p.scale = piece.scale;
  if (!std::isfinite(piece.scale) || piece.scale == 0.0) return PieceFault::bad_scale;
  return std::nullopt;
}

// Orders ranks and pieces, fills Scratch, and returns the first condition-1 error.
// `logical_ok` tells whether F's numel is known (later conditions need it).
// With `boxes`, also finds each piece's boxes (PieceInfo::box) in the same pass over
// the map, so a large map's pieces are read from memory once.
Status prepare(const Map& map, Scratch& s, Index& numel_f, bool& logical_ok, bool boxes = false, int threads = 1) {
  s.pieces.clear();
  s.ranks.clear();
  s.order.clear();
  s.rank_ids.clear();
  Status first;
  auto note = [&](Error e) {
    if (first.ok()) first = std::move(e);
  };

  logical_ok = false;
  numel_f = 0;
  auto n = all_non_negative(map.logical_shape) ? checked_numel(map.logical_shape) : std::nullopt;
  if (!n) {
    note(fault::bad_logical_shape(map.logical_shape));
  } else {
    numel_f = *n;
    logical_ok = true;
  }

  const auto rank_count = static_cast<std::int32_t>(map.ranks.size());
  std::size_t piece_total = 0;
  for (const RankEntry& entry : map.ranks) piece_total += entry.pieces.size();
  s.pieces.reserve(piece_total);
  BoxScratch& b = box_scratch();
  const std::size_t dims = map.logical_shape.size();
  boxes = boxes && logical_ok && numel_f > 0 && dims > 0;
  s.boxes_looked_for = boxes;
  if (boxes) {
    b.full_strides = row_major_strides(map.logical_shape);
    b.lo_hi.resize(piece_total * dims * 2);
    b.dst_lo_hi.clear();
  }
  for (std::int32_t i = 0; i < rank_count; ++i) s.order.push_back(i);
  std::sort(s.order.begin(), s.order.end(), [&](std::int32_t a, std::int32_t b) {
    if (map.ranks[a].rank != map.ranks[b].rank) return map.ranks[a].rank < map.ranks[b].rank;
    return a < b;
  });
  for (std::int32_t i : s.order) {
    Rank id = map.ranks[i].rank;
    if (s.rank_ids.empty() || s.rank_ids.back() != id) s.rank_ids.push_back(id);
  }

  b.shard_strides.clear();
  std::int32_t first_error_rank = rank_count;  // the rank whose fields failed first, if any
  for (std::int32_t oi = 0; oi < rank_count; ++oi) {
    const RankEntry& entry = map.ranks[s.order[oi]];
    RankInfo info;
    info.entry = &entry;
    if (entry.rank < 0) {
      note(fault::negative_rank_id(entry.rank));
    } else if (oi > 0 && map.ranks[s.order[oi - 1]].rank == entry.rank) {
      note(fault::duplicate_rank(entry.rank));
    }
    if (entry.shard_shape) {
      const Extents& shard = *entry.shard_shape;
      auto shard_numel = all_non_negative(shard) ? checked_numel(shard) : std::nullopt;
      if (shard_numel) {
        info.shard_sound = true;
        info.shard_numel = *shard_numel;
      } else {
        note(fault::bad_shard_shape(entry.rank, shard));
      }
    } else if (entry.pieces.empty()) {
      info.shard_sound = true;  // a rank without pieces may omit its shard: it holds nothing
    } else {
      note(fault::missing_shard_shape(entry.rank));
    }

    info.first = static_cast<std::int32_t>(s.pieces.size());
    const auto piece_count = static_cast<std::int32_t>(entry.pieces.size());
    // Content order starts with the source offset, which nearly always decides it, and
    // constructors list pieces in that order already.
    auto& keys = s.keyed;
    keys.clear();
    for (std::int32_t k = 0; k < piece_count; ++k) keys.emplace_back(entry.pieces[k].source.offset, k);
    auto by_content = [&](const std::pair<Index, std::int32_t>& a, const std::pair<Index, std::int32_t>& b) {
      if (a.first != b.first) return a.first < b.first;
      const Piece& x = entry.pieces[a.second];
      const Piece& y = entry.pieces[b.second];
      if (content_less(x, y)) return true;
      if (content_less(y, x)) return false;
      return a.second < b.second;
    };
    if (!std::is_sorted(keys.begin(), keys.end(), by_content)) std::sort(keys.begin(), keys.end(), by_content);
    auto slot = std::lower_bound(s.rank_ids.begin(), s.rank_ids.end(), entry.rank) - s.rank_ids.begin();
    for (const auto& key : keys) {
      PieceInfo p;
      p.piece = &entry.pieces[key.second];
      p.rank = entry.rank;
      p.written = key.second;
      p.rank_slot = static_cast<std::int32_t>(slot);
      p.owner = static_cast<std::int32_t>(s.ranks.size());
      s.pieces.push_back(p);
    }
    info.last = static_cast<std::int32_t>(s.pieces.size());

    const std::size_t rd = entry.shard_shape ? entry.shard_shape->size() : 0;
    if (boxes && info.shard_sound && info.shard_numel > 0 && rd > 0) {
      info.box_side = true;
      info.strides_base = b.shard_strides.size();
      const Strides strides = row_major_strides(*entry.shard_shape);
      b.shard_strides.insert(b.shard_strides.end(), strides.begin(), strides.end());
      info.dst_base = b.dst_lo_hi.size();
      b.dst_lo_hi.resize(info.dst_base + static_cast<std::size_t>(piece_count) * rd * 2);
    }
    // A rank's own faults come before its pieces' faults, and after those of the ranks
    // before it.
    if (!first.ok() && first_error_rank == rank_count) first_error_rank = oi;
    s.ranks.push_back(info);
  }

  // Each piece on its own, in parallel for a large map: the pieces' fields are most of
  // the memory a check reads. The first fault in check order is reported, whatever the
  // thread count.
  const auto total = static_cast<std::int64_t>(s.pieces.size());
  s.faults.assign(s.pieces.size(), kNoFault);
  auto read_piece = [&](std::int64_t g) {
    // Content order need not be the order pieces lie in memory (nor, past four axes, are
    // their fields in the piece): ask for a later piece's fields early.
    constexpr std::int64_t kAhead = 8;
    if (g + kAhead < total) {
      const Piece& later = *s.pieces[static_cast<std::size_t>(g + kAhead)].piece;
      __builtin_prefetch(later.shape.data());
      __builtin_prefetch(later.source.strides.data());
      __builtin_prefetch(later.dest.strides.data());
      __builtin_prefetch(later.locations.data());
    }
    PieceInfo& p = s.pieces[static_cast<std::size_t>(g)];
    const RankInfo& info = s.ranks[static_cast<std::size_t>(p.owner)];
    auto broken = piece_structure(p);
    // A piece on a broken shard is not sound either: its dest cannot be checked.
    p.sound = p.sound && info.shard_sound;
    if (broken) s.faults[static_cast<std::size_t>(g)] = static_cast<std::uint8_t>(*broken);
    const auto& loc = p.piece->locations;
    p.own_ok = std::find(loc.begin(), loc.end(), p.rank) != loc.end();
    p.one_location = loc.size() == 1;
    p.loc_first = loc.empty() ? 0 : loc[0];
    // as_box refuses a view outside its buffer, so this may run before condition 2.
    if (info.box_side && p.sound && p.runs_representable && !p.empty) {
      const Extents& shard = *info.entry->shard_shape;
      const std::size_t rd = shard.size();
      p.box = as_box(p.piece->shape, p.piece->source, map.logical_shape, b.full_strides.data(),
                     &b.lo_hi[static_cast<std::size_t>(g) * dims * 2]) &&
              as_box(p.piece->shape, p.piece->dest, shard, b.shard_strides.data() + info.strides_base,
                     &b.dst_lo_hi[info.dst_base + static_cast<std::size_t>(g - info.first) * rd * 2]);
    }
  };
  // A parallel region costs thousands of instructions even on one thread: a small map,
  // checked hundreds of thousands of times a second by a campaign, never enters one.
  if (total >= kParallelPieces && threads != 1) {
#pragma omp parallel for schedule(static) num_threads(available_threads(threads))
    for (std::int64_t g = 0; g < total; ++g) read_piece(g);
  } else {
    for (std::int64_t g = 0; g < total; ++g) read_piece(g);
  }
  if (first.ok() || first_error_rank < rank_count) {
    for (std::size_t g = 0; g < s.pieces.size(); ++g) {
      if (s.faults[g] == kNoFault) continue;
      const PieceInfo& p = s.pieces[g];
      if (first.ok() || p.owner < first_error_rank) first = fault::piece(static_cast<PieceFault>(s.faults[g]), at(p));
      break;
    }
  }
  return first;
}

// ---- conditions 2 and 3 -----------------------------------------------------------

Status check_bounds(const Scratch& s, Index numel_f) {
  for (const PieceInfo& p : s.pieces) {
    if (!p.sound || p.empty) continue;
    const Index shard_numel = s.ranks[p.owner].shard_numel;
    if (p.src_max >= numel_f) return fault::out_of_bounds(at(p), Side::full, p.src_max, numel_f);
    if (p.dst_max >= shard_numel) {
      return fault::out_of_bounds(at(p), Side::shard, p.dst_max, shard_numel);
    }
  }
  return {};
}

// ---- address runs ------------------------------------------------------------------

Layout make_layout(const Extents& shape, const Strides& strides, std::vector<Axis>& axes) {
  std::array<Axis, 64> raw;
  int n = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] > 1 && n < 64) raw[n++] = Axis{strides[k], shape[k]};
  }
  std::sort(raw.begin(), raw.begin() + n, [](const Axis& a, const Axis& b) { return a.stride < b.stride; });
  Layout out;
  // Same rule as is_unique(), applied here to avoid its allocation on the hot path.
  Index reach = 0;
  for (int k = 0; k < n && out.unique; ++k) {
    auto step = checked_mul(raw[k].extent - 1, raw[k].stride);
    auto next = step ? checked_add(reach, *step) : std::nullopt;
    out.unique = raw[k].stride > reach && next.has_value();
    if (next) reach = *next;
  }
  int merged = 0;
  for (int k = 0; k < n; ++k) {
    if (merged > 0) {
      Axis& inner = raw[merged - 1];
      auto span = checked_mul(inner.stride, inner.extent);
      if (span && *span == raw[k].stride) {
        inner.extent *= raw[k].extent;  // bounded by the view's numel
        continue;
      }
    }
    raw[merged++] = raw[k];
  }
  int first = 0;
  if (merged > 0 && raw[0].stride == 1) {
    out.run_len = raw[0].extent;
    first = 1;
  }
  out.axes_begin = static_cast<std::int32_t>(axes.size());
  for (int k = first; k < merged; ++k) {
    axes.push_back(raw[k]);
    out.runs *= raw[k].extent;  // <= numel
  }
  out.axes_count = merged - first;
  return out;
}

void emit_runs(const Layout& layout, const Axis* axes, Index offset, std::int32_t piece, std::vector<Run>& out) {
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

void emit_source_runs(const Scratch& s, std::int32_t g, std::vector<Run>& out) {
  const Layout& layout = s.layouts[static_cast<std::size_t>(g)].src;
  emit_runs(layout, s.axes.data() + layout.axes_begin, s.pieces[g].piece->source.offset, g, out);
}

void emit_dest_runs(const Scratch& s, std::int32_t g, std::vector<Run>& out) {
  const Layout& layout = s.layouts[static_cast<std::size_t>(g)].dst;
  emit_runs(layout, s.axes.data() + layout.axes_begin, s.pieces[g].piece->dest.offset, g, out);
}

void build_layouts(Scratch& s) {
  s.axes.clear();
  s.layouts.assign(s.pieces.size(), PieceLayouts{});
  for (std::size_t g = 0; g < s.pieces.size(); ++g) {
    const PieceInfo& p = s.pieces[g];
    if (!p.sound || p.empty) continue;
    s.layouts[g].src = make_layout(p.piece->shape, p.piece->source.strides, s.axes);
    s.layouts[g].dst = make_layout(p.piece->shape, p.piece->dest.strides, s.axes);
  }
}

// Total runs the sweeps will build, or nullopt when it exceeds `limit`.
std::optional<Index> total_runs(const Scratch& s, bool with_dest, Index limit) {
  Index total = 0;
  for (std::size_t g = 0; g < s.pieces.size(); ++g) {
    const PieceInfo& p = s.pieces[g];
    if (!p.sound || p.empty) continue;
    auto add = checked_add(total, s.layouts[g].src.runs);
    if (add && with_dest) add = checked_add(*add, s.layouts[g].dst.runs);
    if (!add || *add > limit) return std::nullopt;
    total = *add;
  }
  return total;
}

Status check_itself(const Scratch& s) {
  for (std::size_t g = 0; g < s.pieces.size(); ++g) {
    const PieceInfo& p = s.pieces[g];
    if (!p.sound || p.empty) continue;
    const bool src_ok = s.layouts[g].src.unique;
    if (src_ok && s.layouts[g].dst.unique) continue;
    return fault::overlaps_itself(at(p), src_ok ? Side::shard : Side::full);
  }
  return {};
}

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
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return a.start != b.start ? a.start < b.start : a.piece < b.piece;
  });

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
  bool single = true;     // every sound piece has one location
  bool own_single = true;  // ... and it is the piece's own rank
  for (const PieceInfo& p : s.pieces) {
    if (!p.sound) continue;
    single = single && p.one_location;
    own_single = own_single && p.one_location && p.loc_first == p.rank;
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
    // A flat sort of (location, piece): the location vectors are not read again.
    auto& keyed = s.keyed;
    keyed.clear();
    for (std::int32_t g = 0; g < static_cast<std::int32_t>(s.pieces.size()); ++g) {
      if (s.pieces[g].sound) keyed.emplace_back(s.pieces[g].loc_first, g);
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

// Sweeps the source runs of all pieces in address order. Between consecutive run
// boundaries the set of covering pieces is constant, so coverage and holders are
// decided per segment with interval arithmetic only.
Status check_full_side(Scratch& s, Index numel_f, const PlantedBugs& bugs) {
  auto& runs = s.runs;
  runs.clear();
  for (std::int32_t g = 0; g < static_cast<std::int32_t>(s.pieces.size()); ++g) {
    const PieceInfo& p = s.pieces[g];
    if (p.sound && p.runs_representable && !p.empty) emit_source_runs(s, g, runs);
  }
  std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) {
    return a.start != b.start ? a.start < b.start : a.piece < b.piece;
  });

  assign_classes(s);
  const std::size_t piece_count = s.pieces.size();
  s.piece_active.assign(piece_count, 0);
  s.stamp.assign(piece_count, 0);
  s.class_active.assign(s.class_size.size(), 0);
  s.rank_active.assign(s.rank_ids.size(), 0);
  auto& heap = s.heap;
  heap.clear();
  auto heap_greater = [](const auto& a, const auto& b) { return a.first > b.first; };

  Cover cover;
  auto enter = [&](std::int32_t g, int delta) {
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
  };

  Violation best;
  for (std::int32_t g = 0; g < static_cast<std::int32_t>(piece_count); ++g) {
    const PieceInfo& p = s.pieces[g];
    if (p.sound && p.empty && !p.own_ok) {
      best.piece = g;
      break;
    }
  }
  std::uint32_t segment = 0;
  auto judge = [&](Index pos) {
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
  };

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
      enter(runs[next].piece, 1);
      ++next;
    }
    Index boundary = heap.front().first;
    if (next < runs.size()) boundary = std::min(boundary, runs[next].start);
    if (judge_holders) judge(pos);
    pos = boundary;
    while (!heap.empty() && heap.front().first == pos) {
      enter(runs[heap.front().second].piece, -1);
      std::pop_heap(heap.begin(), heap.end(), heap_greater);
      heap.pop_back();
    }
  }
  note_gap(pos);
  if (!gap.ok() && !bugs.skip_coverage) return gap;
  if (judge_holders && best.piece < static_cast<std::int32_t>(piece_count)) return homogeneity_error(s, best);
  return {};
}

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
    sort_events(b, ev, event_keys((*extents)[k], 1), [](const auto& e) { return e.first; },
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
    // Conditions 5 and 6 per segment, with the counters of check_full_side.
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
      sort_events(b, ev, event_keys((*extents)[k], 1), [](const auto& e) { return e.first; },
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
    sort_events(b, ev, event_keys((*extents)[k], 2),
                [](const auto& e) { return e.first * 2 + (e.second < 0 ? 0 : 1); },
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

// Whether prepare found every piece a box, on both sides. Only then can the sweeps below
// decide conditions 4-6, and no piece overlaps itself (a box of a row-major buffer never
// does, even by the conservative rule of condition 3), so no run layout is built at all.
bool all_boxes(const Scratch& s, const Map& map) {
  if (!s.boxes_looked_for || map.logical_shape.empty() || s.pieces.empty()) return false;
  for (const RankInfo& r : s.ranks) {
    if (r.first == r.last) continue;
    if (!r.shard_sound || !r.entry->shard_shape || r.entry->shard_shape->empty()) return false;
  }
  return std::all_of(s.pieces.begin(), s.pieces.end(), [](const PieceInfo& p) {
    return p.sound && p.runs_representable && (p.empty || p.box);
  });
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

// Keeps the scratch small between calls: one huge map must not pin its run buffers
// for the life of the thread.
struct TrimScratch {
  Scratch& s;
  ~TrimScratch() {
    constexpr std::size_t kKeep = std::size_t{1} << 16;
    if (s.runs.capacity() > kKeep) std::vector<Run>().swap(s.runs);
    if (s.pieces.capacity() > kKeep) std::vector<PieceInfo>().swap(s.pieces);
    if (s.layouts.capacity() > kKeep) std::vector<PieceLayouts>().swap(s.layouts);
    if (s.keyed.capacity() > kKeep) std::vector<std::pair<Rank, std::int32_t>>().swap(s.keyed);
    if (s.faults.capacity() > kKeep) std::vector<std::uint8_t>().swap(s.faults);
    if (s.heap.capacity() > kKeep) std::vector<std::pair<Index, std::int32_t>>().swap(s.heap);
    BoxScratch& b = box_scratch();
    // The boxes are 4 values per piece and axis: kept up to a few MiB, so that a map of
    // tens of thousands of pieces converted again and again is not re-faulted each time.
    constexpr std::size_t kKeepBoxes = std::size_t{1} << 20;
    if (b.lo_hi.capacity() > kKeepBoxes || b.dst_lo_hi.capacity() > kKeepBoxes || b.counts.capacity() > kKeepBoxes ||
        b.sorted.capacity() > kKeepBoxes) {
      b = BoxScratch{};
    }
  }
};

// Conditions 1-6 in s; on success with no check disabled, s.pieces holds every piece of
// the map in check order.
Status check_with(const Map& map, const CheckOptions& options, Scratch& s) {
  const PlantedBugs& bugs = options.bugs;
  Index numel_f = 0;
  bool logical_ok = false;
  const bool tiling = !bugs.skip_dest_tiling;
  const bool try_boxes = options.box_proof && tiling && !bugs.skip_coverage && !bugs.skip_homogeneity &&
                         !bugs.skip_structure && !bugs.skip_bounds && !bugs.skip_itself;
  if (Status err = prepare(map, s, numel_f, logical_ok, try_boxes, options.threads); !err.ok() && !bugs.skip_structure) return err;
  if (!logical_ok) return {};  // nothing later can be judged without F's size
  if (!bugs.skip_bounds) {
    if (Status err = check_bounds(s, numel_f); !err.ok()) return err;
  }
  const bool boxes = try_boxes && all_boxes(s, map);
  if (!boxes) build_layouts(s);
  if (!bugs.skip_itself && !boxes) {
    if (Status err = check_itself(s); !err.ok()) return err;
  }
  if (!tiling && bugs.skip_coverage && bugs.skip_homogeneity) return {};
  if (boxes) {
    if (box_proof(s, map, bugs)) return {};
    build_layouts(s);  // the run sweeps find the exact error
  }

  if (!total_runs(s, tiling, options.limits.max_walked_addresses)) {
    return fault::too_large_to_verify(options.limits.max_walked_addresses);
  }
  if (tiling) {
    for (const RankInfo& r : s.ranks) {
      if (!r.shard_sound) continue;
      if (Status err = check_rank_tiling(s, r); !err.ok()) return err;
    }
  }
  if (bugs.skip_coverage && bugs.skip_homogeneity) return {};
  return check_full_side(s, numel_f, bugs);
}

}  // namespace

Status check_structure(const Map& map) {
  Index numel_f = 0;
  bool logical_ok = false;
  return prepare(map, scratch(), numel_f, logical_ok);
}

Status check_map(const Map& map, const CheckOptions& options) {
  Scratch& s = scratch();
  TrimScratch trim{s};
  return check_with(map, options, s);
}

namespace detail {

Status check_map_proving(const Map& map, const CheckOptions& options,
                         const std::function<void(const ProvenPiece&)>& each) {
  Scratch& s = scratch();
  TrimScratch trim{s};
  if (Status err = check_with(map, options, s); !err.ok()) return err;
  // A valid map passed prepare whole: every piece is in s.pieces, sound, in check order.
  for (const PieceInfo& p : s.pieces) {
    each(ProvenPiece{p.piece, p.rank, p.written, p.numel, p.src_max, p.dst_max,
                     s.ranks[static_cast<std::size_t>(p.owner)].shard_numel, p.scale, !p.one_location});
  }
  return {};
}

}  // namespace detail

}  // namespace shardcheck
