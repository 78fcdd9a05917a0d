// Map checks of contract 3 (conditions 1-6): the reported corruptions of contract 6,
// valid layouts, overflow inputs, order independence, planted bugs, large maps, and a
// cross-check against a naive element-by-element model for many small random maps.
//
// Long file: one test binary per tests/test_*.cc; these tests share the corpus and map
// builders above the first test, and a split would add a binary and a link.
#include "shardcheck/checks.h"
#include "shardcheck/constructors.h"
#include "shardcheck/oracles/reference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <limits>
#include <random>
#include <set>

#include "support/spec_maps.h"

namespace shardcheck {
namespace {

using build::M;
using build::P;
using build::R;

CheckOptions with(void (*set)(PlantedBugs&)) {
  CheckOptions o;
  set(o.bugs);
  return o;
}

void expect_valid(const Map& map, const CheckOptions& options = {}) {
  Status err = check_map(map, options);
  EXPECT_TRUE(err.ok()) << err.error().to_string() << "\n" << describe(map);
}

Error expect_refused(const Map& map, ErrorKind kind, const CheckOptions& options = {}) {
  Status err = check_map(map, options);
  EXPECT_FALSE(err.ok()) << describe(map);
  if (err.ok()) return Error{};
  EXPECT_EQ(kind_name(err.error().kind), kind_name(kind)) << err.error().to_string() << "\n" << describe(map);
  EXPECT_FALSE(err.error().message.empty());
  return err.error();
}

// ---- contract 6: reported corruptions -----------------------------------------

Map spec6_1() {
  return M({8}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})}), R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {1})})});
}

TEST(Spec6, TwoRanksClaimOneBlock) {
  // Elements 4-7 are covered by nobody (condition 5) and 0-3 by two single holders
  // (condition 6). Condition 5 comes first in the spec's order, so strict reports
  // `uncovered` at element 4; with coverage planted off the `twice` shows.
  Error e = expect_refused(spec6_1(), ErrorKind::uncovered);
  EXPECT_EQ(e.address, 4);
  EXPECT_EQ(e.side, Side::full);
  Error t = expect_refused(spec6_1(), ErrorKind::twice, with([](PlantedBugs& b) { b.skip_coverage = true; }));
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.piece, 0);
  EXPECT_EQ(t.address, 0);
  EXPECT_NE(t.message.find("rank 1"), std::string::npos) << t.message;
}

Map spec6_2() {
  return M({6},
           {R(0, Extents{4}, {P({2, 2}, 0, {1, 1}, 0, {2, 1}, {0})}), R(1, Extents{3}, {P({3}, 3, {1}, 0, {1}, {1})})});
}

TEST(Spec6, SourceOverlapsItself) {
  Error e = expect_refused(spec6_2(), ErrorKind::itself);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.piece, 0);
  EXPECT_EQ(e.side, Side::full);
}

TEST(Spec6, ZeroStrideOnLongAxisIsItself) {
  Map map = M({4}, {R(0, Extents{4}, {P({4}, 0, {0}, 0, {1}, {0})})});
  expect_refused(map, ErrorKind::itself);
  // A zero stride on an axis of extent 1 reads nothing twice.
  expect_valid(M({4}, {R(0, Extents{4}, {P({1, 4}, 0, {0, 1}, 0, {0, 1}, {0})})}));
}

TEST(Spec6, NonNestedStridesAreConservativelyItself) {
  // (3,2) with strides (2,3) reads {0,3,2,5,4,7}: unique, but refused by the documented
  // conservative rule before coverage is even looked at.
  Map map = M({8}, {R(0, Extents{6}, {P({3, 2}, 0, {2, 3}, 0, {2, 1}, {0})})});
  Error e = expect_refused(map, ErrorKind::itself);
  EXPECT_EQ(e.side, Side::full);
  Map dest = M({6}, {R(0, Extents{8}, {P({3, 2}, 0, {2, 1}, 0, {2, 3}, {0})})});
  EXPECT_EQ(expect_refused(dest, ErrorKind::itself).side, Side::shard);
}

TEST(Spec6, ReplicaOverSingleHolderRefusedInBothOrders) {
  RankEntry r0 = R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})});
  RankEntry r1 = R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {1})});
  Error a = expect_refused(M({4}, {r0, r1}), ErrorKind::holders);
  Error b = expect_refused(M({4}, {r1, r0}), ErrorKind::holders);
  // The piece to fix is rank 1's, whose locations leave out rank 0 (contract 1.1); rank
  // 0's names the real holders.
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.address, 0);
  EXPECT_EQ(a, b);
}

TEST(Spec6, ReplicasCutAtDifferentBoundariesAreAValidMap) {
  // Condition 7 (data) is rebuild's business; as a map this is valid.
  expect_valid(M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}),
                       R(1, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0, 1}), P({2}, 2, {1}, 2, {1}, {0, 1})})}));
}

TEST(Spec6, TwoPiecesWriteOneShardAddress) {
  Piece a = P({2}, 0, {1}, 0, {1}, {0});
  Piece b = P({2}, 2, {1}, 0, {1}, {0});
  Error e = expect_refused(M({4}, {R(0, Extents{4}, {a, b})}), ErrorKind::twice);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.piece, 0);
  EXPECT_EQ(e.address, 0);
  EXPECT_EQ(e.side, Side::shard);
  // Piece is reported as written, chosen by content: the src-0 piece is now index 1.
  Error f = expect_refused(M({4}, {R(0, Extents{4}, {b, a})}), ErrorKind::twice);
  EXPECT_EQ(f.piece, 1);
  EXPECT_EQ(f.address, 0);
}

Map sub_param_2x8() {
  return M({2, 8}, {R(0, Extents{2, 4}, {P({2, 2}, 0, {8, 1}, 0, {4, 1}, {0}), P({2, 2}, 4, {8, 1}, 2, {4, 1}, {0})}),
                    R(1, Extents{2, 4}, {P({2, 2}, 2, {8, 1}, 0, {4, 1}, {1}), P({2, 2}, 6, {8, 1}, 2, {4, 1}, {1})})});
}

TEST(Spec6, ColumnSplitCollision) {
  expect_valid(sub_param_2x8());
  Map map = sub_param_2x8();
  map.ranks[0].pieces[1].dest.offset = 0;
  Error e = expect_refused(map, ErrorKind::twice);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.address, 0);
  EXPECT_EQ(e.side, Side::shard);
}

TEST(Spec6, DestinationWrapsPastShardRow) {
  Map map = M({12}, {R(0, Extents{3, 4},
                       {P({2, 3}, 0, {3, 1}, 2, {4, 1}, {0}), P({1, 2}, 6, {2, 1}, 0, {4, 1}, {0}),
                        P({1, 1}, 8, {1, 1}, 4, {4, 1}, {0}), P({1, 3}, 9, {3, 1}, 9, {4, 1}, {0})})});
  Error e = expect_refused(map, ErrorKind::twice);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.piece, 0);
  EXPECT_EQ(e.address, 4);
  EXPECT_NE(e.message.find("shard address 4"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("piece 2"), std::string::npos) << e.message;
}

