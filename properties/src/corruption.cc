#include "shardcheck/gen/corruption.h"

#include <algorithm>

#include "corruption_edits.h"

namespace shardcheck::gen {

namespace {

using detail::Kind;
using detail::kKindCount;
using detail::Site;

// clang-format off
constexpr std::string_view kKindNames[] = {
    "shape_inc", "shape_dec", "shape_zero", "shape_swap",
    "source_offset_inc", "source_offset_dec", "source_offset_plus_stride",
    "source_offset_minus_stride", "source_offset_zero", "source_offset_other",
    "source_offset_past_end",
    "dest_offset_inc", "dest_offset_dec", "dest_offset_plus_stride", "dest_offset_minus_stride",
    "dest_offset_zero", "dest_offset_other", "dest_offset_past_end",
    "source_stride_inc", "source_stride_dec", "source_stride_zero", "source_stride_swap",
    "source_stride_copy",
    "dest_stride_inc", "dest_stride_dec", "dest_stride_zero", "dest_stride_swap",
    "dest_stride_copy",
    "locations_drop", "locations_add", "locations_replace", "locations_empty",
    "scale_zero", "scale_half", "scale_double", "scale_negative",
    "shard_shape_inc", "shard_shape_dec",
    "move_piece", "duplicate_piece", "delete_piece", "split_piece",
    "add_empty_rank", "add_copy_rank", "drop_rank",
};
// clang-format on
static_assert(std::size(kKindNames) == kKindCount);

enum class Target { piece, shard_shape, ranks };

Target target_of(Kind k) {
  switch (k) {
    case Kind::shard_shape_inc:
    case Kind::shard_shape_dec:
      return Target::shard_shape;
    case Kind::add_empty_rank:
    case Kind::add_copy_rank:
    case Kind::drop_rank:
      return Target::ranks;
    default:
      return Target::piece;
  }
}

bool splittable(const Piece& p) {
  std::size_t n = std::min({p.shape.size(), p.source.strides.size(), p.dest.strides.size()});
  for (std::size_t k = 0; k < n; ++k) {
    if (p.shape[k] >= 2) return true;
  }
  return false;
}

// Offsets over all pieces, for "another piece's offset": a piece fits only when some
// other piece has a different offset, so the edit is never a no-op.
struct MapFacts {
  std::size_t pieces = 0;
  Index source_lo = 0, source_hi = 0, dest_lo = 0, dest_hi = 0;
};

MapFacts map_facts(const Map& map) {
  MapFacts f;
  for (const auto& entry : map.ranks) {
    for (const auto& p : entry.pieces) {
      bool first = f.pieces++ == 0;
      f.source_lo = first ? p.source.offset : std::min(f.source_lo, p.source.offset);
      f.source_hi = first ? p.source.offset : std::max(f.source_hi, p.source.offset);
      f.dest_lo = first ? p.dest.offset : std::min(f.dest_lo, p.dest.offset);
      f.dest_hi = first ? p.dest.offset : std::max(f.dest_hi, p.dest.offset);
    }
  }
  return f;
}

double scale_target(Kind kind) {
  switch (kind) {
    case Kind::scale_zero:
      return 0.0;
    case Kind::scale_half:
      return 0.5;
    case Kind::scale_double:
      return 2.0;
    default:
      return -1.0;
  }
}

// Whether `kind` can edit this piece and change something.
bool piece_fits(Kind kind, const Piece& p, const MapFacts& f) {
  using detail::has_nonzero;
  using detail::has_two_distinct;
  switch (kind) {
    case Kind::shape_inc:
    case Kind::shape_dec:
      return !p.shape.empty();
    case Kind::shape_zero:
      return has_nonzero(p.shape);
    case Kind::shape_swap:
      return has_two_distinct(p.shape);
    case Kind::source_offset_zero:
      return p.source.offset != 0;
    case Kind::dest_offset_zero:
      return p.dest.offset != 0;
    case Kind::source_offset_other:
      return f.source_lo != f.source_hi;
    case Kind::dest_offset_other:
      return f.dest_lo != f.dest_hi;
    case Kind::source_offset_plus_stride:
    case Kind::source_offset_minus_stride:
    case Kind::source_stride_zero:
      return has_nonzero(p.source.strides);
    case Kind::source_stride_inc:
    case Kind::source_stride_dec:
      return !p.source.strides.empty();
    case Kind::source_stride_swap:
    case Kind::source_stride_copy:
      return has_two_distinct(p.source.strides);
    case Kind::dest_offset_plus_stride:
    case Kind::dest_offset_minus_stride:
    case Kind::dest_stride_zero:
      return has_nonzero(p.dest.strides);
    case Kind::dest_stride_inc:
    case Kind::dest_stride_dec:
      return !p.dest.strides.empty();
    case Kind::dest_stride_swap:
    case Kind::dest_stride_copy:
      return has_two_distinct(p.dest.strides);
    case Kind::locations_drop:
    case Kind::locations_replace:
    case Kind::locations_empty:
      return !p.locations.empty();
    case Kind::scale_zero:
    case Kind::scale_half:
    case Kind::scale_double:
    case Kind::scale_negative:
      return p.scale != scale_target(kind);
    case Kind::split_piece:
      return splittable(p);
    default:
      return true;
  }
}

bool map_fits(Kind kind, const Map& map) {
  switch (kind) {
    case Kind::move_piece:
      return map.ranks.size() >= 2;
    case Kind::add_copy_rank:
    case Kind::drop_rank:
      return !map.ranks.empty();
    default:
      return true;
  }
}

bool has_shard_axis(const RankEntry& entry) {
  return entry.shard_shape && !entry.shard_shape->empty();
}

// Counting pass then selecting pass: a uniform choice among eligible sites without
// building a list of them.
std::size_t count_sites(Kind kind, const Map& map, const MapFacts& f) {
  std::size_t n = 0;
  if (target_of(kind) == Target::shard_shape) {
    for (const auto& entry : map.ranks) n += has_shard_axis(entry);
    return n;
  }
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) n += piece_fits(kind, piece, f);
  }
  return n;
}

