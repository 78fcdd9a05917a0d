#include <bit>
#include <climits>
#include <cstdint>
#include <cstring>

#include <Eigen/Core>

#include "element_types.h"
#include "shardcheck/backend.h"
#include "two_view_walk.h"
#include "wide.h"

namespace shardcheck {

namespace {

// Elements are read and written as the low bytes of a uint64_t.
static_assert(std::endian::native == std::endian::little);

template <class S>
using RowMat = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using AnyStride = Eigen::Stride<Eigen::Dynamic, Eigen::Dynamic>;
template <class S>
using View2 = Eigen::Map<RowMat<S>, Eigen::Unaligned, AnyStride>;
template <class S>
using ConstView2 = Eigen::Map<const RowMat<S>, Eigen::Unaligned, AnyStride>;

// One 2-D slab of a block: the innermost two axes at a fixed outer index.
struct Slab {
  Index from_offset, to_offset;
  Index rows, cols;
  Index from_row_stride, from_col_stride;
  Index to_row_stride, to_col_stride;
  Index first_index;  // row-major index within the block of the slab's first element
};

// Visits the slabs of a block in row-major order; stops early when `fn` returns true.
// 0-d blocks are one 1x1 slab, 1-d blocks one row.
template <class Fn>
void for_each_slab(const Extents& shape, const StridedView& from, const StridedView& to, Fn&& fn) {
  const std::size_t d = shape.size();
  if (detail::has_zero_extent(shape)) return;
  Slab slab{from.offset, to.offset, 1, 1, 0, 0, 0, 0, 0};
  if (d >= 1) {
    slab.cols = shape[d - 1];
    slab.from_col_stride = from.strides[d - 1];
    slab.to_col_stride = to.strides[d - 1];
  }
  if (d >= 2) {
    slab.rows = shape[d - 2];
    slab.from_row_stride = from.strides[d - 2];
    slab.to_row_stride = to.strides[d - 2];
  }
  std::array<detail::WalkAxis, 64> axes;
  const int outer = detail::outer_axes(shape, from, to, d >= 2 ? d - 2 : 0, axes);
  const Index slab_size = slab.rows * slab.cols;
  detail::TwoViewWalk walk(axes.data(), outer, from.offset, to.offset);
  for (Index first = 0;; first += slab_size) {
    slab.from_offset = walk.from();
    slab.to_offset = walk.to();
    slab.first_index = first;
    if (fn(slab)) return;
    if (!walk.next()) return;
  }
}

template <class S>
ConstView2<S> const_view(const std::byte* base, const Slab& s) {
  return ConstView2<S>(reinterpret_cast<const S*>(base) + s.from_offset, s.rows, s.cols,
                       AnyStride(s.from_row_stride, s.from_col_stride));
}

template <class S>
View2<S> dest_view(std::byte* base, const Slab& s) {
  return View2<S>(reinterpret_cast<S*>(base) + s.to_offset, s.rows, s.cols,
                  AnyStride(s.to_row_stride, s.to_col_stride));
}

template <class S>
ConstView2<S> const_dest_view(const std::byte* base, const Slab& s) {
  return ConstView2<S>(reinterpret_cast<const S*>(base) + s.to_offset, s.rows, s.cols,
                       AnyStride(s.to_row_stride, s.to_col_stride));
}

// The scaling a copy asks for, resolved once. Contract arithmetic (1.2) goes element by
// element through shardcheck/scaling.h with the scale rounded once to the arithmetic
// type; the legacy model's torch arithmetic multiplies or divides by `factor_bits`, the
// scale in the element type, through Eigen.
struct Scaling {
  bool active = false;
  bool up = true;
  Arithmetic arithmetic = Arithmetic::contract;
  double factor = 1.0;            // contract: the arithmetic type's value, exact in a double
  std::uint64_t factor_bits = 0;  // legacy: scale^|power| in the element type
};

// nullopt: a copy the ordered path must make through apply_scale (a power other than
// +-1 in contract arithmetic, or a scale the arithmetic type cannot hold: conversion
// refuses those first, so only direct callers of the backend get there).
std::optional<Scaling> resolve_scaling(DType dtype, const BlockCopy& copy) {
  Scaling out;
  if (!is_floating(dtype) || copy.scale == 1.0 || copy.power == 0) return out;
  out.active = true;
  out.up = copy.multiply == (copy.power > 0);
  out.arithmetic = copy.arithmetic;
  if (copy.arithmetic == Arithmetic::contract) {
    if (copy.power != 1 && copy.power != -1) return std::nullopt;
    if (dtype == DType::float64) {
      if (!scaling::arithmetic_factor(copy.scale, out.factor)) return std::nullopt;
    } else {
      float factor = 0;
      if (!scaling::arithmetic_factor(copy.scale, factor)) return std::nullopt;
      out.factor = factor;
    }
    return out;
  }
  if (copy.power == INT_MIN) return std::nullopt;  // no positive counterpart
  const int steps = copy.power > 0 ? copy.power : -copy.power;
  // 1 * s is exact, so this is s^steps in the element type, computed by apply_scale.
  out.factor_bits =
      apply_scale(dtype, *bits_from_double(dtype, 1.0), copy.scale, steps, true, Arithmetic::legacy_torch);
  return out;
}

template <class U, class T>
T scalar_from_bits(std::uint64_t bits) {
  return Eigen::numext::bit_cast<T>(static_cast<U>(bits));
}

template <class Format>
typename Format::Bits contract_scaled(const BlockCopy& copy, const Slab& s, Index r, Index c, const Scaling& scaling) {
  using Bits = typename Format::Bits;
  const auto* from = reinterpret_cast<const Bits*>(copy.from);
  const auto factor = static_cast<typename Format::Math>(scaling.factor);
  return scaling::scale_element<Format>(from[s.from_offset + r * s.from_row_stride + c * s.from_col_stride], factor,
                                        scaling.up)
      .bits;
}

template <class Format>
void copy_slab_contract(const BlockCopy& copy, const Slab& s, const Scaling& scaling) {
  auto* to = reinterpret_cast<typename Format::Bits*>(copy.to);
  for (Index r = 0; r < s.rows; ++r) {
    for (Index c = 0; c < s.cols; ++c) {
      to[s.to_offset + r * s.to_row_stride + c * s.to_col_stride] = contract_scaled<Format>(copy, s, r, c, scaling);
    }
  }
}

template <class U, class T>
void copy_slabs(DType dtype, const BlockCopy& copy, const Scaling& scaling) {
  for_each_slab(*copy.shape, *copy.from_view, *copy.to_view, [&](const Slab& s) {
    if (!scaling.active) {
      dest_view<U>(copy.to, s) = const_view<U>(copy.from, s);
    } else if (scaling.arithmetic == Arithmetic::contract) {
      detail::with_float_format(dtype, [&]<class Format>() { copy_slab_contract<Format>(copy, s, scaling); });
    } else {
      const T factor = scalar_from_bits<U, T>(scaling.factor_bits);
      const auto values = const_view<T>(copy.from, s);
      if (scaling.up) {
        dest_view<T>(copy.to, s).array() = values.array() * factor;
      } else {
        dest_view<T>(copy.to, s).array() = values.array() / factor;
      }
    }
    return false;
  });
}

template <class U, class T>
std::optional<Index> compare_slabs(DType dtype, const BlockCopy& copy, const Scaling& scaling) {
  std::optional<Index> mismatch;
  const T factor = scalar_from_bits<U, T>(scaling.factor_bits);
  auto to_bits = [](const T& x) { return Eigen::numext::bit_cast<U>(x); };
  auto first_in = [](const auto& differs) -> std::optional<Index> {
    if (!differs.any()) return std::nullopt;
    Index c = 0;
    while (!differs(0, c)) ++c;  // rows: (0, c) works for every expression
    return c;
  };
  for_each_slab(*copy.shape, *copy.from_view, *copy.to_view, [&](const Slab& s) {
    const auto from_bits = const_view<U>(copy.from, s);
    const auto from_values = const_view<T>(copy.from, s);
    const auto held = const_dest_view<U>(copy.to, s);
    const auto* held_at = reinterpret_cast<const U*>(copy.to);
    for (Index r = 0; r < s.rows; ++r) {
      std::optional<Index> c;
      if (!scaling.active) {
        c = first_in(from_bits.row(r).array() != held.row(r).array());
      } else if (scaling.arithmetic == Arithmetic::contract) {
        detail::with_float_format(dtype, [&]<class Format>() {
          for (Index j = 0; j < s.cols && !c; ++j) {
            const U scaled = contract_scaled<Format>(copy, s, r, j, scaling);
            if (scaled != held_at[s.to_offset + r * s.to_row_stride + j * s.to_col_stride]) c = j;
          }
        });
      } else if (scaling.up) {
        c = first_in((from_values.row(r).array() * factor).unaryExpr(to_bits) != held.row(r).array());
      } else {
        c = first_in((from_values.row(r).array() / factor).unaryExpr(to_bits) != held.row(r).array());
      }
      if (c) {
        mismatch = s.first_index + r * s.cols + *c;
        return true;
      }
    }
    return false;
  });
  return mismatch;
}

// A destination that overlaps itself must keep the value written last in row-major
// order; Eigen promises no assignment order, so such blocks go element by element.
void copy_ordered(DType dtype, const BlockCopy& copy) {
  const std::size_t size = element_size(dtype);
  const bool scaled = is_floating(dtype) && copy.scale != 1.0 && copy.power != 0;
  for_each_slab(*copy.shape, *copy.from_view, *copy.to_view, [&](const Slab& s) {
    for (Index r = 0; r < s.rows; ++r) {
      for (Index c = 0; c < s.cols; ++c) {
        const Index from_at = s.from_offset + r * s.from_row_stride + c * s.from_col_stride;
        const Index to_at = s.to_offset + r * s.to_row_stride + c * s.to_col_stride;
        std::uint64_t bits = 0;
        std::memcpy(&bits, copy.from + from_at * static_cast<Index>(size), size);
        if (scaled) bits = apply_scale(dtype, bits, copy.scale, copy.power, copy.multiply, copy.arithmetic);
        std::memcpy(copy.to + to_at * static_cast<Index>(size), &bits, size);
      }
    }
    return false;
  });
}

// The wide row copies scale by one factor in contract arithmetic (power 1); anything else
// (the legacy model's torch arithmetic, optimizer powers) goes block by block.
bool wide_can_move(DType dtype, std::span<const BlockCopy> blocks) {
  if (!is_floating(dtype)) return true;
  for (const BlockCopy& b : blocks) {
    if (b.scale != 1.0 && (b.power != 1 || b.arithmetic != Arithmetic::contract)) return false;
  }
  return true;
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  bool runs_batches() const override { return true; }

  bool copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading,
                   std::uint64_t* digest_of_written) override {
    if (!wide_can_move(dtype, blocks)) return Backend::copy_blocks(dtype, blocks, threading, digest_of_written);
    return wide::copy_blocks(dtype, blocks, threading, digest_of_written);
  }
  void copy_blocks_first_wins(DType dtype, std::span<const BlockCopy> blocks, const Threading& threading) override {
    if (!wide_can_move(dtype, blocks)) return Backend::copy_blocks_first_wins(dtype, blocks, threading);
    wide::copy_blocks_last_first(dtype, blocks, threading);
  }
  std::optional<BlockMismatch> compare_blocks(DType dtype, std::span<const BlockCopy> blocks,
                                              const Threading& threading) override {
    if (!wide_can_move(dtype, blocks)) return Backend::compare_blocks(dtype, blocks, threading);
    return wide::compare_blocks(dtype, blocks, threading);
  }
  std::uint64_t digest(const Buffer& full, const Threading& threading) override {
    return wide::parallel_digest(full, threading);
  }

