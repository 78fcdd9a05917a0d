// SplitMix64 (Steele, Lea and Flood 2014), written once: the seeded choice source, the
// campaign's per-case seeds and the content digest's element term (contract 10) all
// use it.
#pragma once

#include <cstdint>

namespace shardcheck {

inline constexpr std::uint64_t kSplitMixGamma = 0x9E3779B97F4A7C15ull;
inline constexpr std::uint64_t kSplitMixMul1 = 0xBF58476D1CE4E5B9ull;
inline constexpr std::uint64_t kSplitMixMul2 = 0x94D049BB133111EBull;

// The finaliser: a bijective mix of all 64 bits.
constexpr std::uint64_t splitmix64_mix(std::uint64_t z) {
  z = (z ^ (z >> 30)) * kSplitMixMul1;
  z = (z ^ (z >> 27)) * kSplitMixMul2;
  return z ^ (z >> 31);
}

// The generator: advances `state` by the gamma and returns the mixed state.
constexpr std::uint64_t splitmix64_next(std::uint64_t& state) {
  state += kSplitMixGamma;
  return splitmix64_mix(state);
}

}  // namespace shardcheck
