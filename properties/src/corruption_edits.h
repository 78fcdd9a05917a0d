// Private: the edits behind corrupt(). Each applies one catalogue entry to a chosen
// site of a mutable map and fills the record. Callers have checked applicability.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/map.h"

namespace shardcheck::gen::detail {

// Catalogue order; corruption_kinds() lists the names in the same order. One line per
// field keeps the catalogue readable, hence no clang-format here.
// clang-format off
enum class Kind {
  shape_inc, shape_dec, shape_zero, shape_swap,
  source_offset_inc, source_offset_dec, source_offset_plus_stride, source_offset_minus_stride,
  source_offset_zero, source_offset_other, source_offset_past_end,
  dest_offset_inc, dest_offset_dec, dest_offset_plus_stride, dest_offset_minus_stride,
  dest_offset_zero, dest_offset_other, dest_offset_past_end,
  source_stride_inc, source_stride_dec, source_stride_zero, source_stride_swap, source_stride_copy,
  dest_stride_inc, dest_stride_dec, dest_stride_zero, dest_stride_swap, dest_stride_copy,
  locations_drop, locations_add, locations_replace, locations_empty,
  scale_zero, scale_half, scale_double, scale_negative,
  shard_shape_inc, shard_shape_dec,
  move_piece, duplicate_piece, delete_piece, split_piece,
  add_empty_rank, add_copy_rank, drop_rank,
};
// clang-format on
inline constexpr std::size_t kKindCount = static_cast<std::size_t>(Kind::drop_rank) + 1;

// A piece by position: map.ranks[rank].pieces[piece].
struct Site {
  std::size_t rank = 0;
  std::size_t piece = 0;
};

struct Edit {
  Map& map;
  ChoiceSource& c;
  CorruptionRecord& record;
};

// One field of one piece (shape, offsets, strides, locations, scale).
void edit_piece_field(Edit& e, Kind kind, Site site);
// shard_shape of one rank entry.
void edit_shard_shape(Edit& e, Kind kind, std::size_t rank_pos);
// move / duplicate / delete / split a piece.
void edit_piece_structure(Edit& e, Kind kind, Site site);
// add an empty rank, add a copy of a rank, drop a rank.
void edit_ranks(Edit& e, Kind kind);

// Predicates that keep an edit from being a no-op; the edits choose axes by the same
// rules, so a piece that fits always has an axis to edit.
inline bool has_nonzero(const std::vector<Index>& v) {
  for (Index x : v) {
    if (x != 0) return true;
  }
  return false;
}
inline bool has_two_distinct(const std::vector<Index>& v) {
  for (Index x : v) {
    if (x != v.front()) return true;
  }
  return false;
}

// Addition that saturates at the Index limits instead of overflowing.
Index saturating_add(Index a, Index b);
std::string list_text(const std::vector<Index>& values);                      // "[0,1]"
std::string field_at(std::string_view name, std::size_t k);                   // "shape[1]"
std::string field_swap(std::string_view name, std::size_t a, std::size_t b);  // "shape[0<->1]"

}  // namespace shardcheck::gen::detail
