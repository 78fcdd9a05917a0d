// Judging what the operations returned: contract 3 validity by the reference model, the
// case's verdict, and whether it meets the case's own expectations.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shardcheck/oracles/reference.h"
#include "truth_internal.h"

namespace shardcheck::oracles {

namespace {

// Contract 3 validity for one operation, judged by the reference model, never by the code
// under test: the map passes conditions 1-6 and, for a rebuild of shards, condition 7 (a
// strict rebuild that stopped comparing replicas must not make its own wrong tensors look
// valid). An extract reads no shard: its map is valid by conditions 1-6, whatever the
// shards the truth map wrote hold.
bool valid_layout(const Case& c, Op op, const ShardSet* shards) {
  if (!reference_check(c.map).valid()) return false;
  // A valid layout that the conversion must still refuse (a scale with p != 1, or on
  // integers): a tensor returned is wrong, not merely different.
  if (!reference_scale_refusal(c.map, c.dtype, c.scale_power).ok()) return false;
  // Resharding: both maps of the pair, and their scales, which a plan copies and never
  // changes (contract 11).
  if (op == Op::reshard && c.target_map &&
      (!reference_check(*c.target_map).valid() || !reference_reshard_scale_refusal(c.map, *c.target_map).ok())) {
    return false;
  }
  if (shards == nullptr || op != Op::rebuild) return true;
  return !reference_replicas_differ(c.map, *shards, c.dtype, c.scale_power);
}

}  // namespace

// Each operation's validity, and the case's: every operation it lists.
// Judged once per operation (condition 7 and a reshard pair's scales walk every element).
void set_valid_layout(CaseOutcome& outcome, const Case& c, const ShardSet* shards) {
  std::map<Op, bool> judged;
  auto valid_for = [&](Op op) {
    const auto [at, added] = judged.try_emplace(op, false);
    if (added) at->second = valid_layout(c, op, shards);
    return at->second;
  };
  for (OpOutcome& op : outcome.ops) op.valid_layout = valid_for(op.op);
  const auto ops = c.ops.list();
  outcome.valid_layout = std::all_of(ops.begin(), ops.end(), valid_for);
}

void summarize(CaseOutcome& outcome) {
  const OpOutcome* refused = nullptr;
  const OpOutcome* fault = nullptr;
  for (const auto& op : outcome.ops) {
    if (op.verdict == Outcome::wrong) {
      outcome.verdict = Outcome::wrong;
      outcome.message = op.message;
      return;
    }
    if (op.verdict == Outcome::target_fault && fault == nullptr) fault = &op;
    if (op.verdict == Outcome::refused && refused == nullptr) refused = &op;
  }
  if (fault != nullptr) {
    outcome.verdict = Outcome::target_fault;
    outcome.fault = fault->fault;
    outcome.message = fault->message;
    return;
  }
  if (refused != nullptr) {
    outcome.verdict = Outcome::refused;
    outcome.error = refused->error;
    outcome.refusal = refused->refusal;
    outcome.message = refused->message;
    return;
  }
  outcome.verdict = Outcome::exact;
  outcome.message = "exact";
  if (outcome.ops.empty() && !outcome.unsupported.empty()) {
    std::vector<std::string_view> names;
    for (Op op : outcome.unsupported) names.push_back(op_name(op));
    outcome.message = fmt::format("not run: the target does not implement {}", fmt::join(names, ", "));
  }
}

namespace {

std::string kinds_text(const Case& c) {
  std::vector<std::string> names;
  if (c.expect_error) names.emplace_back(kind_name(*c.expect_error));
  for (auto kind : c.accept_errors) names.emplace_back(kind_name(kind));
  return fmt::format("{}", fmt::join(names, " or "));
}

// Whether the outcome is what `expected` names: a wrong verdict is wrong_valid_layout
// only on a map that passes every check of contract 3.
bool is_outcome(const CaseOutcome& outcome, Outcome expected) {
  if (expected == Outcome::wrong_valid_layout) return wrong_on_valid_layout(outcome);
  return outcome.verdict == expected;
}

std::string got_text(const CaseOutcome& outcome) {
  if (wrong_on_valid_layout(outcome)) {
    return "wrong (on a valid layout)";
  }
  return std::string(outcome_name(outcome.verdict));
}

std::string judge_strict(const Case& c, const CaseOutcome& outcome, bool judge_kinds) {
  bool kinds_given = judge_kinds && (c.expect_error || !c.accept_errors.empty());
  if (!c.expect && !kinds_given) return {};
  Outcome expect = c.expect.value_or(Outcome::refused);
  if (!is_outcome(outcome, expect)) {
    return fmt::format("expected {}{}, got {}", outcome_name(expect),
                       expect == Outcome::refused && kinds_given ? " " + kinds_text(c) : std::string(),
                       got_text(outcome));
  }
  if (expect != Outcome::refused || !kinds_given) return {};
  if (!outcome.error) return fmt::format("expected refused {}, got refused unknown", kinds_text(c));
  ErrorKind kind = outcome.error->kind;
  bool accepted = c.expect_error == kind;
  for (auto k : c.accept_errors) accepted = accepted || k == kind;
  if (accepted) return {};
  return fmt::format("expected refused {}, got refused {}", kinds_text(c), kind_name(kind));
}

std::string judge_legacy(const Case& c, const CaseOutcome& outcome) {
  if (c.legacy_expect && !is_outcome(outcome, *c.legacy_expect)) {
    return fmt::format("legacy expected {}, got {}", outcome_name(*c.legacy_expect),
                       got_text(outcome));
  }
  if (!c.legacy_output) return {};
  const Buffer* output = nullptr;
  for (const auto& op : outcome.ops) {
    if (op.op == Op::rebuild && op.output) output = &*op.output;
  }
  if (output == nullptr) return "legacy expected a rebuild output, but rebuild returned none";
  auto diff = compare(to_buffer(c.dtype, *c.legacy_output), *output);
  if (!diff) return {};
  return fmt::format("legacy output differs at element {}: expected {} got {}; {} elements differ",
                     diff->element, format_element(c.dtype, diff->expected_bits),
                     format_element(c.dtype, diff->actual_bits), diff->count);
}

}  // namespace

void judge(const Case& c, const Target& target, CaseOutcome& outcome) {
  // A target that ran none of the operations an expectation is about is not held to it:
  // none of the case's (it serves none of them: "not run"), or not the rebuild that
  // shards supplied with the case are for (a damaged replica, condition 7), where a
  // restore step serves extract alone.
  const bool rebuild_not_run =
      std::find(outcome.unsupported.begin(), outcome.unsupported.end(), Op::rebuild) != outcome.unsupported.end();
  if ((outcome.ops.empty() && !outcome.unsupported.empty()) || (c.shards && rebuild_not_run)) {
    outcome.expectation_message.clear();
    outcome.matches_expectation = true;
    outcome.expectation_judged = false;
    return;
  }
  outcome.expectation_message = target.is_legacy_model()
                                    ? judge_legacy(c, outcome)
                                    : judge_strict(c, outcome, target.judges_kinds());
  outcome.matches_expectation = outcome.expectation_message.empty();
}

bool wrong_on_valid_layout(const CaseOutcome& outcome) {
  return outcome.verdict == Outcome::wrong &&
         std::all_of(outcome.ops.begin(), outcome.ops.end(),
                     [](const OpOutcome& op) { return op.verdict != Outcome::wrong || op.valid_layout; });
}

}  // namespace shardcheck::oracles
