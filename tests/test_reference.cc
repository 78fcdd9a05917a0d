// The reference model against the spec: every reported corruption of section 6 is
// refused with the spec's kind, valid layouts are accepted, and its rebuild and
// extract move data exactly. Maps are written by hand here, not by the constructors,
// so that a constructor bug cannot hide a reference bug.
#include "shardcheck/oracles/reference.h"

#include "shardcheck/checks.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

namespace shardcheck::oracles {
namespace {

Piece P(Extents shape, Index src, Strides src_strides, Index dst, Strides dst_strides,
        std::vector<Rank> locations, double scale = 1.0) {
  Piece p;
  p.shape = std::move(shape);
  p.source = StridedView{src, std::move(src_strides)};
  p.dest = StridedView{dst, std::move(dst_strides)};
  p.locations = std::move(locations);
  p.scale = scale;
  return p;
}

// A 1-d piece with unit strides, the spec's `P(n) src(a) dst(b)`.
Piece P1(Index n, Index src, Index dst, std::vector<Rank> locations, double scale = 1.0) {
  return P({n}, src, {1}, dst, {1}, std::move(locations), scale);
}

RankEntry R(Rank rank, Extents shard, std::vector<Piece> pieces) {
  return RankEntry{rank, std::move(shard), std::move(pieces)};
}

Map M(Extents logical, std::vector<RankEntry> ranks) { return Map{std::move(logical), std::move(ranks)}; }

std::optional<ErrorKind> kind_of(const Map& map) { return reference_check(map).kind; }

// Every permutation of rank order, and of piece order inside rank 0's list: the verdict
// must not depend on either (contract 1).
void expect_order_free(const Map& map) {
  const auto expected = kind_of(map);
  Map shuffled = map;
  std::sort(shuffled.ranks.begin(), shuffled.ranks.end(),
            [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; });
  do {
    Map inner = shuffled;
    auto& pieces = inner.ranks.front().pieces;
    std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return std::tie(a.source.offset, a.dest.offset, a.shape) <
             std::tie(b.source.offset, b.dest.offset, b.shape);
    });
    do {
      EXPECT_EQ(kind_of(inner), expected) << describe(inner);
    } while (std::next_permutation(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
      return std::tie(a.source.offset, a.dest.offset, a.shape) <
             std::tie(b.source.offset, b.dest.offset, b.shape);
    }));
  } while (std::next_permutation(
      shuffled.ranks.begin(), shuffled.ranks.end(),
      [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; }));
}

void expect_kind_in(const Map& map, std::initializer_list<ErrorKind> kinds) {
  const auto verdict = reference_check(map);
  ASSERT_FALSE(verdict.valid()) << describe(map);
  EXPECT_NE(std::find(kinds.begin(), kinds.end(), *verdict.kind), kinds.end())
      << kind_name(*verdict.kind) << ": " << verdict.reason;
  EXPECT_FALSE(verdict.reason.empty());
  expect_order_free(map);
}

void expect_kind(const Map& map, ErrorKind kind) { expect_kind_in(map, {kind}); }

void expect_valid(const Map& map) {
  const auto verdict = reference_check(map);
  EXPECT_TRUE(verdict.valid()) << describe(map) << "\n" << verdict.reason;
  EXPECT_FALSE(verdict.refused_only_by_stride_rule);
  expect_order_free(map);
}

Buffer values(DType dtype, const std::vector<std::uint64_t>& bits) {
  Buffer b(dtype, static_cast<Index>(bits.size()));
  for (std::size_t i = 0; i < bits.size(); ++i) b.set_bits(static_cast<Index>(i), bits[i]);
  return b;
}

Buffer floats(const std::vector<float>& xs) {
  std::vector<std::uint64_t> bits;
  for (float x : xs) bits.push_back(*bits_from_double(DType::float32, x));
  return values(DType::float32, bits);
}

// ---- the maps the spec itself gives --------------------------------------

Map spec_example() {  // section 2
  return M({4, 6}, {R(0, {4, 4}, {P({4, 4}, 0, {6, 1}, 0, {4, 1}, {0})}),
                    R(1, {4, 2}, {P({4, 2}, 4, {6, 1}, 0, {2, 1}, {1})})});
}

Map worked_example() {  // section 5, sub_param_map((2,6), (4,2), [[2,2],[1,1]], 1)
  return M({2, 6}, {R(0, {2, 3}, {P({2, 2}, 0, {6, 1}, 0, {3, 1}, {0}),
                                  P({2, 1}, 4, {6, 1}, 2, {3, 1}, {0})}),
                    R(1, {2, 3}, {P({2, 2}, 2, {6, 1}, 0, {3, 1}, {1}),
                                  P({2, 1}, 5, {6, 1}, 2, {3, 1}, {1})})});
}

