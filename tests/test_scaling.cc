// Contract 1.2's scaling arithmetic: float32 arithmetic for 16-bit types, scales the
// arithmetic type cannot hold refused, overflow and flush refused with their address.
// The core (shardcheck/scaling.h) and the reference model (its own rounding model) must
// agree on every power of two from 2^-160 to 2^160 in every float dtype, and both must
// meet the contract's own promises: a power-of-two scale gives F back, but for values it
// writes as subnormals with fewer bits.
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "shardcheck/case.h"
#include "shardcheck/convert.h"
#include "shardcheck/dtype.h"
#include "shardcheck/gen/values.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/scaling.h"

namespace shardcheck {
namespace {

constexpr DType kFloats[] = {DType::float64, DType::float32, DType::float16, DType::bfloat16};

// One rank holding F whole as one piece of `scale`.
Map one_piece(Index n, double scale) {
  Piece piece;
  piece.shape = Extents{n};
  piece.source = StridedView{0, {1}};
  piece.dest = StridedView{0, {1}};
  piece.locations = {0};
  piece.scale = scale;
  RankEntry entry;
  entry.rank = 0;
  entry.shard_shape = Extents{n};
  entry.pieces.push_back(piece);
  Map map;
  map.logical_shape = Extents{n};
  map.ranks.push_back(entry);
  return map;
}

Buffer buffer_of(DType dtype, const std::vector<std::uint64_t>& bits) {
  Buffer out(dtype, static_cast<Index>(bits.size()));
  for (std::size_t i = 0; i < bits.size(); ++i) out.set_bits(static_cast<Index>(i), bits[i]);
  return out;
}

// Special values, markers and random bit patterns of the dtype.
std::vector<std::uint64_t> values_of(DType dtype) {
  std::vector<std::uint64_t> out = gen::special_values(dtype);
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  const std::uint64_t mask = element_size(dtype) == 8 ? ~0ULL : (1ULL << (8 * element_size(dtype))) - 1;
  for (int i = 0; i < 48; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    out.push_back(state & mask);
    out.push_back(marker_bits(dtype, i));
  }
  return out;
}


void expect_same(const Result<Buffer>& core, const Result<Buffer>& reference, const std::string& where) {
  ASSERT_EQ(core.ok(), reference.ok()) << where << ": core "
                                       << (core.ok() ? "accepts" : core.error().to_string()) << ", reference "
                                       << (reference.ok() ? "accepts" : reference.error().to_string());
  if (!core.ok()) {
    EXPECT_EQ(core.error().to_string(), reference.error().to_string()) << where;
    return;
  }
  EXPECT_TRUE(core.value() == reference.value()) << where;
}

TEST(ScalingArithmetic, EveryPowerOfTwoInEveryFloatDtype) {
  int round_trips = 0, refused_scales = 0, refused_elements = 0;
  for (DType dtype : kFloats) {
    const std::vector<std::uint64_t> values = values_of(dtype);
    const auto n = static_cast<Index>(values.size());
    const Buffer full = buffer_of(dtype, values);
    for (int k = -160; k <= 160; ++k) {
      const double scale = std::ldexp(1.0, k);
      const Map map = one_piece(n, scale);
      const std::string where = std::string(dtype_name(dtype)) + " scale 2^" + std::to_string(k);
      // The scale must be a normal number of the arithmetic type.
      const bool fits = dtype == DType::float64 ? (k >= -1022 && k <= 1023) : (k >= -126 && k <= 127);
      EXPECT_EQ(scale_fits_arithmetic(dtype, scale), fits) << where;

      // Every value: core and reference refuse alike, at the lowest shard address whose
      // value the scale overflows or flushes.
      const auto core_extract = extract(map, full, 0);
      expect_same(core_extract, oracles::reference_extract(map, full, 0), where + " extract");
      if (!core_extract.ok()) {
        EXPECT_EQ(core_extract.error().kind, ErrorKind::scale) << where;
        (fits ? refused_elements : refused_scales) += 1;
        if (fits) {
          const Error& e = core_extract.error();
          ASSERT_TRUE(e.address.has_value()) << e.to_string();
          EXPECT_EQ(e.side, Side::shard) << e.to_string();
          EXPECT_NE(scale_fault(dtype, full.bits(*e.address), scale, true), ScaleFault::none) << e.to_string();
          for (Index a = 0; a < *e.address; ++a) {
            EXPECT_EQ(scale_fault(dtype, full.bits(a), scale, true), ScaleFault::none) << "lower address " << a;
          }
        }
      }
      if (!fits) continue;
      // The values this scale keeps, judged by the reference model's arithmetic: they
      // extract and come back as F, but where a power of two wrote a subnormal with
      // fewer bits.
      auto lost = [&](std::uint64_t v, bool multiply) {
        const double before = bits_to_double(dtype, v);
        const double after = bits_to_double(dtype, oracles::reference_scale(dtype, v, scale, 1, multiply));
        return (std::isinf(after) && std::isfinite(before)) || (after == 0 && before != 0);
      };
      std::vector<std::uint64_t> kept;
      for (std::uint64_t v : values) {
        // Kept both ways: a value that rounded up on the way out may overflow on the way back.
        if (!lost(v, true) && !lost(oracles::reference_scale(dtype, v, scale, 1, true), false)) kept.push_back(v);
      }
      const Buffer fitted = buffer_of(dtype, kept);
      const Map fitted_map = one_piece(static_cast<Index>(kept.size()), scale);
      const auto written = extract(fitted_map, fitted, 0);
      expect_same(written, oracles::reference_extract(fitted_map, fitted, 0), where + " extract of kept values");
      ASSERT_TRUE(written.ok()) << where << ": " << written.error().to_string();
      ShardSet shards;
      shards.emplace(0, written.value());
      const auto core_rebuild = rebuild(fitted_map, shards, dtype);
      expect_same(core_rebuild, oracles::reference_rebuild(fitted_map, shards, dtype), where + " rebuild");
      ASSERT_TRUE(core_rebuild.ok()) << where << ": " << core_rebuild.error().to_string();
      for (std::size_t i = 0; i < kept.size(); ++i) {
        const auto e = static_cast<Index>(i);
        if (core_rebuild.value().bits(e) == kept[i] || oracles::underflows_when_scaled(dtype, kept[i], scale)) continue;
        ADD_FAILURE() << where << ": " << format_element(dtype, kept[i]) << " came back as "
                      << format_element(dtype, core_rebuild.value().bits(e));
      }
      ++round_trips;
    }
  }
  EXPECT_GT(round_trips, 400);
  EXPECT_GT(refused_scales, 100);
  EXPECT_GT(refused_elements, 100);
}

struct Boundary {
  DType dtype;
  std::uint64_t value;
  double scale;
  bool multiply;  // extract (true) or rebuild
  bool refused;
  const char* what;
};

// The exact edges of overflow and flush: one ulp of the scale's mantissa decides.
const Boundary kBoundaries[] = {
    {DType::float16, 0x7bff, 1.0 + 0x1p-12, true, false, "65504 * (1 + 2^-12) rounds back to 65504"},
    {DType::float16, 0x7bff, 1.0 + 0x1p-11, true, true, "65504 * (1 + 2^-11) reaches 65520: infinity"},
    {DType::float16, 0x7bff, 0.5, false, true, "65504 / 0.5 overflows"},
    {DType::float16, 0x0001, 0.5, true, true, "2^-24 * 0.5 ties to even: zero"},
    {DType::float16, 0x0001, 0.75, true, false, "2^-24 * 0.75 rounds up to 2^-24"},
    {DType::float16, 0x0003, 0.5, true, false, "3 * 2^-24 * 0.5 ties to 2 * 2^-24, not zero"},
    {DType::float16, 0x1400, 65536.0, true, false, "2^-10 * 2^16 = 64: 2^16 is a normal float32 scale"},
    {DType::float16, 0x5000, 0x1p-16, false, true, "rebuild divides 32 by 2^-16: 2^21 overflows float16"},
    {DType::float16, 0x1400, 0x1p-16, false, false, "rebuild divides 2^-10 by 2^-16: 64"},
    {DType::bfloat16, 0x7f7f, 1.0 + 0x1p-9, true, false, "the largest bfloat16 times (1 + 2^-9) stays below the tie"},
    {DType::bfloat16, 0x7f7f, 1.0 + 0x1p-8, true, true, "the largest bfloat16 times (1 + 2^-8) rounds to infinity"},
    {DType::bfloat16, 0x0001, 0.5, true, true, "the smallest bfloat16 subnormal halved ties to zero"},
    {DType::float32, 0x7f7fffff, 2.0, true, true, "FLT_MAX * 2 overflows"},
    {DType::float32, 0x00000001, 0.5, true, true, "2^-149 * 0.5 flushes"},
    {DType::float32, 0x00000003, 0.5, true, false, "3 * 2^-149 * 0.5 ties to 2 * 2^-149"},
    {DType::float64, 0x7fefffffffffffffULL, 2.0, true, true, "DBL_MAX * 2 overflows"},
    {DType::float64, 0x0000000000000001ULL, 0.5, true, true, "5e-324 * 0.5 flushes"},
    {DType::float32, 0x7f800000, 0.5, true, false, "infinity stays infinite: not an overflow"},
    {DType::float32, 0x80000000, 0.5, true, false, "-0 stays zero: not a flush"},
};

TEST(ScalingArithmetic, OverflowAndFlushAtTheirExactBoundaries) {
  for (const Boundary& b : kBoundaries) {
    const Map map = one_piece(3, b.scale);
    // The value sits at index 1 between two zeros (no scale loses a zero), so the
    // address is checked.
    const Buffer data = buffer_of(b.dtype, {0, b.value, 0});
    Result<Buffer> out = Buffer{};
    Result<Buffer> reference = Buffer{};
    if (b.multiply) {
      out = extract(map, data, 0);
      reference = oracles::reference_extract(map, data, 0);
    } else {
      ShardSet shards;
      shards.emplace(0, data);
      out = rebuild(map, shards, b.dtype);
      reference = oracles::reference_rebuild(map, shards, b.dtype);
    }
    expect_same(out, reference, b.what);
    ASSERT_EQ(out.ok(), !b.refused) << b.what << ": " << (out.ok() ? "accepted" : out.error().to_string());
    if (!b.refused) continue;
    EXPECT_EQ(out.error().kind, ErrorKind::scale) << b.what;
    EXPECT_EQ(out.error().rank, 0) << b.what;
    EXPECT_EQ(out.error().piece, 0) << b.what;
    EXPECT_EQ(out.error().address, 1) << b.what << ": " << out.error().to_string();
    EXPECT_EQ(out.error().side, b.multiply ? Side::shard : Side::full) << b.what;
  }
}

// The top of float32's range, where a scale stops rounding to a finite float (contract 1.2:
// a scale that is not finite in float32 is refused for the 16-bit and float32 dtypes).
// 3.4028235677973366e38 is half an ulp above FLT_MAX: round-to-nearest-even takes it to
// infinity, and everything below it to FLT_MAX.
TEST(ScalingArithmetic, AScaleRoundingToFloatInfinityIsRefused) {
  constexpr double kHalfUlpAboveFloatMax = 3.4028235677973366e38;
  struct Edge {
    double scale;
    bool refused;
  };
  const Edge edges[] = {{kHalfUlpAboveFloatMax, true},
                        {-kHalfUlpAboveFloatMax, true},
                        {std::nextafter(kHalfUlpAboveFloatMax, 0.0), false},
                        {3.4028234663852886e38, false}};
  for (const Edge& edge : edges) {
    float factor = 0;
    EXPECT_EQ(scaling::arithmetic_factor(edge.scale, factor), !edge.refused) << edge.scale;
    if (!edge.refused) {
      EXPECT_EQ(std::fabs(factor), 3.4028234663852886e38f) << edge.scale;
    }
    for (DType dtype : {DType::float32, DType::bfloat16, DType::float16}) {
      const std::string where = std::string(dtype_name(dtype)) + " scale " + std::to_string(edge.scale);
      const Map map = one_piece(1, edge.scale);
      ShardSet shards;
      shards.emplace(0, buffer_of(dtype, {0}));
      const Result<Buffer> out = rebuild(map, shards, dtype);
      expect_same(out, oracles::reference_rebuild(map, shards, dtype), where);
      ASSERT_EQ(out.ok(), !edge.refused) << where << ": " << (out.ok() ? "accepted" : out.error().to_string());
      if (edge.refused) {
        EXPECT_EQ(out.error().kind, ErrorKind::scale) << where;
        EXPECT_EQ(out.error().rank, 0) << where;
        EXPECT_EQ(out.error().piece, 0) << where;
      }
    }
  }
}

// The reported cases of issue 26: F = [2^-10] (or another value that survives) through one
// piece whose scale float32 arithmetic holds but the element type may not. From shards
// the truth map wrote and from the same shards given explicitly, strict is exact or
// refuses with kind scale, never silently wrong.
TEST(ScalingArithmetic, ScalesBeyondTheElementTypeAreExactOrRefused) {
  struct Reported {
    DType dtype;
    double scale;
  };
  const Reported reported[] = {{DType::float16, 0x1p16},  {DType::float16, 0x1p20},   {DType::float16, 0x1p-26},
                               {DType::float16, 0x1p-30}, {DType::bfloat16, 0x1p-140}, {DType::float32, 0x1p-150},
                               {DType::float32, 5e-324}};
  int exact = 0;
  for (const Reported& r : reported) {
    Case c;
    c.name = "reported";
    c.map = one_piece(1, r.scale);
    c.dtype = r.dtype;
    c.full = std::vector<std::uint64_t>{*bits_from_double(r.dtype, 0x1p-10)};
    for (bool explicit_shards : {false, true}) {
      Case run = c;
      if (explicit_shards) {
        auto shard = oracles::reference_extract(c.map, buffer_of(r.dtype, *c.full), 0);
        if (!shard) continue;  // the truth map cannot write it: nothing to give explicitly
        run.shards = std::map<Rank, std::vector<std::uint64_t>>{{0, {shard.value().bits(0)}}};
      }
      auto outcome = oracles::run_case(run);
      if (!outcome) {
        // Only a truth map that cannot write F makes the case unusable, and then by scale.
        EXPECT_EQ(outcome.error().kind, ErrorKind::scale) << outcome.error().to_string();
        continue;
      }
      const std::string where = std::string(dtype_name(r.dtype)) + " scale " + std::to_string(r.scale);
      EXPECT_NE(outcome.value().verdict, Outcome::wrong) << where << ": " << outcome.value().message;
      if (outcome.value().verdict == Outcome::refused) {
        EXPECT_EQ(outcome.value().error->kind, ErrorKind::scale) << where;
      } else {
        ++exact;
      }
      EXPECT_TRUE(outcome.value().expected_vs_full.harness_defect.empty()) << where;
    }
  }
  EXPECT_GE(exact, 4);  // 2^16, 2^20 and 2^-26 for float16 from both kinds of shards at least
}

// Contract 8's exception, found by a campaign: (1 - 2^-53) * 2^-1022 in float64 lies below
// the smallest normal and rounds up to it, so the value comes back as 1. That is gradual
// underflow, which 1.2 does not refuse, not a defect of the harness; a double product of
// the two would itself round to the smallest normal and hide it.
TEST(ScalingArithmetic, RoundingUpToTheSmallestNormalIsGradualUnderflow) {
  Case c;
  c.name = "float64-min-normal-scale";
  c.map = one_piece(2, 0x1p-1022);
  c.dtype = DType::float64;
  c.full = std::vector<std::uint64_t>{0x3fefffffffffffffULL, 0x3ff0000000000000ULL};
  auto outcome = oracles::run_case(c);
  ASSERT_TRUE(outcome) << outcome.error().to_string();
  EXPECT_EQ(outcome.value().verdict, Outcome::exact) << outcome.value().message;
  ASSERT_TRUE(outcome.value().expected_vs_full.difference.has_value());
  EXPECT_EQ(outcome.value().expected_vs_full.difference->element, 0);
  EXPECT_NE(outcome.value().expected_vs_full.reason.find("gradual underflow"), std::string::npos)
      << outcome.value().expected_vs_full.reason;
  EXPECT_TRUE(outcome.value().expected_vs_full.harness_defect.empty()) << outcome.value().expected_vs_full.harness_defect;
}

// The lowest address of the result decides which lost element a refusal names: the shard
// address for extract, the F address for rebuild, not the other side's. Rank 0 stores its
// 2 x 2 block transposed, so F[1] sits at shard address 2 and F[2] at shard address 1;
// both are lost, and the core and the reference model name the same one.
TEST(ScalingArithmetic, ALostElementIsNamedByTheLowestAddressOfTheResult) {
  Piece piece;
  piece.shape = Extents{2, 2};
  piece.source = StridedView{0, {2, 1}};
  piece.dest = StridedView{0, {1, 2}};
  piece.locations = {0};
  piece.scale = std::ldexp(1.0, 64);
  RankEntry entry;
  entry.rank = 0;
  entry.shard_shape = Extents{4};
  entry.pieces.push_back(piece);
  Map map;
  map.logical_shape = Extents{4};
  map.ranks.push_back(entry);
  const auto big = static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(std::ldexp(1.0f, 100)));
  const auto tiny = static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(std::ldexp(1.0f, -100)));
  const auto one = static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(1.0f));

  // Extract: F[1] and F[2] overflow; F[2] lands at the lower shard address, 1.
  const Buffer full = buffer_of(DType::float32, {one, big, big, one});
  const auto core_extract = extract(map, full, 0);
  expect_same(core_extract, oracles::reference_extract(map, full, 0), "extract");
  ASSERT_FALSE(core_extract.ok());
  EXPECT_EQ(core_extract.error().kind, ErrorKind::scale);
  EXPECT_EQ(core_extract.error().side, Side::shard);
  EXPECT_EQ(core_extract.error().address, 1) << core_extract.error().to_string();

  // Rebuild: shard addresses 1 and 2 flush; address 2 holds F[1], the lower F address.
  const ShardSet shards{{0, buffer_of(DType::float32, {one, tiny, tiny, one})}};
  const auto core_rebuild = rebuild(map, shards, DType::float32);
  expect_same(core_rebuild, oracles::reference_rebuild(map, shards, DType::float32), "rebuild");
  ASSERT_FALSE(core_rebuild.ok());
  EXPECT_EQ(core_rebuild.error().kind, ErrorKind::scale);
  EXPECT_EQ(core_rebuild.error().side, Side::full);
  EXPECT_EQ(core_rebuild.error().address, 1) << core_rebuild.error().to_string();
}

}  // namespace
}  // namespace shardcheck
