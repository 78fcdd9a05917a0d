// Resharding (contract 11): transfer plans between two maps over one logical shape.
// The planner (core/src/reshard.cc) is judged against the reference model's naive
// element-by-element reshard, against rebuild-then-extract, and by the truth oracle on
// generated pairs of layouts, corrupted on either side.
//
// Long file: one test binary per tests/test_*.cc; these tests share the pair builders and
// the naive reshard they are judged against, and a split would add a binary and a link.
#include <algorithm>
#include <array>
#include <chrono>
#include <memory>
#include <set>
#include <span>
#include <stdexcept>

#include <gtest/gtest.h>

#include "shardcheck/backend.h"
#include "shardcheck/constructors.h"
#include "shardcheck/digest.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/gen/layout.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/reshard.h"
#include "support/spec_maps.h"

namespace shardcheck {
namespace {

using build::M;
using build::P;
using build::R;

Buffer markers(const Map& map, DType dtype = DType::float32) {
  return marker_buffer(dtype, checked_numel(map.logical_shape).value());
}

ShardSet shards_of(const Map& map, const Buffer& full) {
  auto shards = extract_all(map, full);
  EXPECT_TRUE(shards.ok()) << shards.error().to_string();
  return shards.ok() ? shards.value() : ShardSet{};
}

ShardSet reference_extract_all_or_die(const Map& map, const Buffer& full) {
  auto shards = oracles::reference_extract_all(map, full);
  EXPECT_TRUE(shards.ok()) << shards.error().to_string();
  return shards.ok() ? shards.value() : ShardSet{};
}

// The same maps with ranks and pieces in reverse order: nothing may change.
Map reversed(Map map) {
  std::reverse(map.ranks.begin(), map.ranks.end());
  for (auto& entry : map.ranks) std::reverse(entry.pieces.begin(), entry.pieces.end());
  return map;
}

TEST(Reshard, Tp8ColumnSplitToTp4RowSplitMergesIntoFewSegments) {
  const Map source = contiguous_split_map({64, 64}, std::vector<Index>(8, 8), 1).value();
  const Map target = contiguous_split_map({64, 64}, std::vector<Index>(4, 16), 0).value();
  const Buffer full = markers(source);
  auto made = plan(source, target);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  // One 2-d segment per (source rank, target rank): 16 rows of 8 columns each.
  EXPECT_EQ(made.value().segments.size(), 32u);
  EXPECT_EQ(made.value().statistics.elements_moved, 64 * 64);
  EXPECT_EQ(made.value().statistics.elements_read.at(3), 64 * 8);
  EXPECT_EQ(made.value().statistics.elements_by_pair.at({2, 1}), 16 * 8);
  auto got = execute(made.value(), shards_of(source, full), DType::float32);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), shards_of(target, full));
}

// A plan that moves more than the caches hold streams its rows (streaming.h): 12 MiB of
// float32 from 8 column shards to 4 row shards, with rows of 383 and 385 columns (neither
// a multiple of 16 bytes, so every streamed row has a head or a tail) and an odd number
// of rows.
TEST(Reshard, APlanBeyondTheCachesStreamsTheSameBits) {
  const Map source =
      contiguous_split_map({1025, 3072}, {383, 385, 383, 385, 383, 385, 383, 385}, 1).value();
  const Map target = contiguous_split_map({1025, 3072}, {257, 256, 256, 256}, 0).value();
  const Buffer full = markers(source);
  auto made = plan(source, target);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  ASSERT_GT(made.value().statistics.elements_moved * 4, Index{8} << 20);
  auto got = execute(made.value(), shards_of(source, full), DType::float32);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), shards_of(target, full));
}

TEST(Reshard, PlanJsonSpellsSegmentsAsDeepSpeed) {
  const Map source = contiguous_split_map({2, 4}, {2, 2}, 1).value();
  const Map target = contiguous_split_map({2, 4}, {1, 1}, 0).value();
  auto made = plan(source, target);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  const Json json = plan_to_json(made.value());
  EXPECT_EQ(json["logical_shape"], Json::array({2, 4}));
  // Target rank 0 (row 0) takes [0:2] from source rank 0 and [2:4] from source rank 1.
  ASSERT_EQ(json["segments"].size(), 4u);
  EXPECT_EQ(json["segments"][0].dump(), R"({"shape":[2],"source":[0,0,[1]],"target":[0,0,[1]]})");
  EXPECT_EQ(json["segments"][1].dump(), R"({"shape":[2],"source":[1,0,[1]],"target":[0,2,[1]]})");
  EXPECT_EQ(json["statistics"]["elements_moved"], 8);
}

// elements_by_rank_pair rows are [source rank, target rank, elements] (docs/resharding.md,
// the Python package): a plan whose pairs are not symmetric tells the order apart.
TEST(Reshard, PlanJsonCountsElementsBySourceThenTargetRank) {
  const Map source = contiguous_split_map({8}, {2, 2, 4}, 0).value();
  const Map target = contiguous_split_map({8}, {8}, 0).value();
  auto made = plan(source, target);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  const Json json = plan_to_json(made.value());
  EXPECT_EQ(json["statistics"]["elements_by_rank_pair"],
            Json::parse("[[0, 0, 2], [1, 0, 2], [2, 0, 4]]"));
  EXPECT_EQ(json["statistics"]["elements_read_by_source_rank"], Json::parse(R"({"0": 2, "1": 2, "2": 4})"));
}

// A piece whose F view runs past the end of a row of F into the next, as ZeRO's flat
// partitions do (gen::detail::flatten_runs): no box of the logical shape is one.
bool has_wrapping_piece(const Map& map) {
  if (map.logical_shape.size() < 2 || map.logical_shape.back() < 2) return false;
  const Index row = map.logical_shape.back();
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.shape.size() == 1 && piece.source.strides[0] == 1 && piece.source.offset % row + piece.shape[0] > row) {
        return true;
      }
    }
  }
  return false;
}

