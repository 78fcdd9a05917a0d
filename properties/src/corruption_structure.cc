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

void split_at(Edit& e, Site site) {
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

// Gives `added` a fresh id and inserts it at a uniform position.
void insert_rank(Edit& e, RankEntry added) {
  auto& ranks = e.map.ranks;
  e.record.field = "rank";
  added.rank = fresh_rank(e.map, e.c);
  e.record.rank = added.rank;
  e.record.new_value = fmt::format("{} shard {}", added.rank,
                                   added.shard_shape ? list_text(*added.shard_shape) : "none");
  std::size_t pos = e.c.below(ranks.size() + 1);
  ranks.insert(ranks.begin() + at(pos), std::move(added));
}

}  // namespace

void piece_move(Edit& e, Site site) {
  auto& entry = e.map.ranks[site.rank];
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
}

void piece_duplicate(Edit& e, Site site) {
  auto& entry = e.map.ranks[site.rank];
  std::size_t pos = e.c.below(entry.pieces.size() + 1);
  Piece copy = entry.pieces[site.piece];
  // 1 in 4 the copy is scaled twice as much: two pieces equal in all but their scale,
  // the one tie that the content order breaks by scale (contract section 3).
  if (e.c.chance(1, 4)) copy.scale *= 2.0;
  e.record.field = "piece";
  e.record.old_value = std::to_string(site.piece);
  e.record.new_value = describe(copy);
  entry.pieces.insert(entry.pieces.begin() + at(pos), std::move(copy));
  e.record.piece = static_cast<Index>(pos);
}

void piece_delete(Edit& e, Site site) {
  auto& entry = e.map.ranks[site.rank];
  e.record.field = "piece";
  e.record.old_value = describe(entry.pieces[site.piece]);
  entry.pieces.erase(entry.pieces.begin() + at(site.piece));
}

void piece_split(Edit& e, Site site) { split_at(e, site); }

void rank_drop(Edit& e) {
  auto& ranks = e.map.ranks;
  e.record.field = "rank";
  std::size_t i = e.c.below(ranks.size());
  e.record.rank = ranks[i].rank;
  e.record.old_value = std::to_string(ranks[i].rank);
  ranks.erase(ranks.begin() + at(i));
}

void rank_add_empty(Edit& e) {
  // An empty rank with an empty shard is valid; with another rank's shard shape it
  // owns addresses nobody writes.
  RankEntry added;
  added.shard_shape = Extents{0};
  if (!e.map.ranks.empty() && e.c.coin())
    added.shard_shape = e.map.ranks[e.c.below(e.map.ranks.size())].shard_shape;
  insert_rank(e, std::move(added));
}

void rank_add_copy(Edit& e) {
  std::size_t source = e.c.below(e.map.ranks.size());
  RankEntry added = e.map.ranks[source];
  e.record.old_value = std::to_string(e.map.ranks[source].rank);
  insert_rank(e, std::move(added));
}

}  // namespace shardcheck::gen::detail