  void copy_block(DType dtype, const BlockCopy& copy) override {
    const std::optional<Scaling> scaling = resolve_scaling(dtype, copy);
    if (!scaling || !is_unique(*copy.shape, copy.to_view->strides)) {
      copy_ordered(dtype, copy);
      return;
    }
    detail::with_element_types(dtype, [&]<class U, class T>() { copy_slabs<U, T>(dtype, copy, *scaling); });
  }

  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    const std::optional<Scaling> scaling = resolve_scaling(dtype, copy);
    if (!scaling) return compare_ordered(dtype, copy);
    return detail::with_element_types(dtype,
                                      [&]<class U, class T>() { return compare_slabs<U, T>(dtype, copy, *scaling); });
  }

 private:
  static std::optional<Index> compare_ordered(DType dtype, const BlockCopy& copy) {
    const std::size_t size = element_size(dtype);
    std::optional<Index> mismatch;
    for_each_slab(*copy.shape, *copy.from_view, *copy.to_view, [&](const Slab& s) {
      for (Index r = 0; r < s.rows; ++r) {
        for (Index c = 0; c < s.cols; ++c) {
          std::uint64_t a = 0, b = 0;
          std::memcpy(
              &a,
              copy.from + (s.from_offset + r * s.from_row_stride + c * s.from_col_stride) * static_cast<Index>(size),
              size);
          std::memcpy(
              &b, copy.to + (s.to_offset + r * s.to_row_stride + c * s.to_col_stride) * static_cast<Index>(size), size);
          if (is_floating(dtype) && copy.scale != 1.0 && copy.power != 0) {
            a = apply_scale(dtype, a, copy.scale, copy.power, copy.multiply, copy.arithmetic);
          }
          if (a != b) {
            mismatch = s.first_index + r * s.cols + c;
            return true;
          }
        }
      }
      return false;
    });
    return mismatch;
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

#ifndef SHARDCHECK_WITH_CUDA
std::unique_ptr<Backend> make_cuda_backend() { return nullptr; }
bool cuda_compiled() { return false; }
#endif

#ifdef SHARDCHECK_WITH_DEVICE_OMP
bool device_omp_compiled() { return true; }
#else
std::unique_ptr<Backend> make_device_omp_backend() { return nullptr; }
std::unique_ptr<Backend> make_device_only_omp_backend() { return nullptr; }
bool device_omp_compiled() { return false; }
#endif

BlockCopy block_of(const Piece& piece, Direction direction, const Buffer& from, Buffer& to, int scale_power) {
  const bool rebuild = direction == Direction::rebuild;
  BlockCopy copy;
  copy.shape = &piece.shape;
  copy.from = from.data();
  copy.from_view = rebuild ? &piece.dest : &piece.source;
  copy.to = to.data();
  copy.to_view = rebuild ? &piece.source : &piece.dest;
  copy.scale = piece.scale;
  copy.power = scale_power;
  copy.multiply = direction == Direction::extract;
  copy.numel = checked_numel(piece.shape).value_or(0);
  return copy;
}

}  // namespace shardcheck
