// The constructors of contract 5: the worked example, argument errors, and
// round trips over random layouts and every dtype.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include <fmt/format.h>

#include "shardcheck/checks.h"
#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/dtype.h"
#include "support/spec_maps.h"

namespace shardcheck {
namespace {

constexpr std::uint64_t kSeed = 0x5eedc7a5;
constexpr int kCases = 300;

void expect_format_error(const Result<Map>& result, std::string_view needle, std::optional<Rank> rank = std::nullopt) {
  ASSERT_FALSE(result.ok()) << "expected a format error mentioning '" << needle << "'";
  EXPECT_EQ(result.error().kind, ErrorKind::format) << result.error().to_string();
  EXPECT_NE(result.error().message.find(needle), std::string::npos) << result.error().message;
  if (rank) {
    EXPECT_EQ(result.error().rank, rank) << result.error().message;
  }
}

// The conventions every constructor promises, independent of conversion code.
void expect_conventions(const Map& map, Index tp) {
  ASSERT_EQ(static_cast<Index>(map.ranks.size()), tp);
  const Strides source_strides = row_major_strides(map.logical_shape);
  const Index full = *checked_numel(map.logical_shape);
  for (Index r = 0; r < tp; ++r) {
    const RankEntry& entry = map.ranks[static_cast<std::size_t>(r)];
    EXPECT_EQ(entry.rank, r);
    ASSERT_TRUE(entry.shard_shape.has_value());
    ASSERT_EQ(entry.shard_shape->size(), map.logical_shape.size());
    const Strides dest_strides = row_major_strides(*entry.shard_shape);
    for (const Piece& piece : entry.pieces) {
      EXPECT_EQ(piece.source.strides, source_strides) << describe(piece);
      EXPECT_EQ(piece.dest.strides, dest_strides) << describe(piece);
      EXPECT_TRUE(std::is_sorted(piece.locations.begin(), piece.locations.end()));
      EXPECT_NE(std::find(piece.locations.begin(), piece.locations.end(), r), piece.locations.end()) << describe(piece);
      // An empty piece (a rank of width 0, an empty F) sits where its position along dim
      // puts it, which can be past the end, as DeepSpeed's constructors place it.
      if (*checked_numel(piece.shape) > 0) {
        EXPECT_LT(piece.source.offset, full) << describe(piece);
      }
    }
  }
}

// Walks every element of every piece: each shard address written exactly once, each
// element of F reached, replicas agreeing. Independent of checks.cc and convert.cc.
std::string naive_walk(const Map& map) {
  const Index full = *checked_numel(map.logical_shape);
  std::vector<Index> rebuilt(static_cast<std::size_t>(full), -1);
  for (const RankEntry& entry : map.ranks) {
    const Index shard_numel = *checked_numel(*entry.shard_shape);
    std::vector<Index> shard(static_cast<std::size_t>(shard_numel), -1);
    for (const Piece& piece : entry.pieces) {
      const Index n = *checked_numel(piece.shape);
      for (Index flat = 0; flat < n; ++flat) {
        Index rest = flat, src = piece.source.offset, dst = piece.dest.offset;
        for (std::size_t k = piece.shape.size(); k-- > 0;) {
          const Index i = rest % piece.shape[k];
          rest /= piece.shape[k];
          src += i * piece.source.strides[k];
          dst += i * piece.dest.strides[k];
        }
        if (src >= full || dst >= shard_numel) {
          return fmt::format("rank {} {} leaves its buffer", entry.rank, describe(piece));
        }
        if (shard[static_cast<std::size_t>(dst)] != -1) {
          return fmt::format("rank {} writes shard address {} twice", entry.rank, dst);
        }
        shard[static_cast<std::size_t>(dst)] = src;
        Index& slot = rebuilt[static_cast<std::size_t>(src)];
        if (slot != -1 && piece.locations.size() == 1) {
          return fmt::format("element {} is written twice, once by single holder {}", src, entry.rank);
        }
        slot = src;
      }
    }
    for (Index a = 0; a < shard_numel; ++a) {
      if (shard[static_cast<std::size_t>(a)] == -1) {
        return fmt::format("rank {} never writes shard address {}", entry.rank, a);
      }
    }
  }
  for (Index e = 0; e < full; ++e) {
    if (rebuilt[static_cast<std::size_t>(e)] != e) return fmt::format("element {} uncovered", e);
  }
  return {};
}

// check_map accepts, and extract_all then rebuild returns F bit-exactly, for every dtype.
void expect_round_trip(const Map& map) {
  ASSERT_EQ(naive_walk(map), "") << describe(map);
  const Status verdict = check_map(map);
  ASSERT_TRUE(verdict.ok()) << verdict.error().to_string() << "\n" << describe(map);
  const Index numel = *checked_numel(map.logical_shape);
  for (DType dtype : kAllDTypes) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Buffer full = marker_buffer(dtype, numel);
    auto shards = extract_all(map, full);
    ASSERT_TRUE(shards.ok()) << shards.error().to_string() << "\n" << describe(map);
    ASSERT_EQ(shards.value().size(), map.ranks.size());
    auto rebuilt = rebuild(map, shards.value(), dtype);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.error().to_string() << "\n" << describe(map);
    ASSERT_TRUE(rebuilt.value() == full) << describe(map);
  }
}

// ---------------------------------------------------------------- random parameters

using Rng = std::mt19937_64;

Index uniform(Rng& rng, Index lo, Index hi) {  // closed range
  return std::uniform_int_distribution<Index>(lo, hi)(rng);
}

Extents random_shape(Rng& rng) {
  Extents shape(static_cast<std::size_t>(uniform(rng, 1, 3)));
  for (Index& e : shape) e = uniform(rng, 0, 7);
  return shape;
}

// `total` cut into `parts` non-negative widths; zeros are common on purpose.
std::vector<Index> random_widths(Rng& rng, Index total, Index parts) {
  std::vector<Index> cuts{0, total};
  for (Index i = 1; i < parts; ++i) cuts.push_back(uniform(rng, 0, total));
  std::sort(cuts.begin(), cuts.end());
  std::vector<Index> widths;
  for (std::size_t i = 1; i < cuts.size(); ++i) widths.push_back(cuts[i] - cuts[i - 1]);
  return widths;
}

// Runs `body` kCases times with its own seeded generator, naming the case on failure.
void for_cases(std::string_view name, const std::function<void(Rng&)>& body) {
  for (int c = 0; c < kCases; ++c) {
    Rng rng(kSeed + static_cast<std::uint64_t>(c));
    SCOPED_TRACE(fmt::format("{} case {} (seed {:#x})", name, c, kSeed + c));
    body(rng);
    if (::testing::Test::HasFailure()) return;  // one failing case is enough to read
  }
}

// ---------------------------------------------------------------- worked example

TEST(SubParamMap, WorkedExampleFieldByField) {
  auto result = sub_param_map({2, 6}, {4, 2}, {{2, 2}, {1, 1}}, 1);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  const Map& map = result.value();
  EXPECT_EQ(map.logical_shape, (Extents{2, 6}));
  ASSERT_EQ(map.ranks.size(), 2u);

  EXPECT_EQ(map.ranks[0].rank, 0);
  EXPECT_EQ(map.ranks[0].shard_shape, (Extents{2, 3}));
  ASSERT_EQ(map.ranks[0].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[0].pieces[0], build::P({2, 2}, 0, {6, 1}, 0, {3, 1}, {0}));
  EXPECT_EQ(map.ranks[0].pieces[1], build::P({2, 1}, 4, {6, 1}, 2, {3, 1}, {0}));

  EXPECT_EQ(map.ranks[1].rank, 1);
  EXPECT_EQ(map.ranks[1].shard_shape, (Extents{2, 3}));
  ASSERT_EQ(map.ranks[1].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[1].pieces[0], build::P({2, 2}, 2, {6, 1}, 0, {3, 1}, {1}));
  EXPECT_EQ(map.ranks[1].pieces[1], build::P({2, 1}, 5, {6, 1}, 2, {3, 1}, {1}));

  EXPECT_EQ(describe(map.ranks[1].pieces[1]), "P(2,1) src(5,(6,1)) dst(2,(3,1)) loc{1}");
  expect_round_trip(map);
}

// ---------------------------------------------------------------- concrete layouts

TEST(ReplicatedMap, EveryRankHoldsTheWholeTensor) {
  auto result = replicated_map({3, 2}, 3);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  expect_conventions(result.value(), 3);
  for (const RankEntry& entry : result.value().ranks) {
    EXPECT_EQ(entry.shard_shape, (Extents{3, 2}));
    ASSERT_EQ(entry.pieces.size(), 1u);
    EXPECT_EQ(entry.pieces[0], build::P({3, 2}, 0, {2, 1}, 0, {2, 1}, {0, 1, 2}));
  }
  expect_round_trip(result.value());
}

TEST(ReplicatedMap, AnEmptyTensorIsStillOnePiecePerRank) {
  auto result = replicated_map({0, 4}, 2);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  expect_conventions(result.value(), 2);
  for (const RankEntry& entry : result.value().ranks) {
    ASSERT_EQ(entry.pieces.size(), 1u);
    EXPECT_EQ(entry.pieces[0], build::P({0, 4}, 0, {4, 1}, 0, {4, 1}, {0, 1}));
  }
  expect_round_trip(result.value());
}

// The limit on listed locations (2^24 rank entries over all pieces) is inclusive: TP 4096
// lists exactly 2^24 and is built, TP 4097 is refused format before anything is allocated.
TEST(ReplicatedMap, TheLocationLimitIsInclusive) {
  auto at_limit = replicated_map({1}, 4096);
  ASSERT_TRUE(at_limit.ok()) << at_limit.error().to_string();
  ASSERT_EQ(at_limit.value().ranks.size(), 4096u);
  EXPECT_EQ(at_limit.value().ranks.back().pieces.front().locations.size(), 4096u);
  auto beyond = replicated_map({1}, 4097);
  ASSERT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.error().kind, ErrorKind::format);
  EXPECT_NE(beyond.error().sentence.find("tp 4097 is too large"), std::string::npos) << beyond.error().to_string();
}

