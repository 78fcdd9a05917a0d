#include "shardcheck/gen/corruption.h"

#include <algorithm>
#include <array>
#include <type_traits>

#include "corruption_edits.h"

namespace shardcheck::gen {

namespace {

using detail::Field;
using detail::Fits;
using detail::kKindCount;
using detail::kRows;
using detail::Op;
using detail::Row;
using detail::Site;

constexpr auto kKindNames = [] {
  std::array<std::string_view, kKindCount> names{};
  for (std::size_t i = 0; i < kKindCount; ++i) names[i] = kRows[i].name;
  return names;
}();

constexpr auto kCatalogue = [] {
  std::array<CorruptionKind, kKindCount> kinds{};
  for (std::size_t i = 0; i < kKindCount; ++i) {
    kinds[i] = {kRows[i].name, detail::target_of(kRows[i].field)};
  }
  return kinds;
}();

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

bool is_source(Field field) {
  return field == Field::source_offset || field == Field::source_strides;
}

// The field a row edits, on a piece: its axes for shape and strides, else nullptr.
template <class P>
auto* axes_of(P& piece, Field field) {
  using V = std::conditional_t<std::is_const_v<P>, const Extents, Extents>;
  V* out = nullptr;
  switch (field) {
    case Field::shape:
      out = &piece.shape;
      break;
    case Field::source_strides:
      out = &piece.source.strides;
      break;
    case Field::dest_strides:
      out = &piece.dest.strides;
      break;
    case Field::source_offset:
    case Field::dest_offset:
    case Field::locations:
    case Field::scale:
    case Field::piece:
    case Field::shard_shape:
    case Field::ranks:
    case Field::content_digests:
    case Field::shard_data:
    case Field::map_text:
      break;
  }
  return out;
}

std::string_view record_name(Field field) {
  switch (field) {
    case Field::shape:
      return "shape";
    case Field::source_strides:
      return "source.strides";
    case Field::dest_strides:
      return "dest.strides";
    case Field::source_offset:
      return "source.offset";
    case Field::dest_offset:
      return "dest.offset";
    case Field::locations:
      return "locations";
    case Field::scale:
      return "scale";
    case Field::shard_shape:
      return "shard_shape";
    case Field::piece:
      return "piece";
    case Field::ranks:
      return "rank";
    case Field::content_digests:
      return "content_digests";
    case Field::shard_data:
      return "shard_data";
    case Field::map_text:
      return "map_text";
  }
  return "?";
}

// Whether the row can edit this piece and change something. well_formed() has made
// sure that a row only names a predicate its field has.
bool piece_fits(const Row& row, const Piece& p, const MapFacts& f) {
  const Extents* axes = axes_of(p, row.field);
  const bool source = is_source(row.field);
  switch (row.fits) {
    case Fits::always:
    case Fits::two_ranks:  // a map-wide condition: map_fits
      return true;
    case Fits::has_axis:
      return !axes->empty();
    case Fits::axis_differs:
      return detail::has_other_than(*axes, row.param.n);
    case Fits::two_distinct:
      return detail::has_two_distinct(*axes);
    case Fits::span_differs:
      return detail::has_spanned_axis_other_than(p.shape, *axes, row.param.n);
    case Fits::differs:
      if (row.field == Field::scale) return p.scale != row.param.x;
      return (source ? p.source.offset : p.dest.offset) != row.param.n;
    case Fits::nonzero_stride:
      return detail::has_nonzero(source ? p.source.strides : p.dest.strides);
    case Fits::other_offset:
      return source ? f.source_lo != f.source_hi : f.dest_lo != f.dest_hi;
    case Fits::has_locations:
      return !p.locations.empty();
    case Fits::splittable:
      return splittable(p);
    case Fits::has_replica:
      return p.locations.size() >= 2 && checked_numel(p.shape).value_or(0) > 0;
    case Fits::has_rank:        // rows of the rank list have no piece sites
    case Fits::has_shard_axis:  // nor have rows of a shard shape
    case Fits::has_digest:      // nor rows of the recorded digests
      return false;
  }
  return false;
}

bool map_fits(const Row& row, const Map& map) {
  switch (row.fits) {
    case Fits::two_ranks:
      return map.ranks.size() >= 2;
    case Fits::has_rank:
      return !map.ranks.empty();
    case Fits::has_digest:
      return !map.content_digests.empty();
    case Fits::always:
    case Fits::has_axis:
    case Fits::axis_differs:
    case Fits::span_differs:
    case Fits::two_distinct:
    case Fits::differs:
    case Fits::nonzero_stride:
    case Fits::other_offset:
    case Fits::has_locations:
    case Fits::splittable:
    case Fits::has_shard_axis:
    case Fits::has_replica:
      return true;
  }
  return true;
}

bool has_shard_axis(const RankEntry& entry) {
  return entry.shard_shape && !entry.shard_shape->empty();
}

// Counting pass then selecting pass: a uniform choice among eligible sites without
// building a list of them.
std::size_t count_sites(const Row& row, const Map& map, const MapFacts& f) {
  std::size_t n = 0;
  if (detail::target_of(row.field) == CorruptionTarget::shard_shape) {
    for (const auto& entry : map.ranks) n += has_shard_axis(entry);
    return n;
  }
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) n += piece_fits(row, piece, f);
  }
  return n;
}