TEST(Spec6, PhantomReplica) {
  Error e = expect_refused(M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})})}), ErrorKind::holders);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.piece, 0);
  EXPECT_EQ(e.address, 0);
  EXPECT_EQ(e.side, Side::full);
}

// ---- valid layouts -------------------------------------------------------------------

TEST(Valid, Spec2Example) {
  expect_valid(M({4, 6}, {R(0, Extents{4, 4}, {P({4, 4}, 0, {6, 1}, 0, {4, 1}, {0})}),
                          R(1, Extents{4, 2}, {P({4, 2}, 4, {6, 1}, 0, {2, 1}, {1})})}));
}

TEST(Valid, Spec5WorkedExample) {
  expect_valid(
      M({2, 6}, {R(0, Extents{2, 3}, {P({2, 2}, 0, {6, 1}, 0, {3, 1}, {0}), P({2, 1}, 4, {6, 1}, 2, {3, 1}, {0})}),
                 R(1, Extents{2, 3}, {P({2, 2}, 2, {6, 1}, 0, {3, 1}, {1}), P({2, 1}, 5, {6, 1}, 2, {3, 1}, {1})})}));
}

TEST(Valid, ZeroDimensionalTensor) {
  expect_valid(M({}, {R(0, Extents{}, {P({}, 0, {}, 0, {}, {0, 1})}), R(1, Extents{}, {P({}, 0, {}, 0, {}, {0, 1})})}));
  // A 0-d F has one element: two single holders of it collide, nobody holding it is uncovered.
  expect_refused(M({}, {R(0, Extents{}, {P({}, 0, {}, 0, {}, {0})}), R(1, Extents{}, {P({}, 0, {}, 0, {}, {1})})}),
                 ErrorKind::twice);
  expect_refused(M({}, {R(0, Extents{0}, {})}), ErrorKind::uncovered);
}

TEST(Valid, ZeroExtentPiecesAndEmptyShards) {
  // Rank 1 holds 0 columns: its piece has offset one past the end of F and of its shard.
  expect_valid(M({4, 3}, {R(0, Extents{4, 3}, {P({4, 3}, 0, {3, 1}, 0, {3, 1}, {0})}),
                          R(1, Extents{4, 0}, {P({4, 0}, 12, {3, 1}, 0, {0, 1}, {1})}), R(2, Extents{0, 4}, {})}));
  // Zero-extent pieces may sit anywhere, even far out of bounds.
  expect_valid(M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0}), P({0, 7}, 1000, {5, 9}, 999, {1, 1}, {0})})}));
  expect_valid(M({0, 4}, {R(0, Extents{0, 4}, {})}));
}

TEST(Valid, NonContiguousRankIds) {
  expect_valid(M({2, 4}, {R(9, Extents{2, 2}, {P({2, 2}, 2, {4, 1}, 0, {2, 1}, {9})}),
                          R(3, Extents{2, 2}, {P({2, 2}, 0, {4, 1}, 0, {2, 1}, {3})})}));
}

Map interleaved() {
  // F (2,6) by columns: one column each, two replicated columns, one column each.
  return M({2, 6}, {R(0, Extents{2, 4},
                      {P({2, 1}, 0, {6, 1}, 0, {4, 1}, {0}), P({2, 2}, 2, {6, 1}, 1, {4, 1}, {0, 1}),
                       P({2, 1}, 4, {6, 1}, 3, {4, 1}, {0})}),
                    R(1, Extents{2, 4},
                      {P({2, 1}, 1, {6, 1}, 0, {4, 1}, {1}), P({2, 2}, 2, {6, 1}, 1, {4, 1}, {0, 1}),
                       P({2, 1}, 5, {6, 1}, 3, {4, 1}, {1})})});
}

TEST(Valid, InterleavedReplicatedAndSplit) {
  expect_valid(interleaved());
  Map wrong = interleaved();
  wrong.ranks[1].pieces[1].locations = {1};  // replicated on rank 0, single-held on rank 1
  Error e = expect_refused(wrong, ErrorKind::holders);
  EXPECT_EQ(e.rank, 1);  // the piece whose locations are wrong
  EXPECT_EQ(e.piece, 1);
  EXPECT_EQ(e.address, 2);
}

TEST(Valid, ReplicatedTransposedViews) {
  // Rank 1 stores F transposed: a different but complete, unique dest view.
  expect_valid(M({2, 3}, {R(0, Extents{2, 3}, {P({2, 3}, 0, {3, 1}, 0, {3, 1}, {0, 1})}),
                          R(1, Extents{3, 2}, {P({2, 3}, 0, {3, 1}, 0, {1, 2}, {0, 1})})}));
}

TEST(Itself, AgreesWithIsUniqueOnRandomViews) {
  // The check applies the rule of is_unique() (map.h) on its own; they must agree.
  std::mt19937 rng(7);
  auto pick = [&](Index lo, Index hi) { return std::uniform_int_distribution<Index>(lo, hi)(rng); };
  int refused = 0;
  for (int i = 0; i < 5000; ++i) {
    const auto ndim = static_cast<std::size_t>(pick(0, 3));
    Extents shape(ndim);
    Strides src(ndim), dst(ndim);
    for (std::size_t k = 0; k < ndim; ++k) {
      shape[k] = pick(0, 4);
      src[k] = pick(0, 6);
      dst[k] = pick(0, 6);
    }
    Piece piece = P(shape, pick(0, 2), src, pick(0, 2), dst, {0});
    auto src_span = span_facts(shape, piece.source)->required_span_size;
    auto dst_span = span_facts(shape, piece.dest)->required_span_size;
    Map map = M({std::max<Index>(src_span, 1)}, {R(0, Extents{dst_span}, {piece})});
    const bool empty = checked_numel(shape) == 0;
    const bool unique = empty || (is_unique(shape, src) && is_unique(shape, dst));
    Status err = check_map(map);
    const bool itself = !err.ok() && err.error().kind == ErrorKind::itself;
    refused += itself;
    ASSERT_EQ(itself, !unique) << describe(map) << (err.ok() ? "" : err.error().to_string());
  }
  EXPECT_GT(refused, 500);
}

// ---- condition 1: structure and overflow --------------------------------------------

TEST(Structure, MalformedPiecesAreFormat) {
  auto one = [](Piece p) { return M({4}, {R(0, Extents{4}, {std::move(p)})}); };
  Error stride = expect_refused(one(P({4}, 3, {-1}, 0, {1}, {0})), ErrorKind::format);
  EXPECT_NE(stride.message.find("negative stride"), std::string::npos) << stride.message;
  EXPECT_EQ(stride.rank, 0);
  EXPECT_EQ(stride.piece, 0);
  expect_refused(one(P({4}, 0, {1, 1}, 0, {1}, {0})), ErrorKind::format);
  expect_refused(one(P({-4}, 0, {1}, 0, {1}, {0})), ErrorKind::format);
  expect_refused(one(P({4}, -1, {1}, 0, {1}, {0})), ErrorKind::format);
  expect_refused(one(P({4}, 0, {1}, -1, {1}, {0})), ErrorKind::format);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {})), ErrorKind::format);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {1, 0})), ErrorKind::format);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {0, 0})), ErrorKind::format);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {-1, 0})), ErrorKind::format);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {0}, 0.0)), ErrorKind::scale);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {0}, std::nan(""))), ErrorKind::scale);
  expect_refused(one(P({4}, 0, {1}, 0, {1}, {0}, INFINITY)), ErrorKind::scale);
  expect_valid(one(P({4}, 0, {1}, 0, {1}, {0}, -2.0)));  // negative scales are legal map data
}