TEST(ReplicatedMap, ZeroDimensionalTensor) {
  auto result = replicated_map({}, 2);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  ASSERT_EQ(result.value().ranks.size(), 2u);
  EXPECT_EQ(result.value().ranks[1].shard_shape, Extents{});
  ASSERT_EQ(result.value().ranks[1].pieces.size(), 1u);
  EXPECT_EQ(result.value().ranks[1].pieces[0], build::P({}, 0, {}, 0, {}, {0, 1}));
  expect_round_trip(result.value());
}

TEST(ReplicatedMap, PowerOfTwoScalesRoundTripExactly) {
  for (double scale : {2.0, 0.5}) {
    auto result = replicated_map({2, 3}, 2, scale);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    for (const RankEntry& entry : result.value().ranks) {
      ASSERT_EQ(entry.pieces.size(), 1u);
      EXPECT_EQ(entry.pieces[0].scale, scale);
    }
    ASSERT_TRUE(check_map(result.value()).ok());
    for (DType dtype : kAllDTypes) {
      if (!is_floating(dtype)) continue;
      SCOPED_TRACE(fmt::format("{} scale {}", dtype_name(dtype), scale));
      const Buffer full = marker_buffer(dtype, 6);
      auto shards = extract_all(result.value(), full);
      ASSERT_TRUE(shards.ok()) << shards.error().to_string();
      // The shard really holds F * scale, not F.
      EXPECT_FALSE(shards.value().at(0) == full);
      const double first = bits_to_double(dtype, full.bits(1));
      EXPECT_EQ(bits_to_double(dtype, shards.value().at(0).bits(1)), first * scale);
      auto rebuilt = rebuild(result.value(), shards.value(), dtype);
      ASSERT_TRUE(rebuilt.ok()) << rebuilt.error().to_string();
      EXPECT_TRUE(rebuilt.value() == full);
    }
  }
}

