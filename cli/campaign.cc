// `shardcheck campaign`: generated cases through the oracle, with progress, a table,
// report.json and one minimised case file per finding.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/campaign.h"
#include "shardcheck/oracles/target.h"

namespace shardcheck::cli {

namespace {

struct CampaignArgs {
  std::optional<std::uint64_t> seed;
  std::optional<Index> cases;
  std::optional<double> time_seconds;
  std::string policy = "strict";
  std::string oracle = "truth";
  std::string target;
  double target_timeout = 10.0;
  int jobs = 0;
  std::string shard = "0/1";
  std::string out = "campaign-out";
  bool strict_layout = false;
  Index max_elements = 256;
  bool quiet = false;
};

std::string slug(std::string_view signature) {
  std::string out;
  for (char ch : signature) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    out += keep ? ch : '-';
  }
  return out.substr(0, 120);
}

// "I/N" with 0 <= I < N.
bool parse_shard(const std::string& text, int& index, int& count) {
  unsigned a = 0, b = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%u/%u%c", &a, &b, &tail) != 2) return false;
  if (b == 0 || a >= b || b > 1000000) return false;
  index = static_cast<int>(a);
  count = static_cast<int>(b);
  return true;
}

class ProgressPrinter {
 public:
  ProgressPrinter(std::optional<Index> total, std::optional<double> seconds, bool quiet)
      : total_(total), seconds_(seconds), quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}

  void operator()(Index done) {
    if (quiet_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (!tty_ && elapsed - last_line_ < 5.0) return;  // a line every few seconds in logs
    last_line_ = elapsed;
    const double rate = elapsed > 0 ? done / elapsed : 0.0;
    double fraction = 0.0;
    if (total_ && *total_ > 0) fraction = static_cast<double>(done) / *total_;
    else if (seconds_ && *seconds_ > 0) fraction = elapsed / *seconds_;
    fraction = std::min(1.0, fraction);
    const double eta = fraction > 0 ? elapsed / fraction - elapsed : 0.0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      std::fprintf(stderr, "\r[%s%s] %3.0f%% %lld cases %.0f/s ETA %.0fs ",
                   std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(),
                   fraction * 100, static_cast<long long>(done), rate, eta);
    } else {
      std::fprintf(stderr, "progress: %lld cases, %.0f cases/s, %.0f%%, ETA %.0f s\n",
                   static_cast<long long>(done), rate, fraction * 100, eta);
    }
    std::fflush(stderr);
  }

  void finish() {
    if (tty_ && !quiet_) std::fprintf(stderr, "\n");
  }

 private:
  std::optional<Index> total_;
  std::optional<double> seconds_;
  bool quiet_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  double last_line_ = -1e9;
};

