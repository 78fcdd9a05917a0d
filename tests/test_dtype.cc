#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/dtype.h"

namespace shardcheck {
namespace {

constexpr Index kMarkers = 4096;

std::uint64_t distinct_limit(DType dtype) {
  switch (dtype) {
    case DType::boolean: return 2;
    case DType::int8:
    case DType::uint8: return 255;  // every pattern but the poison byte
    default: return kMarkers;
  }
}

TEST(DType, NamesRoundTrip) {
  std::set<std::string_view> names;
  for (DType dtype : kAllDTypes) {
    auto name = dtype_name(dtype);
    names.insert(name);
    ASSERT_EQ(parse_dtype(name), dtype) << name;
  }
  EXPECT_EQ(names.size(), std::size(kAllDTypes));
  EXPECT_EQ(dtype_name(DType::boolean), "bool");
  EXPECT_EQ(dtype_name(DType::bfloat16), "bfloat16");
  EXPECT_FALSE(parse_dtype("float"));
  EXPECT_FALSE(parse_dtype("Float32"));
  EXPECT_EQ(element_size(DType::float64), 8u);
  EXPECT_EQ(element_size(DType::bfloat16), 2u);
  EXPECT_EQ(element_size(DType::boolean), 1u);
  EXPECT_TRUE(is_floating(DType::float16));
  EXPECT_FALSE(is_floating(DType::int64));
}

TEST(DType, BufferIsZeroFilledLittleEndian) {
  Buffer b(DType::int32, 3);
  EXPECT_EQ(b.numel(), 3);
  EXPECT_EQ(b.size_bytes(), 12u);
  for (Index i = 0; i < 3; ++i) EXPECT_EQ(b.bits(i), 0u);
  b.set_bits(1, 0x11223344);
  EXPECT_EQ(b.bits(1), 0x11223344u);
  EXPECT_EQ(std::to_integer<int>(b.data()[4]), 0x44);
  EXPECT_EQ(std::to_integer<int>(b.data()[7]), 0x11);
  EXPECT_EQ(b.bits(0), 0u);
  EXPECT_EQ(b.bits(2), 0u);
  Buffer h(DType::float16, 2);
  h.set_bits(0, 0xffffABCD);  // only the element's width is stored
  EXPECT_EQ(h.bits(0), 0xABCDu);
  EXPECT_EQ(h.bits(1), 0u);
}

// Borrowed buffers let a caller (the Python module) convert memory it owns in place.
TEST(DType, BorrowedBufferReadsCallerMemoryInPlace) {
  std::vector<std::int32_t> held{5, -6, 7};
  const auto* bytes = reinterpret_cast<const std::byte*>(held.data());
  const Buffer b = Buffer::borrow(DType::int32, 3, bytes);
  EXPECT_TRUE(b.borrowed());
  EXPECT_EQ(b.data(), bytes);
  EXPECT_EQ(b.size_bytes(), 12u);
  EXPECT_EQ(b.bits(1), 0xfffffffau);
  held[2] = 9;  // no copy was taken
  EXPECT_EQ(b.bits(2), 9u);

  Buffer owned(DType::int32, 3);
  for (Index i = 0; i < 3; ++i) owned.set_bits(i, b.bits(i));
  EXPECT_EQ(owned, b);
  owned.set_bits(0, 4);
  EXPECT_NE(owned, b);

  Buffer copy = b;  // a copy owns its bytes
  EXPECT_FALSE(copy.borrowed());
  EXPECT_NE(copy.data(), bytes);
  EXPECT_EQ(copy, b);
  held[0] = 1;
  EXPECT_EQ(copy.bits(0), 5u);
  copy.set_bits(0, 2);
  EXPECT_EQ(held[0], 1);

  Buffer moved = Buffer::borrow(DType::int32, 3, bytes);
  Buffer target = std::move(moved);
  EXPECT_EQ(std::as_const(target).data(), bytes);
  EXPECT_EQ(moved.numel(), 0);  // NOLINT: a moved-from buffer is empty
  EXPECT_EQ(moved.size_bytes(), 0u);
}

TEST(DType, BorrowedBufferRefusesWritesAndMisalignedMemory) {
  alignas(8) std::byte raw[16]{};
  Buffer b = Buffer::borrow(DType::float32, 2, raw);
  EXPECT_THROW(b.set_bits(0, 1), std::logic_error);
  EXPECT_THROW((void)b.data(), std::logic_error);
  EXPECT_THROW((void)Buffer::borrow(DType::float32, 2, raw + 1), std::invalid_argument);
  EXPECT_THROW((void)Buffer::borrow(DType::float32, 1, nullptr), std::invalid_argument);
  EXPECT_THROW((void)Buffer::borrow(DType::float32, -1, raw), std::length_error);
  const Buffer empty = Buffer::borrow(DType::float64, 0, nullptr);
  EXPECT_NE(empty.data(), nullptr);
  EXPECT_EQ(empty, Buffer(DType::float64, 0));
}

TEST(DType, ConversionReadsBorrowedShardsAndFull) {
  auto map = contiguous_split_map({4, 6}, {4, 2}, 1);
  ASSERT_TRUE(map.ok());
  const Buffer full = marker_buffer(DType::float32, 24);
  auto owned = extract_all(map.value(), full);
  ASSERT_TRUE(owned.ok());
  ShardSet borrowed;
  for (const auto& [rank, shard] : owned.value()) {
    borrowed.emplace(rank, Buffer::borrow(shard.dtype(), shard.numel(), shard.data()));
  }
  auto rebuilt = rebuild(map.value(), borrowed, DType::float32);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.error().to_string();
  EXPECT_EQ(rebuilt.value(), full);
  auto shard = extract(map.value(), Buffer::borrow(DType::float32, 24, full.data()), 1);
  ASSERT_TRUE(shard.ok());
  EXPECT_EQ(shard.value(), owned.value().at(1));
}

TEST(DType, MarkersDistinctFiniteAndScaleExact) {
  for (DType dtype : kAllDTypes) {
    std::set<std::uint64_t> seen;
    for (Index i = 0; i < kMarkers; ++i) {
      const std::uint64_t bits = marker_bits(dtype, i);
      seen.insert(bits);
      ASSERT_NE(bits, poison_bits(dtype)) << dtype_name(dtype) << " " << i;
      const double value = bits_to_double(dtype, bits);
      ASSERT_TRUE(std::isfinite(value)) << dtype_name(dtype) << " " << i;
      if (!is_floating(dtype)) continue;
      ASSERT_NE(value, 0.0);
      for (double scale : {2.0, 0.5, -1.0, 4.0}) {
        for (bool multiply : {true, false}) {
          const std::uint64_t scaled = apply_scale(dtype, bits, scale, 1, multiply);
          const double expect = multiply ? value * scale : value / scale;
          ASSERT_EQ(bits_to_double(dtype, scaled), expect) << dtype_name(dtype) << " " << i << " " << scale;
          ASSERT_EQ(apply_scale(dtype, scaled, scale, 1, !multiply), bits) << dtype_name(dtype) << " " << i;
        }
      }
    }
    EXPECT_EQ(seen.size(), distinct_limit(dtype)) << dtype_name(dtype);
  }
  EXPECT_EQ(marker_bits(DType::boolean, 0), 0u);
  EXPECT_EQ(marker_bits(DType::boolean, 1), 1u);
}

TEST(DType, MarkerBufferAppliesSalt) {
  for (DType dtype : kAllDTypes) {
    Buffer plain = marker_buffer(dtype, 64);
    Buffer salted = marker_buffer(dtype, 64, 7);
    ASSERT_EQ(plain.numel(), 64);
    for (Index i = 0; i < 64; ++i) {
      ASSERT_EQ(plain.bits(i), marker_bits(dtype, i));
      ASSERT_EQ(salted.bits(i), marker_bits(dtype, i + 7));
    }
    if (dtype != DType::boolean) {
      EXPECT_NE(plain, salted) << dtype_name(dtype);
    }
  }
}

TEST(DType, PoisonIsFixedAndRecognisable) {
  EXPECT_EQ(poison_bits(DType::float32), 0x7fc0deadu);
  EXPECT_TRUE(std::isnan(bits_to_double(DType::float32, poison_bits(DType::float32))));
  EXPECT_TRUE(std::isnan(bits_to_double(DType::float64, poison_bits(DType::float64))));
  EXPECT_TRUE(std::isnan(bits_to_double(DType::float16, poison_bits(DType::float16))));
  EXPECT_TRUE(std::isnan(bits_to_double(DType::bfloat16, poison_bits(DType::bfloat16))));
  EXPECT_EQ(poison_bits(DType::int16), 0xa5a5u);
  EXPECT_EQ(poison_bits(DType::boolean), 0xa5u);
  EXPECT_EQ(poison_bits(DType::int64), 0xa5a5a5a5a5a5a5a5ull);
}

TEST(DType, ApplyScaleInElementArithmetic) {
  // 1/3 in float32 is not the double 1/3 rounded: the division happens in float.
  const std::uint64_t one = *bits_from_double(DType::float32, 1.0);
  EXPECT_EQ(apply_scale(DType::float32, one, 3.0, 1, false), *bits_from_double(DType::float32, 1.0f / 3.0f));
  // Powers by repeated multiplication in the type: 3^-2 divides, 3^2 multiplies.
  const std::uint64_t two = *bits_from_double(DType::float64, 2.0);
  EXPECT_EQ(bits_to_double(DType::float64, apply_scale(DType::float64, two, 3.0, 2, true)), 18.0);
  EXPECT_EQ(bits_to_double(DType::float64, apply_scale(DType::float64, two, 2.0, -2, true)), 0.5);
  EXPECT_EQ(bits_to_double(DType::float64, apply_scale(DType::float64, two, 2.0, -2, false)), 8.0);
  EXPECT_EQ(apply_scale(DType::float64, two, 5.0, 0, true), two);
  // float16: 1/3 rounds to 0x3555 in half arithmetic.
  const std::uint64_t h_one = *bits_from_double(DType::float16, 1.0);
  EXPECT_EQ(apply_scale(DType::float16, h_one, 3.0, 1, false), 0x3555u);
  // bfloat16 1/3 is 0x3eab.
  const std::uint64_t b_one = *bits_from_double(DType::bfloat16, 1.0);
  EXPECT_EQ(apply_scale(DType::bfloat16, b_one, 3.0, 1, false), 0x3eabu);
  // Overflow in the type's range: 60000 * 2 is inf in float16.
  const std::uint64_t big = *bits_from_double(DType::float16, 60000.0);
  EXPECT_TRUE(std::isinf(bits_to_double(DType::float16, apply_scale(DType::float16, big, 2.0, 1, true))));
  // Integers are moved unchanged.
  EXPECT_EQ(apply_scale(DType::int32, 7, 2.0, 1, true), 7u);
  // A scale beyond the type's range becomes infinity in the type, not undefined behaviour.
  EXPECT_EQ(bits_to_double(DType::float32, apply_scale(DType::float32, one, 1e300, 1, true)), INFINITY);
  EXPECT_EQ(bits_to_double(DType::float16, apply_scale(DType::float16, h_one, -1e300, 1, true)), -INFINITY);
  EXPECT_EQ(bits_to_double(DType::bfloat16, apply_scale(DType::bfloat16, b_one, 1e300, 1, false)), 0.0);
  // A huge power finishes and saturates.
  EXPECT_EQ(bits_to_double(DType::float32, apply_scale(DType::float32, one, 2.0, 1 << 30, true)), INFINITY);
  EXPECT_EQ(bits_to_double(DType::float32, apply_scale(DType::float32, one, -1.0, (1 << 30) + 1, true)), -1.0);
}

TEST(DType, BitsFromDoubleRoundsAndRangeChecks) {
  EXPECT_EQ(bits_from_double(DType::float32, 1.5), 0x3fc00000u);
  EXPECT_EQ(bits_from_double(DType::float64, -2.0), 0xc000000000000000ull);
  EXPECT_EQ(bits_from_double(DType::float16, 1.0), 0x3c00u);
  EXPECT_EQ(bits_from_double(DType::bfloat16, 1.0), 0x3f80u);
  EXPECT_EQ(bits_from_double(DType::float32, -0.0), 0x80000000u);
  // 0.1 rounds to nearest in every float type.
  EXPECT_EQ(bits_from_double(DType::float32, 0.1), 0x3dcccccdu);
  EXPECT_EQ(bits_from_double(DType::float16, 0.1), 0x2e66u);
  EXPECT_EQ(bits_from_double(DType::bfloat16, 0.1), 0x3dcdu);
  // Halfway between two halves (1 and 1+2^-10) ties to even; a hair above goes up,
  // even though plain rounding through float would land on the tie first.
  EXPECT_EQ(bits_from_double(DType::float16, 1.0 + std::ldexp(1.0, -11)), 0x3c00u);
  EXPECT_EQ(bits_from_double(DType::float16, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)), 0x3c01u);
  EXPECT_EQ(bits_from_double(DType::bfloat16, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3f81u);
  // Out of range for the float type: refused, not turned into infinity.
  EXPECT_FALSE(bits_from_double(DType::float16, 70000.0));
  EXPECT_FALSE(bits_from_double(DType::float32, 1e39));
  EXPECT_EQ(bits_from_double(DType::float16, 65504.0), 0x7bffu);
  EXPECT_EQ(bits_from_double(DType::float32, INFINITY), 0x7f800000u);
  ASSERT_TRUE(bits_from_double(DType::float16, NAN));
  EXPECT_TRUE(std::isnan(bits_to_double(DType::float16, *bits_from_double(DType::float16, NAN))));
  // Integers: integral and in range.
  EXPECT_EQ(bits_from_double(DType::int8, -1.0), 0xffu);
  EXPECT_EQ(bits_from_double(DType::int8, 127.0), 0x7fu);
  EXPECT_FALSE(bits_from_double(DType::int8, 128.0));
  EXPECT_FALSE(bits_from_double(DType::int8, -129.0));
  EXPECT_FALSE(bits_from_double(DType::int32, 1.5));
  EXPECT_FALSE(bits_from_double(DType::int32, NAN));
  EXPECT_EQ(bits_from_double(DType::uint8, 255.0), 0xffu);
  EXPECT_FALSE(bits_from_double(DType::uint8, -1.0));
  EXPECT_FALSE(bits_from_double(DType::int64, 9.3e18));
  EXPECT_EQ(bits_from_double(DType::int64, -9.223372036854775808e18), 0x8000000000000000ull);
  EXPECT_EQ(bits_from_double(DType::boolean, 1.0), 1u);
  EXPECT_EQ(bits_from_double(DType::boolean, 0.0), 0u);
  EXPECT_FALSE(bits_from_double(DType::boolean, 2.0));
  EXPECT_FALSE(bits_from_double(DType::boolean, 0.5));
}

TEST(DType, BitsFromInteger) {
  EXPECT_EQ(bits_from_integer(DType::int64, -1), 0xffffffffffffffffull);
  EXPECT_EQ(bits_from_integer(DType::int16, -32768), 0x8000u);
  EXPECT_FALSE(bits_from_integer(DType::int16, 32768));
  EXPECT_EQ(bits_from_integer(DType::uint8, 200), 200u);
  EXPECT_FALSE(bits_from_integer(DType::uint8, 256));
  EXPECT_FALSE(bits_from_integer(DType::boolean, -1));
  EXPECT_EQ(bits_from_integer(DType::float32, 3), 0x40400000u);
  EXPECT_EQ(bits_from_integer(DType::float16, 2049), 0x6800u);  // ties to even: 2048
  EXPECT_EQ(bits_from_integer(DType::float16, 2051), 0x6802u);  // ties to even: 2052
  EXPECT_FALSE(bits_from_integer(DType::float16, 100000));
  // 2^60 + 1 must not round twice: bfloat16 gives exactly 2^60.
  EXPECT_EQ(bits_from_integer(DType::bfloat16, (std::int64_t{1} << 60) + 1), 0x5d80u);
  EXPECT_EQ(bits_from_integer(DType::float64, (std::int64_t{1} << 53) + 1), 0x4340000000000000ull);
}

TEST(DType, BitsToDoubleAndFormat) {
  EXPECT_EQ(bits_to_double(DType::int8, 0xff), -1.0);
  EXPECT_EQ(bits_to_double(DType::uint8, 0xff), 255.0);
  EXPECT_EQ(bits_to_double(DType::int32, 0x80000000u), -2147483648.0);
  EXPECT_EQ(bits_to_double(DType::bfloat16, 0x3fc0), 1.5);
  EXPECT_EQ(format_element(DType::float32, 0x3fc00000), "1.5 (0x3fc00000)");
  EXPECT_EQ(format_element(DType::int16, 0xffff), "-1 (0xffff)");
  EXPECT_EQ(format_element(DType::float16, 0x3c00), "1 (0x3c00)");
  EXPECT_EQ(format_element(DType::boolean, 1), "1 (0x01)");
  EXPECT_EQ(format_element(DType::int64, 0x8000000000000000ull), "-9223372036854775808 (0x8000000000000000)");
  EXPECT_EQ(format_element(DType::float32, 0x80000000u), "-0 (0x80000000)");
  EXPECT_NE(format_element(DType::float32, 0x7fc0dead).find("0x7fc0dead"), std::string::npos);
  for (DType dtype : kAllDTypes) {
    for (Index i = 0; i < 300; ++i) {
      const std::uint64_t bits = marker_bits(dtype, i);
      ASSERT_EQ(bits_from_double(dtype, bits_to_double(dtype, bits)), bits) << dtype_name(dtype) << " " << i;
    }
  }
}

}  // namespace
}  // namespace shardcheck