TEST(ContiguousSplitMap, UnevenSizesWithAZeroWidthRank) {
  auto result = contiguous_split_map({4, 6}, {4, 0, 2}, 1);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  const Map& map = result.value();
  expect_conventions(map, 3);
  EXPECT_EQ(map.ranks[0].shard_shape, (Extents{4, 4}));
  ASSERT_EQ(map.ranks[0].pieces.size(), 1u);
  EXPECT_EQ(map.ranks[0].pieces[0], build::P({4, 4}, 0, {6, 1}, 0, {4, 1}, {0}));
  // A zero-width rank keeps its shard shape and lists its empty block, at its place
  // along dim 1 (DeepSpeed's constructor gives the same piece).
  EXPECT_EQ(map.ranks[1].shard_shape, (Extents{4, 0}));
  ASSERT_EQ(map.ranks[1].pieces.size(), 1u);
  EXPECT_EQ(map.ranks[1].pieces[0], build::P({4, 0}, 4, {6, 1}, 0, {0, 1}, {1}));
  ASSERT_EQ(map.ranks[2].pieces.size(), 1u);
  EXPECT_EQ(map.ranks[2].pieces[0], build::P({4, 2}, 4, {6, 1}, 0, {2, 1}, {2}));
  expect_round_trip(map);
}

