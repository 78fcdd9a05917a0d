// Content digests (contract 10): the definition pinned to constants computed
// independently, the fast kernels against the one-element definition, shares that add
// up, rebuild refusing a wrong digest, and the map format's content_digests.
#include "shardcheck/digest.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <fmt/format.h>

#include "shardcheck/backend.h"
#include "shardcheck/constructors.h"
#include "shardcheck/json.h"
#include "support/spec_maps.h"

namespace shardcheck {
namespace {

using build::M;
using build::P;
using build::R;

Buffer raw(DType dtype, const std::vector<std::uint64_t>& bits) {
  Buffer b(dtype, static_cast<Index>(bits.size()));
  for (std::size_t i = 0; i < bits.size(); ++i) b.set_bits(static_cast<Index>(i), bits[i]);
  return b;
}

// The constants below come from plain integer arithmetic in Python, independent of this
// code, so the definition cannot drift:
//
//   M = (1 << 64) - 1
//   def mix(i, b):
//       x = (i * 0x9E3779B97F4A7C15 + b) & M
//       x ^= x >> 30; x = (x * 0xBF58476D1CE4E5B9) & M
//       x ^= x >> 27; x = (x * 0x94D049BB133111EB) & M
//       x ^= x >> 31
//       return x
//   def digest(bits): return sum(mix(i, b) for i, b in enumerate(bits)) & M
//   digest([0x3f800000, 0xc0200000, 0x7fc00001, 0x80000000])  # 0x1cf7d5947c3fcd66
//   digest([0x3f80, 0xc000, 0x7fc1])                            # 0x17f328ff19e00783
//   digest([0xff, 0x00, 0x7f, 0x80])                            # 0x219e7ad9cf9aee19
//   digest([0x400c000000000000])                                # 0xb2097dd1805d8ef7
//   digest([(i * 0x01000193 + 1) & 0xffffffff for i in range(37)])  # 0xa4f8e8e8359eb08e
TEST(Digest, FixedTensorsMatchAnIndependentComputation) {
  // float32 1.0, -2.5, a NaN with payload 1, -0.0
  EXPECT_EQ(digest(raw(DType::float32, {0x3f800000, 0xc0200000, 0x7fc00001, 0x80000000})),
            0x1cf7d5947c3fcd66ull);
  // bfloat16 1.0, -2.0, a NaN with payload
  EXPECT_EQ(digest(raw(DType::bfloat16, {0x3f80, 0xc000, 0x7fc1})), 0x17f328ff19e00783ull);
  // int8 -1, 0, 127, -128: raw bits zero-extended, not sign-extended
  EXPECT_EQ(digest(raw(DType::int8, {0xff, 0x00, 0x7f, 0x80})), 0x219e7ad9cf9aee19ull);
  // a 0-d float64 tensor holding 3.5
  EXPECT_EQ(digest(raw(DType::float64, {0x400c000000000000})), 0xb2097dd1805d8ef7ull);
  // long enough for the vector loop and its tail
  std::vector<std::uint64_t> bits;
  for (std::uint64_t i = 0; i < 37; ++i) bits.push_back((i * 0x01000193 + 1) & 0xffffffffu);
  EXPECT_EQ(digest(raw(DType::int32, bits)), 0xa4f8e8e8359eb08eull);
  EXPECT_EQ(digest(Buffer(DType::float32, 0)), 0u);
}

std::uint64_t naive(const Buffer& b, Index first = 0) {
  std::uint64_t sum = 0;
  for (Index i = 0; i < b.numel(); ++i) sum += digest_term(static_cast<std::uint64_t>(first + i), b.bits(i));
  return sum;
}

TEST(Digest, KernelsAgreeWithTheDefinitionForEveryDtypeAndLength) {
  std::mt19937_64 rng(7);
  for (DType dtype : kAllDTypes) {
    const std::uint64_t mask =
        element_size(dtype) == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * element_size(dtype))) - 1;
    for (Index n : {0, 1, 7, 8, 9, 15, 16, 17, 64, 131}) {
      Buffer b(dtype, n);
      for (Index i = 0; i < n; ++i) b.set_bits(i, rng() & mask);
      EXPECT_EQ(digest(b), naive(b)) << dtype_name(dtype) << " n=" << n;
      for (Index first : {Index{1}, Index{1} << 40, std::numeric_limits<Index>::max() - 200}) {
        EXPECT_EQ(digest_elements(dtype, b.data(), n, first), naive(b, first)) << dtype_name(dtype) << " n=" << n;
        for (const std::string& kernel : detail::digest_kernels_here()) {
          EXPECT_EQ(detail::digest_elements_with(kernel, dtype, b.data(), n, first), naive(b, first))
              << kernel << " " << dtype_name(dtype) << " n=" << n;
        }
      }
    }
  }
}