TEST(Reshard, EveryConstructorPairMatchesReferenceAndRebuildThenExtract) {
  gen::SeededChoices choices(28);
  gen::LayoutOptions options;
  std::set<std::string> pairs_seen;
  int wrapping = 0;
  for (int i = 0; i < 1500; ++i) {
    gen::LayoutPair pair = gen::generate_layout_pair(choices, options);
    pairs_seen.insert(pair.source.constructor + "->" + pair.target.constructor);
    wrapping += has_wrapping_piece(pair.source.map) || has_wrapping_piece(pair.target.map);
    const DType dtype = pair.source.dtype;
    const Buffer full = markers(pair.source.map, dtype);
    auto source_shards = oracles::reference_extract_all(pair.source.map, full);
    if (!source_shards.ok()) {
      // Markers a drawn scale flushes or overflows (contract 1.2): no producer writes them.
      ASSERT_EQ(source_shards.error().kind, ErrorKind::scale) << source_shards.error().to_string();
      continue;
    }
    const auto got = reshard(pair.source.map, pair.target.map, source_shards.value(), dtype);
    const auto naive = oracles::reference_reshard(pair.source.map, pair.target.map, source_shards.value(), dtype);
    const std::string what = describe(pair.source.map) + "\n->\n" + describe(pair.target.map);
    ASSERT_EQ(got.ok(), naive.ok()) << what << "\n" << (got.ok() ? naive.error().to_string() : got.error().to_string());
    if (!got.ok()) {
      EXPECT_EQ(got.error().kind, naive.error().kind) << what;
      EXPECT_EQ(got.error().kind, ErrorKind::scale) << what << "\n" << got.error().to_string();
      continue;
    }
    EXPECT_EQ(got.value(), naive.value()) << what;
    // Rebuild then extract, where both succeed, gives the same shards.
    auto rebuilt = rebuild(pair.source.map, source_shards.value(), dtype);
    if (rebuilt.ok()) {
      auto extracted = extract_all(pair.target.map, rebuilt.value());
      if (extracted.ok()) {
        EXPECT_EQ(got.value(), extracted.value()) << what;
      }
    }
    // Rank and piece order change nothing.
    auto again = plan(reversed(pair.source.map), reversed(pair.target.map));
    ASSERT_TRUE(again.ok());
    const Plan boxed = plan(pair.source.map, pair.target.map).value();
    EXPECT_TRUE(same_copies(again.value(), boxed)) << what;
    // The planner on runs, which every map can take, makes the same shards in no fewer
    // segments.
    ReshardOptions on_runs;
    on_runs.plan_on_boxes = false;
    const Plan runs = plan(pair.source.map, pair.target.map, on_runs).value();
    EXPECT_EQ(execute(runs, source_shards.value(), dtype).value(), got.value()) << what;
    EXPECT_LE(boxed.segments.size(), runs.segments.size()) << what;
    EXPECT_EQ(boxed.statistics.elements_by_pair, runs.statistics.elements_by_pair) << what;
  }
  // Every pair of the six constructors turned up, and flat partitions whose pieces wrap
  // rows (which the planner on boxes must not take for boxes).
  EXPECT_EQ(pairs_seen.size(), 36u);
  EXPECT_GT(wrapping, 40);  // 89 of the 1500 on this seed
}

TEST(Reshard, TruthOracleOnCorruptedPairsIsRefusedOrExact) {
  gen::SeededChoices choices(11);
  gen::CaseOptions options;
  options.op = Op::reshard;
  int refused = 0, exact = 0, valid_but_different = 0;
  for (int i = 0; i < 1500; ++i) {
    const Case c = gen::generate_case(choices, options);
    auto outcome = oracles::run_case(c);
    ASSERT_TRUE(outcome.ok()) << c.name << ": " << outcome.error().to_string() << "\n" << encode_case_text(c);
    const auto& o = outcome.value();
    // A corruption may leave a valid layout that means another tensor (strides swapped
    // between two axes of one extent): no check can see it, and a reshard through it
    // is wrong by design (contract 3). It is excused only on a corrupted pair, and only
    // where the planner does with the pair as written what the reference model does:
    // then the maps, not the code, make the tensor wrong. Any other wrong tensor is a bug.
    if (o.verdict == Outcome::wrong && oracles::wrong_on_valid_layout(o) && (c.truth || c.target_truth)) {
      Buffer full = markers(c.truth_map(), c.dtype);
      if (c.full) {
        for (std::size_t k = 0; k < c.full->size(); ++k) full.set_bits(static_cast<Index>(k), (*c.full)[k]);
      }
      const auto shards = oracles::reference_extract_all(c.truth_map(), full, c.scale_power);
      ASSERT_TRUE(shards.ok()) << shards.error().to_string() << "\n" << encode_case_text(c);
      const auto got = reshard(c.map, *c.target_map, shards.value(), c.dtype);
      const auto naive = oracles::reference_reshard(c.map, *c.target_map, shards.value(), c.dtype);
      ASSERT_TRUE(got.ok() && naive.ok()) << o.message << "\n" << encode_case_text(c);
      ASSERT_EQ(got.value(), naive.value()) << "the planner differs from the reference model\n" << encode_case_text(c);
      ++valid_but_different;
      continue;
    }
    ASSERT_NE(o.verdict, Outcome::wrong) << o.message << "\n" << encode_case_text(c);
    ASSERT_NE(o.verdict, Outcome::target_fault) << o.message;
    refused += o.verdict == Outcome::refused;
    exact += o.verdict == Outcome::exact;
    // An uncorrupted pair with equal scales always plans.
    if (!c.truth && !c.target_truth && o.verdict == Outcome::refused) {
      EXPECT_EQ(o.error->kind, ErrorKind::scale) << o.message << "\n" << encode_case_text(c);
    }
  }
  EXPECT_GT(refused, 300);
  EXPECT_GT(exact, 150);
  EXPECT_LT(valid_but_different, 15) << "a corruption that mostly leaves valid layouts tests nothing";
}

TEST(Reshard, CaseFileRoundTripKeepsTheTargetSide) {
  gen::SeededChoices choices(5);
  gen::CaseOptions options;
  options.op = Op::reshard;
  for (int i = 0; i < 50; ++i) {
    const Case c = gen::generate_case(choices, options);
    auto back = decode_case_text(encode_case_text(c));
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(back.value().target_map, c.target_map);
    EXPECT_EQ(back.value().target_truth, c.target_truth);
    EXPECT_EQ(back.value().ops, OpList{Op::reshard});
  }
}

