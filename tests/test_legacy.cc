// The legacy policy (contract 4.1) reproduces what DeepSpeed did before the fix: each
// reported corruption of contract 6 gives the outcome the spec reports, deterministically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "shardcheck/convert.h"

#include "support/spec_maps.h"

namespace shardcheck {
namespace {

using build::M;
using build::P;
using build::R;

constexpr DType f32 = DType::float32;

Buffer values(std::vector<double> xs, DType dtype = f32) {
  Buffer b(dtype, static_cast<Index>(xs.size()));
  for (std::size_t i = 0; i < xs.size(); ++i) b.set_bits(static_cast<Index>(i), *bits_from_double(dtype, xs[i]));
  return b;
}

Map reversed(Map map) {
  std::reverse(map.ranks.begin(), map.ranks.end());
  return map;
}

Error refused(const Result<Buffer>& result) {
  EXPECT_FALSE(result.ok());
  if (result.ok()) return Error{};
  EXPECT_FALSE(result.error().message.empty());
  return result.error();
}

Buffer accepted(const Result<Buffer>& result) {
  EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.error().to_string());
  return result.ok() ? result.value() : Buffer{};
}

using namespace build;  // repro1() .. repro8()

// Repro 8 completed: both ranks list the replica.
Map repro8_both() {
  return M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}), R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})})});
}

TEST(LegacySpec6, Repro1GivesRank1ValuesThenPoison) {
  ShardSet shards{{0, values({1, 2, 3, 4})}, {1, values({5, 6, 7, 8})}};
  const Buffer full = accepted(legacy_rebuild(repro1(), shards, f32));
  ASSERT_EQ(full.numel(), 8);
  for (Index i = 0; i < 4; ++i) EXPECT_EQ(full.bits(i), shards.at(1).bits(i));
  for (Index i = 4; i < 8; ++i) EXPECT_EQ(full.bits(i), poison_bits(f32));
}

TEST(LegacySpec6, Repro2DropsTheOverwrittenElement) {
  ShardSet shards{{0, values({9, 8, 7, 6})}, {1, values({1, 2, 3})}};
  EXPECT_EQ(accepted(legacy_rebuild(repro2(), shards, f32)), values({9, 7, 6, 1, 2, 3}));
}

TEST(LegacySpec6, Repro3DependsOnRankOrder) {
  ShardSet shards{{0, values({1, 2, 3, 4})}, {1, values({5, 6, 7, 8})}};
  EXPECT_EQ(accepted(legacy_rebuild(repro3(), shards, f32)), values({5, 6, 7, 8}));
  const Error e = refused(legacy_rebuild(reversed(repro3()), shards, f32));
  EXPECT_EQ(e.kind, ErrorKind::different_data);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.address, 0);
}

TEST(LegacySpec6, Repro4AcceptsWrongDataInOneOrder) {
  ShardSet shards{{0, values({1, 2, 3, 4})}, {1, values({1, 2, 7, 7})}};
  EXPECT_EQ(accepted(legacy_rebuild(repro4(), shards, f32)), values({1, 2, 7, 7}));
  const Error e = refused(legacy_rebuild(reversed(repro4()), shards, f32));
  EXPECT_EQ(e.kind, ErrorKind::different_data);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.address, 2);
}

TEST(LegacySpec6, Repro5To7SilentlyProduceATensor) {
  ShardSet s5{{0, values({1, 2, 3, 4})}};
  EXPECT_EQ(accepted(legacy_rebuild(repro5(), s5, f32)), values({1, 2, 1, 2}));

  ShardSet s6{{0, marker_buffer(f32, 8, 0)}, {1, marker_buffer(f32, 8, 100)}};
  const Buffer f6 = accepted(legacy_rebuild(repro6(), s6, f32));
  ASSERT_EQ(f6.numel(), 16);
  // Rank 0's second block reads shard columns 0,1 again instead of 2,3.
  EXPECT_EQ(f6.bits(4), s6.at(0).bits(0));
  EXPECT_EQ(f6.bits(0), s6.at(0).bits(0));
  EXPECT_EQ(f6.bits(13), s6.at(0).bits(5));

  ShardSet s7{{0, marker_buffer(f32, 12)}};
  const Buffer f7 = accepted(legacy_rebuild(repro7(), s7, f32));
  ASSERT_EQ(f7.numel(), 12);
  // Shard address 4 is read twice (into F[2] and F[8]); address 5 never.
  EXPECT_EQ(f7.bits(2), s7.at(0).bits(4));
  EXPECT_EQ(f7.bits(8), s7.at(0).bits(4));
  EXPECT_EQ(f7.bits(3), s7.at(0).bits(6));
}

