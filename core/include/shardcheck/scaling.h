// Contract 1.2's scaling arithmetic on one element, written once for every
// conversion path: the CPU backend, the wide row copies, and device code (the functions
// are __host__ __device__ under nvcc, plain inline elsewhere; they use nothing but
// integer and float arithmetic, so the same source means the same bits everywhere).
//
//   - The arithmetic type is float32 for float16, bfloat16 and float32, and float64 for
//     float64 (torch's "opmath"). The scale is rounded once to it (arithmetic_factor);
//     zero, subnormal or not finite there, it is refused.
//   - The element is widened exactly, multiplied (extract) or divided (rebuild) once in
//     the arithmetic type, and rounded once to the element type, to nearest, ties to even.
//   - A NaN keeps its bits (payload, sign, signalling or not).
//   - A finite input whose result is infinite, or a nonzero input whose result is zero,
//     is a fault the conversion refuses (ScaleFault), never a value it returns.
//
// The reference model (oracles/src/reference.cc) does not use this header: it has its
// own bit-level rounding model, so that the two can disagree.
#pragma once

#include <cstdint>
#include <cstring>

#include "shardcheck/host_device.h"

namespace shardcheck::scaling {

template <class To, class From>
SHARDCHECK_HD inline To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From));
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}

// ---- 16-bit formats to and from float32 -------------------------------------