Map column_split() {  // sub_param_map((2,8), (4,4), [[2,2],[2,2]], 1)
  return M({2, 8}, {R(0, {2, 4}, {P({2, 2}, 0, {8, 1}, 0, {4, 1}, {0}),
                                  P({2, 2}, 4, {8, 1}, 2, {4, 1}, {0})}),
                    R(1, {2, 4}, {P({2, 2}, 2, {8, 1}, 0, {4, 1}, {1}),
                                  P({2, 2}, 6, {8, 1}, 2, {4, 1}, {1})})});
}

Map replicated(Index n, std::vector<Rank> ranks, double scale = 1.0) {
  Map map;
  map.logical_shape = {n};
  for (Rank r : ranks) map.ranks.push_back(R(r, {n}, {P1(n, 0, 0, ranks, scale)}));
  return map;
}

// ---- section 6: reported corruptions --------------------------------------

TEST(ReferenceRepro, TwoRanksClaimOneBlock) {
  Map map = M({8}, {R(0, {4}, {P1(4, 0, 0, {0})}), R(1, {4}, {P1(4, 0, 0, {1})})});
  expect_kind_in(map, {ErrorKind::twice, ErrorKind::uncovered});
}

TEST(ReferenceRepro, SourceOverlapsItself) {
  Map map = M({6}, {R(0, {4}, {P({2, 2}, 0, {1, 1}, 0, {2, 1}, {0})}),
                    R(1, {3}, {P1(3, 3, 0, {1})})});
  expect_kind(map, ErrorKind::itself);
  EXPECT_FALSE(reference_check(map).refused_only_by_stride_rule);
  ShardSet shards{{0, floats({9, 8, 7, 6})}, {1, floats({1, 2, 3})}};
  auto rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_EQ(rebuilt.error().kind, ErrorKind::itself);
}

TEST(ReferenceRepro, ZeroStrideOnALongAxisOverlapsItself) {
  Map map = M({4}, {R(0, {4}, {P({2, 2}, 0, {2, 0}, 0, {2, 1}, {0})})});
  expect_kind(map, ErrorKind::itself);
  // A zero stride on an axis of extent 1 addresses nothing twice.
  expect_valid(M({4}, {R(0, {4}, {P({4, 1}, 0, {1, 0}, 0, {1, 0}, {0})})}));
}

TEST(ReferenceRepro, ReplicaOverSingleHolderInBothOrders) {
  Map map = M({4}, {R(0, {4}, {P1(4, 0, 0, {0, 1})}), R(1, {4}, {P1(4, 0, 0, {1})})});
  expect_kind_in(map, {ErrorKind::holders, ErrorKind::twice});
  std::swap(map.ranks[0], map.ranks[1]);
  expect_kind_in(map, {ErrorKind::holders, ErrorKind::twice});
}

TEST(ReferenceRepro, ReplicasCutAtDifferentBoundaries) {
  Map map = M({4}, {R(0, {4}, {P1(4, 0, 0, {0, 1})}),
                    R(1, {4}, {P1(2, 0, 0, {0, 1}), P1(2, 2, 2, {0, 1})})});
  expect_valid(map);
  ShardSet differ{{0, floats({1, 2, 3, 4})}, {1, floats({1, 2, 7, 7})}};
  auto wrong = reference_rebuild(map, differ, DType::float32);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().kind, ErrorKind::different_data);
  EXPECT_EQ(wrong.error().address, Index{2});
  std::swap(map.ranks[0], map.ranks[1]);
  wrong = reference_rebuild(map, differ, DType::float32);
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.error().kind, ErrorKind::different_data);

  ShardSet equal{{0, floats({1, 2, 3, 4})}, {1, floats({1, 2, 3, 4})}};
  auto exact = reference_rebuild(map, equal, DType::float32);
  ASSERT_TRUE(exact.ok()) << exact.error().to_string();
  EXPECT_EQ(exact.value(), floats({1, 2, 3, 4}));
}

TEST(ReferenceRepro, TwoPiecesWriteOneShardAddress) {
  Map map = M({4}, {R(0, {4}, {P1(2, 0, 0, {0}), P1(2, 2, 0, {0})})});
  expect_kind_in(map, {ErrorKind::twice, ErrorKind::uncovered});
}