TEST(ContiguousSplitMap, RowSplitIsDense) {
  auto result = contiguous_split_map({4, 3}, {1, 3}, 0);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  EXPECT_EQ(result.value().ranks[1].pieces[0], build::P({3, 3}, 3, {3, 1}, 0, {3, 1}, {1}));
  expect_round_trip(result.value());
}

TEST(SegmentedMap, ReplicatedSegmentGoesToEveryRank) {
  // GPTBigCode-style: Q split over 2 ranks, then a replicated K/V block of 2 rows.
  auto result = segmented_map({6, 2}, {{4, false}, {2, true}}, 0, 2, {{3, 1}});
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  const Map& map = result.value();
  expect_conventions(map, 2);
  EXPECT_EQ(map.ranks[0].shard_shape, (Extents{5, 2}));
  ASSERT_EQ(map.ranks[0].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[0].pieces[0], build::P({3, 2}, 0, {2, 1}, 0, {2, 1}, {0}));
  EXPECT_EQ(map.ranks[0].pieces[1], build::P({2, 2}, 8, {2, 1}, 6, {2, 1}, {0, 1}));
  EXPECT_EQ(map.ranks[1].shard_shape, (Extents{3, 2}));
  ASSERT_EQ(map.ranks[1].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[1].pieces[0], build::P({1, 2}, 6, {2, 1}, 0, {2, 1}, {1}));
  EXPECT_EQ(map.ranks[1].pieces[1], build::P({2, 2}, 8, {2, 1}, 2, {2, 1}, {0, 1}));
  expect_round_trip(map);
}

TEST(BlockGatherMap, ConsecutiveIdsMergeOthersDoNot) {
  auto result = block_gather_map({2, 12}, {{0, 1, 4}, {3, 2, 5}}, 2, 1);
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  const Map& map = result.value();
  expect_conventions(map, 2);
  EXPECT_EQ(map.ranks[0].shard_shape, (Extents{2, 6}));
  ASSERT_EQ(map.ranks[0].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[0].pieces[0], build::P({2, 4}, 0, {12, 1}, 0, {6, 1}, {0}));
  EXPECT_EQ(map.ranks[0].pieces[1], build::P({2, 2}, 8, {12, 1}, 4, {6, 1}, {0}));
  // 3 then 2 runs backwards and 2 then 5 skips: three pieces, in listed order.
  ASSERT_EQ(map.ranks[1].pieces.size(), 3u);
  EXPECT_EQ(map.ranks[1].pieces[0], build::P({2, 2}, 6, {12, 1}, 0, {6, 1}, {1}));
  EXPECT_EQ(map.ranks[1].pieces[1], build::P({2, 2}, 4, {12, 1}, 2, {6, 1}, {1}));
  EXPECT_EQ(map.ranks[1].pieces[2], build::P({2, 2}, 10, {12, 1}, 4, {6, 1}, {1}));
  expect_round_trip(map);
}

