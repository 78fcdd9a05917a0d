#include "shardcheck/checks.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "checks_internal.h"
#include "proven.h"
#include "threads.h"

namespace shardcheck {

namespace check_parts {

namespace {

// Writes lo/hi of the box `view` spans in a row-major buffer of `extents` (with
// `strides` = its row-major strides), or returns false when the view is not such a box.
// The caller has checked bounds, so offset < numel(extents).
bool as_box(const Extents& shape, const StridedView& view, const Extents& extents, const Index* strides, Index* out) {
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
  p.runs_representable =
      src->max_address < std::numeric_limits<Index>::max() && dst->max_address < std::numeric_limits<Index>::max();
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
  if (!std::isfinite(piece.scale) || piece.scale == 0.0) return PieceFault::bad_scale;
  return std::nullopt;
}

// The first error of the map in check order: F's shape, then each rank's own fields
// and its pieces' faults, rank by rank.
struct FirstError {
  Status status;
  void note(Error e) {
    if (status.ok()) status = std::move(e);
  }
};

// Ranks by id (ties as listed) in s.order, and the distinct ids in s.rank_ids.
void order_ranks(const Map& map, Scratch& s) {
  const auto rank_count = static_cast<std::int32_t>(map.ranks.size());
  for (std::int32_t i = 0; i < rank_count; ++i) s.order.push_back(i);
  std::sort(s.order.begin(), s.order.end(), [&](std::int32_t a, std::int32_t b) {
    if (map.ranks[a].rank != map.ranks[b].rank) return map.ranks[a].rank < map.ranks[b].rank;
    return a < b;
  });
  for (std::int32_t i : s.order) {
    Rank id = map.ranks[i].rank;
    if (s.rank_ids.empty() || s.rank_ids.back() != id) s.rank_ids.push_back(id);
  }
}

// The rank's own fields: its id and its shard shape. `oi` is its place in s.order.
RankInfo rank_fields(const Map& map, const Scratch& s, std::int32_t oi, FirstError& first) {
  const RankEntry& entry = map.ranks[s.order[oi]];
  RankInfo info;
  info.entry = &entry;
  if (entry.rank < 0) {
    first.note(fault::negative_rank_id(entry.rank));
  } else if (oi > 0 && map.ranks[s.order[oi - 1]].rank == entry.rank) {
    first.note(fault::duplicate_rank(entry.rank));
  }
  if (entry.shard_shape) {
    const Extents& shard = *entry.shard_shape;
    auto shard_numel = all_non_negative(shard) ? checked_numel(shard) : std::nullopt;
    if (shard_numel) {
      info.shard_sound = true;
      info.shard_numel = *shard_numel;
    } else {
      first.note(fault::bad_shard_shape(entry.rank, shard));
    }
  } else if (entry.pieces.empty()) {
    info.shard_sound = true;  // a rank without pieces may omit its shard: it holds nothing
  } else {
    first.note(fault::missing_shard_shape(entry.rank));
  }
  return info;
}

// Appends the rank's pieces to s.pieces in content order.
void list_pieces(const RankEntry& entry, Scratch& s) {
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
    p.written = static_cast<std::int32_t>(key.second);
    p.rank_slot = static_cast<std::int32_t>(slot);
    p.owner = static_cast<std::int32_t>(s.ranks.size());
    s.pieces.push_back(p);
  }
}

// The rank pass: orders ranks and their pieces into Scratch, notes each rank's own
// faults, and makes room for the shard boxes when `boxes`. Returns the place in check
// order of the first rank by which an error had been noted (F's shape counts as before
// rank 0), or the rank count when none had.
std::int32_t rank_pass(const Map& map, Scratch& s, bool boxes, FirstError& first) {
  BoxScratch& b = box_scratch();
  order_ranks(map, s);
  b.shard_strides.clear();
  const auto rank_count = static_cast<std::int32_t>(map.ranks.size());
  std::int32_t first_error_rank = rank_count;  // the rank whose fields failed first, if any
  for (std::int32_t oi = 0; oi < rank_count; ++oi) {
    const RankEntry& entry = map.ranks[s.order[oi]];
    RankInfo info = rank_fields(map, s, oi, first);
    info.first = static_cast<std::int32_t>(s.pieces.size());
    list_pieces(entry, s);
    info.last = static_cast<std::int32_t>(s.pieces.size());

    const std::size_t rd = entry.shard_shape ? entry.shard_shape->size() : 0;
    if (boxes && info.shard_sound && info.shard_numel > 0 && rd > 0) {
      info.box_side = true;
      info.strides_base = b.shard_strides.size();
      const Strides strides = row_major_strides(*entry.shard_shape);
      b.shard_strides.insert(b.shard_strides.end(), strides.begin(), strides.end());
      info.dst_base = b.dst_lo_hi.size();
      b.dst_lo_hi.resize(info.dst_base + entry.pieces.size() * rd * 2);
    }
    // A rank's own faults come before its pieces' faults, and after those of the ranks
    // before it.
    if (!first.status.ok() && first_error_rank == rank_count) first_error_rank = oi;
    s.ranks.push_back(info);
  }
  return first_error_rank;
}

// One piece of the piece pass: its structure (condition 1), its locations, and its boxes
// (into `b`, the calling thread's box scratch: a worker thread's own is empty).
void read_piece(const Map& map, Scratch& s, BoxScratch& b, std::int64_t g, std::size_t dims) {
  const auto total = static_cast<std::int64_t>(s.pieces.size());
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
  // as_box refuses a view outside its buffer, so this may run before condition 2.
  if (info.box_side && p.sound && p.runs_representable && !p.empty) {
    const Extents& shard = *info.entry->shard_shape;
    const std::size_t rd = shard.size();
    p.box = as_box(p.piece->shape, p.piece->source, map.logical_shape, b.full_strides.data(),
                   &b.lo_hi[static_cast<std::size_t>(g) * dims * 2]) &&
            as_box(p.piece->shape, p.piece->dest, shard, b.shard_strides.data() + info.strides_base,
                   &b.dst_lo_hi[info.dst_base + static_cast<std::size_t>(g - info.first) * rd * 2]);
  }
}

// The piece pass: each piece on its own, in parallel for a large map (the pieces' fields
// are most of the memory a check reads). Faults go to s.faults, one per piece.
void piece_pass(const Map& map, Scratch& s, std::size_t dims, int threads) {
  const auto total = static_cast<std::int64_t>(s.pieces.size());
  s.faults.assign(s.pieces.size(), kNoFault);
  BoxScratch& b = box_scratch();
  // A parallel region costs thousands of instructions even on one thread: a small map,
  // checked hundreds of thousands of times a second by a campaign, never enters one.
  if (total >= kParallelPieces && threads != 1) {
#pragma omp parallel for schedule(static) num_threads(available_threads(threads))
    for (std::int64_t g = 0; g < total; ++g) read_piece(map, s, b, g, dims);
  } else {
    for (std::int64_t g = 0; g < total; ++g) read_piece(map, s, b, g, dims);
  }
}

// The first-fault pick: the first piece fault in check order, unless a rank before the
// piece's own (or F's shape) failed first. The same whatever the thread count.
void pick_first_fault(const Scratch& s, std::int32_t first_error_rank, FirstError& first) {
  const auto rank_count = static_cast<std::int32_t>(s.ranks.size());
  if (!first.status.ok() && first_error_rank == rank_count) return;
  for (std::size_t g = 0; g < s.pieces.size(); ++g) {
    if (s.faults[g] == kNoFault) continue;
    const PieceInfo& p = s.pieces[g];
    if (first.status.ok() || p.owner < first_error_rank) {
      first.status = fault::piece(static_cast<PieceFault>(s.faults[g]), at(p));
    }
    break;
  }
}

}  // namespace

Prepared prepare(const Map& map, Scratch& s, bool boxes, int threads) {
  s.pieces.clear();
  s.ranks.clear();
  s.order.clear();
  s.rank_ids.clear();
  Prepared out;
  FirstError first;
  auto n = all_non_negative(map.logical_shape) ? checked_numel(map.logical_shape) : std::nullopt;
  if (!n) {
    first.note(fault::bad_logical_shape(map.logical_shape));
  } else {
    out.numel_f = *n;
    out.logical_ok = true;
  }

  std::size_t piece_total = 0;
  for (const RankEntry& entry : map.ranks) piece_total += entry.pieces.size();
  s.pieces.reserve(piece_total);
  const std::size_t dims = map.logical_shape.size();
  boxes = boxes && out.logical_ok && out.numel_f > 0 && dims > 0;
  s.boxes_looked_for = boxes;
  if (boxes) {
    BoxScratch& b = box_scratch();
    b.full_strides = row_major_strides(map.logical_shape);
    b.lo_hi.resize(piece_total * dims * 2);
    b.dst_lo_hi.clear();
  }
  const std::int32_t first_error_rank = rank_pass(map, s, boxes, first);
  piece_pass(map, s, dims, threads);
  pick_first_fault(s, first_error_rank, first);
  out.first = std::move(first.status);
  return out;
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

// ---- address runs: layouts and condition 3 ------------------------------------------

namespace {

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

}  // namespace

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

namespace {

// Keeps the scratch small between calls: one huge map must not pin its run buffers
// for the life of the thread.
struct TrimScratch {
  Scratch& s;
  ~TrimScratch() {
    constexpr std::size_t kKeep = std::size_t{1} << 16;
    if (s.runs.capacity() > kKeep) ScratchVector<Run>().swap(s.runs);
    if (s.pieces.capacity() > kKeep) ScratchVector<PieceInfo>().swap(s.pieces);
    if (s.layouts.capacity() > kKeep) ScratchVector<PieceLayouts>().swap(s.layouts);
    if (s.keyed.capacity() > kKeep) ScratchVector<std::pair<Rank, std::int32_t>>().swap(s.keyed);
    if (s.faults.capacity() > kKeep) ScratchVector<std::uint8_t>().swap(s.faults);
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
  const bool tiling = !bugs.skip_dest_tiling;
  const bool try_boxes = options.box_proof && tiling && !bugs.skip_coverage && !bugs.skip_homogeneity &&
                         !bugs.skip_structure && !bugs.skip_bounds && !bugs.skip_itself;
  Prepared prepared = prepare(map, s, try_boxes, options.threads);
  if (!prepared.first.ok() && !bugs.skip_structure) return std::move(prepared.first);
  if (!prepared.logical_ok) return {};  // nothing later can be judged without F's size
  if (!bugs.skip_bounds) {
    if (Status err = check_bounds(s, prepared.numel_f); !err.ok()) return err;
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
  return check_full_side(s, prepared.numel_f, bugs);
}

// The planted bug names_last_piece: the right kind, rank, side and address, but the
// rank's last piece as written named in place of the first in content order.
Status misplaced(const Map& map, Status status) {
  if (status.ok() || !status.error().rank || !status.error().piece) return status;
  const Error& e = status.error();
  const RankEntry* entry = map.find_rank(*e.rank);
  if (entry == nullptr || entry->pieces.size() < 2) return status;
  const auto last = static_cast<Index>(entry->pieces.size()) - 1;
  Where where = Where::in_piece(*e.rank, last, entry->pieces.back());
  if (e.address) where = where.at(e.side, *e.address);
  return make_error(e.kind, e.sentence, where);
}

// check_with, through the planted bug that acts on its answer.
Status check_planted(const Map& map, const CheckOptions& options, Scratch& s) {
  Status status = check_with(map, options, s);
  return options.bugs.names_last_piece ? misplaced(map, std::move(status)) : status;
}

}  // namespace

}  // namespace check_parts

using check_parts::PieceInfo;
using check_parts::Scratch;
using check_parts::scratch;

Status check_structure(const Map& map) { return check_parts::prepare(map, scratch()).first; }

Status check_map(const Map& map, const CheckOptions& options) {
  Scratch& s = scratch();
  check_parts::TrimScratch trim{s};
  return check_parts::check_planted(map, options, s);
}

namespace detail {

Status check_map_proving(const Map& map, const CheckOptions& options,
                         const std::function<void(const ProvenPiece&)>& each) {
  Scratch& s = scratch();
  check_parts::TrimScratch trim{s};
  if (Status err = check_parts::check_planted(map, options, s); !err.ok()) return err;
  // A valid map passed prepare whole: every piece is in s.pieces, sound, in check order.
  for (const PieceInfo& p : s.pieces) {
    each(ProvenPiece{p.piece, p.rank, p.written, p.numel, p.src_max, p.dst_max,
                     s.ranks[static_cast<std::size_t>(p.owner)].shard_numel, p.piece->scale, !p.one_location});
  }
  return {};
}

}  // namespace detail

}  // namespace shardcheck