TEST(ReferenceRepro, ColumnSplitCollision) {
  Map map = column_split();
  expect_valid(map);
  map.ranks[0].pieces[1].dest.offset = 0;
  expect_kind_in(map, {ErrorKind::twice, ErrorKind::uncovered});
}

TEST(ReferenceRepro, DestinationWrapsPastAShardRow) {
  Map map = M({12}, {R(0, {3, 4}, {P({2, 3}, 0, {3, 1}, 2, {4, 1}, {0}),
                                   P({1, 2}, 6, {2, 1}, 0, {4, 1}, {0}),
                                   P({1, 1}, 8, {1, 1}, 4, {4, 1}, {0}),
                                   P({1, 3}, 9, {3, 1}, 9, {4, 1}, {0})})});
  expect_kind(map, ErrorKind::twice);
}

TEST(ReferenceRepro, PhantomReplica) {
  Map map = M({4}, {R(0, {4}, {P1(4, 0, 0, {0, 1})})});
  expect_kind(map, ErrorKind::holders);
  // Rank 1 listed with an empty shard still holds nothing.
  map.ranks.push_back(R(1, {0}, {}));
  expect_kind(map, ErrorKind::holders);
}

// ---- condition 3: the conservative rule and the truth ---------------------

TEST(ReferenceStrideRule, UniqueButRefusedIsFlagged) {
  // (3,2) with strides (2,3) reads 0,3,2,5,4,7: unique; two more pieces fill 1 and 6.
  Map map = M({8}, {R(0, {8}, {P({3, 2}, 0, {2, 3}, 0, {2, 1}, {0}), P1(1, 1, 6, {0}),
                               P1(1, 6, 7, {0})})});
  auto verdict = reference_check(map);
  ASSERT_FALSE(verdict.valid());
  EXPECT_EQ(verdict.kind, ErrorKind::itself);
  EXPECT_TRUE(verdict.refused_only_by_stride_rule);

  // The same view on the dest side.
  Map dest = M({8}, {R(0, {8}, {P({3, 2}, 0, {2, 1}, 0, {2, 3}, {0}), P1(1, 6, 1, {0}),
                                P1(1, 7, 6, {0})})});
  verdict = reference_check(dest);
  EXPECT_EQ(verdict.kind, ErrorKind::itself);
  EXPECT_TRUE(verdict.refused_only_by_stride_rule);
}

TEST(ReferenceStrideRule, UniqueButOtherwiseBrokenIsNotFlagged) {
  // Same unique view, but element 6 of F is never covered.
  Map map = M({8}, {R(0, {7}, {P({3, 2}, 0, {2, 3}, 0, {2, 1}, {0}), P1(1, 1, 6, {0})})});
  auto verdict = reference_check(map);
  EXPECT_EQ(verdict.kind, ErrorKind::itself);
  EXPECT_FALSE(verdict.refused_only_by_stride_rule);
}

TEST(ReferenceStrideRule, RealOverlapIsNotFlagged) {
  // (2,2) with strides (1,1) reads 0,1,1,2.
  Map map = M({3}, {R(0, {4}, {P({2, 2}, 0, {1, 1}, 0, {2, 1}, {0})})});
  auto verdict = reference_check(map);
  EXPECT_EQ(verdict.kind, ErrorKind::itself);
  EXPECT_FALSE(verdict.refused_only_by_stride_rule);
}

TEST(ReferenceStrideRule, EqualStridesAreRefused) {
  Map map = M({16}, {R(0, {4}, {P({2, 2}, 0, {4, 4}, 0, {2, 1}, {0})})});
  EXPECT_EQ(kind_of(map), ErrorKind::itself);
}

// ---- valid layouts ---------------------------------------------------------

TEST(ReferenceValid, SpecExamples) {
  expect_valid(spec_example());
  expect_valid(worked_example());
  expect_valid(column_split());
}

TEST(ReferenceValid, ZeroDimensional) {
  expect_valid(M({}, {R(0, {}, {P({}, 0, {}, 0, {}, {0})})}));
  expect_valid(M({}, {R(0, {}, {P({}, 0, {}, 0, {}, {0, 1})}),
                      R(1, {}, {P({}, 0, {}, 0, {}, {0, 1})})}));
}

TEST(ReferenceValid, ZeroExtentPiecesAndEmptyShards) {
  // Builders place empty pieces one past the end; they cover nothing and are exempt.
  expect_valid(M({4, 2}, {R(0, {4, 2}, {P({4, 2}, 0, {2, 1}, 0, {2, 1}, {0})}),
                          R(1, {0, 2}, {P({0, 2}, 8, {2, 1}, 0, {2, 1}, {1})}),
                          R(2, {0, 4}, {})}));
  expect_valid(M({0, 3}, {R(0, {0, 3}, {})}));
}