TEST(ExpertPlacementMap, ReplicatedExpertsAndAnIdleRank) {
  // Experts 0,1 on rank 0 only; expert 2 on ranks 0 and 2; expert 3 on rank 2; rank 1 idle.
  auto result = expert_placement_map({4, 3}, {{0, 1, 2}, {}, {3, 2}});
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  const Map& map = result.value();
  expect_conventions(map, 3);
  EXPECT_EQ(map.ranks[0].shard_shape, (Extents{3, 3}));
  ASSERT_EQ(map.ranks[0].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[0].pieces[0], build::P({2, 3}, 0, {3, 1}, 0, {3, 1}, {0}));
  EXPECT_EQ(map.ranks[0].pieces[1], build::P({1, 3}, 6, {3, 1}, 6, {3, 1}, {0, 2}));
  EXPECT_EQ(map.ranks[1].shard_shape, (Extents{0, 3}));
  EXPECT_TRUE(map.ranks[1].pieces.empty());
  ASSERT_EQ(map.ranks[2].pieces.size(), 2u);
  EXPECT_EQ(map.ranks[2].pieces[0], build::P({1, 3}, 9, {3, 1}, 0, {3, 1}, {2}));
  EXPECT_EQ(map.ranks[2].pieces[1], build::P({1, 3}, 6, {3, 1}, 3, {3, 1}, {0, 2}));
  expect_round_trip(map);
}

TEST(ExpertPlacementMap, ReplicatedNeighboursStayOneExpertPieces) {
  auto result = expert_placement_map({3}, {{0, 1, 2}, {0, 1}});
  ASSERT_TRUE(result.ok()) << result.error().to_string();
  const Map& map = result.value();
  ASSERT_EQ(map.ranks[0].pieces.size(), 3u);
  EXPECT_EQ(map.ranks[0].pieces[0], build::P({1}, 0, {1}, 0, {1}, {0, 1}));
  EXPECT_EQ(map.ranks[0].pieces[1], build::P({1}, 1, {1}, 1, {1}, {0, 1}));
  EXPECT_EQ(map.ranks[0].pieces[2], build::P({1}, 2, {1}, 2, {1}, {0}));
  expect_round_trip(map);
}

// ---------------------------------------------------------------- bad arguments

TEST(ConstructorErrors, Replicated) {
  expect_format_error(replicated_map({2}, 0), "tp must be at least 1");
  expect_format_error(replicated_map({2}, -3), "tp must be at least 1");
  expect_format_error(replicated_map({2}, 1 << 20), "too large");
  expect_format_error(replicated_map({2, -1}, 2), "negative extent at axis 1");
  expect_format_error(replicated_map({Index{1} << 40, Index{1} << 40}, 2), "64 bits");
  expect_format_error(replicated_map({2}, 2, 0.0), "scale");
  expect_format_error(replicated_map({2}, 2, std::nan("")), "scale");
  expect_format_error(replicated_map({2}, 2, std::numeric_limits<double>::infinity()), "scale");
}

