#include "shardcheck/gen/choice.h"

#include <algorithm>

#include "shardcheck/splitmix.h"

namespace shardcheck::gen {

ChoiceSource::~ChoiceSource() = default;

Index ChoiceSource::between(Index lo, Index hi) {
  if (hi <= lo) return lo;
  return std::clamp(int_in(lo, hi), lo, hi);
}

std::size_t ChoiceSource::below(std::size_t n) {
  if (n <= 1) return 0;
  return static_cast<std::size_t>(between(0, static_cast<Index>(n - 1)));
}

std::uint64_t SeededChoices::next() { return splitmix64_next(state_); }

Index SeededChoices::int_in(Index lo, Index hi) {
  if (hi <= lo) return lo;
  // Width as unsigned so [INT64_MIN, INT64_MAX] works; wraps to 0 for the full range.
  std::uint64_t width = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo) + 1;
  std::uint64_t r = next();
  if (width != 0) {
    // Lemire's multiply-shift: one multiply instead of a division; the bias is below
    // 2^-50 for the small ranges generators ask for.
    r = static_cast<std::uint64_t>((static_cast<unsigned __int128>(r) * width) >> 64);
  }
  return static_cast<Index>(static_cast<std::uint64_t>(lo) + r);
}

}  // namespace shardcheck::gen