TEST(ReferenceValid, ArbitraryRankIds) {
  expect_valid(M({6}, {R(9, {2}, {P1(2, 4, 0, {9})}), R(3, {4}, {P1(4, 0, 0, {3})})}));
  expect_valid(replicated(5, {3, 9}));
}

TEST(ReferenceValid, ReplicaListedTwiceOnOneRank) {
  // Rank 0 keeps two copies of a replicated block; every copy names the same holders.
  expect_valid(M({2}, {R(0, {4}, {P1(2, 0, 0, {0, 1}), P1(2, 0, 2, {0, 1})}),
                       R(1, {2}, {P1(2, 0, 0, {0, 1})})}));
}

// ---- conditions 1, 2, 4, 5, 6 one at a time --------------------------------

TEST(ReferenceStructure, MalformedPiecesAreFormat) {
  auto with = [](auto edit) {
    Map map = spec_example();
    edit(map.ranks[1].pieces[0]);
    return map;
  };
  expect_kind(with([](Piece& p) { p.source.strides = {1}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.dest.strides = {2, 1, 1}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.shape = {-4, 2}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.source.offset = -1; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.dest.offset = -1; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.source.strides = {6, -1}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.locations = {}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.locations = {1, 0}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.locations = {1, 1}; }), ErrorKind::format);
  expect_kind(with([](Piece& p) { p.locations = {-1, 1}; }), ErrorKind::format);
}

TEST(ReferenceStructure, MalformedRanksAreFormat) {
  Map map = spec_example();
  map.ranks[1].rank = 0;
  expect_kind(map, ErrorKind::format);
  map.ranks[1].rank = -1;
  expect_kind(map, ErrorKind::format);
  map = spec_example();
  map.ranks[1].shard_shape.reset();
  expect_kind(map, ErrorKind::format);
  map = spec_example();
  map.ranks[1].shard_shape = Extents{-4, -2};
  expect_kind(map, ErrorKind::format);
  map = spec_example();
  map.logical_shape = {-4, -6};
  expect_kind(map, ErrorKind::format);
  // A rank without pieces needs no shard shape.
  map = spec_example();
  map.ranks.push_back(RankEntry{5, std::nullopt, {}});
  expect_valid(map);
}