TEST(Structure, RanksAndShapes) {
  Piece whole = P({4}, 0, {1}, 0, {1}, {0});
  expect_refused(M({4}, {R(0, std::nullopt, {whole})}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{4}, {whole}), R(0, Extents{0}, {})}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{4}, {whole}), R(-1, Extents{0}, {})}), ErrorKind::format);
  expect_refused(M({-4}, {}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{-1, -4}, {whole})}), ErrorKind::format);
  expect_valid(M({4}, {R(0, Extents{4}, {whole}), R(5, std::nullopt, {})}));
  // Structure errors precede everything else, whatever the rank order.
  Error e = expect_refused(
      M({4}, {R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {1})}), R(0, Extents{3}, {P({4}, 0, {1}, 0, {1}, {0}, 0.0)})}),
      ErrorKind::scale);
  EXPECT_EQ(e.rank, 0);
}

TEST(Structure, OverflowIsFormatNeverUB) {
  const Index big = Index{1} << 40;
  const Index max = std::numeric_limits<Index>::max();
  expect_refused(M({big, big}, {}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{big, big}, {})}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{4}, {P({big, big}, 0, {1, 1}, 0, {1, 1}, {0})})}), ErrorKind::format);
  // A last address of exactly INT64_MAX overflows nothing: it points outside F (the
  // reference model agrees; found by the map_json fuzzer). One step further overflows.
  expect_refused(M({4}, {R(0, Extents{4}, {P({1}, max, {1}, 0, {1}, {0})})}), ErrorKind::bounds);
  expect_refused(M({4}, {R(0, Extents{4}, {P({2}, 0, {max}, 0, {1}, {0})})}), ErrorKind::bounds);
  expect_refused(M({4}, {R(0, Extents{4}, {P({2}, 0, {1}, 0, {max}, {0})})}), ErrorKind::bounds);
  expect_refused(M({4}, {R(0, Extents{4}, {P({2}, 1, {max}, 0, {1}, {0})})}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{4}, {P({2}, 0, {1}, 1, {max}, {0})})}), ErrorKind::format);
  expect_refused(M({4}, {R(0, Extents{4}, {P({3, 3}, 0, {max / 2, max / 2}, 0, {1, 1}, {0})})}), ErrorKind::format);
  // Huge but representable numbers parse and then point outside F.
  expect_refused(M({4}, {R(0, Extents{4}, {P({1}, max - 1, {1}, 0, {1}, {0})})}), ErrorKind::bounds);
  EXPECT_TRUE(check_structure(M({4}, {R(0, Extents{4}, {P({1}, max, {1}, 0, {1}, {0})})})).ok());
  EXPECT_FALSE(check_structure(M({4}, {R(0, Extents{4}, {P({2}, max, {1}, 0, {1}, {0})})})).ok());
  EXPECT_TRUE(check_structure(M({4}, {R(0, Extents{4}, {P({1}, max - 1, {1}, 0, {1}, {0})})})).ok());
}

// An extent of 0 makes a buffer empty whatever its other extents, whose product may then
// overflow: row-major strides of such a buffer must not (found by the map_json fuzzer,
// UndefinedBehaviorSanitizer in row_major_strides, once check_map looked for boxes early).
TEST(Structure, ZeroExtentBesideOverflowingExtentsNeverUB) {
  const Index big = Index{1} << 32;
  const Strides strides = row_major_strides(Extents{4, 1, 0, big, big});
  EXPECT_EQ(strides[4], 1);
  EXPECT_EQ(strides[3], big);
  const Map empty_f = M({4, 1, 0, big, big}, {R(0, Extents{0}, {})});
  const Map empty_shard = M({4}, {R(0, Extents{0, big, big}, {P({0}, 0, {1}, 0, {1}, {0})})});
  for (const Map& map : {empty_f, empty_shard}) {
    CheckOptions runs;
    runs.box_proof = false;
    const Status boxes = check_map(map);
    const Status walked = check_map(map, runs);
    ASSERT_EQ(boxes.ok(), walked.ok());
    if (!boxes.ok()) {
      EXPECT_EQ(boxes.error().to_string(), walked.error().to_string());
    }
  }
}

// An extent of 0 wherever it stands makes a count of 0, however far the other extents
// would overflow; without one, overflow is refused. Both counts (checked_numel for F and
// shards, span_facts for a piece's views) keep the rule, and a piece with such a shape is
// an empty piece, not an overflowing one.
TEST(Structure, ZeroExtentCountsZeroBeforeOverflow) {
  const Index big = Index{1} << 40;
  for (const Extents& shape : {Extents{big, big, 0}, Extents{0, big, big}, Extents{big, 0, big}}) {
    EXPECT_EQ(checked_numel(shape), Index{0});
    const auto facts = span_facts(shape, StridedView{0, {big, big, 1}});
    ASSERT_TRUE(facts.has_value());
    EXPECT_TRUE(facts->empty);
    EXPECT_EQ(facts->numel, 0);
    EXPECT_EQ(facts->required_span_size, 0);
  }
  EXPECT_EQ(checked_numel(Extents{big, big, 1}), std::nullopt);
  EXPECT_EQ(span_facts(Extents{big, big, 1}, StridedView{0, {1, 1, 1}}), std::nullopt);
  EXPECT_EQ(span_facts(Extents{3, 2}, StridedView{0, {Index{1} << 62, 1}}), std::nullopt);  // an address past 2^63 - 1
  EXPECT_EQ(span_facts(Extents{3, 4}, StridedView{5, {4, 1}})->max_address, 16);
  EXPECT_EQ(check_map(M({big, big, 0}, {R(0, Extents{0}, {})})).ok(), true);
  const Map empty_piece =
      M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0}), P({big, big, 0}, 0, {1, 1, 1}, 0, {1, 1, 1}, {0})})});
  EXPECT_TRUE(check_map(empty_piece).ok()) << check_map(empty_piece).error().to_string();
}

// ---- conditions 2 and 4 --------------------------------------------------------------

TEST(Bounds, SourceAndDest) {
  Error src = expect_refused(M({4}, {R(0, Extents{5}, {P({5}, 0, {1}, 0, {1}, {0})})}), ErrorKind::bounds);
  EXPECT_EQ(src.side, Side::full);
  EXPECT_EQ(src.address, 4);
  Error dst = expect_refused(M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 1, {1}, {0})})}), ErrorKind::bounds);
  EXPECT_EQ(dst.side, Side::shard);
  EXPECT_EQ(dst.address, 4);
}

