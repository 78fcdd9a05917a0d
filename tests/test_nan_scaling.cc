// Contract 1.2: a NaN passes through scaling with its bits unchanged (payload
// and sign kept, in every dtype, signalling NaNs included). So NaN replicas with
// different payloads differ after unscaling, and a scaled and an unscaled copy of the
// same NaN agree. Strict conversion, its CPU backend and the reference model keep the
// bits; the legacy model keeps torch's arithmetic, which may quieten them.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shardcheck/backend.h"
#include "shardcheck/convert.h"
#include "shardcheck/dtype.h"
#include "shardcheck/oracles/reference.h"

namespace shardcheck {
namespace {

struct NanCase {
  DType dtype;
  std::vector<std::uint64_t> nans;  // quiet with a payload, signalling, negative
  std::uint64_t one;                // 1.0, a number to scale next to the NaNs
};

std::vector<NanCase> nan_cases() {
  return {
      {DType::float32, {0x7fc00001, 0x7f800001, 0xffc12345, 0xff800002}, 0x3f800000},
      {DType::float64, {0x7ff8000000000abcULL, 0x7ff0000000000001ULL, 0xfff8000000000001ULL}, 0x3ff0000000000000ULL},
      {DType::float16, {0x7e01, 0x7c01, 0xfe01}, 0x3c00},
      {DType::bfloat16, {0x7fc1, 0x7f81, 0xffc1}, 0x3f80},
  };
}

constexpr double kScales[] = {0.5, 2.0, -1.0};

Piece piece(Index offset, Index size, std::vector<Rank> locations, double scale) {
  return Piece{{size}, {offset, {1}}, {0, {1}}, std::move(locations), scale};
}

// F of n elements held whole by ranks 0 and 1 (replicas), each with its own scale.
Map replicated(Index n, double scale0, double scale1) {
  Map map;
  map.logical_shape = {n};
  map.ranks.push_back(RankEntry{0, Extents{n}, {piece(0, n, {0, 1}, scale0)}});
  map.ranks.push_back(RankEntry{1, Extents{n}, {piece(0, n, {0, 1}, scale1)}});
  return map;
}

Buffer buffer(DType dtype, const std::vector<std::uint64_t>& bits) {
  Buffer out(dtype, static_cast<Index>(bits.size()));
  for (std::size_t i = 0; i < bits.size(); ++i) out.set_bits(static_cast<Index>(i), bits[i]);
  return out;
}

std::string hex(std::uint64_t bits) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(bits));
  return text;
}

TEST(NanScaling, ApplyScaleKeepsEveryNanBitForBit) {
  for (const NanCase& c : nan_cases()) {
    for (std::uint64_t nan : c.nans) {
      ASSERT_TRUE(is_nan_bits(c.dtype, nan)) << dtype_name(c.dtype) << " " << nan;
      for (double scale : kScales) {
        for (int power : {1, -1, -2, 3}) {
          for (bool multiply : {true, false}) {
            EXPECT_EQ(apply_scale(c.dtype, nan, scale, power, multiply), nan)
                << dtype_name(c.dtype) << " " << nan << " scale " << scale << " power " << power;
          }
        }
      }
    }
    EXPECT_FALSE(is_nan_bits(c.dtype, c.one));
    // Numbers are still scaled: 1 * 2 = 2, 1 / 0.5 = 2.
    EXPECT_EQ(bits_to_double(c.dtype, apply_scale(c.dtype, c.one, 2.0, 1, true)), 2.0);
    EXPECT_EQ(bits_to_double(c.dtype, apply_scale(c.dtype, c.one, 0.5, 1, false)), 2.0);
  }
  EXPECT_FALSE(is_nan_bits(DType::int32, 0x7fc00001));
  EXPECT_FALSE(is_nan_bits(DType::float32, 0x7f800000));  // infinity
  // The legacy model's arithmetic is torch's: bfloat16 canonicalises a NaN.
  EXPECT_EQ(apply_scale(DType::bfloat16, 0x7fc1, 0.5, 1, false, Arithmetic::legacy_torch), 0x7fc0u);
}

TEST(NanScaling, CpuBackendCopiesAndComparesNanBits) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  for (const NanCase& c : nan_cases()) {
    std::vector<std::uint64_t> bits = c.nans;
    bits.push_back(c.one);
    const Buffer from = buffer(c.dtype, bits);
    const Index n = from.numel();
    const Piece p = piece(0, n, {0}, 0.5);
    for (bool multiply : {true, false}) {
      Buffer to(c.dtype, n);
      BlockCopy copy = block_of(p, multiply ? Direction::extract : Direction::rebuild, from, to, 1);
      cpu->copy_block(c.dtype, copy);
      for (Index i = 0; i + 1 < n; ++i) EXPECT_EQ(to.bits(i), from.bits(i)) << dtype_name(c.dtype) << " " << i;
      EXPECT_EQ(bits_to_double(c.dtype, to.bits(n - 1)), multiply ? 0.5 : 2.0);
      EXPECT_FALSE(cpu->compare_block(c.dtype, copy).has_value()) << dtype_name(c.dtype);
      // A NaN with another payload in the destination is a difference.
      to.set_bits(0, from.bits(0) ^ 1);
      EXPECT_EQ(cpu->compare_block(c.dtype, copy), std::optional<Index>(0)) << dtype_name(c.dtype);
    }
  }
}