// The copying kernels: the terms of the elements they copy, the copy exact, nothing
// written outside it, whatever the destination's alignment (streamed stores start at the
// first 16-byte boundary) and whether the stores are streamed.
TEST(Digest, CopyingKernelsCopyExactlyAndSumAsTheDefinition) {
  std::mt19937_64 rng(11);
  constexpr std::byte kGuard{0xa5};
  for (DType dtype : kAllDTypes) {
    const auto size = static_cast<Index>(element_size(dtype));
    const std::uint64_t mask = size == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * size)) - 1;
    for (Index n : {0, 1, 7, 8, 15, 16, 17, 33, 64, 131, 1000}) {
      Buffer b(dtype, n);
      for (Index i = 0; i < n; ++i) b.set_bits(i, rng() & mask);
      const std::uint64_t expected = naive(b, 5);
      for (Index shift = 0; shift < 64; shift += size) {
        for (bool streaming : {false, true}) {
          std::vector<std::string> kernels = detail::digest_kernels_here();
          kernels.emplace_back("");  // the chosen one, through copy_digesting
          for (const std::string& kernel : kernels) {
            // 64-byte aligned storage, the destination `shift` bytes in, guards around it.
            std::vector<std::uint64_t> storage(static_cast<std::size_t>((n * size + 2 * 64) / 8 + 1));
            auto* base = reinterpret_cast<std::byte*>(storage.data());
            base += (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
            const std::size_t region = storage.size() * 8 - static_cast<std::size_t>(base - reinterpret_cast<std::byte*>(storage.data()));
            std::fill(base, base + region, kGuard);
            std::byte* to = base + shift;
            const std::optional<std::uint64_t> terms =
                kernel.empty() ? std::optional(detail::copy_digesting(dtype, b.data(), to, n, 5, streaming))
                               : detail::copy_digesting_with(kernel, dtype, b.data(), to, n, 5, streaming);
            const std::string what = fmt::format("{} {} n={} shift={} streaming={}", kernel.empty() ? "chosen" : kernel,
                                                 dtype_name(dtype), n, shift, streaming);
            ASSERT_EQ(terms, expected) << what;
            if (n > 0) {  // an empty buffer's data() may be null, which memcmp must not get
              ASSERT_EQ(std::memcmp(to, b.data(), static_cast<std::size_t>(n * size)), 0) << what;
            }
            for (std::byte* q = base; q < to; ++q) ASSERT_EQ(*q, kGuard) << what;
            for (std::byte* q = to + n * size; q < base + region; ++q) ASSERT_EQ(*q, kGuard) << what;
          }
        }
      }
    }
  }
  const Buffer f = marker_buffer(DType::float32, 3);
  std::vector<std::byte> to(12);
  EXPECT_EQ(detail::copy_digesting_with("no-such-kernel", f.dtype(), f.data(), to.data(), 3, 0, false), std::nullopt);
}

TEST(Digest, EveryCpuRunsTheBaselineKernelAndTheChoiceIsOneThatRunsHere) {
  const std::vector<std::string> here = detail::digest_kernels_here();
  ASSERT_FALSE(here.empty());
  EXPECT_EQ(here.back(), "baseline");
  EXPECT_EQ(here.front(), detail::digest_kernel_chosen());
  const Buffer f = marker_buffer(DType::float32, 3);
  EXPECT_EQ(detail::digest_elements_with("no-such-kernel", f.dtype(), f.data(), 3, 0), std::nullopt);
}