TEST(ReferenceStructure, BadScalesAreScale) {
  for (double s : {0.0, -0.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    Map map = spec_example();
    map.ranks[1].pieces[0].scale = s;
    expect_kind(map, ErrorKind::scale);
  }
  // A negative or fractional scale is legal in a map (only conversion with p != 1 refuses).
  Map map = spec_example();
  map.ranks[0].pieces[0].scale = -1.0;
  map.ranks[1].pieces[0].scale = 0.5;
  expect_valid(map);
}

TEST(ReferenceStructure, LowestRankAndPieceDecideBetweenFormatAndScale) {
  Map map = spec_example();
  map.ranks[0].pieces[0].scale = 0.0;
  map.ranks[1].pieces[0].locations = {};
  expect_kind(map, ErrorKind::scale);
  map.ranks[0].rank = 2;  // the malformed piece now sits on the lower rank
  map.ranks[0].pieces[0].locations = {2};
  expect_kind(map, ErrorKind::format);

  // One rank: pieces are ordered by content (source offset first), not as written.
  Map one = M({8}, {R(0, {8}, {P1(4, 4, 4, {}), P1(4, 0, 0, {0}, 0.0)})});
  expect_kind(one, ErrorKind::scale);
  one.ranks[0].pieces[0].source.offset = 0;
  one.ranks[0].pieces[1].source.offset = 4;
  expect_kind(one, ErrorKind::format);
}

TEST(ReferenceStructure, OverflowIsFormat) {
  const Index big = Index{1} << 62;
  expect_kind(M({big, 4}, {R(0, {1}, {P1(1, 0, 0, {0})})}), ErrorKind::format);
  Map map = spec_example();
  map.ranks[0].shard_shape = Extents{big, big};
  expect_kind(map, ErrorKind::format);
  map = spec_example();
  map.ranks[0].pieces[0].shape = {big, big};
  expect_kind(map, ErrorKind::format);
  map = spec_example();
  map.ranks[0].pieces[0].source.strides = {std::numeric_limits<Index>::max(), 1};
  expect_kind(map, ErrorKind::format);
  map = spec_example();
  map.ranks[0].pieces[0].dest.offset = std::numeric_limits<Index>::max() - 1;
  expect_kind(map, ErrorKind::format);
  // An overflowing product that contains a zero extent is 0, not an overflow.
  expect_valid(M({0, big, big}, {R(0, {0}, {})}));
}

TEST(ReferenceStructure, HugeMapsAreRefusedQuicklyWithoutWalking) {
  const Index huge = Index{1} << 50;
  Map map = M({huge}, {R(0, {huge}, {P1(huge, 0, 0, {0})})});
  const auto start = std::chrono::steady_clock::now();
  auto verdict = reference_check(map);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(verdict.kind, ErrorKind::format);
  EXPECT_NE(verdict.reason.find("too large for the reference model"), std::string::npos);
  EXPECT_TRUE(verdict.too_large);
  EXPECT_FALSE(reference_check(spec_example()).too_large);
  EXPECT_LT(elapsed, std::chrono::seconds(1));

  // The limit applies to F, to each shard and to all pieces together.
  EXPECT_EQ(reference_check(spec_example(), 23).kind, ErrorKind::format);
  EXPECT_TRUE(reference_check(spec_example(), 24).valid());
  EXPECT_EQ(reference_check(M({4}, {R(0, {40}, {P1(4, 0, 0, {0})})}), 10).kind,
            ErrorKind::format);
  EXPECT_EQ(reference_check(replicated(6, {0, 1}), 11).kind, ErrorKind::format);
  EXPECT_TRUE(reference_check(replicated(6, {0, 1}), 12).valid());

  auto rebuilt = reference_rebuild(map, {}, DType::float32);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_EQ(rebuilt.error().kind, ErrorKind::format);
}

TEST(ReferenceBounds, PiecesMustStayInside) {
  Map map = spec_example();
  map.ranks[1].pieces[0].source.offset = 5;  // last element 5 + 3*6 + 1 = 24
  expect_kind(map, ErrorKind::bounds);
  map = spec_example();
  map.ranks[1].pieces[0].dest.strides = {2, 2};  // reaches shard address 8 of 8
  expect_kind(map, ErrorKind::bounds);
  map = spec_example();
  map.ranks[1].pieces[0].shape = {5, 2};
  expect_kind(map, ErrorKind::bounds);
}

TEST(ReferenceBounds, BoundsComeBeforeItself) {
  Map map = M({6}, {R(0, {4}, {P({2, 2}, 0, {1, 1}, 0, {2, 1}, {0})}),
                    R(1, {3}, {P1(3, 4, 0, {1})})});
  expect_kind(map, ErrorKind::bounds);
}

TEST(ReferenceTiling, CountMismatch) {
  Map map = spec_example();
  map.ranks[1].shard_shape = Extents{4, 3};
  expect_kind(map, ErrorKind::count);
  expect_kind(M({4}, {R(0, {4}, {P1(4, 0, 0, {0})}), R(1, {2}, {})}), ErrorKind::count);
}

TEST(ReferenceTiling, TilingComesBeforeCoverage) {
  // Rank 0 collides in its shard and element 3 of F is also uncovered: 4 before 5.
  Map map = M({4}, {R(0, {3}, {P1(2, 0, 0, {0}), P1(1, 2, 1, {0})})});
  expect_kind(map, ErrorKind::twice);
}

TEST(ReferenceCoverage, UncoveredElement) {
  expect_kind(M({5}, {R(0, {4}, {P1(4, 0, 0, {0})})}), ErrorKind::uncovered);
  expect_kind(M({5}, {R(0, {4}, {P1(4, 1, 0, {0})})}), ErrorKind::uncovered);
}

TEST(ReferenceHomogeneity, HoldersAndTwice) {
  // Two non-replica pieces of one rank cover one element: holders agree, so twice.
  expect_kind(M({2}, {R(0, {4}, {P1(2, 0, 0, {0}), P1(2, 0, 2, {0})})}), ErrorKind::twice);
  // Two single holders on two ranks: each claims to be the only holder.
  expect_kind(M({4}, {R(0, {4}, {P1(4, 0, 0, {0})}), R(1, {4}, {P1(4, 0, 0, {1})})}),
              ErrorKind::twice);
  // A replica that does not name its own rank.
  expect_kind(M({2}, {R(0, {2}, {P1(2, 0, 0, {1, 2})}), R(1, {2}, {P1(2, 0, 0, {1, 2})}),
                      R(2, {2}, {P1(2, 0, 0, {1, 2})})}),
              ErrorKind::holders);
  // A replicated block named on only some holders.
  expect_kind(M({2}, {R(0, {2}, {P1(2, 0, 0, {0, 1})}), R(1, {2}, {P1(2, 0, 0, {0, 1})}),
                      R(2, {2}, {P1(2, 0, 0, {0, 1, 2})})}),
              ErrorKind::holders);
  // A single holder whose locations name another rank.
  expect_kind(M({2}, {R(0, {2}, {P1(2, 0, 0, {1})})}), ErrorKind::holders);
}

TEST(ReferenceHomogeneity, EmptyPieceMustNameItsOwnRank) {
  Map map = M({4}, {R(0, {4}, {P1(4, 0, 0, {0})}), R(1, {0}, {P1(0, 4, 0, {0})})});
  expect_kind(map, ErrorKind::holders);
  map.ranks[1].pieces[0].locations = {1};
  expect_valid(map);
}

TEST(ReferenceHomogeneity, LowestPieceDecidesTheKind) {
  // Ranks 1 and 2 both claim elements 0 and 1 alone (twice); ranks 0 and 3 replicate 2-5.
  Map map = M({6}, {R(0, {4}, {P1(4, 2, 0, {0, 3})}), R(1, {2}, {P1(2, 0, 0, {1})}),
                    R(2, {2}, {P1(2, 0, 0, {2})}), R(3, {4}, {P1(4, 2, 0, {0, 3})})});
  expect_kind(map, ErrorKind::twice);
  // Now rank 0's replica also names the wrong holders: its fault is at a higher
  // element, but rank 0 is the lowest rank, so holders is reported.
  map.ranks[0].pieces[0].locations = {0, 1};
  expect_kind(map, ErrorKind::holders);
}

// ---- conversion ------------------------------------------------------------

std::vector<Map> round_trip_maps() {
  Map zero_d = M({}, {R(0, {}, {P({}, 0, {}, 0, {}, {0})})});
  Map empties = M({4, 2}, {R(9, {4, 2}, {P({4, 2}, 0, {2, 1}, 0, {2, 1}, {9})}),
                           R(3, {0, 2}, {P({0, 2}, 8, {2, 1}, 0, {2, 1}, {3})})});
  Map row_per_rank = M({2, 3}, {R(0, {3}, {P({3}, 0, {1}, 0, {1}, {0})}),
                                R(1, {3}, {P({1, 3}, 3, {3, 1}, 0, {3, 1}, {1})}),
                                R(2, {0}, {})});
  // The shard stores its block transposed: legal, and exercised element by element.
  Map transposed = M({2, 2}, {R(0, {2, 2}, {P({2, 2}, 0, {2, 1}, 0, {1, 2}, {0})})});
  Map mixed = M({6}, {R(0, {4}, {P1(2, 0, 0, {0, 1}), P1(2, 2, 2, {0})}),
                      R(1, {4}, {P1(2, 4, 0, {1}), P1(2, 0, 2, {0, 1})})});
  return {spec_example(), worked_example(), column_split(), replicated(5, {0, 1, 2}), zero_d,
          empties, row_per_rank, transposed, mixed};
}

TEST(ReferenceConvert, RoundTripEveryDtype) {
  for (const Map& map : round_trip_maps()) {
    ASSERT_TRUE(reference_check(map).valid()) << describe(map);
    for (DType dtype : kAllDTypes) {
      const Index n = *checked_numel(map.logical_shape);
      const Buffer full = marker_buffer(dtype, n, 7);
      ShardSet shards;
      for (const auto& entry : map.ranks) {
        auto shard = reference_extract(map, full, entry.rank);
        ASSERT_TRUE(shard.ok()) << shard.error().to_string();
        EXPECT_EQ(shard.value().numel(), *checked_numel(*entry.shard_shape));
        shards.emplace(entry.rank, std::move(shard).value());
      }
      auto rebuilt = reference_rebuild(map, shards, dtype);
      ASSERT_TRUE(rebuilt.ok()) << rebuilt.error().to_string();
      EXPECT_EQ(rebuilt.value(), full) << describe(map) << " " << dtype_name(dtype);
    }
  }
}

TEST(ReferenceConvert, ExtractPlacesElementsWhereTheMapSays) {
  const Map map = worked_example();
  const Buffer full = floats({0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15});
  auto r0 = reference_extract(map, full, 0);
  auto r1 = reference_extract(map, full, 1);
  ASSERT_TRUE(r0.ok() && r1.ok());
  EXPECT_EQ(r0.value(), floats({0, 1, 4, 10, 11, 14}));
  EXPECT_EQ(r1.value(), floats({2, 3, 5, 12, 13, 15}));
}

TEST(ReferenceConvert, ScaledReplicasCompareAfterUnscaling) {
  Map map = M({4}, {R(0, {4}, {P1(4, 0, 0, {0, 1}, 2.0)}), R(1, {4}, {P1(4, 0, 0, {0, 1})})});
  const Buffer full = floats({1, -2, 0.5, 3});
  auto r0 = reference_extract(map, full, 0);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0.value(), floats({2, -4, 1, 6}));
  ShardSet shards{{0, r0.value()}, {1, full}};
  auto rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.error().to_string();
  EXPECT_EQ(rebuilt.value(), full);
  // Unscaled, rank 0's copy would be half of rank 1's: a real disagreement.
  shards[0] = full;
  rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_EQ(rebuilt.error().kind, ErrorKind::different_data);
}

