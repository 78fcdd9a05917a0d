// The reference model's rounding of contract 1.2: its own reading of each binary
// format, a scale rounded once to the arithmetic type, and which scales a conversion
// refuses. No code shared with the core's scaling (core/include/shardcheck/scaling.h).
#include "shardcheck/oracles/reference.h"

#include "shardcheck/digest.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <compare>
#include <limits>
#include <tuple>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include "reference_internal.h"

namespace shardcheck::oracles {

using namespace reference_detail;

namespace {

// ---- the rounding model of contract 1.2 ----------------------------

// A binary interchange format: `exponent_bits` and `fraction_bits` stored bits.
struct Format {
  int exponent_bits = 0;
  int fraction_bits = 0;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  std::uint64_t exponent_mask() const { return (std::uint64_t{1} << exponent_bits) - 1; }
  std::uint64_t fraction_mask() const { return (std::uint64_t{1} << fraction_bits) - 1; }
  std::uint64_t sign_bit() const { return std::uint64_t{1} << (exponent_bits + fraction_bits); }
};

std::optional<Format> narrow_format(DType dtype) {
  switch (dtype) {
    case DType::float32: return Format{8, 23};
    case DType::float16: return Format{5, 10};
    case DType::bfloat16: return Format{8, 7};
    default: return std::nullopt;
  }
}

bool is_nan_in(const Format& f, std::uint64_t bits) {
  const std::uint64_t exponent = (bits >> f.fraction_bits) & f.exponent_mask();
  return exponent == f.exponent_mask() && (bits & f.fraction_mask()) != 0;
}

// The exact value of a non-NaN element of a format no wider than float32: every such
// value is a double.
double decode_value(const Format& f, std::uint64_t bits) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const std::uint64_t exponent = (bits >> f.fraction_bits) & f.exponent_mask();
  const std::uint64_t fraction = bits & f.fraction_mask();
  double magnitude = 0.0;
  if (exponent == f.exponent_mask()) {
    magnitude = std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(fraction), 1 - f.bias() - f.fraction_bits);
  } else {
    const auto significand = static_cast<double>(fraction | (std::uint64_t{1} << f.fraction_bits));
    magnitude = std::ldexp(significand, static_cast<int>(exponent) - f.bias() - f.fraction_bits);
  }
  return negative ? -magnitude : magnitude;
}

// A double rounded to nearest, ties to even, into the format, by integer arithmetic on
// its significand: the quantum is that of the result's binade, or of the subnormals
// below the smallest normal binade; a carry out of the significand moves up a binade,
// and a binade past the largest is infinity.
std::uint64_t round_to_format(const Format& f, double value) {
  const std::uint64_t sign = std::signbit(value) ? f.sign_bit() : 0;
  if (std::isnan(value)) {
    // Only arithmetic on infinities or zero makes a NaN here: quiet, payload dropped.
    return sign | (f.exponent_mask() << f.fraction_bits) | (std::uint64_t{1} << (f.fraction_bits - 1));
  }
  const double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | (f.exponent_mask() << f.fraction_bits);
  if (magnitude == 0.0) return sign;
  int e = 0;
  const double m = std::frexp(magnitude, &e);  // magnitude = m * 2^e, m in [0.5, 1)
  const auto significand = static_cast<std::uint64_t>(std::ldexp(m, 53));  // 53 bits, exact
  const int lowest = 1 - f.bias();               // the smallest normal binade
  const int binade = std::max(e - 1, lowest);    // magnitude < 2^(binade + 1)
  const int quantum = binade - f.fraction_bits;  // result = n * 2^quantum
  const int shift = quantum - (e - 53);          // >= 53 - 1 - fraction_bits > 0
  std::uint64_t n = 0;
  if (shift < 64) {
    n = significand >> shift;
    const std::uint64_t rest = significand & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (n & 1) != 0)) ++n;
  }  // else below a quarter quantum: rounds to zero
  const std::uint64_t implicit = std::uint64_t{1} << f.fraction_bits;
  if (e - 1 < lowest) return sign | n;  // subnormal; n == implicit is the smallest normal
  int exponent = binade + f.bias();
  if (n == 2 * implicit) {
    n = implicit;
    ++exponent;
  }
  if (exponent >= static_cast<int>(f.exponent_mask())) return sign | (f.exponent_mask() << f.fraction_bits);
  return sign | (static_cast<std::uint64_t>(exponent) << f.fraction_bits) | (n - implicit);
}

constexpr Format kFloat32{8, 23};

