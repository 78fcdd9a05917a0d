// `shardcheck repro CASE.json`: replays a case file through one policy and one oracle
// and says whether the conversion refused, was exact, or was silently wrong, and
// whether that is what the case expects. A finding file records the policy or target
// that found it, and is replayed with it unless told otherwise. `shardcheck repro DIR`
// replays every *.json below DIR (a team's regression corpus) in one run, one line per
// case, and can write the result as JUnit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "reports.h"
#include "shardcheck/escape.h"
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
  std::string target;  // overrides the policy: strict, legacy, a named target (docs/guide/targets.md), exec:COMMAND
  double target_timeout = 10.0;
  bool json = false;
  // A backend to run beside the CPU backend (the backend differential); empty: the one
  // the case file records, if any.
  std::string backend;
  // Whether --policy or --target was given: if neither, the case file's record decides.
  bool implementation_given = false;
  ReportFiles reports;  // --junit (a folder of case files)
};

// Implementations already started, by name: a folder's cases share one process per exec
// target instead of starting one per case.
using Targets = ReplayTargets;

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
std::string implementation_for(const ReproArgs& args, const std::string& path, const Json& file, std::string& refusal) {
  if (args.implementation_given) return args.target.empty() ? args.policy_name : args.target;
  const std::string recorded = props::recorded_target(file);
  if (recorded.empty()) return args.policy_name;
  if (recorded.rfind("exec:", 0) == 0) {
    refusal = fmt::format(
        "{}: the case was found with target '{}'; shardcheck does not run a command named by a file: "
        "give it as --target to replay it, or --policy strict",
        path, recorded);
    return {};
  }
  return recorded;
}

// The backend differential on the case: the CPU backend and `name`, strict conversion,
// on the case's own launch shape. `line` says what it found; true when they differ.
bool backends_differ(const Case& c, const std::string& name, std::string& line, bool& usage_error) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  auto other = oracles::backend_named(name);
  if (!other) {
    line = fmt::format("backend '{}' is not present here (this build knows: {})", name,
                       fmt::join(oracles::backend_names(), ", "));
    usage_error = true;
    return false;
  }
  backends.push_back(std::move(other));
  const oracles::LaunchShape shape = oracles::launch_shape_for(c);
  if (auto difference = oracles::compare_backends(c, backends, shape)) {
    line = fmt::format("backend difference: {}: {}", difference->signature, difference->message);
    return true;
  }
  line = fmt::format("backend {} converts as the CPU backend does (2 threads, tile {})", name, shape.tile);
  return false;
}

// The implementation's target, started on first use; why it cannot start, or empty.
std::string start_target(const ReproArgs& args, const std::string& implementation,
                         std::unique_ptr<oracles::Target>& target) {
  if (target) return {};
  oracles::TargetOptions target_options;
  target_options.timeout_seconds = args.target_timeout;
  auto made = oracles::make_target(implementation, target_options);
  if (!made.target) return made.error;
  target = std::move(made.target);
  return {};
}

// What `repro` says of an outcome after its message: why a wrong tensor or an accepted map
// matters, the harness's own doubts, and whether the case's expectations were met.
void explain_outcome(const ReproArgs& args, const Case& c, const oracles::CaseOutcome& o,
                     const std::string& implementation, bool legacy_model, const std::string& misreported,
                     std::vector<std::string>& lines) {
  auto print = [&](std::string line) { lines.push_back(std::move(line)); };
  const bool digest_ignored =
      std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) { return op.digest_ignored; });
  const bool nan_bits_only = std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) {
    return op.verdict == Outcome::wrong && op.difference && op.difference->nan_bits_only;
  });
  const bool compared = std::any_of(o.ops.begin(), o.ops.end(), [](const oracles::OpOutcome& op) {
    return op.verdict == Outcome::wrong && op.difference.has_value();
  });
  if (oracles::wrong_on_valid_layout(o) && compared && !digest_ignored && !nan_bits_only) {
    print("the map passes every check of spec 3: a valid but different layout");
  }
  if (o.accepted_invalid) {
    print(fmt::format(
        "{} returned a tensor through a map the contract refuses (section 3, or a scale section 1.2 refuses): it "
        "accepts an invalid map",
        o.target.empty() ? "the implementation" : o.target));
  }
  if (!o.expected_vs_full.reason.empty()) {
    print(fmt::format("the expected tensor is not F: {}", o.expected_vs_full.reason));
  }
  if (!o.expected_vs_full.harness_defect.empty())
    print(fmt::format("HARNESS DEFECT: {}", o.expected_vs_full.harness_defect));
  if (!misreported.empty()) print(fmt::format("refusal misreported: {}", misreported));
  if (!o.digest_shares_wrong.empty()) print(fmt::format("digest shares wrong: {}", o.digest_shares_wrong));
  if (!args.implementation_given && implementation != args.policy_name) {
    print(fmt::format("replayed with {}, as the case file records", implementation));
  }
  const std::string stated = stated_expectation(c, legacy_model);
  if (!o.matches_expectation) {
    print(fmt::format("expectation not met: {}", o.expectation_message));
  } else if (!stated.empty() && o.expectation_judged) {
    print(fmt::format("expectation met: {}", stated));
  }
}

