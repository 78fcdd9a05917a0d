// Basic vocabulary: indices, ranks, extents, and overflow-checked arithmetic.
//
// Every number that comes from a map is untrusted. Products and sums of extents,
// strides and offsets are computed with the checked helpers below so that a
// 64-bit overflow is reported, never wrapped.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace shardcheck {

using Index = std::int64_t;  // element counts, offsets, strides, addresses
using Rank = std::int64_t;   // rank ids: arbitrary non-negative integers
using Extents = std::vector<Index>;
using Strides = std::vector<Index>;

// Checked arithmetic: std::nullopt on signed 64-bit overflow. Inline: every map
// check calls them per piece and axis, and an out-of-line call cost a tenth of
// check_map on large maps.
inline std::optional<Index> checked_add(Index a, Index b) {
  Index out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}
inline std::optional<Index> checked_mul(Index a, Index b) {
  Index out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// prod(extents); 1 for a 0-d shape. std::nullopt on overflow. Negative
// extents are the caller's business (structure checks refuse them first).
std::optional<Index> checked_numel(std::span<const Index> extents);

// Row-major strides of `extents` (mdspan's layout_right). Axes of extent 0 are
// given the stride their extent-1 neighbour would need, so a (3,0) buffer has
// strides (0,1). The caller checks numel first; when it is 0, inner extents whose
// product overflows leave the outer strides 0 (nothing is ever addressed).
Strides row_major_strides(std::span<const Index> extents);

}  // namespace shardcheck
