// Private: the corruption catalogue as a table of rows (built from corruptions.def)
// and the edits behind corrupt(). Each edit applies one row to a chosen site of a
// mutable map and fills the record. Callers have checked applicability.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/map.h"

// The switches over the vocabulary below list every enumerator and have no default, so
// an enumerator added without its case is a compile error, not a silent fall-through.
#pragma GCC diagnostic error "-Wswitch"

namespace shardcheck::gen::detail {

// The vocabulary of corruptions.def (its header explains each word).
enum class Field {
  shape,
  source_offset,
  dest_offset,
  source_strides,
  dest_strides,
  locations,
  scale,
  piece,
  shard_shape,
  ranks,
  content_digests,
  shard_data,
  map_text,
};
enum class Fits {
  always,
  has_axis,
  axis_differs,
  span_differs,
  two_distinct,
  differs,
  nonzero_stride,
  other_offset,
  has_locations,
  splittable,
  two_ranks,
  has_rank,
  has_shard_axis,
  has_digest,
  has_replica,
};
enum class Op {
  add_at_axis,
  set_at_axis,
  set_span_axis,
  swap_axes,
  copy_axis,
  add,
  add_stride,
  set,
  set_other,
  set_past_end,
  set_last_address,
  drop_location,
  add_location,
  replace_location,
  clear_locations,
  move_piece,
  duplicate_piece,
  delete_piece,
  split_piece,
  add_empty_rank,
  add_copy_rank,
  drop_rank,
  flip_digest_bit,
  drop_digest,
  digest_to_other_state,
  flip_replica_copy,
  text_fraction,
  text_quote,
  text_huge,
  text_duplicate_key,
  text_truncate,
  text_negative_zero,
  text_leading_zero,
  text_trailing,
  text_lenient,
};

// An edit's parameter: an Index (deltas, offsets, stride values) or a scale.
struct Param {
  Index n = 0;
  double x = 0.0;
};

struct Row {
  std::string_view name;
  Field field;
  Fits fits;
  Op op;
  Param param;
};

constexpr CorruptionTarget target_of(Field field) {
  switch (field) {
    case Field::shape:
    case Field::source_offset:
    case Field::dest_offset:
    case Field::source_strides:
    case Field::dest_strides:
    case Field::locations:
    case Field::scale:
    case Field::piece:
      return CorruptionTarget::piece;
    case Field::shard_shape:
      return CorruptionTarget::shard_shape;
    case Field::ranks:
      return CorruptionTarget::ranks;
    case Field::content_digests:
      return CorruptionTarget::content_digests;
    case Field::shard_data:
      return CorruptionTarget::shard_data;
    case Field::map_text:
      return CorruptionTarget::map_text;
  }
  return CorruptionTarget::piece;
}

constexpr bool is_axes(Field f) {
  return f == Field::shape || f == Field::source_strides || f == Field::dest_strides;
}
constexpr bool is_strides(Field f) {
  return f == Field::source_strides || f == Field::dest_strides;
}
constexpr bool is_offset(Field f) { return f == Field::source_offset || f == Field::dest_offset; }

// Whether `fits` is a question `field` can answer.
constexpr bool fits_suits(Field field, Fits fits) {
  switch (fits) {
    case Fits::always:
      return target_of(field) != CorruptionTarget::shard_shape &&
             target_of(field) != CorruptionTarget::content_digests;
    case Fits::has_axis:
    case Fits::axis_differs:
    case Fits::two_distinct:
      return is_axes(field);
    case Fits::span_differs:
      return is_strides(field);
    case Fits::differs:
      return is_offset(field) || field == Field::scale;
    case Fits::nonzero_stride:
    case Fits::other_offset:
      return is_offset(field);
    case Fits::has_locations:
      return field == Field::locations;
    case Fits::splittable:
    case Fits::two_ranks:
      return target_of(field) == CorruptionTarget::piece;
    case Fits::has_rank:
      return field == Field::ranks;
    case Fits::has_shard_axis:
      return field == Field::shard_shape;
    case Fits::has_digest:
      return field == Field::content_digests;
    case Fits::has_replica:
      return field == Field::shard_data;
  }
  return false;
}

// Whether a site that passes `fits` gives `op` what it needs (an axis to pick, a value
// to take) and makes the edit change something, and whether `op` can edit `field` at
// all. A row that fails this does not compile.
constexpr bool well_formed(Field field, Fits fits, Op op, Param param) {
  auto fits_one_of = [fits](std::initializer_list<Fits> allowed) {
    for (Fits f : allowed) {
      if (f == fits) return true;
    }
    return false;
  };
  const bool no_param = param.n == 0 && param.x == 0.0;
  if (!fits_suits(field, fits)) return false;
  switch (op) {
    case Op::add_at_axis:
      if (field == Field::shard_shape) {
        return fits == Fits::has_shard_axis && param.n != 0 && param.x == 0.0;
      }
      return is_axes(field) && param.n != 0 && param.x == 0.0 &&
             fits_one_of({Fits::has_axis, Fits::axis_differs, Fits::two_distinct});
    case Op::set_at_axis:
      return is_axes(field) && fits == Fits::axis_differs && param.x == 0.0;
    case Op::set_span_axis:
      return is_strides(field) && fits == Fits::span_differs && param.x == 0.0;
    case Op::swap_axes:
    case Op::copy_axis:
      return is_axes(field) && fits == Fits::two_distinct && no_param;
    case Op::add:
      return is_offset(field) && param.n != 0 && param.x == 0.0;
    case Op::add_stride:
      return is_offset(field) && fits == Fits::nonzero_stride && (param.n == 1 || param.n == -1) &&
             param.x == 0.0;
    case Op::set:
      if (field == Field::scale) return fits == Fits::differs && param.n == 0;
      return is_offset(field) && fits == Fits::differs && param.x == 0.0;
    case Op::set_other:
      return is_offset(field) && fits == Fits::other_offset && no_param;
    case Op::set_past_end:
    case Op::set_last_address:
      return is_offset(field) && no_param;
    case Op::drop_location:
    case Op::replace_location:
    case Op::clear_locations:
      return field == Field::locations && fits == Fits::has_locations && no_param;
    case Op::add_location:
      return field == Field::locations && no_param;
    case Op::move_piece:
      return field == Field::piece && fits == Fits::two_ranks && no_param;
    case Op::duplicate_piece:
    case Op::delete_piece:
      return field == Field::piece && no_param;
    case Op::split_piece:
      return field == Field::piece && fits == Fits::splittable && no_param;
    case Op::add_empty_rank:
      return field == Field::ranks && no_param;
    case Op::add_copy_rank:
    case Op::drop_rank:
      return field == Field::ranks && fits == Fits::has_rank && no_param;
    case Op::flip_digest_bit:
    case Op::drop_digest:
    case Op::digest_to_other_state:
      return field == Field::content_digests && fits == Fits::has_digest && no_param;
    case Op::flip_replica_copy:
      return field == Field::shard_data && fits == Fits::has_replica && no_param;
    case Op::text_fraction:
    case Op::text_quote:
    case Op::text_huge:
    case Op::text_duplicate_key:
    case Op::text_truncate:
    case Op::text_negative_zero:
    case Op::text_leading_zero:
    case Op::text_trailing:
    case Op::text_lenient:
      return field == Field::map_text && fits == Fits::always && no_param;
  }
  return false;
}

// The catalogue: one Row per corruptions.def line, in its order.
#define SHARDCHECK_CORRUPTION(name, field, fits, op, param) \
  Row{#name, Field::field, Fits::fits, Op::op, Param param},
inline constexpr Row kRows[] = {
#include "corruptions.def"
};
#undef SHARDCHECK_CORRUPTION

#define SHARDCHECK_CORRUPTION(name, field, fits, op, param)                 \
  static_assert(well_formed(Field::field, Fits::fits, Op::op, Param param), \
                "corruptions.def: row " #name                               \
                " has an edit that does not suit its "                      \
                "field, its applicability or its parameter");
#include "corruptions.def"
#undef SHARDCHECK_CORRUPTION

inline constexpr std::size_t kKindCount = std::size(kRows);

// The row corrupt() falls back to when nothing else applies: one that every map can
// take, so the fallback lap always ends.
constexpr std::size_t always_applicable_row() {
  for (std::size_t i = 0; i < kKindCount; ++i) {
    if (kRows[i].field == Field::ranks && kRows[i].fits == Fits::always) return i;
  }
  return kKindCount;
}
static_assert(always_applicable_row() < kKindCount,
              "corruptions.def needs a row every map can take (a `ranks` row that applies always)");

// The rows that edit the recorded content digests come last: corrupt() draws them only
// for a map that records a digest, so a map without one draws exactly as it did before
// those rows existed (the same seeds and fuzz inputs give the same cases).
constexpr std::size_t first_digest_row() {
  std::size_t first = kKindCount;
  for (std::size_t i = 0; i < kKindCount; ++i) {
    if (target_of(kRows[i].field) == CorruptionTarget::content_digests && first == kKindCount) first = i;
    if (first != kKindCount && target_of(kRows[i].field) != CorruptionTarget::content_digests) return 0;
  }
  return first;
}
static_assert(first_digest_row() > 0, "corruptions.def: the content_digests rows must be the last rows");

// A piece by position: map.ranks[rank].pieces[piece].
struct Site {
  std::size_t rank = 0;
  std::size_t piece = 0;
};

struct Edit {
  Map& map;
  ChoiceSource& c;
  CorruptionRecord& record;
  Corrupted* out = nullptr;  // for the rows that edit no map: the data flip, the text
};

// Edits of one axis (or two) of a shape, a stride vector or a shard shape; `name` is
// the field as the record writes it ("shape", "source.strides", ...).
void axis_add(Edit& e, Extents& v, std::string_view name, Index delta);
void axis_set(Edit& e, Extents& v, std::string_view name, Index value);
// shape_zero, 1 in 4: an extent set to 0 and two axes of 2^62 put in front (strides 1), an
// empty piece whose other extents alone overflow a product.
void axis_zero_beside_huge(Edit& e, Piece& piece);
// The same among the axes the piece's `shape` spans (extent >= 2), where a stride counts.
void spanned_axis_set(Edit& e, const Extents& shape, Strides& v, std::string_view name,
                      Index value);
void axes_swap(Edit& e, Extents& v, std::string_view name);
void axis_copy(Edit& e, Extents& v, std::string_view name);

// Edits of one offset; `source` picks the view.
void offset_add(Edit& e, Site site, bool source, Index delta);
void offset_add_stride(Edit& e, Site site, bool source, Index sign);
void offset_set(Edit& e, Site site, bool source, Index value);
void offset_set_other(Edit& e, Site site, bool source);
void offset_set_past_end(Edit& e, Site site, bool source);
void offset_set_last_address(Edit& e, Site site, bool source);

void scale_set(Edit& e, Site site, double value);

void location_drop(Edit& e, Site site);
void location_add(Edit& e, Site site);
void location_replace(Edit& e, Site site);
void locations_clear(Edit& e, Site site);

void piece_move(Edit& e, Site site);
void piece_duplicate(Edit& e, Site site);
void piece_delete(Edit& e, Site site);
void piece_split(Edit& e, Site site);

void rank_add_empty(Edit& e);
void rank_add_copy(Edit& e);
void rank_drop(Edit& e);

// Edits of the recorded content digests (the map records at least one).
void digest_flip_bit(Edit& e);
void digest_drop(Edit& e);
void digest_to_other_state(Edit& e);

// The replica copy to damage in the truth map's shards (the map is not edited).
void replica_flip(Edit& e, Site site);

// Edits of the map's JSON text (the map is not edited).
void text_edit(Edit& e, Op op);

// Predicates that keep an edit from being a no-op; the edits choose axes by the same
// rules, so a piece that fits always has an axis to edit.
inline bool has_nonzero(std::span<const Index> v) {
  for (Index x : v) {
    if (x != 0) return true;
  }
  return false;
}
inline bool has_other_than(std::span<const Index> v, Index value) {
  for (Index x : v) {
    if (x != value) return true;
  }
  return false;
}
// Whether axis k has shape[k] >= 2 and v[k] != value: where setting the stride changes
// which addresses the view covers.
inline bool spans_other_than(const Extents& shape, const Strides& v, Index value, std::size_t k) {
  return k < shape.size() && k < v.size() && shape[k] >= 2 && v[k] != value;
}
inline bool has_spanned_axis_other_than(const Extents& shape, const Strides& v, Index value) {
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (spans_other_than(shape, v, value, k)) return true;
  }
  return false;
}
inline bool has_two_distinct(std::span<const Index> v) {
  return !v.empty() && has_other_than(v, v.front());
}

// Addition that saturates at the Index limits instead of overflowing.
Index saturating_add(Index a, Index b);
std::string list_text(std::span<const Index> values);                      // "[0,1]"
std::string field_at(std::string_view name, std::size_t k);                   // "shape[1]"
std::string field_swap(std::string_view name, std::size_t a, std::size_t b);  // "shape[0<->1]"

}  // namespace shardcheck::gen::detail