TEST(ConstructorErrors, ContiguousSplit) {
  expect_format_error(contiguous_split_map({4, 6}, {3, 3}, 2), "dim 2 is out of range");
  expect_format_error(contiguous_split_map({4, 6}, {3, 3}, -1), "dim -1 is out of range");
  expect_format_error(contiguous_split_map({}, {1}, 0), "out of range");
  expect_format_error(contiguous_split_map({4, 6}, {}, 1), "at least one rank");
  expect_format_error(contiguous_split_map({4, 6}, {4, 3}, 1), "sum to 7 but shape[1] is 6");
  expect_format_error(contiguous_split_map({4, 6}, {8, -2}, 1), "sizes[1] = -2 is negative", 1);
  expect_format_error(contiguous_split_map({-4, 6}, {3, 3}, 1), "negative extent");
  expect_format_error(contiguous_split_map({4, 6}, {std::numeric_limits<Index>::max(), 1}, 1), "overflow");
  // F is empty, so its size fits, but rank 1's empty block starts at 2^39 * 2^40.
  const Index big = Index{1} << 40;
  expect_format_error(contiguous_split_map({0, big, big}, {big / 2, big / 2}, 1), "offset beyond 64 bits", 1);
}

TEST(ConstructorErrors, SubParam) {
  expect_format_error(sub_param_map({2, 6}, {4, 2}, {{2, 2}, {1, 1}}, 2), "out of range");
  expect_format_error(sub_param_map({2, 6}, {4, 3}, {{2, 2}, {2, 1}}, 1), "sub_sizes sum to 7");
  expect_format_error(sub_param_map({2, 6}, {4, 2}, {{2, 2}}, 1), "1 width lists given for 2 sub-parameters");
  expect_format_error(sub_param_map({2, 6}, {4, 2}, {{2, 2}, {1, 1}, {0, 0}}, 1), "3 width lists given for 2");
  expect_format_error(sub_param_map({2, 6}, {4, 2}, {{2, 2}, {2}}, 1), "widths[1] lists 1 ranks but widths[0] lists 2");
  expect_format_error(sub_param_map({2, 6}, {4, 2}, {{3, 2}, {1, 1}}, 1), "widths[0] sum to 5 but sub_sizes[0] is 4");
  expect_format_error(sub_param_map({2, 6}, {4, 2}, {{2, 2}, {3, -1}}, 1), "widths[1][1] = -1 is negative", 1);
  expect_format_error(sub_param_map({2, 6}, {7, -1}, {{7}, {-1}}, 1), "sub_sizes[1] = -1");
  expect_format_error(sub_param_map({2, 0}, {}, {}, 1), "at least one sub-parameter");
  expect_format_error(sub_param_map({2, 0}, {0}, {{}}, 1), "at least one rank");
}

TEST(ConstructorErrors, Segmented) {
  const std::vector<Segment> segments{{4, false}, {2, true}};
  expect_format_error(segmented_map({6, 2}, segments, 0, 0, {{2, 2}}), "tp must be at least 1");
  expect_format_error(segmented_map({6, 2}, segments, 3, 2, {{2, 2}}), "out of range");
  expect_format_error(segmented_map({7, 2}, segments, 0, 2, {{2, 2}}), "segment sizes sum to 6 but shape[0] is 7");
  expect_format_error(segmented_map({6, 2}, {{7, false}, {-1, true}}, 0, 2, {{3, 4}}),
                      "segment sizes[1] = -1 is negative");
  expect_format_error(segmented_map({6, 2}, segments, 0, 2, {}), "0 width lists given for 1 split segments");
  expect_format_error(segmented_map({6, 2}, segments, 0, 2, {{2, 2}, {0, 0}}), "2 width lists given for 1");
  expect_format_error(segmented_map({6, 2}, segments, 0, 2, {{1, 1, 2}}), "split_widths[0] lists 3 ranks but tp is 2");
  expect_format_error(segmented_map({6, 2}, segments, 0, 2, {{1, 2}}),
                      "split_widths[0] sum to 3 but segment 0's size is 4");
  expect_format_error(segmented_map({6, 2}, segments, 0, 2, {{5, -1}}), "is negative", 1);
}