Site nth_site(const Row& row, const Map& map, const MapFacts& f, std::size_t n) {
  for (std::size_t r = 0; r < map.ranks.size(); ++r) {
    const auto& entry = map.ranks[r];
    if (detail::target_of(row.field) == CorruptionTarget::shard_shape) {
      if (has_shard_axis(entry) && n-- == 0) return {r, 0};
      continue;
    }
    for (std::size_t p = 0; p < entry.pieces.size(); ++p) {
      if (piece_fits(row, entry.pieces[p], f) && n-- == 0) return {r, p};
    }
  }
  return {};
}

bool applicable(const Row& row, const Map& map, const MapFacts& f) {
  if (!map_fits(row, map)) return false;
  const CorruptionTarget target = detail::target_of(row.field);
  return target == CorruptionTarget::ranks || target == CorruptionTarget::content_digests ||
         target == CorruptionTarget::map_text || count_sites(row, map, f) > 0;
}

// The vector an axis edit changes: a piece's shape or strides, or a shard shape.
Extents& edited_axes(Map& map, Field field, Site site) {
  if (field == Field::shard_shape) return *map.ranks[site.rank].shard_shape;
  return *axes_of(map.ranks[site.rank].pieces[site.piece], field);
}

void apply_edit(detail::Edit& e, const Row& row, Site site) {
  using namespace detail;
  const bool source = is_source(row.field);
  const std::string_view name = record_name(row.field);
  auto axes = [&]() -> Extents& { return edited_axes(e.map, row.field, site); };
  switch (row.op) {
    case Op::add_at_axis:
      return axis_add(e, axes(), name, row.param.n);
    case Op::set_at_axis:
      if (row.field == Field::shape && row.param.n == 0 && e.c.chance(1, 4)) {
        return axis_zero_beside_huge(e, e.map.ranks[site.rank].pieces[site.piece]);
      }
      return axis_set(e, axes(), name, row.param.n);
    case Op::set_span_axis: {
      const Extents& shape = e.map.ranks[site.rank].pieces[site.piece].shape;
      return spanned_axis_set(e, shape, axes(), name, row.param.n);
    }
    case Op::swap_axes:
      return axes_swap(e, axes(), name);
    case Op::copy_axis:
      return axis_copy(e, axes(), name);
    case Op::add:
      return offset_add(e, site, source, row.param.n);
    case Op::add_stride:
      return offset_add_stride(e, site, source, row.param.n);
    case Op::set:
      if (row.field == Field::scale) return scale_set(e, site, row.param.x);
      return offset_set(e, site, source, row.param.n);
    case Op::set_other:
      return offset_set_other(e, site, source);
    case Op::set_past_end:
      return offset_set_past_end(e, site, source);
    case Op::set_last_address:
      return offset_set_last_address(e, site, source);
    case Op::drop_location:
      return location_drop(e, site);
    case Op::add_location:
      return location_add(e, site);
    case Op::replace_location:
      return location_replace(e, site);
    case Op::clear_locations:
      return locations_clear(e, site);
    case Op::move_piece:
      return piece_move(e, site);
    case Op::duplicate_piece:
      return piece_duplicate(e, site);
    case Op::delete_piece:
      return piece_delete(e, site);
    case Op::split_piece:
      return piece_split(e, site);
    case Op::add_empty_rank:
      return rank_add_empty(e);
    case Op::add_copy_rank:
      return rank_add_copy(e);
    case Op::drop_rank:
      return rank_drop(e);
    case Op::flip_digest_bit:
      return digest_flip_bit(e);
    case Op::drop_digest:
      return digest_drop(e);
    case Op::digest_to_other_state:
      return digest_to_other_state(e);
    case Op::flip_replica_copy:
      return replica_flip(e, site);
    case Op::text_fraction:
    case Op::text_quote:
    case Op::text_huge:
    case Op::text_duplicate_key:
    case Op::text_truncate:
    case Op::text_negative_zero:
    case Op::text_leading_zero:
    case Op::text_trailing:
    case Op::text_lenient:
      return text_edit(e, row.op);
  }
}

