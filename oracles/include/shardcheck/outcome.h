// How a case ends. One vocabulary for the truth oracle's verdicts, the expectations a
// case file states (`expect` and `legacy.expect`), the properties and the campaign tally.
#pragma once

#include <optional>
#include <string_view>

namespace shardcheck {

// The oracle judges a conversion refused, exact or wrong. A wrong conversion through a
// map that passes every check of contract section 3 is the valid-but-different class
// (wrong_valid_layout): no map check can see it, so it is expected and counted apart.
enum class Outcome { refused, exact, wrong, wrong_valid_layout };

// "refused", "exact", "wrong", "wrong_valid_layout": the spellings of case files and of
// `shardcheck repro --json`.
std::string_view outcome_name(Outcome outcome);
std::optional<Outcome> parse_outcome(std::string_view name);

}  // namespace shardcheck