TEST(ConstructorErrors, BlockGather) {
  expect_format_error(block_gather_map({2, 6}, {{0}, {1, 2}}, 0, 1), "block_size must be");
  expect_format_error(block_gather_map({2, 6}, {{0}, {1, 2}}, -2, 1), "block_size must be");
  expect_format_error(block_gather_map({2, 7}, {{0}, {1, 2}}, 2, 1), "not a multiple");
  expect_format_error(block_gather_map({2, 6}, {{0}, {1, 2}}, 2, 2), "out of range");
  expect_format_error(block_gather_map({2, 6}, {}, 2, 1), "at least one rank");
  expect_format_error(block_gather_map({2, 6}, {{0}, {1, 3}}, 2, 1), "outside 0..2", 1);
  expect_format_error(block_gather_map({2, 6}, {{0}, {-1, 2}}, 2, 1), "block -1", 1);
  expect_format_error(block_gather_map({2, 6}, {{0, 1}, {1}}, 2, 1), "block 1 is listed by rank 0 and again by rank 1",
                      1);
  expect_format_error(block_gather_map({2, 6}, {{0}, {1}}, 2, 1), "held exactly once");
  expect_format_error(block_gather_map({2, 6}, {{0, 1}, {2, 0}}, 2, 1), "held exactly once");
  // A huge extent with few listings is refused before anything is sized by it.
  expect_format_error(block_gather_map({Index{1} << 50}, {{0}}, 1, 0), "held exactly once");
}

TEST(ConstructorErrors, ExpertPlacement) {
  expect_format_error(expert_placement_map({}, {{0}}), "0-d shape");
  expect_format_error(expert_placement_map({2, 3}, {}), "at least one rank");
  expect_format_error(expert_placement_map({2, 3}, {{0}, {2}}), "rank 1 lists expert 2", 1);
  expect_format_error(expert_placement_map({2, 3}, {{0}, {-1, 1}}), "expert -1", 1);
  expect_format_error(expert_placement_map({3, 3}, {{0, 1}, {1, 0}}), "expert 2 is held by no");
  expect_format_error(expert_placement_map({3, 3}, {{0}, {1}}), "every expert needs a holder");
  expect_format_error(expert_placement_map({2, 3}, {{0, 1, 0}}), "lists expert 0 twice", 0);
  expect_format_error(expert_placement_map({Index{1} << 50, 2}, {{0}}), "needs a holder");
  expect_format_error(expert_placement_map({2, -3}, {{0, 1}}), "negative extent");
}

// ---------------------------------------------------------------- random round trips

TEST(RoundTrip, Replicated) {
  for_cases("replicated_map", [](Rng& rng) {
    Extents shape = random_shape(rng);
    if (uniform(rng, 0, 5) == 0) shape.clear();  // 0-d
    const int tp = static_cast<int>(uniform(rng, 1, 6));
    auto result = replicated_map(shape, tp);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    expect_conventions(result.value(), tp);
    expect_round_trip(result.value());
  });
}

TEST(RoundTrip, ContiguousSplit) {
  for_cases("contiguous_split_map", [](Rng& rng) {
    const Extents shape = random_shape(rng);
    const int dim = static_cast<int>(uniform(rng, 0, static_cast<Index>(shape.size()) - 1));
    const Index tp = uniform(rng, 1, 6);
    const auto sizes = random_widths(rng, shape[static_cast<std::size_t>(dim)], tp);
    SCOPED_TRACE(fmt::format("shape ({}) dim {} sizes [{}]", fmt::join(shape, ","), dim, fmt::join(sizes, ",")));
    auto result = contiguous_split_map(shape, sizes, dim);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    expect_conventions(result.value(), tp);
    expect_round_trip(result.value());
  });
}

