// Structural edits: pieces moved, duplicated, deleted or split; ranks added or dropped.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "corruption_edits.h"

namespace shardcheck::gen::detail {

namespace {

std::ptrdiff_t at(std::size_t i) { return static_cast<std::ptrdiff_t>(i); }

// A rank id no entry uses: past the highest one, with a gap so ids stay non-contiguous.
Rank fresh_rank(const Map& map, ChoiceSource& c) {
  Rank highest = -1;
  for (const auto& entry : map.ranks) highest = std::max(highest, entry.rank);
  return saturating_add(highest, c.between(1, 3));
}

void split(Edit& e, Site site) {
  auto& pieces = e.map.ranks[site.rank].pieces;
  Piece& first = pieces[site.piece];
  std::size_t n =
      std::min({first.shape.size(), first.source.strides.size(), first.dest.strides.size()});
  std::size_t axes = 0;
  for (std::size_t k = 0; k < n; ++k) axes += first.shape[k] >= 2;
  std::size_t want = e.c.below(axes);
  std::size_t k = 0;
  for (; k < n; ++k) {
    if (first.shape[k] >= 2 && want-- == 0) break;
  }
  Index extent = first.shape[k];
  Index cut = e.c.between(1, extent - 1);
  Piece second = first;
  first.shape[k] = cut;
  second.shape[k] = extent - cut;
  // The halves stay valid (a split alone does not corrupt); saturate so that an absurd
  // input map cannot overflow here.
  Index src_step =
      checked_mul(cut, second.source.strides[k]).value_or(std::numeric_limits<Index>::max());
  Index dst_step =
      checked_mul(cut, second.dest.strides[k]).value_or(std::numeric_limits<Index>::max());
  second.source.offset = saturating_add(second.source.offset, src_step);
  second.dest.offset = saturating_add(second.dest.offset, dst_step);
  e.record.field = field_at("shape", k);
  e.record.old_value = std::to_string(extent);
  e.record.new_value = fmt::format("{}+{}", cut, extent - cut);
  pieces.insert(pieces.begin() + at(site.piece + 1), std::move(second));
}

}  // namespace

void edit_piece_structure(Edit& e, Kind kind, Site site) {
  auto& entry = e.map.ranks[site.rank];
  e.record.rank = entry.rank;
  e.record.piece = static_cast<Index>(site.piece);
  switch (kind) {
    case Kind::move_piece: {
      std::size_t to = e.c.below(e.map.ranks.size() - 1);
      if (to >= site.rank) ++to;
      Piece moved = std::move(entry.pieces[site.piece]);
      entry.pieces.erase(entry.pieces.begin() + at(site.piece));
      auto& target = e.map.ranks[to];
      std::size_t pos = e.c.below(target.pieces.size() + 1);
      target.pieces.insert(target.pieces.begin() + at(pos), std::move(moved));
      e.record.field = "rank";
      e.record.old_value = std::to_string(entry.rank);
      e.record.new_value = std::to_string(target.rank);
      e.record.rank = target.rank;
      e.record.piece = static_cast<Index>(pos);
      break;
    }
    case Kind::duplicate_piece: {
      std::size_t pos = e.c.below(entry.pieces.size() + 1);
      Piece copy = entry.pieces[site.piece];
      e.record.field = "piece";
      e.record.old_value = std::to_string(site.piece);
      e.record.new_value = describe(copy);
      entry.pieces.insert(entry.pieces.begin() + at(pos), std::move(copy));
      e.record.piece = static_cast<Index>(pos);
      break;
    }
    case Kind::delete_piece:
      e.record.field = "piece";
      e.record.old_value = describe(entry.pieces[site.piece]);
      entry.pieces.erase(entry.pieces.begin() + at(site.piece));
      break;
    default:
      split(e, site);
      break;
  }
}

void edit_ranks(Edit& e, Kind kind) {
  auto& ranks = e.map.ranks;
  e.record.field = "rank";
  if (kind == Kind::drop_rank) {
    std::size_t i = e.c.below(ranks.size());
    e.record.rank = ranks[i].rank;
    e.record.old_value = std::to_string(ranks[i].rank);
    ranks.erase(ranks.begin() + at(i));
    return;
  }
  RankEntry added;
  if (kind == Kind::add_copy_rank) {
    std::size_t source = e.c.below(ranks.size());
    added = ranks[source];
    e.record.old_value = std::to_string(ranks[source].rank);
  } else {
    // An empty rank with an empty shard is valid; with another rank's shard shape it
    // owns addresses nobody writes.
    added.shard_shape = Extents{0};
    if (!ranks.empty() && e.c.coin())
      added.shard_shape = ranks[e.c.below(ranks.size())].shard_shape;
  }
  added.rank = fresh_rank(e.map, e.c);
  e.record.rank = added.rank;
  e.record.new_value = fmt::format("{} shard {}", added.rank,
                                   added.shard_shape ? list_text(*added.shard_shape) : "none");
  std::size_t pos = e.c.below(ranks.size() + 1);
  ranks.insert(ranks.begin() + at(pos), std::move(added));
}

}  // namespace shardcheck::gen::detail
