// `shardcheck reduce CASE --out FILE`: a case file reduced while it shows what it shows
// (props::reduce_case): a finding file keeps its signature; any other case keeps how it
// ends under the implementation (its outcome, its refusal's kind, any finding).
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "reports.h"
#include "shardcheck/case.h"
#include "shardcheck/escape.h"
#include "shardcheck/json.h"
#include "shardcheck/properties.h"
#include "shardcheck/reduce.h"

namespace shardcheck::cli {

namespace {

struct ReduceArgs {
  std::string path;
  std::string out;
  std::string policy;
  std::string target;
  std::string backend;
  double target_timeout = 10.0;
  Index max_evaluations = props::kDefaultMaxEvaluations;
};

using props::Shown;

std::string describe(const Shown& shown) {
  if (!shown.signature.empty()) return "the finding " + shown.signature;
  std::string what(outcome_name(shown.category));
  if (shown.refusal) what += std::string(" ") + std::string(kind_name(*shown.refusal));
  return what;
}

// The implementation: the flags', else a built-in one the file records (an exec: command
// named by a file is never run: repro's rule), else strict.
bool eval_options_for(const ReduceArgs& args, const Json& file, props::EvalOptions& eval, std::string& why) {
  std::string chosen = !args.target.empty() ? args.target : args.policy;
  if (chosen.empty()) chosen = props::recorded_target(file);
  if (chosen.rfind("exec:", 0) == 0 && args.target.empty()) {
    why = fmt::format(
        "the case was found with target '{}'; shardcheck does not run a command named by a file: give "
        "it as --target",
        chosen);
    return false;
  }
  if (auto policy = parse_policy(chosen.empty() ? "strict" : chosen)) {
    eval.policy = *policy;
  } else {
    eval.target = chosen;
    eval.target_timeout_seconds = args.target_timeout;
  }
  eval.backend = args.backend;
  if (eval.backend.empty() && file.contains("backend") && file["backend"].is_string()) {
    eval.backend = file["backend"].get<std::string>();
  }
  return true;
}

// The original file with the case's fields replaced by the reduced case's, and a record
// of the reduction.
Json reduced_file(const Json& original, const Case& given, const props::Reduced& reduced) {
  Json out = original;
  const Json before = encode_case(given);
  const Json after = encode_case(reduced.reduced);
  for (const auto& [key, value] : before.items()) {
    if (!after.contains(key)) out.erase(key);
  }
  for (const auto& [key, value] : after.items()) {
    if (key != "name") out[key] = value;
  }
  out["reduced"] =
      Json{{"steps", reduced.steps}, {"evaluations", reduced.evaluations}, {"locally_minimal", reduced.minimal}};
  return out;
}

int run_reduce(const ReduceArgs& args) {
  auto json = read_json_file(args.path);
  if (!json) return kExitUsage;
  auto decoded = decode_case(*json);
  if (!decoded) {
    fmt::print(stderr, "shardcheck reduce: {}: {}\n", args.path, escape::terminal(decoded.error().to_string()));
    return kExitUsage;
  }
  props::EvalOptions eval;
  std::string why;
  if (!eval_options_for(args, *json, eval, why)) {
    fmt::print(stderr, "shardcheck reduce: {}: {}\n", args.path, escape::terminal(why));
    return kExitUsage;
  }
  const Case& given = decoded.value();
  // What the case states it expects is the case's judgement, not what it shows: a finding
  // file's expectation (its judge's) would judge every edit against the original. Reduced
  // without them; the file keeps them (a recorded output tensor excepted: it was the
  // original's).
  Case work = given;
  work.expect.reset();
  work.expect_error.reset();
  work.accept_errors.clear();
  work.legacy_expect.reset();
  work.legacy_output.reset();
  const Shown target = props::shown_by(work, eval);
  const std::string recorded =
      json->contains("signature") && (*json)["signature"].is_string() ? (*json)["signature"].get<std::string>() : "";
  if (!recorded.empty() && target.signature != recorded) {
    fmt::print(stderr, "shardcheck reduce: {} does not show its finding {} when replayed (it shows {})\n", args.path,
               escape::terminal(recorded), escape::terminal(describe(target)));
    return kExitUsage;
  }
  props::ReduceOptions options;
  options.max_evaluations = args.max_evaluations;
  props::Reduced reduced = props::reduce_case(work, props::keeps_what_it_shows(target, eval), options);
  if (!reduced.shows) {
    fmt::print(stderr, "shardcheck reduce: {} does not show {} when replayed: nothing to keep while reducing\n",
               args.path, escape::terminal(describe(target)));
    return kExitUsage;
  }
  reduced.reduced.expect = given.expect;
  reduced.reduced.expect_error = given.expect_error;
  reduced.reduced.accept_errors = given.accept_errors;
  reduced.reduced.legacy_expect = given.legacy_expect;
  if (std::string error = write_report_file(args.out, reduced_file(*json, given, reduced).dump(2) + "\n");
      !error.empty()) {
    fmt::print(stderr, "shardcheck reduce: {}\n", error);
    return kExitIncomplete;
  }
  fmt::print(
      "reduced {} keeping {}: {} edits in {} evaluations, {}; written to {}\n", escape::terminal(args.path),
      escape::terminal(describe(target)), reduced.steps, reduced.evaluations,
      reduced.minimal ? "locally minimal (no single edit keeps it)" : "not minimal yet (--max-evaluations was reached)",
      escape::terminal(args.out));
  return kExitOk;
}

}  // namespace

void register_reduce(CLI::App& app, RunState& state) {
  auto args = std::make_shared<ReduceArgs>();
  CLI::App* sub = app.add_subcommand("reduce", "Reduce a case file while it shows the same finding or verdict");
  sub->add_option("case", args->path, "case file (JSON), a finding file included")->required();
  sub->add_option("--out", args->out, "where the reduced case file is written")->required();
  sub->add_option("--policy", args->policy, "strict or legacy (default: what the case file records, else strict)")
      ->check(CLI::IsMember({"strict", "legacy"}));
  sub->add_option("--target", args->target,
                  "implementation under test: strict, legacy, a named target or exec:COMMAND (overrides --policy)");
  sub->add_option("--backend", args->backend, "a backend run beside the CPU backend (default: the case file's)");
  add_seconds_option(sub, "--target-timeout", args->target_timeout,
                     "seconds an exec target may take per request before it counts as hung (default 10)");
  add_int_option(sub, "--max-evaluations", args->max_evaluations, Index{1}, Index{1} << 30,
                 fmt::format("replays of edited cases at most (default {})", props::kDefaultMaxEvaluations));
  add_max_input_bytes_option(sub);
  sub->callback([args, &state] { state.exit_code = run_reduce(*args); });
}

}  // namespace shardcheck::cli