TEST(NanScaling, RebuildAndExtractKeepNanBitsInEveryFloatDtype) {
  for (const NanCase& c : nan_cases()) {
    for (double scale : kScales) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " scale " + std::to_string(scale));
      std::vector<std::uint64_t> bits = c.nans;
      bits.push_back(c.one);
      const Buffer full = buffer(c.dtype, bits);
      const Index n = full.numel();
      const Map map = replicated(n, scale, scale);

      auto shards = extract_all(map, full);
      ASSERT_TRUE(shards.ok()) << shards.error().to_string();
      for (Rank rank : {0, 1}) {
        const Buffer& shard = shards.value().at(rank);
        for (Index i = 0; i + 1 < n; ++i) EXPECT_EQ(shard.bits(i), full.bits(i)) << "extract rank " << rank << " " << i;
        EXPECT_EQ(bits_to_double(c.dtype, shard.bits(n - 1)), scale);
        auto naive = oracles::reference_extract(map, full, rank);
        ASSERT_TRUE(naive.ok()) << naive.error().to_string();
        EXPECT_EQ(naive.value(), shard);
      }

      // Rebuild copies the first replica and compares the second, both after unscaling.
      auto back = rebuild(map, shards.value(), c.dtype);
      ASSERT_TRUE(back.ok()) << back.error().to_string();
      EXPECT_EQ(back.value(), full);
      auto naive = oracles::reference_rebuild(map, shards.value(), c.dtype);
      ASSERT_TRUE(naive.ok()) << naive.error().to_string();
      EXPECT_EQ(naive.value(), full);
    }
  }
}

TEST(NanScaling, ReplicasWithDifferentNanPayloadsDifferAfterUnscaling) {
  for (const NanCase& c : nan_cases()) {
    for (double scale : kScales) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " scale " + std::to_string(scale));
      const Map map = replicated(2, scale, scale);
      const std::uint64_t nan = c.nans.front();
      const std::uint64_t other = nan ^ 1;  // same NaN, another payload
      ASSERT_TRUE(is_nan_bits(c.dtype, other));
      const ShardSet shards{{0, buffer(c.dtype, {c.one, nan})}, {1, buffer(c.dtype, {c.one, other})}};
      auto strict = rebuild(map, shards, c.dtype);
      ASSERT_FALSE(strict.ok()) << "replicas " << hex(nan) << " and " << hex(other) << " were merged";
      EXPECT_EQ(strict.error().kind, ErrorKind::different_data);
      EXPECT_EQ(strict.error().address, 1);
      auto naive = oracles::reference_rebuild(map, shards, c.dtype);
      ASSERT_FALSE(naive.ok());
      EXPECT_EQ(naive.error().to_string(), strict.error().to_string());
    }
  }
}

TEST(NanScaling, ScaledAndUnscaledCopiesOfOneNanAgree) {
  for (const NanCase& c : nan_cases()) {
    for (double scale : kScales) {
      SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " scale " + std::to_string(scale));
      for (std::uint64_t nan : c.nans) {
        // Rank 0 holds F as is, rank 1 holds F * scale; the NaN is the same bits in both.
        const Map map = replicated(1, 1.0, scale);
        const ShardSet shards{{0, buffer(c.dtype, {nan})}, {1, buffer(c.dtype, {nan})}};
        auto strict = rebuild(map, shards, c.dtype);
        ASSERT_TRUE(strict.ok()) << strict.error().to_string();
        EXPECT_EQ(strict.value().bits(0), nan);
        auto naive = oracles::reference_rebuild(map, shards, c.dtype);
        ASSERT_TRUE(naive.ok()) << naive.error().to_string();
        EXPECT_EQ(naive.value().bits(0), nan);
      }
    }
  }
}

// The legacy model is DeepSpeed's, which scales in torch: a scaled NaN may lose its
// payload (bfloat16 goes through float32 and comes back canonical). Replicas are compared
// with torch.equal, by value, so replicas holding NaNs are refused whatever their bits
// (contract 4.1), where strict compares the bits and keeps identical NaNs.
TEST(NanScaling, LegacyKeepsTorchArithmetic) {
  Map single;
  single.logical_shape = {1};
  single.ranks.push_back(RankEntry{0, Extents{1}, {piece(0, 1, {0}, 0.5)}});
  auto legacy = legacy_rebuild(single, {{0, buffer(DType::bfloat16, {0x7fc1})}}, DType::bfloat16);
  ASSERT_TRUE(legacy.ok()) << legacy.error().to_string();
  EXPECT_EQ(legacy.value().bits(0), 0x7fc0u);
  ConvertOptions strict;
  auto kept = rebuild(single, {{0, buffer(DType::bfloat16, {0x7fc1})}}, DType::bfloat16, strict);
  ASSERT_TRUE(kept.ok()) << kept.error().to_string();
  EXPECT_EQ(kept.value().bits(0), 0x7fc1u);

  const Map map = replicated(1, 0.5, 0.5);
  const ShardSet same{{0, buffer(DType::bfloat16, {0x7fc1})}, {1, buffer(DType::bfloat16, {0x7fc1})}};
  auto replicas = legacy_rebuild(map, same, DType::bfloat16);
  ASSERT_FALSE(replicas.ok());
  EXPECT_EQ(replicas.error().kind, ErrorKind::different_data);
  EXPECT_TRUE(rebuild(map, same, DType::bfloat16, strict).ok());
}

}  // namespace
}  // namespace shardcheck
