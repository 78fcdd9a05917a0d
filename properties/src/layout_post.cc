#include "layout_post.h"

#include <algorithm>
#include <utility>

namespace shardcheck::gen::detail {

void draw_scales(ChoiceSource& c, Map& map) {
  if (!c.chance(1, 3)) return;
  static constexpr double kScales[] = {1.0, 2.0, 0.5};
  if (c.coin()) {
    for (auto& entry : map.ranks) {
      for (auto& piece : entry.pieces) piece.scale = c.pick(kScales);
    }
    return;
  }
  double scale = c.coin() ? 2.0 : 0.5;
  for (auto& entry : map.ranks) {
    for (auto& piece : entry.pieces) piece.scale = scale;
  }
}

void relabel_ranks(ChoiceSource& c, Map& map) {
  if (!c.coin()) return;
  // (old, new) pairs; tp is small, so a linear lookup beats any associative container.
  std::vector<std::pair<Rank, Rank>> rename;
  rename.reserve(map.ranks.size());
  Rank id = c.between(0, 3);
  for (const auto& entry : map.ranks) {
    rename.emplace_back(entry.rank, id);
    id += c.between(1, 6);
  }
  if (c.coin()) {
    for (std::size_t i = rename.size(); i > 1; --i) {
      std::swap(rename[i - 1].second, rename[c.below(i)].second);
    }
  }
  auto lookup = [&](Rank old) {
    for (const auto& [from, to] : rename) {
      if (from == old) return to;
    }
    return old;  // constructors only name listed ranks; keep anything else as is
  };
  for (auto& entry : map.ranks) {
    entry.rank = lookup(entry.rank);
    for (auto& piece : entry.pieces) {
      for (Rank& r : piece.locations) r = lookup(r);
      std::sort(piece.locations.begin(), piece.locations.end());
    }
  }
}

void shuffle_order(ChoiceSource& c, Map& map) {
  if (c.coin()) {
    for (auto& entry : map.ranks) c.shuffle(entry.pieces);
  }
  if (c.coin()) c.shuffle(map.ranks);
}

}  // namespace shardcheck::gen::detail