TEST(ReferenceConvert, ReplicaComparisonIsBitwise) {
  Map map = replicated(2, {0, 1});
  const std::uint64_t nan = 0x7fc00001;
  ShardSet shards{{0, floats({0.0f, 1})}, {1, floats({-0.0f, 1})}};
  auto rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_EQ(rebuilt.error().kind, ErrorKind::different_data);
  EXPECT_EQ(rebuilt.error().address, Index{0});

  shards = {{0, values(DType::float32, {nan, 5})}, {1, values(DType::float32, {nan, 5})}};
  rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_EQ(rebuilt.value().bits(0), nan);

  shards[1] = values(DType::float32, {nan + 1, 5});
  rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_EQ(rebuilt.error().kind, ErrorKind::different_data);
}

TEST(ReferenceConvert, ScaleRules) {
  Map scaled = replicated(4, {0, 1}, 2.0);
  const Buffer full = floats({1, 2, 3, 4});
  ShardSet shards{{0, full}, {1, full}};
  auto refused = reference_rebuild(scaled, shards, DType::float32, -1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::scale);
  auto extracted = reference_extract(scaled, full, 0, -2);
  ASSERT_FALSE(extracted.ok());
  EXPECT_EQ(extracted.error().kind, ErrorKind::scale);

  const Buffer ints = marker_buffer(DType::int32, 4);
  ShardSet int_shards{{0, ints}, {1, ints}};
  refused = reference_rebuild(scaled, int_shards, DType::int32);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::scale);
  extracted = reference_extract(scaled, ints, 1);
  ASSERT_FALSE(extracted.ok());
  EXPECT_EQ(extracted.error().kind, ErrorKind::scale);

  // Without a scale any power moves bits unchanged.
  Map plain = replicated(4, {0, 1});
  auto rebuilt = reference_rebuild(plain, shards, DType::float32, -2);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_EQ(rebuilt.value(), full);
}