TEST(LegacySpec6, Repro8Accepts) {
  ShardSet shards{{0, values({1, 2, 3, 4})}};
  EXPECT_EQ(accepted(legacy_rebuild(repro8(), shards, f32)), values({1, 2, 3, 4}));
}

TEST(Legacy, ZeroStrideWriteIsItself) {
  const Map map = M({4}, {R(0, Extents{4}, {P({2, 2}, 0, {0, 1}, 0, {2, 1}, {0})})});
  const Error e = refused(legacy_rebuild(map, {{0, values({1, 2, 3, 4})}}, f32));
  EXPECT_EQ(e.kind, ErrorKind::itself);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.piece, 0);
  // A rebuild writes F: the refusal names the source view, on F's side.
  EXPECT_EQ(e.side, Side::full) << e.to_string();
  EXPECT_NE(e.sentence.find("source view"), std::string::npos) << e.to_string();
  // Extract reads through that source view, which torch allows, and writes a dense dest.
  auto shard = legacy_extract(map, values({1, 2, 3, 4}), 0);
  EXPECT_EQ(accepted(shard), values({1, 2, 1, 2}));
  // A replica comparison writes nothing: a zero stride on either side reads fine.
  const Map compared = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}),
                               R(1, Extents{4}, {P({2, 2}, 0, {2, 1}, 0, {0, 1}, {0, 1})})});
  EXPECT_EQ(refused(legacy_rebuild(compared, {{0, values({1, 2, 1, 2})}, {1, values({1, 9, 7, 7})}}, f32)).kind,
            ErrorKind::different_data);
  // Rank 1 reads its shard addresses 0,1,0,1: 2 and 3 are never looked at.
  EXPECT_EQ(accepted(legacy_rebuild(compared, {{0, values({1, 2, 1, 2})}, {1, values({1, 2, 7, 7})}}, f32)),
            values({1, 2, 1, 2}));
  // Extract writing through a zero dest stride is refused.
  const Map dest_zero = M({4}, {R(0, Extents{4}, {P({2, 2}, 0, {2, 1}, 0, {0, 1}, {0})})});
  const Error d = refused(legacy_extract(dest_zero, values({1, 2, 3, 4}), 0));
  EXPECT_EQ(d.kind, ErrorKind::itself);
  // An extract writes the shard: the dest view, on the shard's side.
  EXPECT_EQ(d.side, Side::shard) << d.to_string();
  EXPECT_NE(d.sentence.find("dest view"), std::string::npos) << d.to_string();
}

TEST(Legacy, CountMismatchIsCount) {
  const Map map = M({4}, {R(0, Extents{5}, {P({4}, 0, {1}, 0, {1}, {0})})});
  const Error e = refused(legacy_rebuild(map, {{0, values({1, 2, 3, 4, 5})}}, f32));
  EXPECT_EQ(e.kind, ErrorKind::count);
  EXPECT_EQ(e.rank, 0);
}

TEST(Legacy, TorchLevelErrors) {
  // Shard sizes, missing shards, views past their buffer, negative strides.
  EXPECT_EQ(refused(legacy_rebuild(repro8(), {{0, values({1, 2, 3})}}, f32)).kind, ErrorKind::shape);
  EXPECT_EQ(refused(legacy_rebuild(repro1(), {{0, values({1, 2, 3, 4})}}, f32)).kind, ErrorKind::shape);
  const Map past = M({4}, {R(0, Extents{4}, {P({4}, 1, {1}, 0, {1}, {0})})});
  Error e = refused(legacy_rebuild(past, {{0, values({1, 2, 3, 4})}}, f32));
  EXPECT_EQ(e.kind, ErrorKind::bounds);
  EXPECT_EQ(e.address, 4);
  EXPECT_EQ(e.side, Side::full);
  const Map negative = M({4}, {R(0, Extents{4}, {P({4}, 3, {-1}, 0, {1}, {0})})});
  EXPECT_EQ(refused(legacy_rebuild(negative, {{0, values({1, 2, 3, 4})}}, f32)).kind, ErrorKind::format);
  EXPECT_EQ(refused(legacy_extract(negative, values({1, 2, 3, 4}), 0)).kind, ErrorKind::format);
  // An empty piece may point anywhere, and still marks its offset: a replica starting
  // there is then compared against the poisoned F and refused, as DeepSpeed's was.
  const Map far_empty = M({4}, {R(0, Extents{4}, {P({0}, 99, {1}, 99, {1}, {0}), P({4}, 0, {1}, 0, {1}, {0})})});
  EXPECT_EQ(accepted(legacy_rebuild(far_empty, {{0, values({1, 2, 3, 4})}}, f32)), values({1, 2, 3, 4}));
  const Map empty_marks = M({4}, {R(0, Extents{4}, {P({0}, 0, {1}, 0, {1}, {0}), P({4}, 0, {1}, 0, {1}, {0, 1})})});
  e = refused(legacy_rebuild(empty_marks, {{0, values({1, 2, 3, 4})}}, f32));
  EXPECT_EQ(e.kind, ErrorKind::different_data);
  EXPECT_EQ(e.piece, 1);
  EXPECT_NE(e.message.find("0x7fc0dead"), std::string::npos) << e.message;
}