// Replays one case file: its exit code, and what it prints (stdout lines; a usage error
// as the one line, with exit 2).
ReplayedCase replay(const ReproArgs& args, const std::string& path, Targets& targets) {
  ReplayedCase result;
  result.path = path;
  auto usage = [&](std::string line) {
    result.exit_code = kExitUsage;
    result.lines.push_back(std::move(line));
    return result;
  };
  auto print = [&](std::string line) { result.lines.push_back(std::move(line)); };
  FileText file = read_file(path);
  if (!file.text) return usage(file.error);
  auto c = decode_case_text(*file.text);
  if (!c) return usage(fmt::format("{}: {}", path, c.error().to_string()));
  std::string refusal;
  auto parsed = parse_json(*file.text);  // decoded already: only its record is read here
  const Json file_json = parsed ? std::move(parsed).value() : Json();
  const std::string implementation = implementation_for(args, path, file_json, refusal);
  if (implementation.empty()) return usage(refusal);
  result.implementation = implementation;
  std::unique_ptr<oracles::Target>& target = targets[implementation];
  if (std::string error = start_target(args, implementation, target); !error.empty()) return usage(error);
  // CLI11 has checked the name against the table.
  const oracles::OracleKind oracle = oracles::parse_oracle_kind(args.oracle_name).value_or(oracles::OracleKind::truth);
  auto outcome = oracles::run_case(c.value(), *target, oracle);
  if (!outcome) return usage(fmt::format("{}: the case cannot be run: {}", path, outcome.error().to_string()));
  const oracles::CaseOutcome& o = outcome.value();
  // A refusal must report what is there (condition 7's values), and the per-rank shares
  // of a verified digest must be the reference model's: the replay of a finding of
  // either kind fails while the defect is there.
  std::string misreported;
  for (const auto& op : o.ops) {
    if (!op.misreported.empty() && misreported.empty()) misreported = op.misreported;
  }
  if (args.json) {
    // ensure_ascii: the outcome carries an implementation's own words; none reach a terminal raw.
    print(oracles::outcome_to_json(c.value(), o).dump(-1, ' ', true));
  } else {
    print(o.message);
    explain_outcome(args, c.value(), o, implementation, target->is_legacy_model(), misreported, result.lines);
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
    std::string line;
    backend_differs = backends_differ(c.value(), backend, line, usage_error);
    if (usage_error) return usage(line);
    print(line);
  }
  result.exit_code = silently_wrong || misjudged || backend_differs || !o.matches_expectation ? kExitFound : kExitOk;
  return result;
}

int run_repro_file(const ReproArgs& args) {
  Targets targets;
  const auto start = std::chrono::steady_clock::now();
  ReplayedCase replayed = replay(args, args.path, targets);
  replayed.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (replayed.exit_code == kExitUsage) {
    fmt::print(stderr, "shardcheck: {}\n", escape::terminal(replayed.lines.front(), escape::Newlines::keep));
  } else {
    // --json lines are JSON written with every non-ASCII byte escaped: escaping them again
    // for the terminal would break them.
    for (const auto& line : replayed.lines) {
      fmt::print("{}\n", args.json ? line : escape::terminal(line, escape::Newlines::keep));
    }
  }
  if (!args.reports.junit.empty()) {
    if (std::string error = write_report_file(args.reports.junit, repro_junit(args.path, {replayed})); !error.empty()) {
      fmt::print(stderr, "shardcheck repro: {}\n", error);
      return kExitUsage;
    }
  }
  return replayed.exit_code;
}

