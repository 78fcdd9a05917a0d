// Strict conversion (contract 4): the reported corruptions of contract 6 are refused with the
// spec's kinds, valid layouts round-trip bit-exactly for every dtype, replicas are
// compared bitwise, scale rules hold, order does not matter, and the runtime records
// still refuse when a planted bug switches a map check off.
#include "shardcheck/convert.h"
#include "shardcheck/constructors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "support/spec_maps.h"

namespace shardcheck {
namespace {

using build::M;
using build::P;
using build::R;

Buffer values(DType dtype, std::vector<double> xs) {
  Buffer b(dtype, static_cast<Index>(xs.size()));
  for (std::size_t i = 0; i < xs.size(); ++i) b.set_bits(static_cast<Index>(i), *bits_from_double(dtype, xs[i]));
  return b;
}

Buffer raw(DType dtype, std::vector<std::uint64_t> bits) {
  Buffer b(dtype, static_cast<Index>(bits.size()));
  for (std::size_t i = 0; i < bits.size(); ++i) b.set_bits(static_cast<Index>(i), bits[i]);
  return b;
}

Index shard_numel(const RankEntry& entry) { return *checked_numel(*entry.shard_shape); }

// Shards of markers for every rank with a shard shape (distinct salts per rank).
ShardSet marker_shards(const Map& map, DType dtype) {
  ShardSet out;
  for (const auto& entry : map.ranks) {
    if (entry.shard_shape) out.emplace(entry.rank, marker_buffer(dtype, shard_numel(entry), 1000 * entry.rank));
  }
  return out;
}

Error refused(const Result<Buffer>& result) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return Error{};
  EXPECT_FALSE(result.error().message.empty());
  return result.error();
}

void expect_kind_in(const Error& e, std::initializer_list<ErrorKind> kinds) {
  EXPECT_TRUE(std::find(kinds.begin(), kinds.end(), e.kind) != kinds.end()) << e.to_string();
}

// ---- contract 6: reported corruptions ------------------------------------------------

using namespace build;  // repro1() .. repro8()

TEST(StrictSpec6, EachReproductionIsRefusedWithTheSpecKind) {
  const DType f = DType::float32;
  expect_kind_in(refused(rebuild(repro1(), marker_shards(repro1(), f), f)), {ErrorKind::twice, ErrorKind::uncovered});
  ShardSet s2{{0, values(f, {9, 8, 7, 6})}, {1, values(f, {1, 2, 3})}};
  EXPECT_EQ(refused(rebuild(repro2(), s2, f)).kind, ErrorKind::itself);
  ShardSet s34{{0, values(f, {1, 2, 3, 4})}, {1, values(f, {5, 6, 7, 8})}};
  expect_kind_in(refused(rebuild(repro3(), s34, f)), {ErrorKind::holders, ErrorKind::twice});
  expect_kind_in(refused(rebuild(repro5(), marker_shards(repro5(), f), f)), {ErrorKind::twice, ErrorKind::uncovered});
  expect_kind_in(refused(rebuild(repro6(), marker_shards(repro6(), f), f)), {ErrorKind::twice, ErrorKind::uncovered});
  expect_kind_in(refused(rebuild(repro7(), marker_shards(repro7(), f), f)), {ErrorKind::twice, ErrorKind::uncovered});
  EXPECT_EQ(refused(rebuild(repro8(), marker_shards(repro8(), f), f)).kind, ErrorKind::holders);
  // Extract runs the whole-map check too, even for a rank whose own pieces look fine.
  const Buffer full = marker_buffer(f, 16);
  expect_kind_in(refused(extract(repro6(), full, 1)), {ErrorKind::twice, ErrorKind::uncovered});
  EXPECT_EQ(refused(extract(repro2(), marker_buffer(f, 6), 1)).kind, ErrorKind::itself);
}

TEST(StrictSpec6, ZeroStrideOnExtentAboveOneIsItself) {
  const Map map = M({4}, {R(0, Extents{4}, {P({2, 2}, 0, {0, 1}, 0, {2, 1}, {0})})});
  EXPECT_EQ(refused(rebuild(map, marker_shards(map, DType::int32), DType::int32)).kind, ErrorKind::itself);
}

TEST(StrictSpec6, Repro3IsRefusedInBothRankOrders) {
  const DType f = DType::float32;
  ShardSet shards{{0, values(f, {1, 2, 3, 4})}, {1, values(f, {5, 6, 7, 8})}};
  Map reversed = repro3();
  std::reverse(reversed.ranks.begin(), reversed.ranks.end());
  const Error a = refused(rebuild(repro3(), shards, f));
  const Error b = refused(rebuild(reversed, shards, f));
  EXPECT_EQ(a, b);
}

TEST(StrictSpec6, Repro4ExactWithEqualShardsDifferentDataOtherwise) {
  const DType f = DType::float32;
  ShardSet equal{{0, values(f, {1, 2, 3, 4})}, {1, values(f, {1, 2, 3, 4})}};
  auto ok = rebuild(repro4(), equal, f);
  ASSERT_TRUE(ok.ok()) << ok.error().to_string();
  EXPECT_EQ(ok.value(), values(f, {1, 2, 3, 4}));

  ShardSet differ{{0, values(f, {1, 2, 3, 4})}, {1, values(f, {1, 2, 7, 7})}};
  const Error e = refused(rebuild(repro4(), differ, f));
  EXPECT_EQ(e.kind, ErrorKind::different_data);
  EXPECT_EQ(e.address, 2);
  EXPECT_EQ(e.side, Side::full);
  EXPECT_EQ(e.rank, 1);
  EXPECT_EQ(e.piece, 1);
  EXPECT_NE(e.message.find("rank 0"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("rank 1"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("0x40400000"), std::string::npos) << e.message;  // 3
  EXPECT_NE(e.message.find("0x40e00000"), std::string::npos) << e.message;  // 7
}

TEST(StrictPlantedBugs, SkipReplicaCompareLetsRepro4Through) {
  const DType f = DType::float32;
  ShardSet differ{{0, values(f, {1, 2, 3, 4})}, {1, values(f, {1, 2, 7, 7})}};
  ConvertOptions planted;
  planted.checks.bugs.skip_replica_compare = true;
  auto wrong = rebuild(repro4(), differ, f, planted);
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong.value(), values(f, {1, 2, 3, 4}));  // rank 1's 7s were never looked at
}

TEST(StrictPlantedBugs, RuntimeRecordsStillRefuseWhenAMapCheckIsOff) {
  const DType f = DType::float32;
  ConvertOptions no_tiling;
  no_tiling.checks.bugs.skip_dest_tiling = true;
  EXPECT_EQ(refused(rebuild(repro5(), marker_shards(repro5(), f), f, no_tiling)).kind, ErrorKind::twice);
  EXPECT_EQ(refused(extract(repro5(), marker_buffer(f, 4), 0, no_tiling)).kind, ErrorKind::twice);
  ConvertOptions no_coverage;
  no_coverage.checks.bugs.skip_coverage = true;
  no_coverage.checks.bugs.skip_homogeneity = true;
  const Error e = refused(rebuild(repro1(), marker_shards(repro1(), f), f, no_coverage));
  EXPECT_EQ(e.kind, ErrorKind::twice);
  EXPECT_EQ(e.address, 0);
  // With the writer record off as well, repro 1 comes back silently wrong.
  no_coverage.checks.bugs.skip_writer_record = true;
  EXPECT_TRUE(rebuild(repro1(), marker_shards(repro1(), f), f, no_coverage).ok());
}

// Conversion counts each rank's elements again behind check_map (RankCount in
// convert.cc): a shortfall is otherwise reported later, as an unwritten shard address.
// With condition 4 off, that count is what refuses a rank whose pieces fill half its shard.
TEST(StrictPlantedBugs, TheConversionsOwnCountRefusesAShortRankWhenConditionFourIsOff) {
  const DType f = DType::float32;
  const Map short_rank = M({2, 4}, {R(0, Extents{1, 4}, {P({1, 4}, 0, {4, 1}, 0, {4, 1}, {0})}),
                                    R(1, Extents{2, 4}, {P({1, 4}, 4, {4, 1}, 0, {4, 1}, {1})})});
  const Status whole = check_map(short_rank);
  ASSERT_FALSE(whole.ok());
  EXPECT_EQ(whole.error().kind, ErrorKind::count);
  ConvertOptions no_tiling;
  no_tiling.checks.bugs.skip_dest_tiling = true;
  EXPECT_TRUE(check_map(short_rank, no_tiling.checks).ok());
  for (const Error& e : {refused(rebuild(short_rank, marker_shards(short_rank, f), f, no_tiling)),
                         refused(extract(short_rank, marker_buffer(f, 8), 1, no_tiling))}) {
    EXPECT_EQ(e.kind, ErrorKind::count) << e.to_string();
    EXPECT_EQ(e.rank, 1) << e.to_string();
    EXPECT_NE(e.message.find("hold 4 elements but the shard holds 8"), std::string::npos) << e.message;
  }
}

// ---- valid layouts round-trip ------------------------------------------------------

// (4,6) split along columns 4 | 2 | 0 over ranks 3, 9, 5: the zero-width rank has no pieces.
Map column_split() {
  return M({4, 6}, {R(3, Extents{4, 4}, {P({4, 4}, 0, {6, 1}, 0, {4, 1}, {3})}),
                    R(9, Extents{4, 2}, {P({4, 2}, 4, {6, 1}, 0, {2, 1}, {9})}),
                    R(5, Extents{4, 0}, {})});
}
// The worked example of contract 5: fused sub-parameters, strided dest views.
Map sub_param() {
  return M({2, 6}, {R(0, Extents{2, 3}, {P({2, 2}, 0, {6, 1}, 0, {3, 1}, {0}), P({2, 1}, 4, {6, 1}, 2, {3, 1}, {0})}),
                    R(1, Extents{2, 3}, {P({2, 2}, 2, {6, 1}, 0, {3, 1}, {1}), P({2, 1}, 5, {6, 1}, 2, {3, 1}, {1})})});
}
// 3-d, split along the middle axis, with a replicated last row block.
Map three_d() {
  return M({2, 3, 4}, {R(0, Extents{2, 2, 4}, {P({2, 1, 4}, 0, {12, 4, 1}, 0, {8, 4, 1}, {0}),
                                              P({2, 1, 4}, 8, {12, 4, 1}, 4, {8, 4, 1}, {0, 1})}),
                       R(1, Extents{2, 2, 4}, {P({2, 1, 4}, 4, {12, 4, 1}, 0, {8, 4, 1}, {1}),
                                              P({2, 1, 4}, 8, {12, 4, 1}, 4, {8, 4, 1}, {0, 1})})});
}
Map zero_d() {
  return M({}, {R(0, Extents{}, {P({}, 0, {}, 0, {}, {0, 1})}), R(1, Extents{}, {P({}, 0, {}, 0, {}, {0, 1})})});
}
Map replicated(double scale) {
  return M({5}, {R(0, Extents{5}, {P({5}, 0, {1}, 0, {1}, {0, 1}, scale)}),
                 R(1, Extents{5}, {P({5}, 0, {1}, 0, {1}, {0, 1}, scale)})});
}

std::vector<Map> valid_maps() { return {column_split(), sub_param(), three_d(), zero_d(), replicated(1.0), repro4()}; }

TEST(StrictRoundTrip, EveryDTypeEveryLayoutIsBitExact) {
  for (const Map& map : valid_maps()) {
    const Index n = *checked_numel(map.logical_shape);
    for (DType dtype : kAllDTypes) {
      const Buffer full = marker_buffer(dtype, n, 17);
      auto shards = extract_all(map, full);
      ASSERT_TRUE(shards.ok()) << shards.error().to_string() << "\n" << describe(map);
      for (const auto& entry : map.ranks) {
        ASSERT_EQ(shards.value().count(entry.rank), 1u);
        EXPECT_EQ(shards.value().at(entry.rank).numel(), shard_numel(entry));
      }
      auto back = rebuild(map, shards.value(), dtype);
      ASSERT_TRUE(back.ok()) << back.error().to_string() << "\n" << describe(map);
      EXPECT_EQ(back.value(), full) << dtype_name(dtype) << "\n" << describe(map);
    }
  }
}

TEST(StrictRoundTrip, ShardsHoldTheRightElements) {
  const Buffer full = marker_buffer(DType::int32, 12);
  auto shards = extract_all(sub_param(), full);
  ASSERT_TRUE(shards.ok());
  // Rank 1 of the worked example: columns 2,3 and 5 of each row.
  const std::vector<Index> expect{2, 3, 5, 8, 9, 11};
  for (Index i = 0; i < 6; ++i) EXPECT_EQ(shards.value().at(1).bits(i), full.bits(expect[static_cast<std::size_t>(i)]));
  auto one = extract(column_split(), marker_buffer(DType::int16, 24), 9);
  ASSERT_TRUE(one.ok());
  const std::vector<Index> cols{4, 5, 10, 11, 16, 17, 22, 23};
  for (Index i = 0; i < 8; ++i) {
    EXPECT_EQ(one.value().bits(i), marker_bits(DType::int16, cols[static_cast<std::size_t>(i)]));
  }
  auto empty = extract(column_split(), marker_buffer(DType::int16, 24), 5);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty.value().numel(), 0);
}

TEST(StrictRoundTrip, NaNPayloadsAndNegativeZeroSurvive) {
  const std::vector<std::uint64_t> bits{0x7fc0beef, 0xffc00001, 0x80000000, 0x7f800001, 0x00000001,
                                        0xff800000, 0x3f800000, 0x00000000, 0x7fffffff, 0x80000001,
                                        0x12345678, 0xdeadbeef, 0x7f7fffff, 0x00800000, 0x40490fdb,
                                        0xbf800000, 0x7fa00000, 0x00400000, 0x3eaaaaab, 0xc0000000,
                                        0x7f800000, 0x5f000000, 0x1, 0x2};
  for (const Map& map : {column_split(), three_d()}) {
    const Buffer full = raw(DType::float32, bits);
    auto shards = extract_all(map, full);
    ASSERT_TRUE(shards.ok());
    auto back = rebuild(map, shards.value(), DType::float32);
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(back.value(), full);
  }
}

TEST(StrictReplicas, SignedZerosDifferEqualNaNsAgree) {
  const Map map = replicated(1.0);
  const DType f = DType::float32;
  ShardSet zeros{{0, raw(f, {0x00000000, 1, 2, 3, 4})}, {1, raw(f, {0x80000000, 1, 2, 3, 4})}};
  const Error e = refused(rebuild(map, zeros, f));
  EXPECT_EQ(e.kind, ErrorKind::different_data);
  EXPECT_EQ(e.address, 0);
  EXPECT_NE(e.message.find("0x00000000"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("0x80000000"), std::string::npos) << e.message;
  ShardSet nans{{0, raw(f, {0x7fc0beef, 1, 2, 3, 4})}, {1, raw(f, {0x7fc0beef, 1, 2, 3, 4})}};
  auto ok = rebuild(map, nans, f);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok.value().bits(0), 0x7fc0beefu);
  ShardSet other_nan{{0, raw(f, {0x7fc0beef, 1, 2, 3, 4})}, {1, raw(f, {0x7fc0beee, 1, 2, 3, 4})}};
  EXPECT_EQ(refused(rebuild(map, other_nan, f)).kind, ErrorKind::different_data);
  // The last element differing is found at its own address.
  ShardSet last{{0, raw(f, {0, 1, 2, 3, 4})}, {1, raw(f, {0, 1, 2, 3, 5})}};
  EXPECT_EQ(refused(rebuild(map, last, f)).address, 4);
}

TEST(StrictShards, WrongMissingOrExtraShardsAreShape) {
  const DType f = DType::float32;
  const Map map = sub_param();
  ShardSet good = marker_shards(map, f);
  ASSERT_TRUE(rebuild(map, good, f).ok());

  ShardSet short_one = good;
  short_one.at(1) = marker_buffer(f, 5);
  Error e = refused(rebuild(map, short_one, f));
  EXPECT_EQ(e.kind, ErrorKind::shape);
  EXPECT_EQ(e.rank, 1);

  ShardSet missing = good;
  missing.erase(0);
  EXPECT_EQ(refused(rebuild(map, missing, f)).kind, ErrorKind::shape);

  ShardSet extra = good;
  extra.emplace(7, marker_buffer(f, 6));
  e = refused(rebuild(map, extra, f));
  EXPECT_EQ(e.kind, ErrorKind::shape);
  EXPECT_EQ(e.rank, 7);

  ShardSet wrong_dtype = good;
  wrong_dtype.at(0) = marker_buffer(DType::int32, 6);
  EXPECT_EQ(refused(rebuild(map, wrong_dtype, f)).kind, ErrorKind::shape);

  // The zero-width rank needs no shard.
  const Map split = column_split();
  ShardSet no_empty = marker_shards(split, DType::uint8);
  no_empty.erase(5);
  EXPECT_TRUE(rebuild(split, no_empty, DType::uint8).ok());
}

// Contract 2/9: a rank whose piece list is empty may leave out its shard shape, and its
// shard is then empty. An empty shard supplied for it is accepted; a shard holding
// elements is not that shard (contract 4: a supplied shard whose element count differs
// from the map is refused, kind shape).
TEST(StrictShards, AShapelessEmptyRankTakesOnlyAnEmptyShard) {
  const DType f = DType::float32;
  const Map map = M({2}, {R(0, Extents{2}, {P({2}, 0, {1}, 0, {1}, {0})}), R(1, std::nullopt, {})});
  ASSERT_TRUE(check_map(map).ok()) << check_map(map).error().to_string();
  ShardSet shards;
  shards.emplace(0, values(f, {1, 2}));
  auto without = rebuild(map, shards, f);
  ASSERT_TRUE(without.ok()) << without.error().to_string();
  EXPECT_EQ(without.value(), values(f, {1, 2}));

  shards.emplace(1, Buffer(f, 0));
  auto empty = rebuild(map, shards, f);
  ASSERT_TRUE(empty.ok()) << empty.error().to_string();
  EXPECT_EQ(empty.value(), values(f, {1, 2}));

  shards.at(1) = values(f, {5, 6});
  const Error e = refused(rebuild(map, shards, f));
  EXPECT_EQ(e.kind, ErrorKind::shape) << e.to_string();
  EXPECT_EQ(e.rank, 1) << e.to_string();
}

TEST(StrictExtract, UnknownRankIsFormatWrongFullIsShape) {
  const Map map = sub_param();
  Error e = refused(extract(map, marker_buffer(DType::float32, 12), 4));
  EXPECT_EQ(e.kind, ErrorKind::format);
  EXPECT_EQ(e.rank, 4);
  EXPECT_NE(e.message.find("4"), std::string::npos);
  EXPECT_EQ(refused(extract(map, marker_buffer(DType::float32, 11), 0)).kind, ErrorKind::shape);
}

TEST(StrictScale, ScaledReplicaRoundTripsForFloats) {
  const Map map = replicated(2.0);
  for (DType dtype : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    const Buffer full = marker_buffer(dtype, 5);
    auto shards = extract_all(map, full);
    ASSERT_TRUE(shards.ok()) << shards.error().to_string();
    for (Index i = 0; i < 5; ++i) {
      EXPECT_EQ(bits_to_double(dtype, shards.value().at(0).bits(i)), 2.0 * bits_to_double(dtype, full.bits(i)));
    }
    auto back = rebuild(map, shards.value(), dtype);
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(back.value(), full) << dtype_name(dtype);
    // A replica that is off by one unit after unscaling is still caught.
    ShardSet tampered = shards.value();
    tampered.at(1).set_bits(3, tampered.at(1).bits(3) ^ 1);
    const Error e = refused(rebuild(map, tampered, dtype));
    EXPECT_EQ(e.kind, ErrorKind::different_data);
    EXPECT_EQ(e.address, 3);
  }
}

TEST(StrictScale, RefusedForIntegersAndOtherPowers) {
  const Map map = replicated(2.0);
  EXPECT_EQ(refused(extract(map, marker_buffer(DType::int32, 5), 0)).kind, ErrorKind::scale);
  EXPECT_EQ(refused(rebuild(map, marker_shards(map, DType::int32), DType::int32)).kind, ErrorKind::scale);
  ConvertOptions adam;
  adam.scale_power = -1;
  const Error e = refused(rebuild(map, marker_shards(map, DType::float32), DType::float32, adam));
  EXPECT_EQ(e.kind, ErrorKind::scale);
  EXPECT_TRUE(e.rank.has_value());
  EXPECT_TRUE(e.piece.has_value());
  EXPECT_EQ(refused(extract(map, marker_buffer(DType::float32, 5), 1, adam)).kind, ErrorKind::scale);
  // Without any scaled piece, other powers are fine.
  const Buffer full = marker_buffer(DType::float32, 5);
  ShardSet same{{0, full}, {1, full}};
  auto plain = rebuild(replicated(1.0), same, DType::float32, adam);
  ASSERT_TRUE(plain.ok()) << plain.error().to_string();
  EXPECT_EQ(plain.value(), full);
}

// Section 4 checks the map whole, and 1.2's scale rules are about the map: a scale on
// another rank's piece that this dtype or power cannot apply refuses an extract of a rank
// whose own pieces are unscaled, as it refuses the rebuild (and as the legacy model does
// for the power). Found by an independent model of the contract: strict extract of rank
// 0 looked at rank 0's scales only.
TEST(StrictScale, AnExtractIsRefusedForAScaleOnAnyRank) {
  struct Variant {
    const char* what;
    double scale;
    DType dtype;
    int power;
  };
  const std::vector<Variant> variants = {{"power -1", 2.0, DType::float32, -1},
                                         {"integer data", 2.0, DType::int32, 1},
                                         {"a scale float32 cannot hold", 1e39, DType::float32, 1}};
  for (const Variant& v : variants) {
    const Map map = M({2}, {R(0, Extents{1}, {P({1}, 0, {1}, 0, {1}, {0})}),
                            R(1, Extents{1}, {P({1}, 1, {1}, 0, {1}, {1}, v.scale)})});
    for (bool wide : {true, false}) {
      ConvertOptions options;
      options.scale_power = v.power;
      options.wide_copies = wide;
      const Buffer full = marker_buffer(v.dtype, 2);
      const Error e = refused(extract(map, full, 0, options));
      EXPECT_EQ(e.kind, ErrorKind::scale) << v.what;
      EXPECT_EQ(e.rank, Rank{1}) << v.what;
      EXPECT_EQ(e.piece, Index{0}) << v.what;
      const auto all = extract_all(map, full, options);
      ASSERT_FALSE(all.ok()) << v.what;
      EXPECT_EQ(all.error().to_string(), e.to_string()) << v.what;
    }
  }
}

// ---- order independence ------------------------------------------------------------

Map shuffled(const Map& map, std::mt19937& rng) {
  Map out = map;
  std::shuffle(out.ranks.begin(), out.ranks.end(), rng);
  for (auto& entry : out.ranks) std::shuffle(entry.pieces.begin(), entry.pieces.end(), rng);
  return out;
}

TEST(StrictOrder, ResultsDoNotDependOnRankOrPieceOrder) {
  std::mt19937 rng(20240611);
  const DType f = DType::float32;
  ShardSet differ{{0, values(f, {1, 2, 3, 4})}, {1, values(f, {1, 2, 7, 7})}};
  const Error reference = refused(rebuild(repro4(), differ, f));
  for (const Map& map : valid_maps()) {
    const Buffer full = marker_buffer(f, *checked_numel(map.logical_shape), 3);
    auto shards = extract_all(map, full);
    ASSERT_TRUE(shards.ok());
    for (int trial = 0; trial < 20; ++trial) {
      const Map other = shuffled(map, rng);
      auto again = extract_all(other, full);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(again.value(), shards.value());
      auto back = rebuild(other, shards.value(), f);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(back.value(), full);
    }
  }
  for (int trial = 0; trial < 20; ++trial) {
    const Map other = shuffled(repro4(), rng);
    const Error e = refused(rebuild(other, differ, f));
    EXPECT_EQ(e.kind, reference.kind);
    EXPECT_EQ(e.rank, reference.rank);
    EXPECT_EQ(e.address, reference.address);
    ASSERT_TRUE(e.piece.has_value());
    // The same piece is blamed, wherever the shuffle put it.
    EXPECT_EQ(other.find_rank(*e.rank)->pieces[static_cast<std::size_t>(*e.piece)],
              repro4().find_rank(*reference.rank)->pieces[static_cast<std::size_t>(*reference.piece)]);
  }
}

// Single holders only (the wide path converts them in any order): a scale refusal still
// names the first scaled piece in visiting order, wherever the pieces are listed.
TEST(StrictOrder, ScaleRefusalOfSingleHoldersDoesNotDependOnOrder) {
  std::vector<std::vector<Index>> ids(2);
  for (Index b = 0; b < 8; ++b) ids[static_cast<std::size_t>(b % 2)].push_back(b);
  Map map = block_gather_map({8, 16}, ids, 1, 0).value();
  for (auto& entry : map.ranks) {
    for (std::size_t i = 1; i < entry.pieces.size(); ++i) entry.pieces[i].scale = 2.0;  // all but the first
  }
  const DType f = DType::float32;
  const ShardSet shards = marker_shards(map, f);
  const Buffer full = marker_buffer(f, 128);
  ConvertOptions adam;
  adam.scale_power = -1;
  const Error want = refused(rebuild(map, shards, f, adam));
  ASSERT_EQ(want.kind, ErrorKind::scale);
  ASSERT_EQ(want.rank, 0);
  ASSERT_EQ(want.piece, 1);
  const Error want_extract = refused(extract(map, full, 1, adam));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const Map other = shuffled(map, rng);
    for (const Error& e : {refused(rebuild(other, shards, f, adam)), refused(extract(other, full, 1, adam))}) {
      const Error& reference = e.rank == want.rank ? want : want_extract;
      EXPECT_EQ(e.kind, ErrorKind::scale);
      ASSERT_EQ(e.rank, reference.rank);
      ASSERT_TRUE(e.piece.has_value());
      EXPECT_EQ(other.find_rank(*e.rank)->pieces[static_cast<std::size_t>(*e.piece)],
                map.find_rank(*reference.rank)->pieces[static_cast<std::size_t>(*reference.piece)]);
    }
  }
  // Unscaled, the same shuffles convert to the same tensor.
  for (auto& entry : map.ranks) {
    for (auto& piece : entry.pieces) piece.scale = 1.0;
  }
  const ShardSet plain = extract_all(map, full).value();
  for (int trial = 0; trial < 20; ++trial) {
    const Map other = shuffled(map, rng);
    EXPECT_EQ(rebuild(other, plain, f).value(), full);
    EXPECT_EQ(extract_all(other, full).value(), plain);
  }
}