TEST(Reshard, NonBoxAndStridedPiecesPlanAsFinerSegments) {
  // Contract 6.7's wrapping destination, made valid: one rank holds F (12,) in a (3,4)
  // shard through pieces whose dest views wrap past a row; the source side is transposed.
  const Map wrapping = M({12}, {R(0, Extents{3, 4},
                                  {P({2, 3}, 0, {3, 1}, 2, {4, 1}, {0}), P({1, 2}, 6, {2, 1}, 0, {4, 1}, {0}),
                                   P({1, 2}, 8, {2, 1}, 10, {4, 1}, {0}), P({1, 2}, 10, {2, 1}, 5, {4, 4}, {0})})});
  ASSERT_TRUE(check_map(wrapping).ok()) << check_map(wrapping).error().to_string();
  const Map transposed = M({12}, {R(5, Extents{4, 3}, {P({4, 3}, 0, {1, 4}, 0, {3, 1}, {5})})});
  ASSERT_TRUE(check_map(transposed).ok()) << check_map(transposed).error().to_string();
  const Buffer full = markers(wrapping);
  for (const auto& [from, to] : {std::pair{&wrapping, &transposed}, std::pair{&transposed, &wrapping}}) {
    auto got = reshard(*from, *to, shards_of(*from, full), DType::float32);
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    EXPECT_EQ(got.value(), shards_of(*to, full));
  }
}

TEST(Reshard, ZeroDimensionalAndEmptyRanks) {
  const Map scalar_source = replicated_map({}, 3).value();
  const Map scalar_target = replicated_map({}, 2).value();
  const Buffer one = markers(scalar_source);
  auto got = reshard(scalar_source, scalar_target, shards_of(scalar_source, one), DType::float32);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), shards_of(scalar_target, one));
  // Uneven sizes with empty ranks on both sides.
  const Map source = contiguous_split_map({5, 3}, {0, 5, 0}, 0).value();
  const Map target = contiguous_split_map({5, 3}, {1, 0, 2, 0}, 1).value();
  const Buffer full = markers(source);
  got = reshard(source, target, shards_of(source, full), DType::float32);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), shards_of(target, full));
}

TEST(Reshard, ReplicatedSourceIsReadFromTheLowestRankUnlessAllAreCompared) {
  const Map source = replicated_map({4}, 3).value();
  const Map target = contiguous_split_map({4}, {2, 2}, 0).value();
  const Buffer full = markers(source);
  ShardSet shards = shards_of(source, full);
  shards.at(2).set_bits(1, shards.at(2).bits(1) ^ 1);  // a damaged copy on rank 2
  auto made = plan(source, target);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made.value().statistics.elements_read, (std::map<Rank, Index>{{0, 4}}));
  auto got = execute(made.value(), shards, DType::float32);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got.value(), shards_of(target, full));  // rank 0's copy, untouched
  ReshardOptions compare;
  compare.compare_replicas = true;
  auto refused = reshard(source, target, shards, DType::float32, compare);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::different_data);
  EXPECT_EQ(refused.error().rank, 0);
  auto naive = oracles::reference_reshard(source, target, shards, DType::float32, true);
  ASSERT_FALSE(naive.ok());
  EXPECT_EQ(naive.error().kind, ErrorKind::different_data);
}

// Two replicas holding the same element at different shard addresses: the refusal is
// located at the address of the copy read, and names the other holder's address in words.
TEST(Reshard, AReplicaRefusalIsLocatedAtTheCopyReadAndNamesTheOther) {
  // Rank 1 holds F's halves swapped: F[1] sits at its shard address 3.
  const Map source = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}),
                             R(1, Extents{4}, {P({2}, 2, {1}, 0, {1}, {0, 1}), P({2}, 0, {1}, 2, {1}, {0, 1})})});
  const Map target = contiguous_split_map({4}, {2, 2}, 0).value();
  const Buffer full = markers(source);
  ShardSet shards = shards_of(source, full);
  shards.at(1).set_bits(3, shards.at(1).bits(3) ^ 1);
  ReshardOptions compare;
  compare.compare_replicas = true;
  auto refused = reshard(source, target, shards, DType::float32, compare);
  ASSERT_FALSE(refused.ok());
  const Error& e = refused.error();
  EXPECT_EQ(e.kind, ErrorKind::different_data);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.side, Side::shard);
  EXPECT_EQ(e.address, 1) << e.to_string();
  EXPECT_NE(e.sentence.find("rank 1 holds"), std::string::npos) << e.sentence;
  EXPECT_NE(e.sentence.find("at shard address 3"), std::string::npos) << e.sentence;
  auto naive = oracles::reference_reshard(source, target, shards, DType::float32, true);
  ASSERT_FALSE(naive.ok());
  EXPECT_EQ(naive.error(), e) << naive.error().to_string();
}

TEST(Reshard, ScalesMustAgreeAndThenCopyPlainly) {
  const Map source = replicated_map({4}, 2, 2.0).value();
  Map target = contiguous_split_map({4}, {1, 3}, 0).value();
  const Buffer full = markers(source);
  const ShardSet shards = reference_extract_all_or_die(source, full);
  auto refused = plan(source, target);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::scale);
  // The planner on runs refuses it alike, at the same rank, piece and element.
  ReshardOptions on_runs;
  on_runs.plan_on_boxes = false;
  auto refused_on_runs = plan(source, target, on_runs);
  ASSERT_FALSE(refused_on_runs.ok());
  EXPECT_EQ(refused_on_runs.error().to_string(), refused.error().to_string());
  for (auto& entry : target.ranks) {
    for (auto& piece : entry.pieces) piece.scale = 2.0;
  }
  auto got = reshard(source, target, shards, DType::float32);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), reference_extract_all_or_die(target, full));
  // Integers cannot have been scaled.
  ShardSet integer_shards;
  for (Rank r : {0, 1}) integer_shards.emplace(r, Buffer(DType::int32, 4));
  auto integers = reshard(source, target, integer_shards, DType::int32);
  ASSERT_FALSE(integers.ok());
  EXPECT_EQ(integers.error().kind, ErrorKind::scale);
}

