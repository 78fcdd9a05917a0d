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

#include "shardcheck/small_vector.h"

namespace shardcheck {

using Index = std::int64_t;  // element counts, offsets, strides, addresses
using Rank = std::int64_t;   // rank ids: arbitrary non-negative integers
// Axes and replica lists are short: up to four are kept in place (small_vector.h).
using Extents = SmallVector<Index, 4>;
using Strides = SmallVector<Index, 4>;
using RankList = SmallVector<Rank, 4>;
// A piece holds four of them and a large map 10^7 pieces: their size is the map's memory.
static_assert(sizeof(Extents) == 40 && sizeof(RankList) == 40);

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

// prod(extents); 1 for a 0-d shape. std::nullopt on overflow, unless an extent is 0:
// the count is then 0, however far the others would overflow. Negative extents are the
// caller's business (structure checks refuse them first). Inline, as above: span_facts
// asks it of both views of every piece.
inline std::optional<Index> checked_numel(std::span<const Index> extents) {
  Index n = 1;
  bool has_zero = false;
  bool overflow = false;
  for (Index e : extents) {
    has_zero |= e == 0;
    overflow |= __builtin_mul_overflow(n, e, &n);
  }
  if (has_zero) return 0;
  if (overflow) return std::nullopt;
  return n;
}

// Row-major strides of `extents` (mdspan's layout_right). Axes of extent 0 are
// given the stride their extent-1 neighbour would need, so a (3,0) buffer has
// strides (0,1). The caller checks numel first; when it is 0, inner extents whose
// product overflows leave the outer strides 0 (nothing is ever addressed).
Strides row_major_strides(std::span<const Index> extents);

}  // namespace shardcheck
