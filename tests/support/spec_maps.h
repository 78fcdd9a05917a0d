// Test support: terse map builders in the contract notation (build::P is the one piece
// builder of the tests), and the maps of the contract 6 reproductions, shared by the
// unit tests of checks and conversion.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "shardcheck/map.h"

namespace shardcheck::build {

// P(shape, src offset, src strides, dst offset, dst strides, locations[, scale])
inline Piece P(Extents shape, Index src, Strides src_strides, Index dst, Strides dst_strides, std::vector<Rank> loc,
               double scale = 1.0) {
  Piece p;
  p.shape = std::move(shape);
  p.source = {src, std::move(src_strides)};
  p.dest = {dst, std::move(dst_strides)};
  p.locations = std::move(loc);
  p.scale = scale;
  return p;
}

inline RankEntry R(Rank rank, std::optional<Extents> shard, std::vector<Piece> pieces) {
  return RankEntry{rank, std::move(shard), std::move(pieces)};
}

inline Map M(Extents logical, std::vector<RankEntry> ranks) { return Map{std::move(logical), std::move(ranks)}; }

// ---- contract 6: reported corruptions (map parts) ----------------------------------------

inline Map repro1() {
  return M({8}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})}), R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {1})})});
}
inline Map repro2() {
  return M({6},
           {R(0, Extents{4}, {P({2, 2}, 0, {1, 1}, 0, {2, 1}, {0})}), R(1, Extents{3}, {P({3}, 3, {1}, 0, {1}, {1})})});
}
inline Map repro3() {
  return M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}), R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {1})})});
}
inline Map repro4() {
  return M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}),
                 R(1, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0, 1}), P({2}, 2, {1}, 2, {1}, {0, 1})})});
}
inline Map repro5() { return M({4}, {R(0, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0}), P({2}, 2, {1}, 0, {1}, {0})})}); }
inline Map repro6() {
  return M({2, 8}, {R(0, Extents{2, 4}, {P({2, 2}, 0, {8, 1}, 0, {4, 1}, {0}), P({2, 2}, 4, {8, 1}, 0, {4, 1}, {0})}),
                    R(1, Extents{2, 4}, {P({2, 2}, 2, {8, 1}, 0, {4, 1}, {1}), P({2, 2}, 6, {8, 1}, 2, {4, 1}, {1})})});
}
inline Map repro7() {
  return M({12}, {R(0, Extents{3, 4},
                    {P({2, 3}, 0, {3, 1}, 2, {4, 1}, {0}), P({1, 2}, 6, {2, 1}, 0, {4, 1}, {0}),
                     P({1, 1}, 8, {1, 1}, 4, {4, 1}, {0}), P({1, 3}, 9, {3, 1}, 9, {4, 1}, {0})})});
}
inline Map repro8() { return M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})})}); }

}  // namespace shardcheck::build
