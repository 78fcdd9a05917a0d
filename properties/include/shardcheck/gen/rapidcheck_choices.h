// A ChoiceSource driven by RapidCheck, for properties. Header-only so that only the
// tests (which link rapidcheck) depend on it. Must be used inside an rc::check body.
#pragma once

#include <rapidcheck.h>

#include <limits>

#include "shardcheck/gen/choice.h"

namespace shardcheck::gen {

class RapidCheckChoices final : public ChoiceSource {
 public:
  Index int_in(Index lo, Index hi) override {
    if (hi <= lo) return lo;
    // inRange is half-open; hi + 1 would overflow at the top of the range, where
    // giving up the single largest value is harmless for a generator.
    if (hi == std::numeric_limits<Index>::max()) --hi;
    return *rc::gen::inRange<Index>(lo, hi + 1);
  }
};

}  // namespace shardcheck::gen