// A source rank with an empty shard (shard shape (0,), no pieces) has nothing to read:
// execute needs no buffer for it, while a source rank that holds elements must have one.
TEST(Reshard, AnEmptySourceRankNeedsNoShard) {
  const Map source = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})}), R(1, Extents{0}, {})});
  const Map target = contiguous_split_map({4}, {2, 2}, 0).value();
  const Buffer full = markers(source);
  ShardSet shards = reference_extract_all_or_die(source, full);
  shards.erase(1);
  auto made = plan(source, target);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  auto got = execute(made.value(), shards, DType::float32);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), reference_extract_all_or_die(target, full));
  shards.erase(0);
  auto missing = execute(made.value(), shards, DType::float32);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::shape);
  EXPECT_EQ(missing.error().rank, 0) << missing.error().to_string();
  // The plan knows the shard's size, not its pieces: the sentence names what it knows.
  EXPECT_EQ(missing.error().sentence, "no shard was supplied for this source rank, whose shard holds 4 elements");
  auto reference = oracles::reference_reshard(source, target, shards, DType::float32);
  ASSERT_FALSE(reference.ok());
  EXPECT_EQ(reference.error(), missing.error());
}

// Contract 1.2/3.7: replicas under different scales agree after unscaling, not bit for
// bit, so comparing all replicas (compare_replicas) must not compare their raw bits.
// Rank 0 holds F * 2, rank 1 holds F * 4 of one replicated block: a valid map.
TEST(Reshard, ComparingReplicasSkipsCopiesUnderAnotherScale) {
  const Map source = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1}, 2.0)}),
                             R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1}, 4.0)})});
  Map target = contiguous_split_map({4}, {2, 2}, 0).value();
  for (auto& entry : target.ranks) {
    for (auto& piece : entry.pieces) piece.scale = 2.0;  // rank 0's scale, the copy read
  }
  ASSERT_TRUE(check_map(source).ok()) << check_map(source).error().to_string();
  const Buffer full = markers(source);
  const ShardSet shards = reference_extract_all_or_die(source, full);
  ASSERT_NE(shards.at(0), shards.at(1));  // the raw bits differ
  ReshardOptions compare;
  compare.compare_replicas = true;
  auto made = plan(source, target, compare);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  EXPECT_TRUE(made.value().replica_checks.empty());
  auto got = reshard(source, target, shards, DType::float32, compare);
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), reference_extract_all_or_die(target, full));
}

TEST(Reshard, RefusesInvalidMapsAndShapesSayingWhichSide) {
  const Map good = contiguous_split_map({8}, {4, 4}, 0).value();
  auto bad_source = plan(build::repro1(), good);
  ASSERT_FALSE(bad_source.ok());
  EXPECT_EQ(bad_source.error().kind, ErrorKind::uncovered);  // contract 6.1: twice / uncovered
  EXPECT_NE(bad_source.error().message.find("in the source map"), std::string::npos) << bad_source.error().message;
  auto bad_target = plan(good, build::repro1());
  ASSERT_FALSE(bad_target.ok());
  EXPECT_NE(bad_target.error().message.find("in the target map"), std::string::npos);
  auto shapes = plan(good, contiguous_split_map({2, 4}, {1, 1}, 0).value());
  ASSERT_FALSE(shapes.ok());
  EXPECT_EQ(shapes.error().kind, ErrorKind::shape);
}

TEST(Reshard, ExhaustedBudgetIsAnErrorNeverATruncatedPlan) {
  // 8 column shards to 4 row shards: 32 overlaps, none of which merge.
  const Map source = contiguous_split_map({64, 64}, std::vector<Index>(8, 8), 1).value();
  const Map target = contiguous_split_map({64, 64}, std::vector<Index>(4, 16), 0).value();
  ReshardOptions tight;
  tight.max_segments = 31;
  auto refused = plan(source, target, tight);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::format);
  EXPECT_NE(refused.error().message.find("budget"), std::string::npos);
  tight.max_segments = 32;
  auto fits = plan(source, target, tight);
  ASSERT_TRUE(fits.ok()) << fits.error().to_string();
  EXPECT_EQ(fits.value().segments.size(), 32u);
}

TEST(Reshard, TheBudgetCountsSegmentsAfterMerging) {
  // Even and odd elements of F on two ranks (no box: F steps by 2) to two halves: 64 runs
  // of one element, merged into one segment per rank pair.
  const Map interleaved = M({64}, {R(0, Extents{32}, {P({32}, 0, {2}, 0, {1}, {0})}),
                                   R(1, Extents{32}, {P({32}, 1, {2}, 0, {1}, {1})})});
  ASSERT_TRUE(check_map(interleaved).ok()) << check_map(interleaved).error().to_string();
  const Map halves = contiguous_split_map({64}, {32, 32}, 0).value();
  ReshardOptions tight;
  tight.max_segments = 4;
  auto fits = plan(interleaved, halves, tight);
  ASSERT_TRUE(fits.ok()) << fits.error().to_string();
  EXPECT_EQ(fits.value().segments.size(), 4u);
  const Buffer full = markers(interleaved);
  EXPECT_EQ(execute(fits.value(), shards_of(interleaved, full), DType::float32).value(), shards_of(halves, full));
  tight.max_segments = 3;
  auto refused = plan(interleaved, halves, tight);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::format);
}

TEST(Reshard, BoxPlansDoNotGrowWithRows) {
  // Two row shards to four column shards of (rows, 8): DeepSpeed's planner makes 8
  // strided segments of it, and so does this one, at 10^3 rows as at 10^9.
  for (const Index rows : {Index{1000}, Index{1000000000}}) {
    const Map source = contiguous_split_map({rows, 8}, {rows / 2, rows / 2}, 0).value();
    const Map target = contiguous_split_map({rows, 8}, {2, 2, 2, 2}, 1).value();
    auto made = plan(source, target);
    ASSERT_TRUE(made.ok()) << made.error().to_string();
    ASSERT_EQ(made.value().segments.size(), 8u) << rows;
    for (const TransferSegment& s : made.value().segments) {
      EXPECT_EQ(s.shape, (Extents{rows / 2, 2}));
      EXPECT_EQ(s.source.strides, (Strides{8, 1}));
      EXPECT_EQ(s.target.strides, (Strides{2, 1}));
    }
    EXPECT_EQ(made.value().statistics.elements_moved, rows * 8);
  }
}

