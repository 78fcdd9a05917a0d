// The storage and arithmetic types of each dtype, for code that is written once as a
// template and run on the raw bits of any dtype (the CPU backend, the wide row copies).
#pragma once

#include <cstdint>

#include <Eigen/Core>

#include "shardcheck/dtype.h"
#include "shardcheck/scaling.h"

namespace shardcheck::detail {

// Calls fn.template operator()<Bits, Value>() for `dtype`: Bits is the unsigned integer
// of the element's width, Value the type arithmetic uses (Bits itself for integers and
// bool, which are only moved and compared).
template <class Fn>
auto with_element_types(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::float64: return fn.template operator()<std::uint64_t, double>();
    case DType::float32: return fn.template operator()<std::uint32_t, float>();
    case DType::float16: return fn.template operator()<std::uint16_t, Eigen::half>();
    case DType::bfloat16: return fn.template operator()<std::uint16_t, Eigen::bfloat16>();
    case DType::int16: return fn.template operator()<std::uint16_t, std::uint16_t>();
    case DType::int32: return fn.template operator()<std::uint32_t, std::uint32_t>();
    case DType::int64: return fn.template operator()<std::uint64_t, std::uint64_t>();
    default: return fn.template operator()<std::uint8_t, std::uint8_t>();
  }
}

// Calls fn.template operator()<Format>() with the scaling::Float* format of a floating
// dtype (contract 1.2's arithmetic). Callers have refused scaling any other dtype.
template <class Fn>
auto with_float_format(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::float64: return fn.template operator()<scaling::Float64>();
    case DType::float16: return fn.template operator()<scaling::Float16>();
    case DType::bfloat16: return fn.template operator()<scaling::BFloat16>();
    default: return fn.template operator()<scaling::Float32>();
  }
}

}  // namespace shardcheck::detail