// Every float16 value is a float32 value: exact.
SHARDCHECK_HD inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t fraction = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_as<float>(sign | 0x7f800000u | (fraction << 13));
  if (exponent == 0) {
    if (fraction == 0) return bits_as<float>(sign);
    // A subnormal half is a normal float: shift the leading one into the implicit bit.
    exponent = 1;
    while ((fraction & 0x400u) == 0) {
      fraction <<= 1;
      --exponent;
    }
    fraction &= 0x3ffu;
  }
  return bits_as<float>(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

// A float32 that is not a NaN, rounded to float16: nearest, ties to even; past the
// largest half (from 65520 on) infinity, below half the smallest subnormal zero.
SHARDCHECK_HD inline std::uint16_t float_to_half(float value) {
  const std::uint32_t x = bits_as<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520, or infinite
  if (magnitude >= 0x38800000u) {
    // Normal half (>= 2^-14): rebias the exponent, drop 13 fraction bits; a carry out of
    // the fraction moves into the exponent, which is the right rounding too.
    const std::uint32_t rebiased = magnitude - 0x38000000u;
    std::uint32_t half = rebiased >> 13;
    const std::uint32_t rest = rebiased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  if (magnitude <= 0x33000000u) return sign;  // at most 2^-25: the tie with zero goes to zero
  // Subnormal half: count units of 2^-24. The float is m * 2^(e - 150) with a 24-bit m.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;  // 14..24
  std::uint32_t units = significand >> shift;
  const std::uint32_t rest = significand & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1u);
  if (rest > halfway || (rest == halfway && (units & 1u) != 0)) ++units;  // 0x400: the smallest normal
  return static_cast<std::uint16_t>(sign | units);
}

SHARDCHECK_HD inline float bfloat16_to_float(std::uint16_t b) {
  return bits_as<float>(static_cast<std::uint32_t>(b) << 16);
}

// A float32 that is not a NaN, rounded to bfloat16: nearest, ties to even. The carry of
// the rounding runs into the exponent, up to infinity.
SHARDCHECK_HD inline std::uint16_t float_to_bfloat16(float value) {
  const std::uint32_t x = bits_as<std::uint32_t>(value);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---- element formats ---------------------------------------------------------

// Bits: the stored element; Math: the arithmetic type; widen is exact, narrow rounds
// once (to nearest, ties to even) and is never asked about a NaN.
struct Float16 {
  using Bits = std::uint16_t;
  using Math = float;
  SHARDCHECK_HD static Math widen(Bits b) { return half_to_float(b); }
  SHARDCHECK_HD static Bits narrow(Math m) { return float_to_half(m); }
  SHARDCHECK_HD static bool is_nan(Bits b) { return (b & 0x7fffu) > 0x7c00u; }
  SHARDCHECK_HD static bool is_infinite(Bits b) { return (b & 0x7fffu) == 0x7c00u; }
  SHARDCHECK_HD static bool is_zero(Bits b) { return (b & 0x7fffu) == 0; }
};

struct BFloat16 {
  using Bits = std::uint16_t;
  using Math = float;
  SHARDCHECK_HD static Math widen(Bits b) { return bfloat16_to_float(b); }
  SHARDCHECK_HD static Bits narrow(Math m) { return float_to_bfloat16(m); }
  SHARDCHECK_HD static bool is_nan(Bits b) { return (b & 0x7fffu) > 0x7f80u; }
  SHARDCHECK_HD static bool is_infinite(Bits b) { return (b & 0x7fffu) == 0x7f80u; }
  SHARDCHECK_HD static bool is_zero(Bits b) { return (b & 0x7fffu) == 0; }
};

struct Float32 {
  using Bits = std::uint32_t;
  using Math = float;
  SHARDCHECK_HD static Math widen(Bits b) { return bits_as<float>(b); }
  SHARDCHECK_HD static Bits narrow(Math m) { return bits_as<Bits>(m); }
  SHARDCHECK_HD static bool is_nan(Bits b) { return (b & 0x7fffffffu) > 0x7f800000u; }
  SHARDCHECK_HD static bool is_infinite(Bits b) { return (b & 0x7fffffffu) == 0x7f800000u; }
  SHARDCHECK_HD static bool is_zero(Bits b) { return (b & 0x7fffffffu) == 0; }
};

struct Float64 {
  using Bits = std::uint64_t;
  using Math = double;
  SHARDCHECK_HD static Math widen(Bits b) { return bits_as<double>(b); }
  SHARDCHECK_HD static Bits narrow(Math m) { return bits_as<Bits>(m); }
  SHARDCHECK_HD static bool is_nan(Bits b) { return (b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull; }
  SHARDCHECK_HD static bool is_infinite(Bits b) { return (b & 0x7fffffffffffffffull) == 0x7ff0000000000000ull; }
  SHARDCHECK_HD static bool is_zero(Bits b) { return (b & 0x7fffffffffffffffull) == 0; }
};

// ---- the scale and one element ----------------------------------------------

// The scale rounded once to the arithmetic type; false when it is zero, subnormal or not
// finite there (kind `scale`). 65536 is a valid scale for float16 data: a normal float32.
SHARDCHECK_HD inline bool arithmetic_factor(double scale, double& factor) {
  const double magnitude = scale < 0 ? -scale : scale;
  if (!(magnitude >= 2.2250738585072014e-308 && magnitude <= 1.7976931348623157e308)) return false;
  factor = scale;
  return true;
}

SHARDCHECK_HD inline bool arithmetic_factor(double scale, float& factor) {
  const double magnitude = scale < 0 ? -scale : scale;
  // From half an ulp below 2^128 on, a double rounds to float infinity; a cast from
  // beyond the float range is undefined, so that range is decided here.
  constexpr double kFloatMax = 3.4028234663852886e38;
  constexpr double kRoundsToInfinity = 3.4028235677973366e38;
  if (!(magnitude < kRoundsToInfinity)) return false;  // also NaN
  const float rounded = magnitude > kFloatMax ? 3.4028234663852886e38f : static_cast<float>(magnitude);
  if (!(rounded >= 1.17549435e-38f)) return false;  // zero or subnormal in float32
  factor = scale < 0 ? -rounded : rounded;
  return true;
}

enum class ScaleFault : std::uint8_t { none, overflow, flush };

template <class Format>
struct Scaled {
  typename Format::Bits bits;
  ScaleFault fault;
};

// value * factor (multiply: extract) or value / factor (rebuild), as contract 1.2 says.
template <class Format>
SHARDCHECK_HD inline Scaled<Format> scale_element(typename Format::Bits bits, typename Format::Math factor,
                                                   bool multiply) {
  if (Format::is_nan(bits)) return {bits, ScaleFault::none};
  const typename Format::Math value = Format::widen(bits);
  const typename Format::Math result = multiply ? value * factor : value / factor;
  const typename Format::Bits out = Format::narrow(result);
  ScaleFault fault = ScaleFault::none;
  if (Format::is_infinite(out) && !Format::is_infinite(bits)) fault = ScaleFault::overflow;
  if (Format::is_zero(out) && !Format::is_zero(bits)) fault = ScaleFault::flush;
  return {out, fault};
}

}  // namespace shardcheck::scaling
