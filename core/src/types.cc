#include "shardcheck/types.h"

namespace shardcheck {

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