TEST(Digest, DisjointPartsAddUp) {
  const Buffer f = marker_buffer(DType::float16, 100);
  const Index k = 37;
  const std::uint64_t parts = digest_elements(f.dtype(), f.data(), k, 0) +
                              digest_elements(f.dtype(), f.data() + k * 2, f.numel() - k, k);
  EXPECT_EQ(parts, digest(f));
}

TEST(Digest, DependsOnValueAndPositionNotLayout) {
  Buffer f = marker_buffer(DType::float32, 16);
  const std::uint64_t d = digest(f);
  Buffer swapped = f;
  swapped.set_bits(3, f.bits(4));
  swapped.set_bits(4, f.bits(3));
  EXPECT_NE(digest(swapped), d);
  Buffer flipped = f;
  flipped.set_bits(9, f.bits(9) ^ 1u);
  EXPECT_NE(digest(flipped), d);
}

// ---- shares ---------------------------------------------------------------------------

std::uint64_t sum_of(const std::map<Rank, std::uint64_t>& shares) {
  std::uint64_t sum = 0;
  for (const auto& [rank, share] : shares) sum += share;
  return sum;
}

void expect_shares_add_up(const Map& map, DType dtype, const std::string& what) {
  SCOPED_TRACE(what + " " + std::string(dtype_name(dtype)));
  const Status valid = check_map(map);
  ASSERT_TRUE(valid.ok()) << valid.error().to_string();
  const Buffer f = marker_buffer(dtype, *checked_numel(map.logical_shape));
  auto shards = extract_all(map, f);
  ASSERT_TRUE(shards.ok()) << shards.error().to_string();
  auto shares = digest_shares(map, shards.value());
  ASSERT_TRUE(shares.ok()) << shares.error().to_string();
  EXPECT_EQ(sum_of(shares.value()), digest(f));
  for (const auto& entry : map.ranks) {
    if (entry.shard_shape) {
      EXPECT_TRUE(shares.value().count(entry.rank)) << "rank " << entry.rank;
    }
  }
}

TEST(DigestShares, AddUpForConstructorMaps) {
  const std::vector<std::pair<std::string, Map>> maps = {
      {"row split", contiguous_split_map({6, 5}, {2, 0, 4}, 0).value()},
      {"column split", contiguous_split_map({6, 8}, {2, 2, 4}, 1).value()},
      {"sub_param dim 1", sub_param_map({2, 6}, {4, 2}, {{2, 2}, {1, 1}}, 1).value()},
      {"replicated", replicated_map({3, 5}, 3).value()},
      {"replicated, scale 2", replicated_map({4, 4}, 2, 2.0).value()},
      {"segmented with a replicated block", segmented_map({4, 10}, {{4, false}, {2, true}, {4, false}}, 1, 2,
                                                          {{1, 3}, {2, 2}})
                                                .value()},
      {"block gather", block_gather_map({8, 3}, {{3, 0}, {1, 2}}, 2, 0).value()},
      {"expert placement with a replicated expert",
       expert_placement_map({4, 3}, {{0, 1}, {1, 2}, {3}, {}}).value()},
  };
  for (const auto& [name, map] : maps) {
    for (DType dtype : {DType::float32, DType::bfloat16, DType::int8, DType::float64}) {
      if (dtype == DType::int8 && name == "replicated, scale 2") continue;  // a scale needs a float
      expect_shares_add_up(map, dtype, name);
    }
  }
}

TEST(DigestShares, ReplicatedElementIsCountedByTheLowestRankOnly) {
  const Map map = replicated_map({2, 3}, 3).value();
  const Buffer f = marker_buffer(DType::float32, 6);
  auto shares = digest_shares(map, extract_all(map, f).value());
  ASSERT_TRUE(shares.ok());
  EXPECT_EQ(shares.value().at(0), digest(f));
  EXPECT_EQ(shares.value().at(1), 0u);
  EXPECT_EQ(shares.value().at(2), 0u);
}

