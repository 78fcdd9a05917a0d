// A block reduced to rows, the unit every batched copy works in (the CPU's wide row
// copies, the device backend's work items). Internal to core.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "shardcheck/backend.h"
#include "two_view_walk.h"

namespace shardcheck::detail {

// A block reduced to rows: axes of extent 1 dropped, neighbouring axes merged where
// both views are contiguous across them (which keeps the row-major element order), the
// innermost axis left as one run of `len` elements, the outer axes enumerating rows.
struct RowPlan {
  std::size_t block = 0;
  Index from_offset = 0;
  Index to_offset = 0;
  Index len = 1;
  Index from_step = 1;
  Index to_step = 1;
  Index rows = 1;
  std::int32_t axes_begin = 0;  // outer axes, outermost first, in the axes list made beside it
  std::int32_t axes_count = 0;
};

// False for an empty block (nothing to move). Axes are reduced on the stack and only
// the outer axes left over go to `axes`: a one-row block (a gather's piece) adds none.
inline bool make_row_plan(const BlockCopy& b, std::size_t index, std::vector<WalkAxis>& axes, RowPlan& out) {
  const Extents& shape = *b.shape;
  // At most 63 axes have extent > 1: the block's numel fits 64 bits.
  std::array<WalkAxis, 64> kept;
  std::size_t n = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) return false;
    if (shape[k] == 1) continue;
    kept[n++] = WalkAxis{shape[k], b.from_view->strides[k], b.to_view->strides[k]};
  }
  out = RowPlan{};
  out.block = index;
  out.from_offset = b.from_view->offset;
  out.to_offset = b.to_view->offset;
  n = merge_contiguous_axes(kept.data(), n);
  if (n > 0) {
    const WalkAxis& inner = kept[n - 1];
    out.len = inner.extent;
    out.from_step = inner.from_stride;
    out.to_step = inner.to_stride;
    --n;
  }
  out.axes_begin = static_cast<std::int32_t>(axes.size());
  out.axes_count = static_cast<std::int32_t>(n);
  for (std::size_t k = 0; k < n; ++k) {
    axes.push_back(kept[k]);
    out.rows *= kept[k].extent;
  }
  return true;
}

}  // namespace shardcheck::detail