Site nth_site(Kind kind, const Map& map, const MapFacts& f, std::size_t n) {
  for (std::size_t r = 0; r < map.ranks.size(); ++r) {
    const auto& entry = map.ranks[r];
    if (target_of(kind) == Target::shard_shape) {
      if (has_shard_axis(entry) && n-- == 0) return {r, 0};
      continue;
    }
    for (std::size_t p = 0; p < entry.pieces.size(); ++p) {
      if (piece_fits(kind, entry.pieces[p], f) && n-- == 0) return {r, p};
    }
  }
  return {};
}

bool applicable(Kind kind, const Map& map, const MapFacts& f) {
  if (!map_fits(kind, map)) return false;
  return target_of(kind) == Target::ranks || count_sites(kind, map, f) > 0;
}

Corrupted apply_from(const Map& map, std::size_t first, ChoiceSource& c) {
  // Deterministic fallback: the next applicable kind in catalogue order. add_empty_rank
  // always applies, so the loop always ends within one lap.
  const MapFacts facts = map_facts(map);
  auto kind = Kind::add_empty_rank;
  for (std::size_t i = 0; i < kKindCount; ++i) {
    auto candidate = static_cast<Kind>((first + i) % kKindCount);
    if (applicable(candidate, map, facts)) {
      kind = candidate;
      break;
    }
  }
  Corrupted out{map, {}};
  out.record.kind = std::string(kKindNames[static_cast<std::size_t>(kind)]);
  detail::Edit edit{out.map, c, out.record};
  switch (target_of(kind)) {
    case Target::ranks:
      detail::edit_ranks(edit, kind);
      break;
    case Target::shard_shape: {
      std::size_t n = count_sites(kind, map, facts);
      detail::edit_shard_shape(edit, kind, nth_site(kind, map, facts, c.below(n)).rank);
      break;
    }
    case Target::piece: {
      Site site = nth_site(kind, map, facts, c.below(count_sites(kind, map, facts)));
      if (kind == Kind::move_piece || kind == Kind::duplicate_piece || kind == Kind::delete_piece ||
          kind == Kind::split_piece) {
        detail::edit_piece_structure(edit, kind, site);
      } else {
        detail::edit_piece_field(edit, kind, site);
      }
      break;
    }
  }
  return out;
}

}  // namespace

std::span<const std::string_view> corruption_kinds() { return kKindNames; }

Corrupted corrupt(const Map& map, ChoiceSource& c) {
  return apply_from(map, c.below(kKindCount), c);
}

Corrupted corrupt_with(const Map& map, std::string_view kind, ChoiceSource& c) {
  auto it = std::find(std::begin(kKindNames), std::end(kKindNames), kind);
  // An unknown name starts the fallback lap at the first kind.
  std::size_t first = it == std::end(kKindNames) ? 0 : static_cast<std::size_t>(it - kKindNames);
  return apply_from(map, first, c);
}

}  // namespace shardcheck::gen