TEST(DigestShares, ReplicasOverlappingOnOneRankAreCountedOnce) {
  // Rank 0 holds the whole replicated tensor and again as two halves; valid (every copy
  // names the same holders), so the lowest rank covers each element twice.
  const Map map = M({4}, {R(0, Extents{8}, {P({4}, 0, {1}, 0, {1}, {0, 1}), P({2}, 0, {1}, 4, {1}, {0, 1}),
                                            P({2}, 2, {1}, 6, {1}, {0, 1})}),
                          R(1, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})})});
  expect_shares_add_up(map, DType::float32, "overlapping replicas");
}

TEST(DigestShares, ReplicasSharingOnlyTheirLastElementAreCountedOnce) {
  // Rank 0's two replica pieces meet at F[1] alone: spans [0, 1] and [1, 2] touch, so the
  // element both hold must still be counted once.
  const Map map = M({3}, {R(0, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0, 1}), P({2}, 1, {1}, 2, {1}, {0, 1})}),
                          R(1, Extents{3}, {P({3}, 0, {1}, 0, {1}, {0, 1})})});
  expect_shares_add_up(map, DType::float32, "replicas touching at one element");
}

TEST(DigestShares, SumEqualsTheDigestOfTheRebuiltTensor) {
  // Scaled pieces are unscaled as rebuild unscales them; the sum is digest(rebuild(...)).
  const Map map = replicated_map({3, 4}, 2, 0.5).value();
  const Buffer f = marker_buffer(DType::bfloat16, 12);
  auto shards = extract_all(map, f).value();
  auto shares = digest_shares(map, shards);
  auto rebuilt = rebuild(map, shards, DType::bfloat16);
  ASSERT_TRUE(shares.ok() && rebuilt.ok());
  EXPECT_EQ(sum_of(shares.value()), digest(rebuilt.value()));
}

TEST(DigestShares, RefusedAsRebuildRefuses) {
  const Map split = contiguous_split_map({4, 4}, {2, 2}, 0).value();
  const ShardSet shards = extract_all(split, marker_buffer(DType::float32, 16)).value();
  // an invalid map: its own kind
  auto invalid = digest_shares(build::repro1(), {{0, Buffer(DType::float32, 4)}, {1, Buffer(DType::float32, 4)}});
  ASSERT_FALSE(invalid.ok());
  EXPECT_EQ(invalid.error().kind, check_map(build::repro1()).error().kind);
  // a missing shard, a short shard, a shard for a rank the map does not list
  ShardSet missing = shards;
  missing.erase(1);
  EXPECT_EQ(digest_shares(split, missing).error().kind, ErrorKind::shape);
  ShardSet short_shard = shards;
  short_shard[1] = Buffer(DType::float32, 7);
  EXPECT_EQ(digest_shares(split, short_shard).error().kind, ErrorKind::shape);
  ShardSet extra = shards;
  extra[5] = Buffer(DType::float32, 0);
  EXPECT_EQ(digest_shares(split, extra).error().kind, ErrorKind::shape);
  ShardSet mixed = shards;
  mixed[1] = Buffer(DType::float16, 8);
  EXPECT_EQ(digest_shares(split, mixed).error().kind, ErrorKind::shape);
  // a scaled map with scale_power -1, and on an integer dtype
  const Map scaled = replicated_map({4}, 2, 2.0).value();
  const ShardSet scaled_shards = {{0, Buffer(DType::float32, 4)}, {1, Buffer(DType::float32, 4)}};
  EXPECT_EQ(digest_shares(scaled, scaled_shards, -1).error().kind, ErrorKind::scale);
  const ShardSet int_shards = {{0, Buffer(DType::int32, 4)}, {1, Buffer(DType::int32, 4)}};
  EXPECT_EQ(digest_shares(scaled, int_shards).error().kind, ErrorKind::scale);
}