TEST(Reshard, OverlapsMergeAcrossPiecesAndAxes) {
  // A (4, 6, 8) tensor in 2 shards along axis 1 to 2 shards along axis 2, and back: each
  // overlap is a 3-d box whose views step as 2-d ones; the plans match the reference.
  const Map by_rows = contiguous_split_map({4, 6, 8}, {3, 3}, 1).value();
  const Map by_columns = contiguous_split_map({4, 6, 8}, {4, 4}, 2).value();
  const Buffer full = markers(by_rows);
  for (const auto& [from, to] : {std::pair{&by_rows, &by_columns}, std::pair{&by_columns, &by_rows}}) {
    auto made = plan(*from, *to);
    ASSERT_TRUE(made.ok()) << made.error().to_string();
    EXPECT_EQ(made.value().segments.size(), 4u);
    EXPECT_EQ(execute(made.value(), shards_of(*from, full), DType::float32).value(), shards_of(*to, full));
  }
  // One rank holding F in two pieces, back to back in its shard: one segment.
  const Map two_pieces = M({4, 6}, {R(0, Extents{24}, {P({2, 6}, 0, {6, 1}, 0, {6, 1}, {0}),
                                                     P({2, 6}, 12, {6, 1}, 12, {6, 1}, {0})})});
  ASSERT_TRUE(check_map(two_pieces).ok()) << check_map(two_pieces).error().to_string();
  const Map whole = contiguous_split_map({4, 6}, {4}, 0).value();
  auto made = plan(two_pieces, whole);
  ASSERT_TRUE(made.ok()) << made.error().to_string();
  ASSERT_EQ(made.value().segments.size(), 1u);
  EXPECT_EQ(made.value().segments[0].shape, Extents{24});
}

TEST(Reshard, PlantedMergeBugBreaksABoxPlan) {
  // One rank holds F's last two rows swapped in its shard: the target's rows come from
  // shard rows 0, 1, 3, 2, whose distances change, which only the planted bug joins.
  const Map swapped = M({4, 3}, {R(0, Extents{4, 3}, {P({1, 3}, 0, {3, 1}, 0, {3, 1}, {0}),
                                                    P({1, 3}, 3, {3, 1}, 3, {3, 1}, {0}),
                                                    P({1, 3}, 6, {3, 1}, 9, {3, 1}, {0}),
                                                    P({1, 3}, 9, {3, 1}, 6, {3, 1}, {0})})});
  ASSERT_TRUE(check_map(swapped).ok()) << check_map(swapped).error().to_string();
  const Map whole = contiguous_split_map({4, 3}, {4}, 0).value();
  const Buffer full = markers(swapped);
  ReshardOptions bugged;
  bugged.bugs.merge_unequal_strides = true;
  auto right = plan(swapped, whole);
  auto wrong = plan(swapped, whole, bugged);
  ASSERT_TRUE(right.ok() && wrong.ok());
  EXPECT_EQ(execute(right.value(), shards_of(swapped, full), DType::float32).value(), shards_of(whole, full));
  EXPECT_LT(wrong.value().segments.size(), right.value().segments.size());
  auto executed = execute(wrong.value(), shards_of(swapped, full), DType::float32);
  EXPECT_FALSE(executed.ok() && executed.value() == shards_of(whole, full)) << "the planted bug changed nothing";
}

TEST(Reshard, ExecuteChecksTheShardsAndIntoCallerBuffers) {
  const Map source = contiguous_split_map({6}, {3, 3}, 0).value();
  const Map target = contiguous_split_map({6}, {2, 4}, 0).value();
  const Buffer full = markers(source);
  const ShardSet shards = shards_of(source, full);
  const Plan made = plan(source, target).value();
  ShardSet into;
  into.emplace(0, Buffer(DType::float32, 2));
  into.emplace(1, Buffer(DType::float32, 4));
  ASSERT_TRUE(execute_into(made, shards, into).ok());
  EXPECT_EQ(into, shards_of(target, full));
  into.at(1) = Buffer(DType::float32, 3);
  Status wrong_size = execute_into(made, shards, into);
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_EQ(wrong_size.error().kind, ErrorKind::shape);
  ShardSet missing = shards;
  missing.erase(1);
  auto refused = execute(made, missing, DType::float32);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::shape);
  // A plan edited to read past a shard is refused, not executed.
  Plan edited = made;
  edited.segments.front().source.offset = 2;
  auto outside = execute(edited, shards, DType::float32);
  ASSERT_FALSE(outside.ok());
  EXPECT_EQ(outside.error().kind, ErrorKind::bounds);
}

// Each planted planner bug is found by the truth oracle on generated pairs within a
// minute, as a silently wrong tensor: rows merged into one segment although the source
// distance between them changes, and a copy between different scales (which both maps
// allow alone, and the pair does not: the oracle must not call it valid-but-different).
TEST(Reshard, PlantedPlannerBugsAreFoundQuickly) {
  for (const char* name : {"merge_unequal_strides", "copy_across_scales"}) {
    ConvertOptions convert;
    ReshardOptions planted;
    planted.bugs.merge_unequal_strides = std::string_view(name) == "merge_unequal_strides";
    planted.bugs.copy_across_scales = std::string_view(name) == "copy_across_scales";
    auto target = oracles::make_policy_target(convert, planted);
    gen::SeededChoices choices(1);
    gen::CaseOptions options;
    options.op = Op::reshard;
    const auto start = std::chrono::steady_clock::now();
    int cases = 0;
    std::optional<std::string> found;
    while (!found && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
      const Case c = gen::generate_case(choices, options);
      ++cases;
      auto outcome = oracles::run_case(c, *target);
      ASSERT_TRUE(outcome.ok());
      // Wrong through the true pair itself, or through a pair the contract refuses; a
      // wrong tensor through another valid pair is the valid-but-different class.
      const bool true_pair = c.map == c.truth_map() && *c.target_map == c.target_truth_map();
      if (outcome.value().verdict == Outcome::wrong && (true_pair || !oracles::wrong_on_valid_layout(outcome.value()))) {
        found = outcome.value().message;
      }
    }
    ASSERT_TRUE(found.has_value()) << name << " not found in " << cases << " cases";
    std::cout << "planted " << name << " found after " << cases << " cases: " << *found << "\n";
  }
}

// --- execution through the backends -------------------------------------------------------