TEST(Tiling, CountMismatch) {
  Error e = expect_refused(M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}), R(1, Extents{4}, {})}),
                           ErrorKind::count);
  EXPECT_EQ(e.rank, 1);
  expect_refused(M({4}, {R(0, Extents{2, 2}, {P({2}, 0, {1}, 0, {1}, {0})})}), ErrorKind::count);
}

// ---- order independence ------------------------------------------------------------

void expect_order_independent(const Map& map, std::uint32_t seed) {
  Status base_status = check_map(map);
  ASSERT_FALSE(base_status.ok()) << describe(map);
  const Error base = base_status.error();
  const Piece* base_piece = nullptr;
  if (base.piece) base_piece = &map.find_rank(*base.rank)->pieces[*base.piece];
  std::mt19937 rng(seed);
  for (int round = 0; round < 200; ++round) {
    Map shuffled = map;
    std::shuffle(shuffled.ranks.begin(), shuffled.ranks.end(), rng);
    for (auto& r : shuffled.ranks) std::shuffle(r.pieces.begin(), r.pieces.end(), rng);
    Status status = check_map(shuffled);
    ASSERT_FALSE(status.ok());
    const Error& err = status.error();
    EXPECT_EQ(err.kind, base.kind);
    EXPECT_EQ(err.rank, base.rank);
    EXPECT_EQ(err.address, base.address);
    EXPECT_EQ(err.side, base.side);
    ASSERT_EQ(err.piece.has_value(), base.piece.has_value());
    if (base_piece) {
      EXPECT_EQ(shuffled.find_rank(*err.rank)->pieces[*err.piece], *base_piece) << err.to_string();
    }
  }
}

TEST(Order, VerdictDoesNotDependOnRankOrPieceOrder) {
  expect_order_independent(spec6_1(), 1);
  expect_order_independent(spec6_2(), 2);
  Map wrap = M({12}, {R(0, Extents{3, 4},
                        {P({2, 3}, 0, {3, 1}, 2, {4, 1}, {0}), P({1, 2}, 6, {2, 1}, 0, {4, 1}, {0}),
                         P({1, 1}, 8, {1, 1}, 4, {4, 1}, {0}), P({1, 3}, 9, {3, 1}, 9, {4, 1}, {0})})});
  expect_order_independent(wrap, 3);
  Map mixed = interleaved();
  mixed.ranks[0].pieces[2].locations = {0, 1};  // phantom replica in a later column
  mixed.ranks[1].pieces[0].locations = {0};     // and a rank not naming itself
  expect_order_independent(mixed, 4);
  // Several broken pieces in one rank: the lowest in content order is reported.
  Map many = M({8}, {R(2, Extents{8},
                       {P({2}, 6, {1}, 6, {1}, {2, 5}), P({2}, 4, {1}, 4, {1}, {2, 4}), P({4}, 0, {1}, 0, {1}, {2})}),
                     R(0, Extents{0}, {}), R(7, Extents{0}, {})});
  expect_order_independent(many, 5);
  Error e = expect_refused(many, ErrorKind::holders);
  EXPECT_EQ(e.piece, 1);
  EXPECT_EQ(e.address, 4);
}

// ---- planted bugs ------------------------------------------------------------------

TEST(PlantedBugs, EachSwitchDisablesItsCondition) {
  Map scale0 = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0}, 0.0)})});
  expect_refused(scale0, ErrorKind::scale);
  expect_valid(scale0, with([](PlantedBugs& b) { b.skip_structure = true; }));

  Map past_f = M({4}, {R(0, Extents{6}, {P({6}, 0, {1}, 0, {1}, {0})})});
  expect_refused(past_f, ErrorKind::bounds);
  expect_valid(past_f, with([](PlantedBugs& b) { b.skip_bounds = true; }));

  expect_valid(spec6_2(), with([](PlantedBugs& b) { b.skip_itself = true; }));

  Map collide = M({4}, {R(0, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0}), P({2}, 2, {1}, 0, {1}, {0})})});
  expect_valid(collide, with([](PlantedBugs& b) { b.skip_dest_tiling = true; }));

  Map half = M({8}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})})});
  expect_refused(half, ErrorKind::uncovered);
  expect_valid(half, with([](PlantedBugs& b) { b.skip_coverage = true; }));

  Map phantom = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})})});
  expect_valid(phantom, with([](PlantedBugs& b) { b.skip_homogeneity = true; }));

  // A switch disables only its own condition.
  expect_refused(phantom, ErrorKind::holders, with([](PlantedBugs& b) {
                   b.skip_structure = b.skip_bounds = b.skip_itself = b.skip_dest_tiling = b.skip_coverage = true;
                 }));
  expect_refused(collide, ErrorKind::twice, with([](PlantedBugs& b) {
                   b.skip_structure = b.skip_bounds = b.skip_itself = b.skip_coverage = b.skip_homogeneity = true;
                 }));
}

TEST(PlantedBugs, BrokenMapsNeverCrashWithChecksOff) {
  const Index max = std::numeric_limits<Index>::max();
  CheckOptions all;
  all.bugs.skip_structure = all.bugs.skip_bounds = all.bugs.skip_itself = true;
  std::vector<Map> maps = {
      M({4}, {R(0, Extents{4}, {P({4}, 0, {-1}, 0, {1}, {0})})}),
      M({4}, {R(0, Extents{4}, {P({2}, 0, {max}, 0, {1}, {0})})}),
      M({4}, {R(0, std::nullopt, {P({4}, 0, {1}, 0, {1}, {0})})}),
      M({4}, {R(0, Extents{4}, {P({4}, 0, {1, 2}, 0, {1}, {})})}),
      M({-3}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})})}),
      M({4}, {R(0, Extents{4}, {P({4}, 100, {1}, 50, {1}, {0})})}),
      M({4}, {R(0, Extents{4}, {P({4, 4}, 0, {0, 0}, 0, {0, 1}, {0})}), R(0, Extents{4}, {})}),
      M({4}, {R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {1, 1}, std::nan(""))}),
              R(1, Extents{2}, {P({4}, 0, {1}, 0, {1}, {0})})}),
  };
  for (const Map& map : maps) {
    (void)check_map(map, all);
    CheckOptions tiling_off = all;
    tiling_off.bugs.skip_dest_tiling = true;
    (void)check_map(map, tiling_off);
  }
  SUCCEED();
}

