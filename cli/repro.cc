// `shardcheck repro CASE.json`: replays a case file through one policy and one oracle
// and says whether the conversion refused, was exact, or was silently wrong, and
// whether that is what the case expects. A finding file records the policy or target
// that found it, and is replayed with it unless told otherwise.
#include <algorithm>
#include <cstdio>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "shardcheck/case.h"
#include "shardcheck/convert.h"
#include "shardcheck/oracles/backends.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/properties.h"

namespace shardcheck::cli {

namespace {

struct ReproArgs {
  std::string path;
  std::string policy_name = "strict";
  std::string oracle_name{oracles::oracle_kind_name(oracles::OracleKind::truth)};
  std::string target;  // overrides the policy: strict, legacy, deepspeed, exec:COMMAND
  double target_timeout = 10.0;
  bool json = false;
  // A backend to run beside the CPU backend (the backend differential); empty: the one
  // the case file records, if any.
  std::string backend;
  // Whether --policy or --target was given: if neither, the case file's record decides.
  bool implementation_given = false;
};

// What the case states the implementation must do, for the line that says whether the
// outcome met it; empty when it states nothing.
std::string stated_expectation(const Case& c, bool legacy_model) {
  if (legacy_model) {
    std::string stated = c.legacy_expect ? fmt::format("legacy {}", outcome_name(*c.legacy_expect)) : "";
    if (c.legacy_output) stated += stated.empty() ? "legacy output" : " with its output";
    return stated;
  }
  std::vector<std::string> kinds;
  if (c.expect_error) kinds.emplace_back(kind_name(*c.expect_error));
  for (const ErrorKind kind : c.accept_errors) kinds.emplace_back(kind_name(kind));
  if (!c.expect && kinds.empty()) return {};
  std::string stated(outcome_name(c.expect.value_or(Outcome::refused)));
  for (std::size_t i = 0; i < kinds.size(); ++i) stated += (i == 0 ? " " : " or ") + kinds[i];
  return stated;
}

// The implementation to replay with: the flags', else the one the case file records
// (a finding file's `policy` or `target`), else strict. A file may name a built-in
// implementation only: an `exec:` command taken from a file would run whatever the
// file says, so it must be given as --target. Empty with `refusal` set when it cannot.
std::string implementation_for(const ReproArgs& args, const Json& file, std::string& refusal) {
  if (args.implementation_given) return args.target.empty() ? args.policy_name : args.target;
  const std::string recorded = props::recorded_target(file);
  if (recorded.empty()) return args.policy_name;
  if (recorded.rfind("exec:", 0) == 0) {
    refusal = fmt::format(
        "{}: the case was found with target '{}'; shardcheck does not run a command named by a file: "
        "give it as --target to replay it, or --policy strict",
        args.path, recorded);
    return {};
  }
  return recorded;
}

// The backend differential on the case: the CPU backend and `name`, strict conversion,
// on the case's own launch shape. Prints one line; true when they differ.
bool backends_differ(const Case& c, const std::string& name, bool& usage_error) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  auto other = oracles::backend_named(name);
  if (!other) {
    fmt::print(stderr, "shardcheck: backend '{}' is not present here (this build knows: {})\n", name,
               fmt::join(oracles::backend_names(), ", "));
    usage_error = true;
    return false;
  }
  backends.push_back(std::move(other));
  const oracles::LaunchShape shape = oracles::launch_shape_for(c);
  if (auto difference = oracles::compare_backends(c, backends, shape)) {
    fmt::print("backend difference: {}: {}\n", difference->signature, difference->message);
    return true;
  }
  fmt::print("backend {} converts as the CPU backend does (2 threads, tile {})\n", name, shape.tile);
  return false;
}

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
  std::string refusal;
  auto parsed = parse_json(*file.text);  // decoded already: only its record is read here
  const Json file_json = parsed ? std::move(parsed).value() : Json();
  const std::string implementation = implementation_for(args, file_json, refusal);
  if (implementation.empty()) {
    fmt::print(stderr, "shardcheck: {}\n", refusal);
    return kExitUsage;
  }
  oracles::TargetOptions target_options;
  target_options.timeout_seconds = args.target_timeout;
  auto made = oracles::make_target(implementation, target_options);
  if (!made.target) {
    fmt::print(stderr, "shardcheck: {}\n", made.error);
    return kExitUsage;
  }
  // CLI11 has checked the name against the table.
  const oracles::OracleKind oracle = oracles::parse_oracle_kind(args.oracle_name).value_or(oracles::OracleKind::truth);
  auto outcome = oracles::run_case(c.value(), *made.target, oracle);
  if (!outcome) {
    fmt::print(stderr, "shardcheck: {}: the case cannot be run: {}\n", args.path, outcome.error().to_string());
    return kExitUsage;
  }
  const oracles::CaseOutcome& o = outcome.value();
  // A refusal must report what is there (condition 7's values), and the per-rank shares
  // of a verified digest must be the reference model's: the replay of a finding of
  // either kind fails while the defect is there.
  std::string misreported;
  for (const auto& op : o.ops) {
    if (!op.misreported.empty() && misreported.empty()) misreported = op.misreported;
  }
  if (args.json) {
    fmt::print("{}\n", oracles::outcome_to_json(c.value(), o).dump());
  } else {
    fmt::print("{}\n", o.message);
    const bool digest_ignored =
        std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) { return op.digest_ignored; });
    const bool nan_bits_only = std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) {
      return op.verdict == Outcome::wrong && op.difference && op.difference->nan_bits_only;
    });
    const bool compared = std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) {
      return op.verdict == Outcome::wrong && op.difference.has_value();
    });
    if (o.verdict == Outcome::wrong && o.valid_layout && compared && !digest_ignored && !nan_bits_only) {
      fmt::print("the map passes every check of spec 3: a valid but different layout\n");
    }
    if (o.accepted_invalid) {
      fmt::print(
          "{} returned a tensor through a map the contract refuses (section 3, or a scale section 1.2 refuses): it "
          "accepts an invalid map\n",
          o.target.empty() ? "the implementation" : o.target);
    }
    if (!o.expected_vs_full.reason.empty()) {
      fmt::print("the expected tensor is not F: {}\n", o.expected_vs_full.reason);
    }
    if (!o.expected_vs_full.harness_defect.empty())
      fmt::print("HARNESS DEFECT: {}\n", o.expected_vs_full.harness_defect);
    if (!misreported.empty()) fmt::print("refusal misreported: {}\n", misreported);
    if (!o.digest_shares_wrong.empty()) fmt::print("digest shares wrong: {}\n", o.digest_shares_wrong);
    if (!args.implementation_given && implementation != args.policy_name) {
      fmt::print("replayed with {}, as the case file records\n", implementation);
    }
    const std::string stated = stated_expectation(c.value(), made.target->is_legacy_model());
    if (!o.matches_expectation) {
      fmt::print("expectation not met: {}\n", o.expectation_message);
    } else if (!stated.empty()) {
      fmt::print("expectation met: {}\n", stated);
    }
  }
  // A crash, hang or garbage answer of an implementation under test is never a pass, nor
  // is a harness whose own expected tensor breaks contract 8.
  bool silently_wrong =
      o.verdict == Outcome::wrong || o.verdict == Outcome::target_fault || !o.expected_vs_full.harness_defect.empty();
  const bool misjudged = !misreported.empty() || !o.digest_shares_wrong.empty();
  std::string backend = args.backend;
  if (backend.empty() && file_json.is_object() && file_json.contains("backend") && file_json["backend"].is_string()) {
    backend = file_json["backend"].get<std::string>();
  }
  bool backend_differs = false;
  if (!backend.empty()) {
    bool usage_error = false;
    backend_differs = backends_differ(c.value(), backend, usage_error);
    if (usage_error) return kExitUsage;
  }
  return silently_wrong || misjudged || backend_differs || !o.matches_expectation ? kExitFound : kExitOk;
}

}  // namespace