// A backend's digest of a large F is summed in parts on threads; every part must keep
// its elements' indices in F, so the sum is digest(F) whatever the thread count. (Tests'
// tensors are small: the threads are asked for from the first byte.)
TEST(Digest, ThreadedDigestIsTheDigest) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  int compared = 0;
  for (DType dtype : {DType::float32, DType::bfloat16, DType::float64, DType::uint8}) {
    for (Index n : {0, 1, 7, 1000, 65537}) {
      const Buffer f = marker_buffer(dtype, n);
      std::uint64_t by_definition = 0;
      for (Index i = 0; i < n; ++i) by_definition += digest_term(static_cast<std::uint64_t>(i), f.bits(i));
      for (int threads : {1, 2, 3, 8}) {
        EXPECT_EQ(cpu->digest(f, Threading{threads, 0, 0}), by_definition)
            << dtype_name(dtype) << " numel " << n << " threads " << threads;
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 80);
}

// Contract 1.2 in a share: an element that unscaling overflows or flushes is refused with
// rebuild's own error (kind, rank, piece as written, addresses), whatever the piece order,
// never summed as the infinity or zero the arithmetic leaves (found by an independent
// model: `shardcheck digest` printed the digest of +inf).
TEST(DigestShares, AnElementUnscalingLosesIsRefusedAsRebuildRefusesIt) {
  struct Scaled {
    double scale;
    double value;  // in the shard
  };
  const std::vector<Scaled> lost = {{1e-30, 1.0},      // 1 / 1e-30 overflows float16
                                    {65536.0, 0x1p-14},  // the smallest normal float16 / 2^16 flushes
                                    {0x1p-100, 0x1p100},
                                    {0x1p100, 0x1p-100}};
  int refused = 0;
  for (DType dtype : {DType::float16, DType::bfloat16}) {
    for (const Scaled& s : lost) {
      const auto bits = bits_from_double(dtype, s.value);
      if (!bits) continue;  // 2^100 is no float16
      // Two pieces of rank 0: the one listed second comes first in content order and
      // holds the element lost; the other is harmless.
      const Map map = M({2}, {R(0, Extents{2}, {P({1}, 1, {1}, 1, {1}, {0}, 2.0), P({1}, 0, {1}, 0, {1}, {0}, s.scale)})});
      Buffer shard(dtype, 2);
      shard.set_bits(0, *bits);
      shard.set_bits(1, *bits_from_double(dtype, 1.0));
      const ShardSet shards = {{0, shard}};
      const std::string where = fmt::format("{} scale {} value {}", dtype_name(dtype), s.scale, s.value);
      auto rebuilt = rebuild(map, shards, dtype);
      if (rebuilt.ok()) continue;  // this dtype holds the result: nothing is lost
      ASSERT_EQ(rebuilt.error().kind, ErrorKind::scale) << where;
      ++refused;
      auto shares = digest_shares(map, shards);
      ASSERT_FALSE(shares.ok()) << where << " summed " << format_digest(sum_of(shares.value()));
      EXPECT_EQ(shares.error().to_string(), rebuilt.error().to_string()) << where;
      EXPECT_EQ(shares.error().piece, 1) << where;
      Map reversed = map;
      std::swap(reversed.ranks[0].pieces[0], reversed.ranks[0].pieces[1]);
      auto reversed_shares = digest_shares(reversed, shards);
      ASSERT_FALSE(reversed_shares.ok()) << where;
      EXPECT_EQ(reversed_shares.error().address, shares.error().address) << where;
      EXPECT_EQ(reversed_shares.error().piece, 0) << where;
    }
  }
  EXPECT_EQ(refused, 4);  // an overflow and a flush in each dtype
}

// ---- rebuild with an expected digest --------------------------------------------------

// The valid-but-different layout of contract 3: two equal pieces swap
// destinations. Every check passes; only the digest can see it.
Map truth_layout() {
  return M({4}, {R(0, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0}), P({2}, 2, {1}, 2, {1}, {0})})});
}
Map swapped_layout() {
  return M({4}, {R(0, Extents{4}, {P({2}, 0, {1}, 2, {1}, {0}), P({2}, 2, {1}, 0, {1}, {0})})});
}