TEST(PlantedBugs, RandomGarbageUnderEveryBugCombination) {
  // Hostile numbers in every field, under all 64 combinations of the map switches:
  // the check must return (sanitizer builds catch overflow and bad reads).
  std::mt19937_64 rng(99);
  const Index max = std::numeric_limits<Index>::max();
  const Index specials[] = {0, 1, 2, 3, -1, max, max - 1, max / 2, Index{1} << 32, Index{1} << 62};
  auto num = [&] { return rng() % 3 == 0 ? specials[rng() % std::size(specials)] : static_cast<Index>(rng() % 7); };
  auto vec = [&](std::size_t n) {
    std::vector<Index> v(n);
    for (auto& x : v) x = num();
    return v;
  };
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    Map map = M(vec(rng() % 3), {});
    for (int r = 0, nr = static_cast<int>(rng() % 3); r < nr; ++r) {
      RankEntry entry = R(num(), rng() % 5 ? std::optional<Extents>(vec(rng() % 3)) : std::nullopt, {});
      for (int k = 0, np = static_cast<int>(rng() % 3); k < np; ++k) {
        const std::size_t n = rng() % 3;
        entry.pieces.push_back(P(vec(n), num(), vec(rng() % 4 ? n : n + 1), num(), vec(n), vec(rng() % 3),
                                 rng() % 8 ? 1.0 : std::nan("")));
      }
      map.ranks.push_back(std::move(entry));
    }
    CheckOptions options;
    options.limits.max_walked_addresses = 1 << 16;
    const unsigned bits = static_cast<unsigned>(i % 64);
    options.bugs.skip_structure = bits & 1;
    options.bugs.skip_bounds = bits & 2;
    options.bugs.skip_itself = bits & 4;
    options.bugs.skip_dest_tiling = bits & 8;
    options.bugs.skip_coverage = bits & 16;
    options.bugs.skip_homogeneity = bits & 32;
    Status err = check_map(map, options);
    if (!err.ok()) {
      ++refused;
      EXPECT_FALSE(err.error().message.empty());
    }
    if (check_structure(map).ok()) {
      // A structurally sound map gets the same verdict kind from the full check
      // whatever order it is written in.
      Status a = check_map(map, {});
      Map reversed = map;
      std::reverse(reversed.ranks.begin(), reversed.ranks.end());
      for (auto& r : reversed.ranks) std::reverse(r.pieces.begin(), r.pieces.end());
      Status b = check_map(reversed, {});
      ASSERT_EQ(a.ok(), b.ok()) << describe(map);
      if (!a.ok()) {
        EXPECT_EQ(a.error().kind, b.error().kind) << describe(map);
      }
    }
  }
  EXPECT_GT(refused, 1000);
}

// ---- large maps ------------------------------------------------------------------------