int run_campaign(const CampaignArgs& args) {
  campaign::Options options;
  options.seed = args.seed ? *args.seed : std::random_device{}();
  if (args.cases) options.cases = *args.cases;
  else options.time_seconds = args.time_seconds ? *args.time_seconds : 60.0;
  if (args.cases && args.time_seconds) options.time_seconds = *args.time_seconds;
  options.jobs = args.jobs > 0 ? args.jobs : std::max(1u, std::thread::hardware_concurrency());
  if (!parse_shard(args.shard, options.shard_index, options.shard_count)) {
    std::fprintf(stderr, "shardcheck campaign: --shard wants I/N with 0 <= I < N, got '%s'\n", args.shard.c_str());
    return kExitUsage;
  }
  auto policy = parse_policy(args.policy);
  if (!policy) {
    std::fprintf(stderr, "shardcheck campaign: unknown policy '%s' (strict or legacy)\n", args.policy.c_str());
    return kExitUsage;
  }
  options.eval.policy = *policy;
  if (!args.target.empty()) {
    if (auto builtin = parse_policy(args.target)) {
      options.eval.policy = *builtin;
    } else {
      // Started once here so that a target that cannot run is a usage error, not a
      // finding per case; each worker thread then starts its own process.
      oracles::TargetOptions target_options;
      target_options.timeout_seconds = args.target_timeout;
      auto probe = oracles::make_target(args.target, target_options);
      if (!probe.target) {
        std::fprintf(stderr, "shardcheck campaign: %s\n", probe.error.c_str());
        return kExitUsage;
      }
      options.eval.target = args.target;
      options.eval.target_timeout_seconds = args.target_timeout;
    }
  }
  if (args.oracle == "truth") options.eval.oracle = oracles::OracleKind::truth;
  else if (args.oracle == "same-map") options.eval.oracle = oracles::OracleKind::same_map;
  else {
    std::fprintf(stderr, "shardcheck campaign: unknown oracle '%s' (truth or same-map)\n", args.oracle.c_str());
    return kExitUsage;
  }
  options.eval.strict_layout = args.strict_layout;
  options.generate.layout.max_elements = args.max_elements;

  std::error_code ec;
  const std::filesystem::path out(args.out);
  std::filesystem::create_directories(out / "findings", ec);
  if (ec) {
    std::fprintf(stderr, "shardcheck campaign: cannot create %s: %s\n", args.out.c_str(), ec.message().c_str());
    return kExitUsage;
  }
  std::fprintf(stderr, "shardcheck campaign: seed %llu, %s, %s %s, oracle %s, %d jobs, shard %d/%d\n",
               static_cast<unsigned long long>(options.seed),
               options.cases ? fmt::format("{} cases", *options.cases).c_str()
                             : fmt::format("{:.0f} s", *options.time_seconds).c_str(),
               options.eval.target.empty() ? "policy" : "target",
               options.eval.target.empty() ? std::string(policy_name(options.eval.policy)).c_str()
                                           : options.eval.target.c_str(),
               args.oracle.c_str(), options.jobs, options.shard_index,
               options.shard_count);
  ProgressPrinter printer(options.cases, options.time_seconds, args.quiet);
  const campaign::Report report = campaign::run(options, [&](Index done) { printer(done); });
  printer.finish();

  std::fputs(campaign::format_table(report).c_str(), stdout);
  for (const auto& finding : report.findings) {
    const auto path = out / "findings" / (slug(finding.signature) + ".json");
    std::ofstream(path) << campaign::finding_case_file(report, finding).dump(2) << "\n";
    std::printf("finding: %s (%lld cases) -> %s\n", finding.signature.c_str(),
                static_cast<long long>(finding.occurrences), path.c_str());
  }
  std::ofstream(out / "report.json") << campaign::report_to_json(report).dump(2) << "\n";
  std::printf("report: %s\n", (out / "report.json").c_str());
  return report.failed() ? kExitFound : kExitOk;
}

}  // namespace

void register_campaign(CLI::App& app, RunState& state) {
  auto args = std::make_shared<CampaignArgs>();
  CLI::App* sub = app.add_subcommand("campaign", "Run generated (layout, corruption) cases through the oracle");
  sub->add_option("--seed", args->seed, "Seed (default: random, printed)");
  auto* cases = sub->add_option("--cases", args->cases, "Number of cases (deterministic)")->check(CLI::PositiveNumber);
  sub->add_option("--time", args->time_seconds, "Time budget in seconds (default 60 without --cases)")
      ->check(CLI::PositiveNumber);
  (void)cases;
  sub->add_option("--policy", args->policy, "strict (default) or legacy");
  sub->add_option("--oracle", args->oracle, "truth (default) or same-map");
  sub->add_option("--target", args->target,
                  "Implementation under test: strict, legacy, deepspeed or exec:COMMAND (overrides --policy)");
  sub->add_option("--target-timeout", args->target_timeout,
                  "Seconds an exec target may take per request before it counts as hung (default 10)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--jobs", args->jobs, "Worker threads (default: all cores)")->check(CLI::NonNegativeNumber);
  sub->add_option("--shard", args->shard, "Run part I of N (I/N), tables add up");
  sub->add_option("--out", args->out, "Directory for report.json and findings/ (default campaign-out)");
  sub->add_flag("--strict-layout", args->strict_layout, "Valid-but-different cases fail the run too");
  sub->add_option("--max-elements", args->max_elements, "Largest numel(F) generated (default 256)")
      ->check(CLI::Range(Index{1}, Index{1} << 20));
  sub->add_flag("--quiet", args->quiet, "No progress output");
  sub->callback([args, &state] { state.exit_code = run_campaign(*args); });
}

}  // namespace shardcheck::cli
