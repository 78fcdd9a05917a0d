// How a case ends. One vocabulary for the truth oracle's verdicts, the expectations a
// case file states (`expect` and `legacy.expect`), the properties and the campaign tally.
#pragma once

#include <optional>
#include <string_view>

namespace shardcheck {

// The oracle judges a conversion refused, exact or wrong. A wrong conversion through a
// map that passes every check of contract 3 is the valid-but-different class
// (wrong_valid_layout): no map check can see it, so it is expected and counted apart.
// An implementation under test in another process may also crash, hang or answer
// something that is not a response (target_fault): no verdict on the map at all, and
// never a pass.
enum class Outcome { refused, exact, wrong, wrong_valid_layout, target_fault };

// "refused", "exact", "wrong", "wrong_valid_layout", "target_fault": the spellings of
// `shardcheck repro --json` and of case files.
std::string_view outcome_name(Outcome outcome);
// The four outcomes a case file may expect; target_fault is not one of them (a case
// states what an implementation should do, and no implementation should fault).
std::optional<Outcome> parse_outcome(std::string_view name);

}  // namespace shardcheck