TEST(Legacy, MalformedNumbersNeverCrash) {
  const Index huge = Index{1} << 62;
  const Map overflow = M({4}, {R(0, Extents{4}, {P({huge, 4}, 0, {1, 1}, 0, {1, 1}, {0})})});
  EXPECT_EQ(refused(legacy_rebuild(overflow, {{0, values({1, 2, 3, 4})}}, f32)).kind, ErrorKind::format);
  EXPECT_EQ(refused(legacy_extract(overflow, values({1, 2, 3, 4}), 0)).kind, ErrorKind::format);
  const Map far = M({4}, {R(0, Extents{4}, {P({4}, std::numeric_limits<Index>::max(), {huge}, 0, {1}, {0})})});
  EXPECT_EQ(refused(legacy_rebuild(far, {{0, values({1, 2, 3, 4})}}, f32)).kind, ErrorKind::format);
  const Map mismatched = M({4}, {R(0, Extents{4}, {P({4}, 0, {1, 1}, 0, {1}, {0})})});
  EXPECT_EQ(refused(legacy_rebuild(mismatched, {{0, values({1, 2, 3, 4})}}, f32)).kind, ErrorKind::format);
  // A map asking for a huge F or shard backed by no data is refused, not allocated.
  const Map giant = M({huge}, {R(0, Extents{0}, {})});
  EXPECT_EQ(refused(legacy_rebuild(giant, {{0, Buffer(f32, 0)}}, f32)).kind, ErrorKind::format);
  const Map giant_shard = M({4}, {R(0, Extents{huge}, {})});
  EXPECT_EQ(refused(legacy_extract(giant_shard, values({1, 2, 3, 4}), 0)).kind, ErrorKind::format);
  EXPECT_EQ(refused(legacy_extract(repro8(), values({1, 2, 3, 4}), 5)).kind, ErrorKind::format);
}

TEST(Legacy, ExtractStartsPoisonedAndWritesInOrder) {
  const Buffer full = values({1, 2, 3, 4});
  // Repro 5: dest 0,1 written twice (the later piece wins), 2,3 never.
  const Buffer shard = accepted(legacy_extract(repro5(), full, 0));
  ASSERT_EQ(shard.numel(), 4);
  EXPECT_EQ(shard.bits(0), full.bits(2));
  EXPECT_EQ(shard.bits(1), full.bits(3));
  EXPECT_EQ(shard.bits(2), poison_bits(f32));
  EXPECT_EQ(shard.bits(3), poison_bits(f32));
}

TEST(Legacy, ScaleAppliesToParametersOnly) {
  const Map map = M({3}, {R(0, Extents{3}, {P({3}, 0, {1}, 0, {1}, {0}, 2.0)})});
  EXPECT_EQ(accepted(legacy_rebuild(map, {{0, values({1, 2, 3})}}, f32)), values({0.5, 1, 1.5}));
  EXPECT_EQ(accepted(legacy_extract(map, values({1, 2, 3}), 0)), values({2, 4, 6}));
  // An optimizer state through a scaled piece is refused in both directions (contract 4.1).
  EXPECT_EQ(refused(legacy_extract(map, values({1, 2, 3}), 0, -1)).kind, ErrorKind::scale);
  EXPECT_EQ(refused(legacy_rebuild(map, {{0, values({1, 2, 3})}}, f32, -2)).kind, ErrorKind::scale);
  // Its piece constructor refuses a zero scale.
  const Map zero = M({3}, {R(0, Extents{3}, {P({3}, 0, {1}, 0, {1}, {0}, 0.0)})});
  EXPECT_EQ(refused(legacy_rebuild(zero, {{0, values({1, 2, 3})}}, f32)).kind, ErrorKind::scale);
  EXPECT_EQ(refused(legacy_extract(zero, values({1, 2, 3}), 0)).kind, ErrorKind::scale);
}

