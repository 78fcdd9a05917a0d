// The choice source: the only thing generators read from.
//
// Every range is closed, [lo, hi]. RapidCheck's inRange is half-open and
// FuzzedDataProvider's is closed; each adapter converts at this one boundary so the
// generators never have to know which engine drives them. Generators must terminate
// for any sequence of answers (no retry loops) and ask O(size) questions, so a fuzzer's
// bytes, a property's shrinker and a seeded campaign all see the same generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardcheck/types.h"

namespace shardcheck::gen {

class ChoiceSource {
 public:
  virtual ~ChoiceSource();

  // An integer in the closed range [lo, hi]; callers guarantee lo <= hi. A source
  // with nothing left to say (an exhausted fuzzer input) must answer lo: the
  // generators treat lo as "the smallest, simplest choice".
  virtual Index int_in(Index lo, Index hi) = 0;

  // int_in, but safe against a misbehaving implementation: hi < lo answers lo without
  // asking, and an answer outside [lo, hi] is clamped. Generators call this.
  Index between(Index lo, Index hi);

  // An index in [0, n-1]; 0 when n == 0 (callers never use it then).
  std::size_t below(std::size_t n);

  // true with "probability" num/den (0 < den). The lo answer gives false unless
  // num >= den, so a shrinking or exhausted source turns rare features off.
  bool chance(Index num, Index den) { return between(0, den - 1) >= den - num; }

  bool coin() { return between(0, 1) == 1; }

  template <class T>
  const T& pick(std::span<const T> items) {
    return items[below(items.size())];
  }
  template <class T>
  const T& pick(const std::vector<T>& items) {
    return pick(std::span<const T>(items));
  }
  template <class T, std::size_t N>
  const T& pick(const T (&items)[N]) {
    return pick(std::span<const T>(items));
  }

  // Fisher-Yates in place: n-1 questions.
  template <class T>
  void shuffle(std::vector<T>& items) {
    for (std::size_t i = items.size(); i > 1; --i) {
      std::size_t j = below(i);
      if (j != i - 1) std::swap(items[i - 1], items[j]);
    }
  }
};

// A fast deterministic source for the campaign and for seeded tests: splitmix64, so
// the same seed gives the same cases on every platform and compiler.
class SeededChoices final : public ChoiceSource {
 public:
  explicit SeededChoices(std::uint64_t seed) : state_(seed) {}
  Index int_in(Index lo, Index hi) override;
  std::uint64_t next();

 private:
  std::uint64_t state_;
};

}  // namespace shardcheck::gen
