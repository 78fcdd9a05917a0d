// Fuzz target case_file: untrusted bytes through the case-file codec and the truth
// oracle under both policies. Neither may crash; under the strict policy a usable case
// must never come back silently wrong unless its map passes every check (the
// valid-but-different class, which no map check can see).
//
// With SHARDCHECK_REPLAY_STRICT=1 (the replay of corpus/regressions) every input must
// also decode, be usable, and meet its own expectations under both policies.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "report.h"
#include "shardcheck/case.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/properties.h"

namespace {

using namespace shardcheck;

constexpr std::string_view kTarget = SHARDCHECK_FUZZ_TARGET_NAME;

[[noreturn]] void fail(const Case& c, props::JudgeId judge, std::string_view detail, std::string message) {
  fuzz::report_finding(props::make_finding(judge, detail, std::move(message), c), kTarget);
}

std::string label(const Case& c) {
  return fmt::format("{}/{}", c.constructor.empty() ? "case_file" : c.constructor,
                     c.corruption ? c.corruption->kind : "none");
}

std::string wrong_op(const oracles::CaseOutcome& outcome) {
  for (const auto& op : outcome.ops) {
    if (op.verdict == Outcome::wrong) return std::string(op_name(op.op));
  }
  return "rebuild";
}

void run_policy(const Case& c, Policy policy) {
  ConvertOptions options;
  options.policy = policy;
  options.scale_power = c.scale_power;
  auto outcome = oracles::run_case(c, options);
  if (!outcome) {
    if (fuzz::replay_strict()) {
      fail(c, props::JudgeId::case_file_unusable, kind_name(outcome.error().kind),
           "a regression case cannot be run: " + outcome.error().to_string());
    }
    return;
  }
  const oracles::CaseOutcome& result = outcome.value();
  if (policy == Policy::strict && result.verdict == Outcome::wrong &&
      !oracles::reference_check(c.map).valid()) {
    fail(c, props::JudgeId::silently_wrong, fmt::format("{}:{}", wrong_op(result), label(c)), result.message);
  }
  if (fuzz::replay_strict() && !result.matches_expectation) {
    fail(c, props::JudgeId::case_file_expectation, fmt::format("{}:{}", policy_name(policy), c.name),
         result.expectation_message);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::InputScope scope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto decoded = decode_case_text(text);
  fuzz::count_input(decoded.ok());
  if (!decoded) {
    if (fuzz::replay_strict()) {
      // No case to print: the signature line alone says which file broke and why.
      fuzz::report_finding(
          props::make_finding(props::JudgeId::case_file_undecodable, "", decoded.error().to_string(), Case{}),
          kTarget);
    }
    return 0;
  }
  const Case& c = decoded.value();
  if (!c.undecoded_map) {
    if (auto finding = props::check_reference_agreement(c)) fuzz::report_finding(*finding, kTarget);
  }
  run_policy(c, Policy::strict);
  run_policy(c, Policy::legacy);
  return 0;
}