Corrupted apply_from(const Map& map, std::size_t first, ChoiceSource& c) {
  // Deterministic fallback: the next applicable row in catalogue order. One row always
  // applies (corruption_edits.h checks that), so the loop always ends within one lap.
  const MapFacts facts = map_facts(map);
  std::size_t chosen = detail::always_applicable_row();
  for (std::size_t i = 0; i < kKindCount; ++i) {
    std::size_t candidate = (first + i) % kKindCount;
    if (applicable(kRows[candidate], map, facts)) {
      chosen = candidate;
      break;
    }
  }
  const Row& row = kRows[chosen];
  Corrupted out{map, {}, std::nullopt, std::nullopt, false};
  out.record.kind = std::string(row.name);
  detail::Edit edit{out.map, c, out.record, &out};
  Site site;
  switch (detail::target_of(row.field)) {
    case CorruptionTarget::ranks:
    case CorruptionTarget::content_digests:
    case CorruptionTarget::map_text:
      break;
    case CorruptionTarget::shard_shape:
      site = nth_site(row, map, facts, c.below(count_sites(row, map, facts)));
      out.record.rank = map.ranks[site.rank].rank;
      break;
    case CorruptionTarget::piece:
    case CorruptionTarget::shard_data:
      site = nth_site(row, map, facts, c.below(count_sites(row, map, facts)));
      out.record.rank = map.ranks[site.rank].rank;
      out.record.piece = static_cast<Index>(site.piece);
      break;
  }
  apply_edit(edit, row, site);
  return out;
}

}  // namespace

std::span<const std::string_view> corruption_kinds() { return kKindNames; }

std::span<const CorruptionKind> corruption_catalogue() { return kCatalogue; }

std::vector<bool> applicable_corruptions(const Map& map) {
  const MapFacts facts = map_facts(map);
  std::vector<bool> out(kKindCount);
  for (std::size_t i = 0; i < kKindCount; ++i) out[i] = applicable(kRows[i], map, facts);
  return out;
}

Corrupted corrupt(const Map& map, ChoiceSource& c) {
  const std::size_t drawn = map.content_digests.empty() ? detail::first_digest_row() : kKindCount;
  return apply_from(map, c.below(drawn), c);
}

Corrupted corrupt_with(const Map& map, std::string_view kind, ChoiceSource& c) {
  auto it = std::find(kKindNames.begin(), kKindNames.end(), kind);
  // An unknown name starts the fallback lap at the first kind.
  std::size_t first =
      it == kKindNames.end() ? 0 : static_cast<std::size_t>(it - kKindNames.begin());
  return apply_from(map, first, c);
}

}  // namespace shardcheck::gen