TEST(DigestRequest, ValidButDifferentLayoutIsRefused) {
  const Buffer f = marker_buffer(DType::float32, 4);
  const ShardSet shards = extract_all(truth_layout(), f).value();
  ASSERT_TRUE(check_map(swapped_layout()).ok());
  auto silently = rebuild(swapped_layout(), shards, DType::float32);
  ASSERT_TRUE(silently.ok());
  ASSERT_FALSE(silently.value() == f);  // the class: accepted and wrong without a digest

  ConvertOptions options;
  options.expected_digest = digest(f);
  auto refused = rebuild(swapped_layout(), shards, DType::float32, options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::digest);
  EXPECT_NE(refused.error().message.find(format_digest(digest(f))), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find(format_digest(digest(silently.value()))), std::string::npos)
      << refused.error().message;

  auto exact = rebuild(truth_layout(), shards, DType::float32, options);
  ASSERT_TRUE(exact.ok()) << exact.error().to_string();
  EXPECT_EQ(exact.value(), f);
}

TEST(DigestRequest, ComparesFAfterUnscaling) {
  const Map map = replicated_map({2, 4}, 2, 2.0).value();
  const Buffer f = marker_buffer(DType::float16, 8);
  const ShardSet shards = extract_all(map, f).value();
  ConvertOptions options;
  options.expected_digest = digest(f);
  EXPECT_TRUE(rebuild(map, shards, DType::float16, options).ok());
  options.expected_digest = digest(shards.at(0));  // the scaled bits are not F
  EXPECT_EQ(rebuild(map, shards, DType::float16, options).error().kind, ErrorKind::digest);
}

TEST(DigestRequest, TheMapsRecordForAState) {
  const Buffer f = marker_buffer(DType::float32, 4);
  const ShardSet shards = extract_all(truth_layout(), f).value();
  Map map = truth_layout();
  map.content_digests["param"] = digest(f);
  map.content_digests["exp_avg"] = digest(f) + 1;
  ConvertOptions options;
  options.digest_state = "param";
  EXPECT_TRUE(rebuild(map, shards, DType::float32, options).ok());
  // a flipped bit in the record
  map.content_digests["param"] ^= std::uint64_t{1} << 17;
  EXPECT_EQ(rebuild(map, shards, DType::float32, options).error().kind, ErrorKind::digest);
  // the entry of another state
  options.digest_state = "exp_avg";
  EXPECT_EQ(rebuild(map, shards, DType::float32, options).error().kind, ErrorKind::digest);
  // no entry for the state asked for
  options.digest_state = "exp_avg_sq";
  auto missing = rebuild(map, shards, DType::float32, options);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().kind, ErrorKind::digest);
  EXPECT_NE(missing.error().message.find("exp_avg_sq"), std::string::npos) << missing.error().message;
  // both a value and a state: both must match
  map.content_digests["param"] = digest(f);
  options.digest_state = "param";
  options.expected_digest = digest(f) ^ 1u;
  EXPECT_EQ(rebuild(map, shards, DType::float32, options).error().kind, ErrorKind::digest);
  options.expected_digest = digest(f);
  EXPECT_TRUE(rebuild(map, shards, DType::float32, options).ok());
}

TEST(DigestRequest, NotAskedMeansNotCompared) {
  const Buffer f = marker_buffer(DType::float32, 4);
  Map map = truth_layout();
  map.content_digests["param"] = 0;  // wrong, but nobody asks
  EXPECT_TRUE(rebuild(map, extract_all(map, f).value(), DType::float32).ok());
}

TEST(DigestRequest, LegacyIgnoresTheDigest) {
  const Buffer f = marker_buffer(DType::float32, 4);
  ConvertOptions options;
  options.policy = Policy::legacy;
  options.expected_digest = digest(f) ^ 1u;
  EXPECT_TRUE(rebuild(truth_layout(), extract_all(truth_layout(), f).value(), DType::float32, options).ok());
}