TEST(ReferenceConvert, SuppliedBuffersMustMatchTheMap) {
  const Map map = spec_example();
  const Buffer full = marker_buffer(DType::float32, 24);
  auto s0 = reference_extract(map, full, 0);
  auto s1 = reference_extract(map, full, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());

  auto expect_shape = [&](const ShardSet& shards, DType dtype) {
    auto rebuilt = reference_rebuild(map, shards, dtype);
    ASSERT_FALSE(rebuilt.ok());
    EXPECT_EQ(rebuilt.error().kind, ErrorKind::shape) << rebuilt.error().to_string();
  };
  expect_shape({{0, s0.value()}}, DType::float32);                           // missing
  expect_shape({{0, s0.value()}, {1, Buffer(DType::float32, 7)}}, DType::float32);  // count
  expect_shape({{0, s0.value()}, {1, Buffer(DType::float16, 8)}}, DType::float32);  // dtype
  expect_shape({{0, s0.value()}, {1, s1.value()}}, DType::float16);

  auto bad_full = reference_extract(map, Buffer(DType::float32, 23), 0);
  ASSERT_FALSE(bad_full.ok());
  EXPECT_EQ(bad_full.error().kind, ErrorKind::shape);
  auto no_rank = reference_extract(map, full, 2);
  ASSERT_FALSE(no_rank.ok());
  EXPECT_EQ(no_rank.error().kind, ErrorKind::format);
}

TEST(ReferenceConvert, RefusesWhatTheCheckRefuses) {
  // Rank 0's shard is fine, but rank 1 claims rank 0's block: extract of rank 0
  // must refuse too, because the whole map is checked (contract 4).
  Map map = M({8}, {R(0, {4}, {P1(4, 0, 0, {0})}), R(1, {4}, {P1(4, 0, 0, {1})})});
  const auto kind = kind_of(map);
  ASSERT_TRUE(kind.has_value());
  auto extracted = reference_extract(map, marker_buffer(DType::float32, 8), 0);
  ASSERT_FALSE(extracted.ok());
  EXPECT_EQ(extracted.error().kind, *kind);
  ShardSet shards{{0, Buffer(DType::float32, 4)}, {1, Buffer(DType::float32, 4)}};
  auto rebuilt = reference_rebuild(map, shards, DType::float32);
  ASSERT_FALSE(rebuilt.ok());
  EXPECT_EQ(rebuilt.error().kind, *kind);
}