TEST(RoundTrip, SubParam) {
  for_cases("sub_param_map", [](Rng& rng) {
    const Extents shape = random_shape(rng);
    const int dim = static_cast<int>(uniform(rng, 0, static_cast<Index>(shape.size()) - 1));
    const Index tp = uniform(rng, 1, 6);
    const auto sub_sizes = random_widths(rng, shape[static_cast<std::size_t>(dim)], uniform(rng, 1, 3));
    std::vector<std::vector<Index>> widths;
    for (Index size : sub_sizes) widths.push_back(random_widths(rng, size, tp));
    SCOPED_TRACE(
        fmt::format("shape ({}) dim {} sub_sizes [{}]", fmt::join(shape, ","), dim, fmt::join(sub_sizes, ",")));
    auto result = sub_param_map(shape, sub_sizes, widths, dim);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    expect_conventions(result.value(), tp);
    expect_round_trip(result.value());
  });
}

TEST(RoundTrip, Segmented) {
  for_cases("segmented_map", [](Rng& rng) {
    const Extents shape = random_shape(rng);
    const int dim = static_cast<int>(uniform(rng, 0, static_cast<Index>(shape.size()) - 1));
    const int tp = static_cast<int>(uniform(rng, 1, 6));
    const auto sizes = random_widths(rng, shape[static_cast<std::size_t>(dim)], uniform(rng, 1, 3));
    std::vector<Segment> segments;
    std::vector<std::vector<Index>> split_widths;
    for (Index size : sizes) {
      const bool replicated = uniform(rng, 0, 2) == 0;
      segments.push_back({size, replicated});
      if (!replicated) split_widths.push_back(random_widths(rng, size, tp));
    }
    auto result = segmented_map(shape, segments, dim, tp, split_widths);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    expect_conventions(result.value(), tp);
    expect_round_trip(result.value());
  });
}

TEST(RoundTrip, BlockGather) {
  for_cases("block_gather_map", [](Rng& rng) {
    Extents shape = random_shape(rng);
    const int dim = static_cast<int>(uniform(rng, 0, static_cast<Index>(shape.size()) - 1));
    const Index block_size = uniform(rng, 1, 3);
    const Index blocks = uniform(rng, 0, 7 / block_size);
    shape[static_cast<std::size_t>(dim)] = blocks * block_size;
    const Index tp = uniform(rng, 1, 6);
    std::vector<std::vector<Index>> ids(static_cast<std::size_t>(tp));
    for (Index b = 0; b < blocks; ++b) {
      ids[static_cast<std::size_t>(uniform(rng, 0, tp - 1))].push_back(b);
    }
    // Sorted lists exercise merging; shuffled ones exercise out-of-order gathers.
    for (auto& list : ids) {
      if (uniform(rng, 0, 1) == 0) std::shuffle(list.begin(), list.end(), rng);
    }
    auto result = block_gather_map(shape, ids, block_size, dim);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    expect_conventions(result.value(), tp);
    expect_round_trip(result.value());
  });
}

TEST(RoundTrip, ExpertPlacement) {
  for_cases("expert_placement_map", [](Rng& rng) {
    const Extents shape = random_shape(rng);
    const Index tp = uniform(rng, 1, 6);
    std::vector<std::vector<Index>> experts(static_cast<std::size_t>(tp));
    for (Index e = 0; e < shape[0]; ++e) {
      const Index first = uniform(rng, 0, tp - 1);
      experts[static_cast<std::size_t>(first)].push_back(e);
      // Sometimes replicate the expert on further ranks.
      for (Index r = 0; r < tp; ++r) {
        if (r != first && uniform(rng, 0, 3) == 0) {
          experts[static_cast<std::size_t>(r)].push_back(e);
        }
      }
    }
    for (auto& list : experts) {
      if (uniform(rng, 0, 1) == 0) std::shuffle(list.begin(), list.end(), rng);
    }
    auto result = expert_placement_map(shape, experts);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    expect_conventions(result.value(), tp);
    for (std::size_t r = 0; r < experts.size(); ++r) {
      EXPECT_EQ((*result.value().ranks[r].shard_shape)[0], static_cast<Index>(experts[r].size()));
    }
    expect_round_trip(result.value());
  });
}

}  // namespace
}  // namespace shardcheck