// Every *.json below `folder`, in name order (hidden files and folders skipped).
std::vector<std::string> case_files(const std::filesystem::path& folder, std::string& error) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(folder, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name.front() == '.') {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".json") files.push_back(it->path().string());
  }
  if (ec) error = fmt::format("cannot read {}: {}", folder.string(), ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

// `repro DIR`: one line per case ("PASS", "FAIL" or "ERROR", the file, its outcome),
// then a summary; exit 2 if any case could not be replayed, else 1 if any failed.
int run_repro_folder(const ReproArgs& args) {
  std::string error;
  const std::vector<std::string> files = case_files(args.path, error);
  if (!error.empty()) {
    fmt::print(stderr, "shardcheck repro: {}\n", error);
    return kExitUsage;
  }
  if (files.empty()) {
    fmt::print(stderr, "shardcheck repro: {} holds no case files (*.json)\n", args.path);
    return kExitUsage;
  }
  Targets targets;
  std::vector<ReplayedCase> replayed;
  int failed = 0;
  int errors = 0;
  for (const auto& file : files) {
    const auto start = std::chrono::steady_clock::now();
    ReplayedCase one = replay(args, file, targets);
    one.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const char* status = one.exit_code == kExitOk ? "PASS" : one.exit_code == kExitFound ? "FAIL" : "ERROR";
    failed += one.exit_code == kExitFound;
    errors += one.exit_code == kExitUsage;
    const std::string first = one.lines.empty() ? "" : one.lines.front();
    fmt::print("{} {}: {}\n", status, escape::terminal(file), args.json ? first : escape::terminal(first));
    if (args.json) {
      for (std::size_t i = 1; i < one.lines.size(); ++i) {
        fmt::print("{}\n", args.json ? one.lines[i] : escape::terminal(one.lines[i], escape::Newlines::keep));
      }
    }
    replayed.push_back(std::move(one));
  }
  const std::size_t passed = files.size() - static_cast<std::size_t>(failed + errors);
  fmt::print("{} case files: {} passed, {} failed, {} could not be replayed\n", files.size(), passed, failed, errors);
  if (!args.reports.junit.empty()) {
    if (std::string werror = write_report_file(args.reports.junit, repro_junit(args.path, replayed)); !werror.empty()) {
      fmt::print(stderr, "shardcheck repro: {}\n", werror);
      return kExitUsage;
    }
  }
  return errors > 0 ? kExitUsage : failed > 0 ? kExitFound : kExitOk;
}

int run_repro(const ReproArgs& args) {
  std::error_code ec;
  if (std::filesystem::is_directory(args.path, ec)) return run_repro_folder(args);
  return run_repro_file(args);
}

}  // namespace

ReplayedCase replay_case_file(const std::string& path, const std::string& implementation, double target_timeout,
                              ReplayTargets& targets) {
  ReproArgs args;
  args.path = path;
  args.target = implementation;
  args.implementation_given = !implementation.empty();
  args.target_timeout = target_timeout;
  return replay(args, path, targets);
}

void register_repro(CLI::App& app, RunState& state) {
  auto args = std::make_shared<ReproArgs>();
  CLI::App* sub =
      app.add_subcommand("repro", "Replay a case file: refused, exact, or silently wrong (with the difference)");
  sub->add_option("case", args->path, "case file (JSON), or a folder: every *.json below it")->required();
  CLI::Option* policy = sub->add_option("--policy", args->policy_name,
                                        "conversion policy: strict or legacy (default: the policy or target the "
                                        "case file records, else strict)")
                            ->check(CLI::IsMember({"strict", "legacy"}));
  sub->add_option("--oracle", args->oracle_name, oracle_help())->check(CLI::IsMember(oracle_names()));
  CLI::Option* target =
      sub->add_option("--target", args->target,
                      "implementation under test: strict, legacy, deepspeed, deepspeed-restore, deepspeed-convert, "
                      "dcp, megatron or exec:COMMAND (overrides --policy; a case file's "
                      "recorded exec: target is never run without it)");
  add_seconds_option(sub, "--target-timeout", args->target_timeout,
                     "seconds an exec target may take per request before it counts as hung (default 10)");
  sub->add_flag("--json", args->json, "print the outcome as one JSON object (a folder: one per case)");
  add_max_input_bytes_option(sub);
  add_report_options(sub, args->reports, /*markdown=*/false);
  sub->add_option("--backend", args->backend,
                  "also convert on this backend beside the CPU backend and compare verdict, error and bits: "
                  "device-omp (the device code on OpenMP threads) or cuda (default: the one the case file records)");
  sub->callback([args, policy, target, &state] {
    args->implementation_given = policy->count() > 0 || target->count() > 0;
    state.exit_code = run_repro(*args);
  });
}

}  // namespace shardcheck::cli