// Contract 1.2: the arithmetic type is float32 for every format no wider than float32.
// The scale is rounded once into it; the element's value (exact in a double) is
// multiplied or divided once there and rounded once more into the element's format.
// Products of two values of at most 24 significant bits are exact in a double; a
// quotient is rounded twice, to 53 bits and then to 24, which gives the correctly
// rounded float32 result because 53 >= 2 * 24 + 2. Powers other than 1 multiply the
// rounded scale in float32 (conversion refuses them with a scale other than 1 anyway).
double float32_power(double scale, int power) {
  const double factor = decode_value(kFloat32, round_to_format(kFloat32, scale));
  const long steps = power > 0 ? static_cast<long>(power) : -static_cast<long>(power);
  double scale_power = factor;
  for (long k = 1; k < steps; ++k) {
    const double next = decode_value(kFloat32, round_to_format(kFloat32, scale_power * factor));
    scale_power = next;
    // Once 0, infinite, NaN or of magnitude 1 the power can only change sign.
    if (std::isnan(next) || std::isinf(next) || next == 0.0 || std::fabs(next) == 1.0) {
      if (!std::isnan(next) && std::signbit(factor) && (steps - 1 - k) % 2 == 1) scale_power = -scale_power;
      break;
    }
  }
  return scale_power;
}

std::uint64_t narrow_scale(const Format& f, std::uint64_t bits, double scale, int power, bool multiply) {
  const double factor = float32_power(scale, power);
  const bool up = multiply == (power > 0);
  const double value = decode_value(f, bits);
  const double in_float32 = decode_value(kFloat32, round_to_format(kFloat32, up ? value * factor : value / factor));
  return round_to_format(f, in_float32);
}

// float64's arithmetic is the double arithmetic itself, correctly rounded by IEEE 754.
std::uint64_t double_scale(std::uint64_t bits, double scale, int power, bool multiply) {
  const bool up = multiply == (power > 0);
  const long steps = power > 0 ? static_cast<long>(power) : -static_cast<long>(power);
  double scale_power = scale;
  for (long k = 1; k < steps; ++k) {
    const double next = scale_power * scale;
    scale_power = next;
    if (std::isnan(next) || std::isinf(next) || next == 0.0 || std::fabs(next) == 1.0) {
      if (!std::isnan(next) && std::signbit(scale) && (steps - 1 - k) % 2 == 1) scale_power = -scale_power;
      break;
    }
  }
  const double value = std::bit_cast<double>(bits);
  return std::bit_cast<std::uint64_t>(up ? value * scale_power : value / scale_power);
}
}  // namespace

std::uint64_t reference_scale(DType dtype, std::uint64_t bits, double scale, int power, bool multiply) {
  if (power == 0) return bits;
  if (dtype == DType::float64) {
    if ((bits & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL) return bits;  // NaN: kept
    return double_scale(bits, scale, power, multiply);
  }
  const std::optional<Format> format = narrow_format(dtype);
  if (!format) return bits;  // integers are never scaled
  if (is_nan_in(*format, bits)) return bits;
  return narrow_scale(*format, bits, scale, power, multiply);
}

namespace {

// Contract 1.2: the scale, rounded once to the arithmetic type (float64 for float64
// data, float32 otherwise), must be a normal number there.
bool scale_fits(DType dtype, double scale) {
  if (dtype == DType::float64) return std::fpclassify(scale) == FP_NORMAL;
  const double rounded = decode_value(kFloat32, round_to_format(kFloat32, scale));
  return std::isfinite(rounded) && std::fabs(rounded) >= std::ldexp(1.0, -126);
}

}  // namespace

namespace reference_detail {

Reading read_bits(DType dtype, std::uint64_t bits) {
  if (dtype == DType::float64) {
    const double v = std::bit_cast<double>(bits);
    return Reading{std::isnan(v), std::isinf(v), v == 0.0};
  }
  const Format f = *narrow_format(dtype);
  if (is_nan_in(f, bits)) return Reading{true, false, false};
  const double v = decode_value(f, bits);
  return Reading{false, std::isinf(v), v == 0.0};
}


// Whether one scale may convert `dtype` data with power `power` (the rules below).
bool scale_may_convert(double scale, DType dtype, int power) {
  const bool floating =
      dtype == DType::float64 || dtype == DType::float32 || dtype == DType::float16 || dtype == DType::bfloat16;
  return scale == 1.0 || (power == 1 && floating && scale_fits(dtype, scale));
}

}  // namespace reference_detail

// Contract 1.2: scaling with p != 1 would need the optimizer's lr and eps rescaled too,
// integers cannot be scaled at all, and the arithmetic type must hold the scale as a
// normal number. Which dtypes are floating is the model's own list, not the core's
// is_floating, which is under test.
Status reference_scale_refusal(const Map& map, DType dtype, int power) {
  const bool floating =
      dtype == DType::float64 || dtype == DType::float32 || dtype == DType::float16 || dtype == DType::bfloat16;
  for (const PieceRef& ref : all_pieces(map)) {
    if (ref.piece->scale == 1.0) continue;
    if (power != 1) return fault::scale_needs_power_one(at(ref), power);
    if (!floating) return fault::scale_on_integer(at(ref), dtype);
    if (!scale_fits(dtype, ref.piece->scale)) return fault::scale_outside_arithmetic(at(ref), dtype);
  }
  return {};
}

}  // namespace shardcheck::oracles
