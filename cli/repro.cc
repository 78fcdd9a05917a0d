// `shardcheck repro CASE.json`: replays a case file through one policy and one oracle
// and says whether the conversion refused, was exact, or was silently wrong.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/case.h"
#include "shardcheck/convert.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck::cli {

namespace {

struct ReproArgs {
  std::string path;
  std::string policy_name = "strict";
  std::string oracle_name = "truth";
  std::string target;  // overrides the policy: strict, legacy, deepspeed, exec:COMMAND
  double target_timeout = 10.0;
  bool json = false;
};

int run_repro(const ReproArgs& args) {
  FileText file = read_file(args.path);
  if (!file.text) {
    fmt::print(stderr, "shardcheck: {}\n", file.error);
    return kExitUsage;
  }
  auto c = decode_case_text(*file.text);
  if (!c) {
    fmt::print(stderr, "shardcheck: {}: {}\n", args.path, c.error().to_string());
    return kExitUsage;
  }
  oracles::TargetOptions target_options;
  target_options.timeout_seconds = args.target_timeout;
  auto made = oracles::make_target(args.target.empty() ? args.policy_name : args.target, target_options);
  if (!made.target) {
    fmt::print(stderr, "shardcheck: {}\n", made.error);
    return kExitUsage;
  }
  auto oracle = args.oracle_name == "same-map" ? oracles::OracleKind::same_map
                                               : oracles::OracleKind::truth;
  auto outcome = oracles::run_case(c.value(), *made.target, oracle);
  if (!outcome) {
    fmt::print(stderr, "shardcheck: {}: the case cannot be run: {}\n", args.path,
               outcome.error().to_string());
    return kExitUsage;
  }
  const oracles::CaseOutcome& o = outcome.value();
  if (args.json) {
    fmt::print("{}\n", oracles::outcome_to_json(c.value(), o).dump());
  } else {
    fmt::print("{}\n", o.message);
    const bool digest_ignored =
        std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) { return op.digest_ignored; });
    const bool nan_bits_only = std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) {
      return op.verdict == Outcome::wrong && op.difference && op.difference->nan_bits_only;
    });
    if (o.verdict == Outcome::wrong && o.valid_layout && !digest_ignored && !nan_bits_only) {
      fmt::print("the map passes every check of spec 3: a valid but different layout\n");
    }
    if (o.accepted_invalid) {
      fmt::print("{} returned a tensor through a map that breaks contract section 3 (accepts an invalid map)\n",
                 o.target.empty() ? "the implementation" : o.target);
    }
    if (!o.expected_vs_full.reason.empty()) {
      fmt::print("the expected tensor is not F: {}\n", o.expected_vs_full.reason);
    }
    if (!o.expected_vs_full.harness_defect.empty()) fmt::print("HARNESS DEFECT: {}\n", o.expected_vs_full.harness_defect);
    if (!o.matches_expectation) fmt::print("expectation not met: {}\n", o.expectation_message);
  }
  // A crash, hang or garbage answer of an implementation under test is never a pass.
  // So is a harness whose own expected tensor breaks contract 8.
  bool silently_wrong = o.verdict == Outcome::wrong || o.verdict == Outcome::target_fault ||
                        !o.expected_vs_full.harness_defect.empty();
  return silently_wrong || !o.matches_expectation ? kExitFound : kExitOk;
}

}  // namespace

void register_repro(CLI::App& app, RunState& state) {
  auto args = std::make_shared<ReproArgs>();
  CLI::App* sub = app.add_subcommand(
      "repro", "Replay a case file: refused, exact, or silently wrong (with the difference)");
  sub->add_option("case", args->path, "case file (JSON)")->required();
  sub->add_option("--policy", args->policy_name, "conversion policy: strict (default) or legacy")
      ->check(CLI::IsMember({"strict", "legacy"}));
  sub->add_option("--oracle", args->oracle_name, "truth (default) or same-map")
      ->check(CLI::IsMember({"truth", "same-map"}));
  sub->add_option("--target", args->target,
                  "implementation under test: strict, legacy, deepspeed or exec:COMMAND (overrides --policy)");
  add_seconds_option(sub, "--target-timeout", args->target_timeout,
                     "seconds an exec target may take per request before it counts as hung (default 10)");
  sub->add_flag("--json", args->json, "print the outcome as one JSON object");
  sub->callback([args, &state] { state.exit_code = run_repro(*args); });
}

}  // namespace shardcheck::cli