// reference_check remembers its last verdicts by map: two maps that compare equal but
// differ in a zero scale's sign must each get their own wording.
TEST(ReferenceMemo, AZeroScaleKeepsItsSignInTheRefusal) {
  const Map plus = M({4}, {R(0, {4}, {P1(4, 0, 0, {0}, 0.0)})});
  const Map minus = M({4}, {R(0, {4}, {P1(4, 0, 0, {0}, -0.0)})});
  ASSERT_TRUE(plus == minus);  // the map's own comparison cannot tell them apart
  const ReferenceVerdict a = reference_check(plus);
  const ReferenceVerdict b = reference_check(minus);
  ASSERT_EQ(a.kind, ErrorKind::scale);
  ASSERT_EQ(b.kind, ErrorKind::scale);
  EXPECT_EQ(b.reason.find("-0") != std::string::npos, true) << b.reason;
  EXPECT_EQ(a.reason.find("-0"), std::string::npos) << a.reason;
  EXPECT_EQ(reference_check(plus).reason, a.reason);
}

// Condition 4's refusal names the lowest writer of the address in content order, the
// other writer in words, and the address; the core checks name the same place. Rank 0's
// pieces both write shard addresses 0 and 1: the one reading F from 0, written second,
// comes first in content order.
TEST(ReferenceTiling, ACollisionNamesTheLowestWriterAndTheAddress) {
  const Map map = M({4}, {R(0, {4}, {P1(2, 2, 0, {0}), P1(2, 0, 0, {0})})});
  const ReferenceVerdict verdict = reference_check(map);
  ASSERT_TRUE(verdict.error.has_value());
  const Error& e = *verdict.error;
  EXPECT_EQ(e.kind, ErrorKind::twice);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.piece, 1) << e.to_string();
  EXPECT_EQ(e.side, Side::shard);
  EXPECT_EQ(e.address, 0);
  EXPECT_NE(e.sentence.find("piece 0 (P(2) src(2,(1)) dst(0,(1)) loc{0}) also maps"), std::string::npos)
      << e.sentence;
  const Status fast = check_map(map);
  ASSERT_FALSE(fast.ok());
  EXPECT_EQ(fast.error(), e) << fast.error().to_string();
}

// Contract 11 with compare_replicas: a replica held under another scale is compared only
// after unscaling, which a plan does not do, so the naive reshard skips it as the planner
// does. Rank 0 holds F * 2, rank 1 F * 4 of one replicated block (a valid map).
TEST(ReferenceReshard, ComparingReplicasSkipsCopiesUnderAnotherScale) {
  const Map source = M({4}, {R(0, {4}, {P1(4, 0, 0, {0, 1}, 2.0)}), R(1, {4}, {P1(4, 0, 0, {0, 1}, 4.0)})});
  const Map target = M({4}, {R(0, {4}, {P1(4, 0, 0, {0}, 2.0)})});
  ASSERT_TRUE(reference_check(source).valid());
  const Buffer full = floats({1, 2, 3, 4});
  auto shards = reference_extract_all(source, full);
  ASSERT_TRUE(shards.ok()) << shards.error().to_string();
  ASSERT_NE(shards.value().at(0), shards.value().at(1));  // the raw bits differ
  for (bool compare : {false, true}) {
    SCOPED_TRACE(compare ? "comparing replicas" : "lowest holder only");
    auto got = reference_reshard(source, target, shards.value(), DType::float32, compare);
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    ASSERT_EQ(got.value().size(), 1u);
    EXPECT_EQ(got.value().at(0), floats({2, 4, 6, 8}));
  }
  // A copy under the same scale is still compared: rank 1 now holds F * 2 with one bit off.
  Map same = source;
  same.ranks[1].pieces[0].scale = 2.0;
  ShardSet damaged = shards.value();
  damaged.at(1) = damaged.at(0);
  damaged.at(1).set_bits(2, damaged.at(1).bits(2) ^ 1);
  auto refused = reference_reshard(same, target, damaged, DType::float32, true);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::different_data);
  EXPECT_EQ(refused.error().rank, 0);
  EXPECT_EQ(refused.error().address, 2);
}

}  // namespace
}  // namespace shardcheck::oracles