// ---- the CPU backend on its own ----------------------------------------------------

TEST(CpuBackend, CopyAndCompareStridedBlocks) {
  auto backend = make_cpu_backend();
  ASSERT_TRUE(backend);
  EXPECT_EQ(backend->name(), "cpu");
  const Buffer from = marker_buffer(DType::float16, 24);
  Buffer to(DType::float16, 24);
  const Extents shape{2, 3, 4};
  BlockCopy copy;
  copy.shape = &shape;
  copy.from = from.data();
  const StridedView from_view{0, {12, 4, 1}};
  const StridedView to_view{0, {1, 2, 6}};  // a transposing permutation
  copy.from_view = &from_view;
  copy.to = to.data();
  copy.to_view = &to_view;
  backend->copy_block(DType::float16, copy);
  for (Index i = 0; i < 2; ++i)
    for (Index j = 0; j < 3; ++j)
      for (Index k = 0; k < 4; ++k) ASSERT_EQ(to.bits(i + 2 * j + 6 * k), from.bits(12 * i + 4 * j + k));
  EXPECT_FALSE(backend->compare_block(DType::float16, copy));
  to.set_bits(1 + 2 * 2 + 6 * 3, 0);  // block index (1,2,3) = 23
  EXPECT_EQ(backend->compare_block(DType::float16, copy), 23);
  to.set_bits(0 + 2 * 1 + 6 * 2, 0);  // block index (0,1,2) = 6
  EXPECT_EQ(backend->compare_block(DType::float16, copy), 6);

  // Scaled compare: `to` holds from/2, compared after dividing `from` by 2.
  copy.scale = 2.0;
  copy.multiply = false;
  backend->copy_block(DType::float16, copy);
  EXPECT_FALSE(backend->compare_block(DType::float16, copy));
  EXPECT_EQ(bits_to_double(DType::float16, to.bits(0)), bits_to_double(DType::float16, from.bits(0)) / 2);
}