// The backends of this build a plan executes on, beside the CPU backend: the device code on
// OpenMP threads (host memory), the same reaching its "device" memory only (CUDA's control
// flow), and CUDA where a device is.
std::vector<std::unique_ptr<Backend>> device_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  if (auto omp = make_device_omp_backend()) backends.push_back(std::move(omp));
  if (auto only = make_device_only_omp_backend()) backends.push_back(std::move(only));
  if (auto cuda = make_cuda_backend()) backends.push_back(std::move(cuda));
  return backends;
}

// `plan` executed on `backend` where its data lives (a device's memory when it reaches
// one), on `threading`; the target shards brought back to the host.
Result<ShardSet> execute_on(Backend& backend, const Plan& made, const ShardSet& shards, DType dtype,
                            const Threading& threading) {
  const bool device = backend.reaches(Memory::device);
  const ShardSet placed = device ? copy_shards_to(backend, shards, Memory::device) : shards;
  auto got = execute(made, placed, dtype, &backend, threading);
  if (!got || !device) return got;
  for (const auto& [rank, shard] : got.value()) EXPECT_EQ(shard.memory(), Memory::device) << backend.name();
  return copy_shards_to(backend, got.value(), Memory::host);
}

// One plan, every backend: the same target shards, bit for bit, as the CPU backend's and
// the reference model's, on generated pairs of every constructor (strided, transposed,
// replicated, empty ranks; every dtype the generator draws), with and without replica
// checks, under several thread counts and work-item tiles.
TEST(ReshardBackends, EveryBackendWritesTheSameTargetShardsOnGeneratedPairs) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  const auto cpu = make_cpu_backend();
  const auto backends = device_backends();
  ASSERT_GE(backends.size(), 2u);
  gen::SeededChoices choices(47);
  gen::LayoutOptions options;
  int executed = 0;
  for (int i = 0; i < 600; ++i) {
    const gen::LayoutPair pair = gen::generate_layout_pair(choices, options);
    const DType dtype = pair.source.dtype;
    const Buffer full = markers(pair.source.map, dtype);
    auto source_shards = oracles::reference_extract_all(pair.source.map, full);
    if (!source_shards.ok()) continue;  // markers a drawn scale cannot hold (contract 1.2)
    ReshardOptions reshard_options;
    reshard_options.compare_replicas = i % 2 == 1;
    auto made = plan(pair.source.map, pair.target.map, reshard_options);
    if (!made.ok()) continue;  // scales that differ between the two maps
    const std::string what = describe(pair.source.map) + "\n->\n" + describe(pair.target.map);
    const Threading threading{1 + i % 3, 0, std::array<Index, 4>{1, 3, 64, 0}[static_cast<std::size_t>(i % 4)]};
    auto want = execute(made.value(), source_shards.value(), dtype, cpu.get(), threading);
    const auto naive = oracles::reference_reshard(pair.source.map, pair.target.map, source_shards.value(), dtype,
                                                  reshard_options.compare_replicas);
    ASSERT_EQ(want.ok(), naive.ok()) << what;
    if (!want.ok()) continue;
    ASSERT_EQ(want.value(), naive.value()) << what;
    for (const auto& backend : backends) {
      auto got = execute_on(*backend, made.value(), source_shards.value(), dtype, threading);
      ASSERT_TRUE(got.ok()) << backend->name() << ": " << got.error().to_string() << "\n" << what;
      EXPECT_EQ(got.value(), want.value()) << backend->name() << "\n" << what;
    }
    ++executed;
  }
  EXPECT_GT(executed, 300);
}

// The test above must be able to fail: a backend whose batched copy loses one segment
// (the last) leaves its target addresses unwritten, and the comparison sees it.
class SegmentDroppingBackend final : public Backend {
 public:
  std::string_view name() const override { return "segment-dropping"; }
  bool runs_batches() const override { return true; }
  void copy_block(DType dtype, const BlockCopy& copy) override { cpu_->copy_block(dtype, copy); }
  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    return cpu_->compare_block(dtype, copy);
  }
  bool copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                   std::uint64_t* digest_of_written) override {
    return cpu_->copy_blocks(dtype, blocks.first(blocks.empty() ? 0 : blocks.size() - 1), threading, digest_of_written);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

TEST(ReshardBackends, ABackendThatDropsASegmentIsSeen) {
  const Map source = contiguous_split_map({16, 16}, std::vector<Index>(8, 2), 1).value();
  const Map target = contiguous_split_map({16, 16}, std::vector<Index>(4, 4), 0).value();
  const Buffer full = markers(source);
  SegmentDroppingBackend dropping;
  ShardSet zeroed;
  const Plan made = plan(source, target).value();
  for (const auto& [rank, numel] : made.target_numel) zeroed.emplace(rank, Buffer(DType::float32, numel));
  ASSERT_TRUE(execute_into(made, shards_of(source, full), zeroed, &dropping).ok());
  EXPECT_NE(zeroed, shards_of(target, full));
}

// A backend that does not reach the shards' memory, or shards in two memories, is the
// caller's mistake (std::invalid_argument), before anything is read.
TEST(ReshardBackends, ShardsOutOfTheBackendsReachAreRefusedAsTheCallersMistake) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  const Map source = contiguous_split_map({8, 6}, {3, 3}, 1).value();
  const Map target = contiguous_split_map({8, 6}, {4, 4}, 0).value();
  const Buffer full = markers(source);
  const ShardSet shards = shards_of(source, full);
  const Plan made = plan(source, target).value();
  const auto device_only = make_device_only_omp_backend();
  const ShardSet on_device = copy_shards_to(*device_only, shards, Memory::device);
  EXPECT_THROW((void)execute(made, on_device, DType::float32), std::invalid_argument);  // the CPU backend
  EXPECT_THROW((void)execute(made, shards, DType::float32, device_only.get()), std::invalid_argument);
  ReshardOptions on_cpu;
  EXPECT_THROW((void)reshard(source, target, on_device, DType::float32, on_cpu), std::invalid_argument);
  ShardSet mixed = shards;
  mixed.insert_or_assign(1, device_only->copy_to(shards.at(1), Memory::device));
  const auto device_omp = make_device_omp_backend();
  EXPECT_THROW((void)execute(made, mixed, DType::float32, device_omp.get()), std::invalid_argument);
  // Target shards in another memory than the sources'.
  ShardSet into = execute(made, shards, DType::float32).value();
  EXPECT_THROW((void)execute_into(made, on_device, into, device_omp.get()), std::invalid_argument);
  EXPECT_TRUE(execute_into(made, shards, into, device_omp.get()).ok());
  EXPECT_EQ(into, shards_of(target, full));
}

