#include "shardcheck/types.h"

namespace shardcheck {

std::optional<Index> checked_numel(std::span<const Index> extents) {
  // One pass: a large map asks this of every piece, twice.
  Index n = 1;
  bool has_zero = false;
  bool overflow = false;
  for (Index e : extents) {
    has_zero |= e == 0;
    overflow |= __builtin_mul_overflow(n, e, &n);
  }
  // An extent of 0 makes the product 0 even if the others would overflow.
  if (has_zero) return 0;
  if (overflow) return std::nullopt;
  return n;
}

Strides row_major_strides(std::span<const Index> extents) {
  Strides strides(extents.size(), 0);
  Index running = 1;
  for (std::size_t k = extents.size(); k-- > 0;) {
    strides[k] = running;
    // A buffer with an extent of 0 holds nothing, however large its other extents: their
    // product may overflow, and the strides past it are never used to address anything.
    if (__builtin_mul_overflow(running, extents[k], &running)) running = 0;
  }
  // (3,0) -> (0,1): once a zero extent is crossed every outer stride is 0, as torch does.
  return strides;
}

}  // namespace shardcheck