// Process CPU time, so that a loaded machine does not fail the timing tests.
template <class F>
double cpu_seconds(F&& body) {
  const std::clock_t start = std::clock();
  body();
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

Map split_big(int dim) {
  const Index rows = 50304, cols = 12288;
  Map map = M({rows, cols}, {});
  for (Rank r = 0; r < 8; ++r) {
    if (dim == 0) {
      const Index n = rows / 8;
      map.ranks.push_back(R(r, Extents{n, cols}, {P({n, cols}, r * n * cols, {cols, 1}, 0, {cols, 1}, {r})}));
    } else {
      const Index n = cols / 8;
      map.ranks.push_back(R(r, Extents{rows, n}, {P({rows, n}, r * n, {cols, 1}, 0, {n, 1}, {r})}));
    }
  }
  return map;
}

TEST(Large, ContiguousSplitsCheckQuickly) {
  Map rows = split_big(0), cols = split_big(1);
  const double elapsed = cpu_seconds([&] {
    expect_valid(rows);
    expect_valid(cols);
  });
  EXPECT_LT(elapsed, 2.0);
  // Both are boxes, proved on the boxes without address runs, so no limit on runs
  // refuses them. The run sweeps alone prove the row split from a handful of runs; the
  // column split needs one run per row and piece, so a small limit refuses only it.
  CheckOptions small;
  small.limits.max_walked_addresses = 1000;
  expect_valid(rows, small);
  expect_valid(cols, small);
  small.box_proof = false;
  expect_valid(rows, small);
  Error e = expect_refused(cols, ErrorKind::format, small);
  EXPECT_NE(e.message.find("too large to verify"), std::string::npos);

  cols.ranks[5].pieces[0].source.offset += 1;  // overlaps rank 6's first column
  Error b = expect_refused(cols, ErrorKind::uncovered);
  EXPECT_EQ(b.address, 5 * 1536);
  rows.ranks[3].pieces[0].locations = {3, 4};
  Error h = expect_refused(rows, ErrorKind::holders);
  EXPECT_EQ(h.rank, 3);
  EXPECT_EQ(h.address, 3 * 6288 * Index{12288});
}

TEST(Large, SmallMapsAreFast) {
  Map map = interleaved();
#if defined(__SANITIZE_ADDRESS__)
  const int n = 20000;
#else
  const int n = 200000;
#endif
  int refused = 0;
  const double elapsed = cpu_seconds([&] {
    for (int i = 0; i < n; ++i) refused += !check_map(map).ok();
  });
  EXPECT_EQ(refused, 0);
  std::printf("interleaved map: %.0f checks per CPU second\n", n / elapsed);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_LT(elapsed, 2.0);
#endif
}

// ---- cross-check against a naive model ----------------------------------------------

// Conditions 4-6 element by element, with the same ordering rules, for small maps that
// pass conditions 1-3. Independent of the run decomposition and sweeps.
struct NaiveVerdict {
  std::optional<ErrorKind> kind;
  std::optional<Rank> rank;
  std::optional<Index> piece;
  std::optional<Index> address;
};

std::vector<Index> addresses(const Extents& shape, const StridedView& v) {
  std::vector<Index> out;
  Index n = 1;
  for (Index e : shape) n *= e;
  for (Index flat = 0; flat < n; ++flat) {
    Index rest = flat, a = v.offset;
    for (std::size_t k = shape.size(); k-- > 0;) {
      a += (rest % shape[k]) * v.strides[k];
      rest /= shape[k];
    }
    out.push_back(a);
  }
  std::sort(out.begin(), out.end());
  return out;
}

NaiveVerdict naive(const Map& input) {
  Map map = canonical(input);
  Index numel_f = 1;
  for (Index e : map.logical_shape) numel_f *= e;
  // Written index of each canonical piece (all pieces here are distinct).
  auto written = [&](Rank r, const Piece& p) {
    const auto& list = input.find_rank(r)->pieces;
    return static_cast<Index>(std::find(list.begin(), list.end(), p) - list.begin());
  };
  for (const auto& r : map.ranks) {
    Index shard = 1;
    for (Index e : *r.shard_shape) shard *= e;
    std::vector<std::vector<std::size_t>> writers(shard);
    Index total = 0;
    for (std::size_t i = 0; i < r.pieces.size(); ++i) {
      for (Index a : addresses(r.pieces[i].shape, r.pieces[i].dest)) writers[a].push_back(i);
      total += static_cast<Index>(addresses(r.pieces[i].shape, r.pieces[i].dest).size());
    }
    if (total != shard) return {ErrorKind::count, r.rank, std::nullopt, std::nullopt};
    for (Index a = 0; a < shard; ++a) {
      if (writers[a].size() > 1) return {ErrorKind::twice, r.rank, written(r.rank, r.pieces[writers[a][0]]), a};
    }
  }
  struct Cover {
    Rank rank;
    const Piece* piece;
  };
  std::vector<std::vector<Cover>> covers(numel_f);
  for (const auto& r : map.ranks) {
    for (const auto& p : r.pieces) {
      for (Index a : addresses(p.shape, p.source)) covers[a].push_back({r.rank, &p});
    }
  }
  for (Index e = 0; e < numel_f; ++e) {
    if (covers[e].empty()) return {ErrorKind::uncovered, std::nullopt, std::nullopt, e};
  }
  for (const auto& r : map.ranks) {
    for (const auto& p : r.pieces) {
      if (std::find(p.locations.begin(), p.locations.end(), r.rank) == p.locations.end() &&
          addresses(p.shape, p.source).empty()) {
        return {ErrorKind::holders, r.rank, written(r.rank, p), std::nullopt};
      }
      for (Index e : addresses(p.shape, p.source)) {
        const auto& c = covers[e];
        std::set<Rank> holders;
        int singles = 0;
        bool same = true;
        for (const auto& x : c) {
          holders.insert(x.rank);
          singles += x.piece->locations.size() == 1;
          same = same && x.piece->locations == c[0].piece->locations;
        }
        // The pieces to fix are those whose own locations are wrong; the pair rule names
        // every piece only when none is (two single holders on one rank).
        const std::vector<Rank> holder_list(holders.begin(), holders.end());
        const bool some_own_fault =
            std::any_of(c.begin(), c.end(), [&](const auto& x) { return x.piece->locations != holder_list; });
        const bool pair_bad = !some_own_fault && c.size() >= 2 && !(same && c[0].piece->locations.size() >= 2);
        const bool own = holder_list == p.locations;
        if (pair_bad || !own) {
          ErrorKind kind = c.size() >= 2 && singles >= 2 ? ErrorKind::twice : ErrorKind::holders;
          return {kind, r.rank, written(r.rank, p), e};
        }
      }
    }
  }
  return {};
}

// Small maps from a valid column or row split (some columns replicated), then a few
// single-field edits in the spirit of the contract 7 catalogue.
Map random_map(std::mt19937& rng) {
  auto pick = [&](Index lo, Index hi) { return std::uniform_int_distribution<Index>(lo, hi)(rng); };
  const Index rows = pick(1, 3), cols = pick(1, 6);
  const int tp = static_cast<int>(pick(1, 3));
  const bool by_cols = pick(0, 1) == 1;
  const Index along = by_cols ? cols : rows;
  Map map = M({rows, cols}, {});
  std::vector<std::vector<Piece>> pieces(tp);
  std::vector<Index> widths(tp, 0);
  for (Index start = 0; start < along;) {
    const Index len = pick(1, along - start);
    const bool replicated = tp > 1 && pick(0, 3) == 0;
    std::vector<Rank> all;
    for (int r = 0; r < tp; ++r) all.push_back(r);
    for (int r = 0; r < tp; ++r) {
      if (!replicated && r != static_cast<int>(start % tp)) continue;
      Piece p = P(by_cols ? Extents{rows, len} : Extents{len, cols}, by_cols ? start : start * cols, {cols, 1},
                  widths[r], {}, replicated ? all : std::vector<Rank>{r});
      p.dest.offset = widths[r];
      widths[r] += len;
      pieces[r].push_back(p);
    }
    start += len;
  }
  for (int r = 0; r < tp; ++r) {
    Extents shard = by_cols ? Extents{rows, widths[r]} : Extents{widths[r], cols};
    Strides rm = row_major_strides(shard);
    for (Piece& p : pieces[r]) {
      p.dest.offset = by_cols ? p.dest.offset : p.dest.offset * cols;
      p.dest.strides = rm;
    }
    map.ranks.push_back(R(r, shard, pieces[r]));
  }
  const int edits = static_cast<int>(pick(0, 2));
  for (int e = 0; e < edits; ++e) {
    RankEntry& re = map.ranks[pick(0, tp - 1)];
    if (re.pieces.empty()) continue;
    Piece& p = re.pieces[pick(0, static_cast<Index>(re.pieces.size()) - 1)];
    switch (pick(0, 9)) {
      case 0:
        p.source.offset = std::max<Index>(0, p.source.offset + pick(-2, 2));
        break;
      case 1:
        p.dest.offset = std::max<Index>(0, p.dest.offset + pick(-2, 2));
        break;
      case 2:
        p.shape[pick(0, 1)] = std::max<Index>(0, p.shape[0] + pick(-1, 1));
        break;
      case 3:
        p.locations = {pick(0, 3)};
        break;
      case 4:
        p.locations.push_back(9);
        break;
      case 5:
        std::swap(p.source.strides[0], p.source.strides[1]);
        break;
      case 6:
        map.ranks[pick(0, tp - 1)].pieces.push_back(p);
        break;
      case 7:
        re.pieces.erase(re.pieces.begin());
        break;
      case 8:
        p.dest.strides[pick(0, 1)] += pick(-1, 1);
        break;
      default:
        p.locations = p.locations.size() > 1 ? std::vector<Rank>{p.locations[0]} : std::vector<Rank>{0, 1};
        break;
    }
  }
  return map;
}

bool has_duplicate_pieces(const Map& map) {
  for (const auto& r : map.ranks) {
    for (std::size_t i = 0; i < r.pieces.size(); ++i) {
      for (std::size_t j = i + 1; j < r.pieces.size(); ++j) {
        if (r.pieces[i] == r.pieces[j]) return true;
      }
    }
  }
  return false;
}

TEST(CrossCheck, MatchesNaiveModelOnSmallRandomMaps) {
  std::mt19937 rng(20240611);
  int compared = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    Map map = random_map(rng);
    Status status = check_map(map);
    const std::optional<Error> err = status.ok() ? std::nullopt : std::optional<Error>(status.error());
    if (err && (err->kind == ErrorKind::format || err->kind == ErrorKind::bounds || err->kind == ErrorKind::itself)) {
      continue;  // conditions 1-3 are metadata-only; the naive model starts at 4
    }
    if (has_duplicate_pieces(map)) continue;  // written index of twin pieces is ambiguous
    NaiveVerdict want = naive(map);
    ++compared;
    refused += want.kind.has_value();
    ASSERT_EQ(err.has_value(), want.kind.has_value()) << (err ? err->to_string() : "valid") << "\n" << describe(map);
    if (!err) continue;
    EXPECT_EQ(kind_name(err->kind), kind_name(*want.kind)) << err->to_string() << "\n" << describe(map);
    EXPECT_EQ(err->rank, want.rank) << err->to_string() << "\n" << describe(map);
    EXPECT_EQ(err->piece, want.piece) << err->to_string() << "\n" << describe(map);
    EXPECT_EQ(err->address, want.address) << err->to_string() << "\n" << describe(map);
  }
  std::printf("compared %d maps, %d refused\n", compared, refused);
  EXPECT_GT(compared, 5000);
  EXPECT_GT(refused, 1000);
  EXPECT_GT(compared - refused, 1000);
}

