// FNV-1a (Fowler, Noll and Vo), written once: it picks a case's launch shape
// (oracles/src/backends.cc) and the cases a judgement is spread over (props::case_hash).
// Neither needs a strong hash, only one that is the same on every run and machine.
#pragma once

#include <cstdint>
#include <string_view>

namespace shardcheck {

class Fnv1a {
 public:
  // One step: `word` xored in whole, then the prime. A byte is a word here; wider values
  // (extents, element bits) go in as one step each.
  constexpr void add(std::uint64_t word) { value_ = (value_ ^ word) * kPrime; }
  constexpr void add_bytes(std::string_view bytes) {
    for (const unsigned char byte : bytes) add(byte);
  }
  constexpr std::uint64_t value() const { return value_; }

 private:
  static constexpr std::uint64_t kOffsetBasis = 0xcbf29ce484222325ull;
  static constexpr std::uint64_t kPrime = 0x100000001b3ull;
  std::uint64_t value_ = kOffsetBasis;
};

}  // namespace shardcheck
