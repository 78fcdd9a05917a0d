#include "shardcheck/outcome.h"

#include <utility>

namespace shardcheck {

namespace {

constexpr std::pair<Outcome, std::string_view> kOutcomeNames[] = {
    {Outcome::refused, "refused"},
    {Outcome::exact, "exact"},
    {Outcome::wrong, "wrong"},
    {Outcome::wrong_valid_layout, "wrong_valid_layout"},
    {Outcome::target_fault, "target_fault"},
};

}  // namespace

std::string_view outcome_name(Outcome outcome) {
  for (const auto& [value, name] : kOutcomeNames) {
    if (value == outcome) return name;
  }
  return "wrong";
}

std::optional<Outcome> parse_outcome(std::string_view name) {
  for (const auto& [value, spelling] : kOutcomeNames) {
    if (spelling == name && value != Outcome::target_fault) return value;
  }
  return std::nullopt;
}

}  // namespace shardcheck