// ---- large maps read on several threads ---------------------------------------------

// A 256 x 256 grid of 4 x 4 boxes over 8 ranks: 65,536 pieces, enough for check_map to
// read the pieces on several threads.
Map large_grid() {
  constexpr Index kPerSide = 256, kBox = 4, kSide = kPerSide * kBox;
  std::vector<std::vector<Piece>> lists(8);
  for (Index i = 0; i < kPerSide; ++i) {
    for (Index j = 0; j < kPerSide; ++j) {
      auto& list = lists[static_cast<std::size_t>((i * kPerSide + j) % 8)];
      const Index at = static_cast<Index>(list.size());
      list.push_back(P({kBox, kBox}, i * kBox * kSide + j * kBox, {kSide, 1}, at * kBox * kBox, {kBox, 1},
                       {static_cast<Rank>((i * kPerSide + j) % 8)}));
    }
  }
  Map map;
  map.logical_shape = {kSide, kSide};
  for (Rank r = 0; r < 8; ++r) {
    auto& list = lists[static_cast<std::size_t>(r)];
    const Index rows = static_cast<Index>(list.size()) * kBox;
    map.ranks.push_back(R(r, Extents{rows, kBox}, std::move(list)));
  }
  return map;
}

// The same verdict and error on 1, 2 and 8 threads, with the box proof and without.
Status same_on_any_thread_count(const Map& map) {
  CheckOptions one;
  one.threads = 1;
  const Status want = check_map(map, one);
  for (const int threads : {2, 8}) {
    for (const bool boxes : {true, false}) {
      CheckOptions options;
      options.threads = threads;
      options.box_proof = boxes;
      const Status got = check_map(map, options);
      EXPECT_EQ(got.ok(), want.ok()) << threads << " threads";
      if (!got.ok() && !want.ok()) {
        EXPECT_EQ(got.error().to_string(), want.error().to_string()) << threads << " threads, boxes " << boxes;
      }
    }
  }
  return want;
}

TEST(LargeThreads, ValidGridOnAnyThreadCount) { EXPECT_TRUE(same_on_any_thread_count(large_grid()).ok()); }

// 40,000 one-row pieces dealt out to 8 ranks: the box proof reads them on worker threads,
// which must write into the box scratch the calling thread prepared (each thread has its
// own, and a worker's is empty).
TEST(LargeThreads, RowGatherOnAnyThreadCount) {
  constexpr Index kRows = 40000;
  std::vector<std::vector<Index>> ids(8);
  for (Index row = 0; row < kRows; ++row) ids[static_cast<std::size_t>(row % 8)].push_back(row);
  auto map = block_gather_map({kRows, 64}, ids, 1, 0);
  ASSERT_TRUE(map.ok()) << map.error().to_string();
  EXPECT_TRUE(same_on_any_thread_count(map.value()).ok());
}

TEST(LargeThreads, FirstPieceFaultInCheckOrderWhateverTheThreads) {
  Map map = large_grid();
  // Faults on a late piece of rank 6 and an early and a late one of rank 2: rank 2's
  // first piece in content order is reported, as on one thread.
  map.ranks[6].pieces[8000].scale = 0.0;
  map.ranks[2].pieces[8100].source.strides[0] = -1;
  map.ranks[2].pieces[7].locations = {};
  Status verdict = same_on_any_thread_count(map);
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().kind, ErrorKind::format);
  EXPECT_EQ(verdict.error().rank, 2);
  EXPECT_EQ(verdict.error().piece, 7);
}

TEST(LargeThreads, ARankFaultAndPieceFaultsKeepTheirOrder) {
  Map map = large_grid();
  map.ranks[4].pieces[3].scale = std::numeric_limits<double>::infinity();
  map.ranks[1].shard_shape = Extents{-1, 4};  // a fault of rank 1 itself
  Status verdict = same_on_any_thread_count(map);
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().rank, 1);  // before rank 4's piece
  EXPECT_EQ(verdict.error().piece, std::nullopt);

  map.ranks[0].pieces[8000].dest.offset = -3;  // a piece of a rank before rank 1
  verdict = same_on_any_thread_count(map);
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().rank, 0);
  EXPECT_EQ(verdict.error().piece, 8000);
}

TEST(LargeThreads, ConditionsAfterTheFirstOnAnyThreadCount) {
  Map map = large_grid();
  map.ranks[3].pieces[500].locations = {3, 5};  // a holders error, found by the sweeps
  Status verdict = same_on_any_thread_count(map);
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().kind, ErrorKind::holders);
  map = large_grid();
  map.ranks[7].pieces[1].source.offset += 1;  // leaves an element of F uncovered
  verdict = same_on_any_thread_count(map);
  ASSERT_FALSE(verdict.ok());
  EXPECT_EQ(verdict.error().kind, ErrorKind::uncovered);
}

// A few boxes along a long axis: the box proof sorts their boundaries by comparison, not
// by counting (more keys than four per event), a branch the generated maps, whose axes
// are short, never take. Every variant must get the runs' verdict, error for error.
TEST(BoxProof, FewBoxesAlongALongAxisGetTheRunsVerdict) {
  CheckOptions runs;
  runs.box_proof = false;
  int refused = 0;
  for (int dim : {0, 1}) {
    const Extents shape = dim == 0 ? Extents{5000, 2} : Extents{2, 5000};
    const Map split = contiguous_split_map(shape, {1000, 2000, 2000}, dim).value();
    const Index step = dim == 0 ? 2 : 1;  // one row or one column in F
    std::vector<Map> variants;
    for (Index shift : {0, 1, -1}) {
      for (int moved : {1, 2}) {
        Map m = split;
        m.ranks[static_cast<std::size_t>(moved)].pieces[0].source.offset += shift * step;
        std::reverse(m.ranks.begin(), m.ranks.end());  // listed last to first
        variants.push_back(m);
      }
    }
    // Every piece on one rank, in reverse order, with one shard that holds them all.
    Map one_rank = M(shape, {R(0, shape, {})});
    for (auto it = split.ranks.rbegin(); it != split.ranks.rend(); ++it) {
      Piece p = it->pieces[0];
      p.dest = p.source;
      p.dest.strides = row_major_strides(shape);
      p.locations = {0};
      one_rank.ranks[0].pieces.push_back(p);
    }
    variants.push_back(one_rank);
    one_rank.ranks[0].pieces[1].source.offset += step;
    variants.push_back(one_rank);
    for (const Map& map : variants) {
      const Status boxes = check_map(map);
      const Status walked = check_map(map, runs);
      ASSERT_EQ(boxes.ok(), walked.ok()) << describe(map);
      if (boxes.ok()) continue;
      ++refused;
      EXPECT_EQ(boxes.error().to_string(), walked.error().to_string()) << describe(map);
    }
  }
  EXPECT_GE(refused, 8);
}

}  // namespace
}  // namespace shardcheck