void register_repro(CLI::App& app, RunState& state) {
  auto args = std::make_shared<ReproArgs>();
  CLI::App* sub =
      app.add_subcommand("repro", "Replay a case file: refused, exact, or silently wrong (with the difference)");
  sub->add_option("case", args->path, "case file (JSON)")->required();
  CLI::Option* policy = sub->add_option("--policy", args->policy_name,
                                        "conversion policy: strict or legacy (default: the policy or target the "
                                        "case file records, else strict)")
                            ->check(CLI::IsMember({"strict", "legacy"}));
  sub->add_option("--oracle", args->oracle_name, oracle_help())->check(CLI::IsMember(oracle_names()));
  CLI::Option* target = sub->add_option(
      "--target", args->target,
      "implementation under test: strict, legacy, deepspeed or exec:COMMAND (overrides --policy; a case file's "
      "recorded exec: target is never run without it)");
  add_seconds_option(sub, "--target-timeout", args->target_timeout,
                     "seconds an exec target may take per request before it counts as hung (default 10)");
  sub->add_flag("--json", args->json, "print the outcome as one JSON object");
  sub->add_option("--backend", args->backend,
                  "also convert on this backend beside the CPU backend and compare verdict, error and bits: "
                  "device-omp (the device code on OpenMP threads) or cuda (default: the one the case file records)");
  sub->callback([args, policy, target, &state] {
    args->implementation_given = policy->count() > 0 || target->count() > 0;
    state.exit_code = run_repro(*args);
  });
}

}  // namespace shardcheck::cli