// Integer data meets a scale through torch's type promotion: divided in float32 and cast
// back (truncation, wrapping) on rebuild; an in-place multiply cannot be cast back on extract.
TEST(Legacy, ScaledIntegersGoThroughFloat32) {
  const Map map = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0}, -1.0)})});
  const Buffer shard = values({0, 1, 2, 100}, DType::uint8);
  EXPECT_EQ(accepted(legacy_rebuild(map, {{0, shard}}, DType::uint8)), values({0, 255, 254, 156}, DType::uint8));
  const Map half = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0}, 2.0)})});
  EXPECT_EQ(accepted(legacy_rebuild(half, {{0, values({0, 1, 3, -7}, DType::int8)}}, DType::int8)),
            values({0, 0, 1, -3}, DType::int8));
  EXPECT_EQ(refused(legacy_extract(half, values({0, 1, 3, 7}, DType::int32), 0)).kind, ErrorKind::scale);
}

// A replica refusal names what DeepSpeed compared: the copy as it unscales it (its own
// bits when scale^p is 1, since DeepSpeed then divides nothing; the float32 quotient for
// scaled integers) and what F holds, which may be the poison no piece wrote.
TEST(Legacy, ReplicaRefusalNamesWhatDeepSpeedCompared) {
  const Map replicas = repro8_both();
  Buffer nan(DType::float16, 4);
  for (Index i = 0; i < 4; ++i) nan.set_bits(i, 0x7c01);  // a signalling NaN
  const Error same_nan = refused(legacy_rebuild(replicas, {{0, nan}, {1, nan}}, DType::float16));
  EXPECT_EQ(same_nan.kind, ErrorKind::different_data);
  EXPECT_NE(same_nan.sentence.find("holds nan (0x7c01) at shard address 0"), std::string::npos) << same_nan.sentence;
  EXPECT_NE(same_nan.sentence.find("F holds nan (0x7c01) here"), std::string::npos) << same_nan.sentence;

  // Rank 0's empty piece marks source offset 0 as written; F still holds the poison there.
  const Map marked = M({1}, {R(0, Extents{0}, {P({0}, 0, {1}, 0, {1}, {0})}),
                             R(1, Extents{1}, {P({1}, 0, {1}, 0, {1}, {1, 2})}),
                             R(2, Extents{1}, {P({1}, 0, {1}, 0, {1}, {1, 2})})});
  const Buffer one = values({1}, DType::int8);
  const Error poison = refused(legacy_rebuild(marked, {{0, Buffer(DType::int8, 0)}, {1, one}, {2, one}}, DType::int8));
  EXPECT_EQ(poison.kind, ErrorKind::different_data);
  EXPECT_EQ(poison.rank, 1);
  EXPECT_NE(poison.sentence.find("F holds -91 (0xa5) here"), std::string::npos) << poison.sentence;
  EXPECT_NE(poison.sentence.find("the poison"), std::string::npos) << poison.sentence;

  const Map scaled = M({1}, {R(0, Extents{1}, {P({1}, 0, {1}, 0, {1}, {0, 1}, 2.0)}),
                             R(1, Extents{1}, {P({1}, 0, {1}, 0, {1}, {0, 1}, 2.0)})});
  const Error quotient =
      refused(legacy_rebuild(scaled, {{0, values({6}, DType::int32)}, {1, values({7}, DType::int32)}}, DType::int32));
  EXPECT_NE(quotient.sentence.find("holds 3.5 (7 (0x00000007) divided by the scale in float32)"), std::string::npos)
      << quotient.sentence;
  EXPECT_NE(quotient.sentence.find("F holds 3 (0x00000003)"), std::string::npos) << quotient.sentence;
}