namespace shardcheck {
namespace {

// Contract 3's content order, field by field: source offset, source strides, shape, dest
// offset, dest strides, locations, scale, each ascending, each deciding only when every
// field before it ties. Checks and the reference model share content_less, so only this
// test can tell a reversed field from the contract's order.
TEST(ContentOrder, EachFieldInTheContractsOrderAscending) {
  const Piece base = build::P({2, 2}, 4, {4, 1}, 2, {2, 1}, {1, 2}, 2.0);
  // Each row makes one field larger than base's, in the contract's order.
  const std::vector<std::pair<const char*, std::function<void(Piece&)>>> fields = {
      {"source offset", [](Piece& p) { p.source.offset = 5; }},
      {"source strides", [](Piece& p) { p.source.strides = {4, 2}; }},
      {"shape", [](Piece& p) { p.shape = {2, 3}; }},
      {"dest offset", [](Piece& p) { p.dest.offset = 3; }},
      {"dest strides", [](Piece& p) { p.dest.strides = {3, 1}; }},
      {"locations", [](Piece& p) { p.locations = {1, 3}; }},
      {"scale", [](Piece& p) { p.scale = 4.0; }},
  };
  for (std::size_t i = 0; i < fields.size(); ++i) {
    SCOPED_TRACE(fields[i].first);
    Piece larger = base;
    fields[i].second(larger);
    EXPECT_TRUE(content_less(base, larger));
    EXPECT_FALSE(content_less(larger, base));
    // The earlier field decides whatever the later ones say: smaller in field i and larger
    // in every later field, a piece still comes first.
    Piece smaller_here_larger_later = base;
    for (std::size_t j = i + 1; j < fields.size(); ++j) fields[j].second(smaller_here_larger_later);
    EXPECT_TRUE(content_less(smaller_here_larger_later, larger))
        << describe(smaller_here_larger_later) << " against " << describe(larger);
    EXPECT_FALSE(content_less(larger, smaller_here_larger_later));
  }
}

// Condition 1 reads a rank's shard_shape before its pieces: a rank that lists pieces
// without a shard shape is refused for that, even when one of its pieces is malformed too.
TEST(ConditionOrder, ARanksMissingShardShapeComesBeforeItsPieces) {
  Piece negative = build::P({2}, 0, {1}, 0, {1}, {0});
  negative.shape = {-1};
  for (bool box_proof : {true, false}) {
    SCOPED_TRACE(box_proof ? "box proof" : "runs");
    CheckOptions options;
    options.box_proof = box_proof;
    const Error e = expect_refused(build::M({4}, {build::R(0, std::nullopt, {negative})}), ErrorKind::format, options);
    EXPECT_EQ(e.rank, 0);
    EXPECT_FALSE(e.piece.has_value()) << e.to_string();
    EXPECT_NE(e.sentence.find("shard"), std::string::npos) << e.to_string();
  }
}

// Two single holders of an element with a replica between them: the `twice` refusal names
// the other single holder, never the replica, whose locations may well be right.
TEST(ConditionOrder, ClaimedTwiceNamesTheOtherSingleHolderNotAReplica) {
  const Map map = build::M({2}, {build::R(0, Extents{2}, {build::P({2}, 0, {1}, 0, {1}, {0})}),
                                 build::R(1, Extents{2}, {build::P({2}, 0, {1}, 0, {1}, {0, 1})}),
                                 build::R(2, Extents{2}, {build::P({2}, 0, {1}, 0, {1}, {2})})});
  for (bool box_proof : {true, false}) {
    SCOPED_TRACE(box_proof ? "box proof" : "runs");
    CheckOptions options;
    options.box_proof = box_proof;
    const Error e = expect_refused(map, ErrorKind::twice, options);
    EXPECT_EQ(e.rank, 0);
    EXPECT_EQ(e.address, 0);
    EXPECT_NE(e.sentence.find("rank 2 piece 0 (P(2) src(0,(1)) dst(0,(1)) loc{2}) also claims"), std::string::npos) << e.to_string();
  }
}

// Which of two faulty pieces a refusal names follows that order, not the order written:
// two pieces of one rank reach past the shard and differ only in dest offset; the one at
// the lower dest offset is named, written second.
TEST(ContentOrder, TheRefusalNamesTheFirstPieceInContentOrder) {
  const Map map = build::M({8}, {build::R(0, Extents{8}, {build::P({4}, 0, {1}, 6, {1}, {0}),
                                                          build::P({4}, 0, {1}, 5, {1}, {0})})});
  const Status status = check_map(map);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().kind, ErrorKind::bounds);
  EXPECT_EQ(status.error().piece, 1) << status.error().to_string();
}

// Content order's last field, the scale, orders negative scales as numbers (IEEE
// totalOrder, the reference model's strong_order): -4 before -2 before 2. Twin pieces
// that only their scales tell apart write one shard address; the refusal names the
// lower scale's piece, written second, by the box proof and the run sweeps alike.
TEST(ContentOrder, NegativeScalesOrderAsNumbers) {
  const Piece minus4 = build::P({2}, 0, {1}, 0, {1}, {0}, -4.0);
  const Piece minus2 = build::P({2}, 0, {1}, 0, {1}, {0}, -2.0);
  const Piece plus2 = build::P({2}, 0, {1}, 0, {1}, {0}, 2.0);
  EXPECT_TRUE(content_less(minus4, minus2));
  EXPECT_FALSE(content_less(minus2, minus4));
  EXPECT_TRUE(content_less(minus2, plus2));
  EXPECT_FALSE(content_less(plus2, minus2));
  const Map map = build::M({2}, {build::R(0, Extents{4}, {minus2, minus4})});
  for (bool box_proof : {true, false}) {
    SCOPED_TRACE(box_proof ? "box proof" : "runs");
    CheckOptions options;
    options.box_proof = box_proof;
    const Error e = expect_refused(map, ErrorKind::twice, options);
    EXPECT_EQ(e.rank, 0);
    EXPECT_EQ(e.piece, 1) << e.to_string();
    EXPECT_EQ(e.side, Side::shard);
    EXPECT_EQ(e.address, 0);
  }
}

// A rank listed twice is refused format at that rank: the error carries the rank id and
// its JSON path, from the core checks and the reference model alike.
TEST(Structure, ARankListedTwiceIsNamed) {
  const Map map = build::M({4}, {build::R(3, Extents{4}, {build::P({4}, 0, {1}, 0, {1}, {3})}),
                                 build::R(3, Extents{0}, {})});
  const Error e = expect_refused(map, ErrorKind::format);
  EXPECT_EQ(e.rank, 3) << e.to_string();
  EXPECT_EQ(e.piece, std::nullopt);
  EXPECT_EQ(e.path, "$.ranks.3");
  const oracles::ReferenceVerdict reference = oracles::reference_check(map);
  ASSERT_TRUE(reference.error.has_value());
  EXPECT_EQ(reference.error->rank, 3) << reference.error->to_string();
  EXPECT_EQ(reference.error->to_string(), e.to_string());
}

}  // namespace
}  // namespace shardcheck