TEST(CpuBackend, OverlappingDestinationKeepsLastRowMajorWrite) {
  auto backend = make_cpu_backend();
  const Buffer from = values(DType::int64, {9, 8, 7, 6});
  Buffer to(DType::int64, 3);
  const Extents shape{2, 2};
  BlockCopy copy;
  copy.shape = &shape;
  copy.from = from.data();
  const StridedView from_view{0, {2, 1}};
  const StridedView to_view{0, {1, 1}};
  copy.from_view = &from_view;
  copy.to = to.data();
  copy.to_view = &to_view;
  backend->copy_block(DType::int64, copy);
  EXPECT_EQ(to, values(DType::int64, {9, 7, 6}));
  const Extents scalar{};
  BlockCopy one = copy;
  one.shape = &scalar;
  const StridedView one_from{3, {}};
  const StridedView one_to{1, {}};
  one.from_view = &one_from;
  one.to_view = &one_to;
  backend->copy_block(DType::int64, one);
  EXPECT_EQ(to, values(DType::int64, {9, 6, 6}));
  EXPECT_FALSE(backend->compare_block(DType::int64, one));
  if (!cuda_compiled()) {
    EXPECT_EQ(make_cuda_backend(), nullptr);
  }
}

}  // namespace
}  // namespace shardcheck