TEST(DigestRequest, EarlierChecksComeFirst) {
  // A map refused by a check is refused with that check's kind, not `digest`.
  ConvertOptions options;
  options.expected_digest = 0;
  const ShardSet shards = {{0, Buffer(DType::float32, 4)}, {1, Buffer(DType::float32, 4)}};
  EXPECT_EQ(rebuild(build::repro1(), shards, DType::float32, options).error().kind, check_map(build::repro1()).error().kind);
}

// ---- text form and the map format -----------------------------------------------------

TEST(DigestText, FormatAndParse) {
  EXPECT_EQ(format_digest(0x1cf7d5947c3fcd66ull), "0x1cf7d5947c3fcd66");
  EXPECT_EQ(format_digest(1), "0x0000000000000001");
  EXPECT_EQ(parse_digest("0x1cf7d5947c3fcd66"), 0x1cf7d5947c3fcd66ull);
  EXPECT_EQ(parse_digest("0x1CF7D5947C3FCD66"), 0x1cf7d5947c3fcd66ull);
  EXPECT_EQ(parse_digest("0xffffffffffffffff"), ~std::uint64_t{0});
  for (const char* bad : {"", "0x", "0x1", "1cf7d5947c3fcd66", "0x1cf7d5947c3fcd6", "0x1cf7d5947c3fcd660",
                          "0X1cf7d5947c3fcd66", "0x1cf7d5947c3fcd6g", "0x+cf7d5947c3fcd66", " 0x1cf7d5947c3fcd6"}) {
    EXPECT_FALSE(parse_digest(bad)) << bad;
  }
}

TEST(DigestFormat, ContentDigestsSurviveDecodeAndEncode) {
  const std::string text =
      R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]],)"
      R"( "dest": [0, [1]], "locations": [0]}]}}, "content_digests": {"param": "0x1CF7D5947C3FCD66",)"
      R"( "exp_avg": "0x0000000000000001"}})";
  auto map = decode_map(parse_json(text).value());
  ASSERT_TRUE(map.ok()) << map.error().to_string();
  EXPECT_EQ(map.value().content_digests.at("param"), 0x1cf7d5947c3fcd66ull);
  EXPECT_EQ(map.value().content_digests.at("exp_avg"), 1u);
  EXPECT_TRUE(check_map(map.value()).ok());
  const Json encoded = encode_map(map.value());
  EXPECT_EQ(encoded["content_digests"]["param"], "0x1cf7d5947c3fcd66");
  auto again = decode_map(encoded);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value(), map.value());
  // A map without digests is written without the key, as DeepSpeed writes it.
  EXPECT_FALSE(encode_map(truth_layout()).contains("content_digests"));
}

TEST(DigestFormat, MalformedEntriesAreFormatErrors) {
  const std::string head =
      R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]],)"
      R"( "dest": [0, [1]], "locations": [0]}]}}, "content_digests": )";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"(["0x1cf7d5947c3fcd66"])", "$.content_digests"},
      {R"("0x1cf7d5947c3fcd66")", "$.content_digests"},
      {R"({"param": 12345})", "$.content_digests.param"},
      {R"({"param": "0x1234"})", "$.content_digests.param"},
      {R"({"param": "1cf7d5947c3fcd66"})", "$.content_digests.param"},
      {R"({"param": "0x1cf7d5947c3fcd66", "exp_avg": null})", "$.content_digests.exp_avg"},
      {R"({"": "0x1cf7d5947c3fcd66"})", R"($.content_digests[""])"},
  };
  for (const auto& [digests, path] : bad) {
    auto json = parse_json(head + digests + "}");
    ASSERT_TRUE(json.ok()) << digests;
    auto map = decode_map(json.value());
    ASSERT_FALSE(map.ok()) << digests;
    EXPECT_EQ(map.error().kind, ErrorKind::format) << digests;
    EXPECT_EQ(map.error().path, path) << map.error().to_string();
  }
}

}  // namespace
}  // namespace shardcheck