// --- content digests (contract 10) on both sides of a plan -----------------------------

// A TP 3 column split of 12 x 24 to a TP 2 row split, each map recording digest(F) of
// the markers under "param".
struct DigestedPair {
  Map source = contiguous_split_map({12, 24}, {8, 8, 8}, 1).value();
  Map target = contiguous_split_map({12, 24}, {6, 6}, 0).value();
  Buffer full = markers(source);
  std::uint64_t recorded = digest(full);
  DigestedPair() {
    source.content_digests["param"] = recorded;
    target.content_digests["param"] = recorded;
  }
};

// Ranks 0 and 1 of a map trade their pieces: still a valid map, of another layout.
Map with_ranks_traded(Map map) {
  std::swap(map.ranks[0].pieces, map.ranks[1].pieces);
  for (auto& entry : map.ranks) {
    for (Piece& piece : entry.pieces) piece.locations = {entry.rank};
  }
  return map;
}

ReshardOptions asking_for(std::optional<std::string> state, std::optional<std::uint64_t> expected = std::nullopt) {
  ReshardOptions options;
  options.digest_state = std::move(state);
  options.expected_digest = expected;
  return options;
}

TEST(ReshardDigest, AMatchingRecordChangesNothing) {
  const DigestedPair p;
  const ShardSet sources = shards_of(p.source, p.full);
  for (const auto& options : {asking_for("param"), asking_for(std::nullopt, p.recorded),
                              asking_for("param", p.recorded)}) {
    auto got = reshard(p.source, p.target, sources, DType::float32, options);
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    EXPECT_EQ(got.value(), shards_of(p.target, p.full));
  }
}

