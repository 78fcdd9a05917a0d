// The walk of a shape through two strided views, written once: the CPU backend's slabs,
// conversion's element walk, the digest's rows and the wide path's rows all step through
// their outer axes with this odometer. Internal to core.
#pragma once

#include <array>
#include <cstddef>

#include "shardcheck/map.h"
#include "walk_axis.h"

namespace shardcheck::detail {

// The axes [0, last) of `shape` with an extent > 1, outermost first, into `out`; returns
// how many. Axes of extent 1 do not move either address, so leaving them out changes
// neither the order nor the addresses of a walk, and at most 63 remain in a shape whose
// numel fits 64 bits (the caller has checked the views).
inline int outer_axes(const Extents& shape, const StridedView& a, const StridedView& b, std::size_t last,
                      std::array<WalkAxis, 64>& out) {
  int n = 0;
  for (std::size_t k = 0; k < last; ++k) {
    if (shape[k] > 1 && n < 64) out[static_cast<std::size_t>(n++)] = WalkAxis{shape[k], a.strides[k], b.strides[k]};
  }
  return n;
}

// Merges each axis of axes[0, n) (outermost first) into the one inside it wherever both
// views step across the pair as across one longer axis, from the innermost outwards, which
// keeps the row-major order of the elements; the merged axes are left in axes[0, returned
// count). The products stay below the numel the caller has checked.
inline std::size_t merge_contiguous_axes(WalkAxis* axes, std::size_t n) {
  std::size_t write = n;
  for (std::size_t k = n; k-- > 0;) {
    if (write < n) {
      WalkAxis& inner = axes[write];
      const WalkAxis& outer = axes[k];
      if (outer.from_stride == inner.from_stride * inner.extent && outer.to_stride == inner.to_stride * inner.extent) {
        inner.extent *= outer.extent;
        continue;
      }
    }
    axes[--write] = axes[k];
  }
  for (std::size_t k = write; k < n; ++k) axes[k - write] = axes[k];
  return n - write;
}

inline bool has_zero_extent(const Extents& shape) {
  for (Index e : shape) {
    if (e == 0) return true;
  }
  return false;
}

// An odometer over `count` axes in row-major order (the last fastest), holding the
// addresses of the current position in both views. It starts at position `start`
// (0 <= start < the product of the extents).
class TwoViewWalk {
 public:
  TwoViewWalk(const WalkAxis* axes, int count, Index from, Index to, Index start = 0)
      : axes_(axes), count_(count), from_(from), to_(to) {
    // Only the walk's own axes are set: zeroing the whole array cost more than copying a
    // 2 KiB row on the wide path.
    for (int k = count_; k-- > 0;) {
      counter_[k] = start % axes_[k].extent;
      start /= axes_[k].extent;
      from_ += counter_[k] * axes_[k].from_stride;
      to_ += counter_[k] * axes_[k].to_stride;
    }
  }

  Index from() const { return from_; }
  Index to() const { return to_; }

  // Moves to the next position; false after the last one. Steps back rather than one
  // past the end: the past-the-end address may overflow.
  bool next() {
    for (int k = count_; k-- > 0;) {
      const WalkAxis& axis = axes_[k];
      if (++counter_[k] < axis.extent) {
        from_ += axis.from_stride;
        to_ += axis.to_stride;
        return true;
      }
      from_ -= (axis.extent - 1) * axis.from_stride;
      to_ -= (axis.extent - 1) * axis.to_stride;
      counter_[k] = 0;
    }
    return false;
  }

 private:
  const WalkAxis* axes_;
  int count_;
  Index from_;
  Index to_;
  std::array<Index, 64> counter_;
};

// Calls fn(k, a, b) for every element k of `shape` in row-major order with its addresses
// in views a and b; stops early (returning true) when fn returns true.
template <class Fn>
bool walk(const Extents& shape, const StridedView& a, const StridedView& b, Fn&& fn) {
  if (has_zero_extent(shape)) return false;
  const std::size_t d = shape.size();
  if (d == 0) return fn(Index{0}, a.offset, b.offset);
  std::array<WalkAxis, 64> axes;
  const int outer = outer_axes(shape, a, b, d - 1, axes);
  const Index inner = shape[d - 1];
  const Index a_step = a.strides[d - 1];
  const Index b_step = b.strides[d - 1];
  TwoViewWalk rows(axes.data(), outer, a.offset, b.offset);
  for (Index k = 0;;) {
    Index ia = rows.from();
    Index ib = rows.to();
    for (Index j = 0; j < inner; ++j, ++k, ia += a_step, ib += b_step) {
      if (fn(k, ia, ib)) return true;
    }
    if (!rows.next()) return false;
  }
}

}  // namespace shardcheck::detail