// The details of contract 4.1 that decide a verdict, as DeepSpeed's module decides them.
TEST(Legacy, ChecksWhatDeepSpeedChecks) {
  // The count check covers a rank with no pieces: its shard must be empty.
  const Map lonely = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})}), R(1, Extents{2}, {})});
  const ShardSet both{{0, values({1, 2, 3, 4})}, {1, values({5, 6})}};
  EXPECT_EQ(refused(legacy_rebuild(lonely, both, f32)).kind, ErrorKind::count);
  EXPECT_EQ(legacy_check(lonely).error().kind, ErrorKind::count);
  // A negative extent beside a zero one still counts 0 elements, as a plain product does.
  const Map odd = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})}), R(1, Extents{0, -1}, {})});
  EXPECT_EQ(accepted(legacy_rebuild(odd, {{0, values({1, 2, 3, 4})}, {1, Buffer(f32, 0)}}, f32)),
            values({1, 2, 3, 4}));
  // A shard for a rank the map does not list, a missing one, or none at all.
  const Map one = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0})})});
  EXPECT_EQ(refused(legacy_rebuild(one, {{0, values({1, 2, 3, 4})}, {1, values({5})}}, f32)).kind, ErrorKind::shape);
  EXPECT_EQ(refused(legacy_rebuild(one, {}, f32)).kind, ErrorKind::shape);
  EXPECT_EQ(refused(legacy_rebuild(M({4}, {}), {}, f32)).kind, ErrorKind::shape);
  EXPECT_EQ(refused(legacy_rebuild(repro3(), {{1, values({1, 2, 3, 4})}}, f32)).kind, ErrorKind::shape);
  // Replicas compare by value (torch.equal): +0 equals -0, and a NaN equals nothing.
  const ShardSet zeros{{0, values({0.0, 1, 2, 3})}, {1, values({-0.0, 1, 2, 3})}};
  const Buffer kept = accepted(legacy_rebuild(repro8_both(), zeros, f32));
  EXPECT_EQ(kept.bits(0), zeros.at(0).bits(0));  // the first writer's zero survives
  const ShardSet nans{{0, values({NAN, 1, 2, 3})}, {1, values({NAN, 1, 2, 3})}};
  EXPECT_EQ(refused(legacy_rebuild(repro8_both(), nans, f32)).kind, ErrorKind::different_data);
}

TEST(Legacy, PolicyDispatchAndNames) {
  EXPECT_EQ(policy_name(Policy::legacy), "legacy");
  EXPECT_EQ(policy_name(Policy::strict), "strict");
  EXPECT_EQ(parse_policy("legacy"), Policy::legacy);
  EXPECT_EQ(parse_policy("strict"), Policy::strict);
  EXPECT_FALSE(parse_policy("lenient"));
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  ShardSet shards{{0, values({9, 8, 7, 6})}, {1, values({1, 2, 3})}};
  EXPECT_EQ(accepted(rebuild(repro2(), shards, f32, legacy)), values({9, 7, 6, 1, 2, 3}));
  EXPECT_EQ(refused(rebuild(repro2(), shards, f32)).kind, ErrorKind::itself);  // strict
  auto all = extract_all(repro5(), values({1, 2, 3, 4}), legacy);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all.value().at(0).bits(3), poison_bits(f32));
  // Deterministic: the same inputs give the same bits every time.
  ShardSet s1{{0, values({1, 2, 3, 4})}, {1, values({5, 6, 7, 8})}};
  EXPECT_EQ(accepted(legacy_rebuild(repro1(), s1, f32)), accepted(rebuild(repro1(), s1, f32, legacy)));
}

}  // namespace
}  // namespace shardcheck

namespace shardcheck {
namespace {

// torch refuses a view whose running product of extents overflows 64 unsigned bits, even
// when a later extent of 0 empties it (observed on torch 1.13; contract 4.1). DeepSpeed's
// module refused the shape_zero case that showed it; the legacy model must too.
TEST(LegacyTorchDetails, AnEmptyPieceWhoseExtentsOverflowFirstIsRefused) {
  constexpr Index kBig = Index{1} << 62;
  auto map_with_extra = [](Extents extra_shape) {
    Map map;
    map.logical_shape = {2};
    map.ranks.push_back(RankEntry{0, Extents{2}, {Piece{{2}, {0, {1}}, {0, {1}}, {0}, 1.0}}});
    const std::size_t n = extra_shape.size();
    map.ranks[0].pieces.push_back(Piece{std::move(extra_shape), {0, Strides(n, 1)}, {0, Strides(n, 1)}, {0}, 1.0});
    return map;
  };
  ShardSet shards;
  shards.emplace(0, marker_buffer(DType::float32, 2));
  EXPECT_FALSE(legacy_rebuild(map_with_extra({kBig, 4, 0}), shards, DType::float32).ok());
  EXPECT_TRUE(legacy_rebuild(map_with_extra({0, kBig, 4}), shards, DType::float32).ok());
  EXPECT_TRUE(legacy_rebuild(map_with_extra({kBig, 0, kBig}), shards, DType::float32).ok());
}

}  // namespace
}  // namespace shardcheck