// The class no check of a map can see (contract 10): a source map that is valid but says
// the shards hold another layout. Without a digest the plan copies the wrong elements.
TEST(ReshardDigest, ASourceMapOfAnotherLayoutIsRefusedOnTheSourceSide) {
  const DigestedPair p;
  const ShardSet sources = shards_of(p.source, p.full);
  const Map lying = with_ranks_traded(p.source);
  ASSERT_TRUE(check_map(lying).ok());
  auto silent = reshard(lying, p.target, sources, DType::float32);
  ASSERT_TRUE(silent.ok()) << silent.error().to_string();
  EXPECT_NE(silent.value(), shards_of(p.target, p.full));
  auto refused = reshard(lying, p.target, sources, DType::float32, asking_for("param"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::digest);
  EXPECT_NE(refused.error().sentence.find("F as the source shards hold it has content digest"), std::string::npos)
      << refused.error().sentence;
  EXPECT_NE(refused.error().sentence.find(format_digest(p.recorded)), std::string::npos) << refused.error().sentence;
  // The caller's own value is judged the same way.
  auto expected = reshard(lying, p.target, sources, DType::float32, asking_for(std::nullopt, p.recorded));
  ASSERT_FALSE(expected.ok());
  EXPECT_NE(expected.error().sentence.find("the expected digest is"), std::string::npos);
}

// A target map that is valid but wrong places F's elements consistently with itself: its
// shards hold F with the recorded digest, so no digest can refuse it (as for extract).
TEST(ReshardDigest, ATargetMapOfAnotherLayoutIsBeyondAnyDigest) {
  const DigestedPair p;
  const Map lying = with_ranks_traded(p.target);
  auto got = reshard(p.source, lying, shards_of(p.source, p.full), DType::float32, asking_for("param"));
  ASSERT_TRUE(got.ok()) << got.error().to_string();
  EXPECT_EQ(got.value(), shards_of(lying, p.full));
  EXPECT_NE(got.value(), shards_of(p.target, p.full));
}

TEST(ReshardDigest, RecordsMustExistAndAgree) {
  DigestedPair p;
  const ShardSet sources = shards_of(p.source, p.full);
  auto missing = reshard(p.source, p.target, sources, DType::float32, asking_for("exp_avg"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::digest);
  EXPECT_NE(missing.error().sentence.find("the source map records no content digest for state \"exp_avg\""),
            std::string::npos)
      << missing.error().sentence;
  Map other = p.target;
  other.content_digests["param"] ^= 1;
  auto disagree = reshard(p.source, other, sources, DType::float32, asking_for("param"));
  ASSERT_FALSE(disagree.ok());
  EXPECT_EQ(disagree.error().kind, ErrorKind::digest);
  EXPECT_NE(disagree.error().sentence.find("do not describe one tensor"), std::string::npos)
      << disagree.error().sentence;
  // A target map without a record of its own is fine: the source map's counts.
  other.content_digests.clear();
  EXPECT_TRUE(reshard(p.source, other, sources, DType::float32, asking_for("param")).ok());
  // A damaged source record.
  p.source.content_digests["param"] ^= 1;
  p.target.content_digests.clear();
  auto damaged = reshard(p.source, p.target, sources, DType::float32, asking_for("param"));
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.error().kind, ErrorKind::digest);
}

// The target side's checks are the ones that see the planner itself: every generated pair
// the planted merge bug copies wrongly is refused there once a digest is asked for (by the
// digest, or where only a replica the digest does not count went wrong, by comparing it
// with its lowest holder's copy).
TEST(ReshardDigest, APlannerBugIsRefusedOnTheTargetSide) {
  ReshardOptions planted;
  planted.bugs.merge_unequal_strides = true;
  gen::SeededChoices choices(5);
  gen::CaseOptions options;
  options.op = Op::reshard;
  options.corrupt_probability = 0.0;
  options.adversarial_data = false;
  int wrong = 0, by_digest = 0;
  for (int i = 0; i < 3000 && wrong < 20; ++i) {
    const Case c = gen::generate_case(choices, options);
    const Buffer full = markers(c.map, c.dtype);
    auto sources = oracles::reference_extract_all(c.map, full);
    auto wanted = oracles::reference_extract_all(*c.target_map, full);
    if (!sources.ok() || !wanted.ok()) continue;
    auto got = reshard(c.map, *c.target_map, sources.value(), c.dtype, planted);
    if (!got.ok() || got.value() == wanted.value()) continue;
    ++wrong;
    Map source = c.map, target = *c.target_map;
    source.content_digests["param"] = digest(full);
    ReshardOptions verified = planted;
    verified.digest_state = "param";
    auto refused = reshard(source, target, sources.value(), c.dtype, verified);
    ASSERT_FALSE(refused.ok()) << c.name;
    const Error& error = refused.error();
    if (error.kind == ErrorKind::digest) {
      ++by_digest;
      EXPECT_NE(error.sentence.find("the plan moved elements to the wrong places"), std::string::npos)
          << error.sentence;
    } else {
      EXPECT_EQ(error.kind, ErrorKind::different_data) << error.to_string();
      EXPECT_NE(error.sentence.find("in the target shards the plan wrote, "), std::string::npos) << error.sentence;
    }
  }
  EXPECT_GT(wrong, 0) << "the planted bug never showed in 3000 pairs";
  EXPECT_GT(by_digest, 0);
}

// Strict as it is, but its reshard never verifies a digest (as DeepSpeed's planner).
class DigestBlindStrict final : public oracles::Target {
 public:
  const std::string& name() const override { return name_; }
  oracles::TargetResult<oracles::Accepted> check(const oracles::TargetMap& map) override { return strict_->check(map); }
  oracles::TargetResult<oracles::TensorAnswer> rebuild(const oracles::TargetMap& map, const ShardSet& shards, DType dtype,
                                        int scale_power, const oracles::DigestRequest& digest) override {
    return strict_->rebuild(map, shards, dtype, scale_power, digest);
  }
  oracles::TargetResult<oracles::TensorAnswer> extract(const oracles::TargetMap& map, const Buffer& full, Rank rank,
                                        int scale_power) override {
    return strict_->extract(map, full, rank, scale_power);
  }
  bool supports(Op op) const override { return strict_->supports(op); }
  oracles::TargetResult<oracles::Resharded> reshard(const oracles::TargetMap& source, const oracles::TargetMap& target,
                                                     const ShardSet& shards, DType dtype, int scale_power,
                                                     const oracles::DigestRequest&) override {
    return strict_->reshard(source, target, shards, dtype, scale_power, oracles::DigestRequest{});
  }

 private:
  std::string name_ = "digest-blind-strict";
  std::unique_ptr<oracles::Target> strict_ = oracles::make_policy_target(ConvertOptions{});
};

// The truth oracle asks a reshard to verify the case's digest, and judges an answer that
// did not as silently wrong wherever the returned shards hold F with another digest.
TEST(ReshardDigest, TheTruthOracleJudgesATargetThatIgnoresTheDigest) {
  const DigestedPair p;
  Case c;
  c.ops = {Op::reshard};
  c.dtype = DType::float32;
  c.truth = p.source;
  c.map = with_ranks_traded(p.source);
  c.target_map = p.target;
  c.digest_state = "param";
  c.constructor = "hand";
  c.corruption = CorruptionRecord{"none", {}, {}, {}, {}, {}};
  auto strict = oracles::run_case(c);
  ASSERT_TRUE(strict.ok()) << strict.error().to_string();
  EXPECT_EQ(strict.value().verdict, Outcome::refused) << strict.value().message;
  ASSERT_TRUE(strict.value().error.has_value());
  EXPECT_EQ(strict.value().error->kind, ErrorKind::digest);
  DigestBlindStrict blind;
  auto ignored = oracles::run_case(c, blind);
  ASSERT_TRUE(ignored.ok()) << ignored.error().to_string();
  EXPECT_EQ(ignored.value().verdict, Outcome::wrong) << ignored.value().message;
  ASSERT_EQ(ignored.value().ops.size(), 1u);
  EXPECT_TRUE(ignored.value().ops[0].digest_ignored);
  EXPECT_NE(ignored.value().message.find("reshard returned target shards with content digest"), std::string::npos)
      << ignored.value().message;
  // Without a digest asked for, the same answer is the valid-but-different class.
  c.digest_state.reset();
  auto plain = oracles::run_case(c, blind);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(oracles::wrong_on_valid_layout(plain.value())) << plain.value().message;
  // The true source map, and a target map whose record is damaged: exact shards, yet the
  // target side's record was asked for too.
  c.digest_state = "param";
  c.map = p.source;
  c.truth.reset();
  c.target_truth = p.target;
  c.target_map->content_digests["param"] ^= 1;
  auto strict_record = oracles::run_case(c);
  ASSERT_TRUE(strict_record.ok());
  EXPECT_EQ(strict_record.value().verdict, Outcome::refused) << strict_record.value().message;
  auto blind_record = oracles::run_case(c, blind);
  ASSERT_TRUE(blind_record.ok());
  EXPECT_EQ(blind_record.value().verdict, Outcome::wrong) << blind_record.value().message;
  EXPECT_NE(blind_record.value().message.find("although the target map records"), std::string::npos)
      << blind_record.value().message;
}

// Generated pairs with recorded digests: nothing silently wrong, and the valid-but-different
// answers left are of pairs whose target side was corrupted.
TEST(ReshardDigest, GeneratedPairsWithDigestsLeaveOnlyTargetSideDifferences) {
  gen::SeededChoices choices(23);
  gen::CaseOptions options;
  options.op = Op::reshard;
  options.record_digest = true;
  int refused_digest = 0;
  for (int i = 0; i < 1500; ++i) {
    const Case c = gen::generate_case(choices, options);
    ASSERT_EQ(c.digest_state, std::optional<std::string>("param")) << c.name;
    auto outcome = oracles::run_case(c);
    ASSERT_TRUE(outcome.ok()) << c.name << ": " << outcome.error().to_string();
    const auto& o = outcome.value();
    if (o.verdict == Outcome::wrong) {
      ASSERT_TRUE(oracles::wrong_on_valid_layout(o)) << o.message << "\n" << encode_case_text(c);
      EXPECT_TRUE(c.name.find("-target-") != std::string::npos || c.name.find("-both-") != std::string::npos)
          << o.message << "\n" << encode_case_text(c);
    }
    refused_digest += o.verdict == Outcome::refused && o.error && o.error->kind == ErrorKind::digest;
  }
  // The catalogue's record corruptions alone make some.
  EXPECT_GT(refused_digest, 0);
}

}  // namespace
}  // namespace shardcheck
