#include "draw.h"

#include <algorithm>

namespace shardcheck::gen::detail {

Extents draw_shape(ChoiceSource& c, int ndim, int first, Index max_extent, Index max_elements) {
  Extents shape(static_cast<std::size_t>(ndim), 0);
  Index numel = 1;  // stays <= max_elements, so the products below cannot overflow
  for (int i = 0; i < ndim; ++i) {
    auto k = static_cast<std::size_t>((first + i) % ndim);
    Index cap = max_extent;
    if (numel > 0) cap = std::min(cap, max_elements / numel);
    // Empty axes are interesting but should not swamp everything else; the lo answer
    // gives extent 1, the simplest non-empty shape.
    Index extent = 0;
    if (cap > 0 && !c.chance(1, 12)) extent = c.between(1, cap);
    shape[k] = extent;
    numel *= extent;
  }
  return shape;
}

Index draw_divisor(ChoiceSource& c, Index n) {
  if (n <= 1) return 1;
  // Divisors come in pairs (d, n/d); count them, then walk to the chosen one, so no
  // list is built.
  Index count = 0;
  for (Index d = 1; d * d <= n; ++d) {
    if (n % d == 0) count += (d * d == n) ? 1 : 2;
  }
  Index want = c.between(0, count - 1);
  for (Index d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    if (want == 0) return d;
    --want;
    if (d * d == n) continue;
    if (want == 0) return n / d;
    --want;
  }
  return 1;
}

namespace {
// Sorted cut points in [0, units] turned into consecutive differences.
void random_cuts(ChoiceSource& c, Index units, std::vector<Index>& out) {
  for (std::size_t r = 0; r + 1 < out.size(); ++r) out[r] = c.between(0, units);
  out.back() = units;
  std::sort(out.begin(), out.end());
  for (std::size_t r = out.size(); r-- > 1;) out[r] -= out[r - 1];
}
}  // namespace

std::vector<Index> draw_widths(ChoiceSource& c, Index total, int parts) {
  std::vector<Index> out(static_cast<std::size_t>(std::max(parts, 1)), 0);
  Index unit = 1;
  if (total > 1 && c.chance(1, 3)) unit = draw_divisor(c, total);
  Index units = total / unit;
  if (c.coin()) {
    random_cuts(c, units, out);
  } else {
    auto n = static_cast<Index>(out.size());
    for (Index r = 0; r < n; ++r) out[static_cast<std::size_t>(r)] = units / n + (r < units % n);
  }
  for (Index& w : out) w *= unit;
  return out;
}

std::vector<Index> draw_positive_widths(ChoiceSource& c, Index total, int parts) {
  std::vector<Index> out(static_cast<std::size_t>(std::max(parts, 1)), 0);
  auto n = static_cast<Index>(out.size());
  Index floor = total >= n ? 1 : 0;
  random_cuts(c, total - floor * n, out);
  for (Index& w : out) w += floor;
  return out;
}

}  // namespace shardcheck::gen::detail
