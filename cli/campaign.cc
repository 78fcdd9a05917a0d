// `shardcheck campaign`: generated cases through the oracle, with progress, a table,
// report.json and one minimised case file per finding, kept on disk as the campaign
// goes; stops on SIGINT/SIGTERM at a case boundary and resumes from its checkpoint.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "outputs.h"
#include "reports.h"
#include "shardcheck/campaign.h"
#include "shardcheck/escape.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/backends.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck::cli {

namespace {

using namespace campaign::option_traits;

// The command line's value of an option of campaign_options.def by the row's type:
// numbers and seconds are optional (unset: Options keeps its default), flags and texts
// plain; a row registered by hand (kCommandLineByHand) keeps its text in CampaignArgs.
template <class T, bool by_hand>
struct Arg {
  using type = std::optional<T>;
};
template <class T>
struct Arg<std::optional<T>, false> {
  using type = std::optional<T>;
};
template <>
struct Arg<bool, false> {
  using type = bool;
};
template <>
struct Arg<std::string, false> {
  using type = std::string;
};
template <class T>
struct Arg<T, true> {
  using type = std::monostate;
};
// (Not spelled Arg<...>::type in the rows' macros, where `type` is a column.)
template <class T, bool by_hand>
using ArgOf = typename Arg<T, by_hand>::type;
template <class A, class T>
A initial_arg(const T& default_value) {
  if constexpr (std::is_same_v<A, bool> || std::is_same_v<A, std::string>) return A(default_value);
  else return A{};
}

struct CampaignArgs {
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  ArgOf<type, ((traits)&kCommandLineByHand) != 0> key =                                      \
      initial_arg<ArgOf<type, ((traits)&kCommandLineByHand) != 0>>(default_value);
#define SHARDCHECK_CAMPAIGN_FLAG(key, type, default_value, flag, help, traits) type key = default_value;
#include "shardcheck/campaign_options.def"
  // The rows registered by hand, as given.
  std::string policy_text{policy_name(Policy::strict)};
  std::string oracle_text{oracles::oracle_kind_name(oracles::OracleKind::truth)};
  std::string shard_text = "0/1";
  std::string op_text;  // "" (rebuild, extract or both, as always) or one operation's name
  // Options that define the campaign, so that --resume refuses them: name -> given.
  std::vector<std::pair<std::string, CLI::Option*>> defining;
};

// A row's value from the command line into Options, when given (a flag or a text: always).
template <class T, class Field>
void copy_given(const std::optional<T>& given, Field& field) {
  if (given) field = *given;
}
void copy_given(bool given, bool& field) { field = given; }
void copy_given(const std::string& given, std::string& field) { field = given; }
template <class Field>
void copy_given(std::monostate, Field&) {}

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

// --- stop requests ------------------------------------------------------------------
// SIGTERM (batch schedulers, CI time-outs) and SIGINT stop at the next case boundary;
// a second SIGINT stops at once. SIGINT stays ignored when the campaign was started
// with it ignored (a background job of a non-interactive shell), as is customary.

std::atomic<int> g_stop{0};
std::atomic<int> g_interrupts{0};
// The first stop signal: a campaign it stopped before the end exits 128 + it.
std::atomic<int> g_signal{0};

extern "C" void on_stop_signal(int signal) {
  int none = 0;
  g_signal.compare_exchange_strong(none, signal);
  int wanted = campaign::kStopGraceful;
  if (signal == SIGINT && g_interrupts.fetch_add(1) >= 1) wanted = campaign::kStopImmediate;
  int current = g_stop.load();
  while (current < wanted && !g_stop.compare_exchange_weak(current, wanted)) {
  }
}

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  struct sigaction previous {};
  if (sigaction(SIGINT, nullptr, &previous) == 0 && previous.sa_handler != SIG_IGN) {
    sigaction(SIGINT, &action, nullptr);
  }
}

// stdout (findings as they come) and stderr (progress) share a terminal line.
std::mutex g_print_mutex;

class ProgressPrinter {
 public:
  ProgressPrinter(std::optional<Index> total, std::optional<double> seconds, Index already_done, double already_seconds,
                  bool quiet)
      : total_(total),
        seconds_(seconds),
        base_(already_done),
        base_seconds_(already_seconds),
        quiet_(quiet),
        tty_(isatty(STDERR_FILENO) == 1),
        start_(std::chrono::steady_clock::now()) {}

  void operator()(Index done) {
    if (g_stop.load() != 0 && !stop_announced_) {
      stop_announced_ = true;
      std::lock_guard lock(g_print_mutex);
      clear_line();
      std::fprintf(stderr, "shardcheck campaign: stopping after the cases running now%s\n",
                   g_interrupts.load() == 1 ? " (Ctrl-C again to stop at once)" : "");
    }
    if (quiet_) return;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (!tty_ && elapsed - last_line_ < 5.0) return;  // a line every few seconds in logs
    last_line_ = elapsed;
    const double rate = elapsed > 0 ? (done - base_) / elapsed : 0.0;
    double fraction = 0.0;
    if (total_ && *total_ > 0)
      fraction = static_cast<double>(done) / *total_;
    else if (seconds_ && *seconds_ > 0)
      fraction = (base_seconds_ + elapsed) / *seconds_;
    fraction = std::min(1.0, fraction);
    const double left =
        total_ ? (rate > 0 ? (*total_ - done) / rate : 0.0) : (seconds_ ? *seconds_ - base_seconds_ - elapsed : 0.0);
    std::lock_guard lock(g_print_mutex);
    if (tty_) {
      constexpr int kWidth = 30;
      const int filled = static_cast<int>(fraction * kWidth);
      std::fprintf(stderr, "\r[%s%s] %3.0f%% %lld cases %.0f/s ETA %.0fs ", std::string(filled, '#').c_str(),
                   std::string(kWidth - filled, '.').c_str(), fraction * 100, static_cast<long long>(done), rate,
                   std::max(0.0, left));
      on_line_ = true;
    } else {
      std::fprintf(stderr, "progress: %lld cases, %.0f cases/s, %.0f%%, ETA %.0f s\n", static_cast<long long>(done),
                   rate, fraction * 100, std::max(0.0, left));
    }
    std::fflush(stderr);
  }

  // Before another line: the progress bar's line is cleared (call with g_print_mutex held).
  void clear_line() {
    if (on_line_) std::fprintf(stderr, "\r\033[K");
    on_line_ = false;
  }

  void finish() {
    std::lock_guard lock(g_print_mutex);
    clear_line();
  }

 private:
  std::optional<Index> total_;
  std::optional<double> seconds_;
  Index base_;
  double base_seconds_;
  bool quiet_;
  bool tty_;
  std::chrono::steady_clock::time_point start_;
  double last_line_ = -1e9;
  bool on_line_ = false;
  bool stop_announced_ = false;
};

// The options of a new campaign from the command line.
int options_from_args(const CampaignArgs& args, campaign::Options& options) {
  // The rows that decide the cases (campaign_options.def), but those copied by hand below.
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  if (((traits)&kChangesCases) && !((traits) & (kCopiedByHand | kCommandLineByHand))) copy_given(args.key, options.field);
#include "shardcheck/campaign_options.def"
  options.seed = args.seed ? *args.seed : std::random_device{}();
  if (args.requested_cases)
    options.cases = *args.requested_cases;
  else
    options.time_seconds = args.time_seconds ? *args.time_seconds : 60.0;
  if (args.requested_cases && args.time_seconds) options.time_seconds = *args.time_seconds;
  if (!parse_shard(args.shard_text, options.shard_index, options.shard_count)) {
    std::fprintf(stderr, "shardcheck campaign: --shard wants I/N with 0 <= I < N, got '%s'\n", args.shard_text.c_str());
    return kExitUsage;
  }
  auto policy = parse_policy(args.policy_text);
  if (!policy) {
    std::fprintf(stderr, "shardcheck campaign: unknown policy '%s' (strict or legacy)\n", args.policy_text.c_str());
    return kExitUsage;
  }
  options.eval.policy = *policy;
  if (!args.target.empty()) {
    if (auto builtin = parse_policy(args.target)) {
      options.eval.policy = *builtin;
    } else {
      options.eval.target = args.target;
      if (args.target_timeout) options.eval.target_timeout_seconds = *args.target_timeout;
    }
  }
  if (auto oracle = oracles::parse_oracle_kind(args.oracle_text)) {
    options.eval.oracle = *oracle;
  } else {
    std::fprintf(stderr, "shardcheck campaign: unknown oracle '%s' (%s)\n", args.oracle_text.c_str(),
                 oracles::oracle_choices().c_str());
    return kExitUsage;
  }
  if (!args.op_text.empty()) {
    options.generate.op = parse_op(args.op_text);
    if (!options.generate.op) {
      std::fprintf(stderr,
                   "shardcheck campaign: --op takes rebuild, extract or reshard (without it, cases rebuild, "
                   "extract or both), got '%s'\n",
                   escape::terminal(args.op_text).c_str());
      return kExitUsage;
    }
  }
  if (!args.backend.empty()) {
    if (!oracles::backend_present(args.backend)) {
      std::fprintf(stderr, "shardcheck campaign: backend '%s' is not present here (this build knows: %s)\n",
                   args.backend.c_str(), fmt::format("{}", fmt::join(oracles::backend_names(), ", ")).c_str());
      return kExitUsage;
    }
    options.eval.backend = args.backend;
  }
  // A share of every default campaign runs the device code beside the CPU backend.
  if (device_omp_compiled()) options.share_backend = "device-omp";
  if (options.generate.op == Op::reshard) {
    // Reshard pairs have no large variant, and the protocol's loopback serves no reshard;
    // the digest share records digests in both maps of a pair, and the plan verifies them.
    options.large_share = 0;
    options.loopback_share = 0;
  }
  options.isolate = true;
  return kExitOk;
}

// The options of a stopped campaign, from DIR/checkpoint.json.
int options_from_checkpoint(const CampaignArgs& args, campaign::Checkpoint& checkpoint) {
  for (const auto& [name, option] : args.defining) {
    if (option->count() > 0) {
      std::fprintf(stderr, "shardcheck campaign: %s cannot be given with --resume (the checkpoint holds it)\n",
                   name.c_str());
      return kExitUsage;
    }
  }
  const std::string path = (std::filesystem::path(args.resume) / "checkpoint.json").string();
  const FileText file = read_file(path);
  if (!file.text) {
    std::fprintf(stderr, "shardcheck campaign: %s\n", file.error.c_str());
    return kExitUsage;
  }
  auto json = parse_json(*file.text);
  Result<campaign::Checkpoint> parsed = json ? campaign::checkpoint_from_json(json.value()) : json.error();
  if (!parsed) {
    const std::string error = json ? parsed.error().sentence : parsed.error().to_string();
    std::fprintf(stderr, "shardcheck campaign: cannot resume from %s: %s\n", path.c_str(), error.c_str());
    return kExitUsage;
  }
  checkpoint = std::move(parsed).value();
  return kExitOk;
}

// The command that continues the campaign in `out` (or rewrites its outputs, for a
// finished one), with the report files this run was asked for.
std::string resume_command(const std::filesystem::path& out, const ReportFiles& reports) {
  std::string command = "shardcheck campaign --resume " + oracles::shell_word(out.string());
  if (!reports.junit.empty()) command += " --junit " + oracles::shell_word(reports.junit);
  if (!reports.markdown.empty()) command += " --markdown " + oracles::shell_word(reports.markdown);
  return command;
}

// What a campaign found, for its verdict line; empty when nothing.
std::string found_text(const campaign::Report& report) {
  std::vector<std::string> what;
  if (!report.findings.empty()) what.push_back(fmt::format("{} finding signatures", report.findings.size()));
  if (report.total.wrong > 0) what.push_back(fmt::format("{} silently wrong cases", report.total.wrong));
  if (report.options.eval.strict_layout && report.total.valid_but_different > 0) {
    what.push_back(fmt::format("{} valid-but-different cases (--strict-layout)", report.total.valid_but_different));
  }
  return fmt::format("{}", fmt::join(what, ", "));
}

// "N of M cases", or "N cases of a S s budget" for a time budget.
std::string progress_text(const campaign::Report& report) {
  const campaign::Options& o = report.options;
  if (o.cases) return fmt::format("{} of {} cases", report.cases, *o.cases);
  return fmt::format("{} cases of a {:.0f} s budget", report.cases, o.time_seconds.value_or(0.0));
}

// The verdict of a campaign whose outputs are not all on disk (exit 3): what could not be
// written, what the campaign found, and how to write them again.
std::string incomplete_outputs_line(const campaign::Report& report, const std::filesystem::path& out,
                                    const std::vector<campaign::OutputError>& unwritten, const ReportFiles& reports) {
  const campaign::OutputError& first = unwritten.front();
  const std::string others =
      unwritten.size() > 1 ? fmt::format(" (and {} other files)", unwritten.size() - 1) : std::string();
  const std::string found = found_text(report);
  std::error_code ec;
  // Resuming a campaign rewrites its outputs, a finished one's too; without any
  // checkpoint on disk there is nothing to resume from.
  const std::string again = std::filesystem::exists(out / "checkpoint.json", ec)
                                ? "write them again with: " + resume_command(out, reports)
                                : "run the campaign again with --overwrite";
  return fmt::format(
      "verdict: INCOMPLETE, exit {}: the outputs are incomplete: {} could not be written: {}{}; the campaign found {} "
      "in {} cases; once there is room, {}\n",
      kExitIncomplete, first.path.string(), first.why, others, found.empty() ? "nothing" : found, report.cases, again);
}

// The last line of a campaign: its verdict and what its exit code means. `signal`: the
// signal that stopped it before the end, or 0.
std::string verdict_line(const campaign::Report& report, const std::filesystem::path& out,
                         const std::vector<campaign::OutputError>& unwritten, int signal, const ReportFiles& reports) {
  if (!unwritten.empty()) return incomplete_outputs_line(report, out, unwritten, reports);
  const std::string found = found_text(report);
  if (signal != 0) {
    return fmt::format("verdict: INCOMPLETE, exit {}: stopped by {} after {}{}; continue with: {}\n",
                       kExitSignalBase + signal, signal == SIGINT ? "SIGINT" : "SIGTERM", progress_text(report),
                       found.empty() ? "" : " (found so far: " + found + ")", resume_command(out, reports));
  }
  const std::string ran =
      report.complete ? fmt::format("{} cases", report.cases) : fmt::format("{} cases (stopped early)", report.cases);
  if (!report.failed()) {
    return fmt::format("verdict: PASS, exit 0: nothing silently wrong and no finding in {}\n", ran);
  }
  return fmt::format("verdict: FAIL, exit 1: {} in {}; replay one with: shardcheck repro {}/findings/FILE\n", found,
                     ran, out.string());
}

// The options of this run: a new campaign's from the command line, or a stopped one's
// from its checkpoint, read under the lock of its folder (no other run writes it then);
// and how this run executes (jobs, isolation, limits, test hooks).
int campaign_options(const CampaignArgs& args, OutDirLock& lock, campaign::Checkpoint& checkpoint,
                     campaign::Options& options) {
  if (!args.resume.empty()) {
    std::error_code ec;
    if (std::filesystem::is_directory(args.resume, ec)) {
      if (std::string held = lock.acquire(args.resume, "wait for it to end"); !held.empty()) {
        std::fprintf(stderr, "shardcheck campaign: %s\n", held.c_str());
        return kExitUsage;
      }
    }
    if (int code = options_from_checkpoint(args, checkpoint); code != kExitOk) return code;
    options = checkpoint.report.options;
  } else if (int code = options_from_args(args, options); code != kExitOk) {
    return code;
  }
  // The rows of how this run executes (campaign_options.def), but those copied by hand below.
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  if (!((traits) & (kChangesCases | kCopiedByHand | kCommandLineByHand))) copy_given(args.key, options.field);
#include "shardcheck/campaign_options.def"
  if (args.jobs.value_or(0) > 0)
    options.jobs = *args.jobs;
  else if (args.resume.empty())
    options.jobs = std::max(1u, std::thread::hardware_concurrency());
  if (args.isolate) options.isolate = true;
  if (args.no_isolate) options.isolate = false;
  if (args.case_memory_limit) options.case_memory_limit = *args.case_memory_limit << 20;  // MiB
  // The loopback target: this very program, serving the strict policy over the protocol
  // (a share of the cases, Options::loopback_share; not with a target of the user's).
  if (options.eval.target.empty() && options.loopback_share > 0) {
    std::error_code self_error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", self_error);
    if (!self_error) options.loopback_target = "exec:exec " + oracles::shell_word(self.string()) + " serve-protocol";
  }
  return kExitOk;
}

// Started once here (and stopped again before any worker starts) so that a target that
// cannot run is a usage error, not a finding per case; each worker process or thread
// then starts its own.
int probe_target(const campaign::Options& options) {
  if (options.eval.target.empty()) return kExitOk;
  oracles::TargetOptions target_options;
  target_options.timeout_seconds = options.eval.target_timeout_seconds;
  auto probe = oracles::make_target(options.eval.target, target_options);
  if (!probe.target) {
    std::fprintf(stderr, "shardcheck campaign: %s\n", probe.error.c_str());
    return kExitUsage;
  }
  // A mixed campaign asks a target that serves one operation only that one (the others
  // count as unsupported); one that names an operation the target lacks would judge nothing.
  if (options.generate.op && !probe.target->supports(*options.generate.op)) {
    std::fprintf(stderr, "shardcheck campaign: target %s does not implement %s\n",
                 escape::terminal(options.eval.target).c_str(), std::string(op_name(*options.generate.op)).c_str());
    return kExitUsage;
  }
  return kExitOk;
}

// Before any case runs: the report files can be written, and `out` is this run's alone,
// holds no other campaign's outputs (a resumed one: none its checkpoint does not record)
// and takes files.
int prepare_outputs(const CampaignArgs& args, const std::filesystem::path& out, const campaign::Checkpoint& checkpoint,
                    OutDirLock& lock) {
  const Reuse reuse = !args.resume.empty() ? Reuse::resume : args.overwrite ? Reuse::overwrite : Reuse::refuse;
  std::string error = probe_report_files(args.reports);
  if (error.empty()) error = prepare_out_dir(out, reuse, reuse == Reuse::resume ? "folder" : "--out", lock);
  if (error.empty() && reuse == Reuse::resume) {
    std::set<std::string> recorded;
    for (const auto& finding : checkpoint.report.findings) {
      if (finding.has_case) recorded.insert(campaign::finding_file_name(finding.signature));
    }
    error = remove_unrecorded_findings(out, recorded);
  }
  if (error.empty()) return kExitOk;
  std::fprintf(stderr, "shardcheck campaign: %s\n", error.c_str());
  return kExitUsage;
}

void print_header(const CampaignArgs& args, const campaign::Options& options, const std::filesystem::path& out,
                  Index already_done) {
  // An unsharded run (1/1) names no shard.
  const std::string shard =
      options.shard_count > 1 ? fmt::format(", shard {}/{}", options.shard_index, options.shard_count) : "";
  std::fprintf(
      stderr, "shardcheck campaign: %sseed %llu, %s, %s %s, oracle %s, %d jobs%s%s%s\n",
      args.resume.empty() ? "" : fmt::format("resuming {} ({} cases done), ", out.string(), already_done).c_str(),
      static_cast<unsigned long long>(options.seed),
      options.cases ? fmt::format("{} cases", *options.cases).c_str()
                    : fmt::format("{:.0f} s", *options.time_seconds).c_str(),
      options.eval.target.empty() ? "policy" : "target",
      options.eval.target.empty() ? std::string(policy_name(options.eval.policy)).c_str() : options.eval.target.c_str(),
      std::string(oracles::oracle_kind_name(options.eval.oracle)).c_str(), options.jobs,
      options.isolate ? " (isolated)" : "", shard.c_str(), options.generate.record_digest ? ", digests" : "");
}

bool unwritten_has(const std::vector<campaign::OutputError>& unwritten, const std::filesystem::path& path) {
  return std::any_of(unwritten.begin(), unwritten.end(),
                     [&](const campaign::OutputError& e) { return e.path == path; });
}

// After the table: the findings not announced yet, a note on valid-but-different cases,
// where the report is.
void print_summary(const CampaignArgs& args, const campaign::Report& report, const std::filesystem::path& out,
                   const std::set<std::string>& announced) {
  for (const auto& finding : report.findings) {
    if (!args.verbose && announced.count(finding.signature) > 0) continue;
    const auto path = out / "findings" / campaign::finding_file_name(finding.signature);
    const std::string file = !finding.has_case                           ? "(no case file)"
                             : unwritten_has(report.output_errors, path) ? "(its case file could not be written)"
                                                                         : path.string();
    std::printf("finding: %s (%lld cases) -> %s\n", escape::terminal(finding.signature).c_str(),
                static_cast<long long>(finding.occurrences), escape::terminal(file).c_str());
  }
  const Index different = report.total.valid_but_different;
  if (different > 0 && !report.options.eval.strict_layout) {
    std::printf(
        "note: %lld valid-but-different cases do not fail the run: their maps pass every check, so no map check can "
        "see the difference (contract section 10); content digests close it for rebuild and for a reshard's source "
        "side (--digest), "
        "--strict-layout makes them findings\n",
        static_cast<long long>(different));
  }
  if (!unwritten_has(report.output_errors, out / "report.json")) {
    std::printf("report: %s\n", (out / "report.json").c_str());
  }
}

// The end of a campaign: table, findings, reports, verdict; returns the exit code.
int conclude(const CampaignArgs& args, const campaign::Report& report, const std::filesystem::path& out,
             const std::set<std::string>& announced) {
  // --quiet: the verdict line and errors alone (the table is table.txt's).
  if (!args.quiet) {
    std::fputs(campaign::format_table(report).c_str(), stdout);
    print_summary(args, report, out, announced);
  }
  std::vector<campaign::OutputError> unwritten = report.output_errors;
  for (auto& error : write_campaign_reports(report, out, args.reports, "campaign")) unwritten.push_back(error);
  // A stop that came when every case had run stopped nothing.
  const int signal = report.complete ? 0 : g_signal.load();
  if (!report.complete) {
    std::fprintf(stderr, "shardcheck campaign: stopped after %lld cases; continue with: %s\n",
                 static_cast<long long>(report.cases), resume_command(out, args.reports).c_str());
  }
  if (!report.ledger_error.empty()) {
    // The engine lost or doubled cases: its table is not the campaign it claims to be.
    std::printf("verdict: ERROR, exit 2: the campaign's cases are not exactly the cases it ran: %s\n",
                report.ledger_error.c_str());
    std::fprintf(stderr, "shardcheck campaign: the ledger does not add up: %s\n", report.ledger_error.c_str());
    return kExitUsage;
  }
  std::fputs(verdict_line(report, out, unwritten, signal, args.reports).c_str(), stdout);
  if (!unwritten.empty()) return kExitIncomplete;
  if (signal != 0) return kExitSignalBase + signal;
  return report.failed() ? kExitFound : kExitOk;
}

int run_campaign(const CampaignArgs& args) {
  if (args.isolate && args.no_isolate) {
    std::fprintf(stderr, "shardcheck campaign: --isolate and --no-isolate exclude each other\n");
    return kExitUsage;
  }
  if (args.overwrite && !args.resume.empty()) {
    std::fprintf(stderr,
                 "shardcheck campaign: --overwrite starts a new campaign and cannot be given with --resume, which "
                 "continues one\n");
    return kExitUsage;
  }
  OutDirLock lock;
  campaign::Checkpoint checkpoint;
  campaign::Options options;
  if (int code = campaign_options(args, lock, checkpoint, options); code != kExitOk) return code;
  if (int code = probe_target(options); code != kExitOk) return code;
  const std::filesystem::path out(args.resume.empty() ? args.out : args.resume);
  if (int code = prepare_outputs(args, out, checkpoint, lock); code != kExitOk) return code;
  // Before the header line: a stop signal from then on is this campaign's to honour.
  install_stop_handlers();
  const Index already_done = args.resume.empty() ? 0 : checkpoint.report.cases;
  print_header(args, options, out, already_done);
  ProgressPrinter printer(options.cases, options.time_seconds, already_done,
                          args.resume.empty() ? 0.0 : checkpoint.report.seconds, args.quiet);
  campaign::Control control;
  control.out = out;
  control.progress = [&](Index done) { printer(done); };
  control.stop = &g_stop;
  control.resume = args.resume.empty() ? nullptr : &checkpoint;
  // Signatures this run has printed a line for: the end lists only the others (found by
  // the run this one resumes), so each finding shows once (all again with --verbose).
  std::set<std::string> announced;
  control.on_new_finding = [&](const campaign::FindingRecord& finding, const std::filesystem::path& file) {
    std::lock_guard lock(g_print_mutex);
    announced.insert(finding.signature);
    if (args.quiet) return;  // the verdict line counts them; report.json and findings/ list them
    printer.clear_line();
    std::printf("new finding: %s (case %lld) -> %s\n", escape::terminal(finding.signature).c_str(),
                static_cast<long long>(finding.first_case),
                file.empty() ? "(no case file)" : escape::terminal(file.string()).c_str());
    std::fflush(stdout);
  };
  control.on_warning = [&](const std::string& message) {
    std::lock_guard lock(g_print_mutex);
    printer.clear_line();
    std::fprintf(stderr, "shardcheck campaign: %s\n", escape::terminal(message).c_str());
  };
  const campaign::Report report = campaign::run(options, control);
  printer.finish();
  return conclude(args, report, out, announced);
}

// A row of campaign_options.def on the command line, by the type of its argument.
CLI::Option* add_row_option(CLI::App* sub, bool& arg, const std::string& flag, Index, Index, const std::string& help) {
  return sub->add_flag(flag, arg, help);
}
CLI::Option* add_row_option(CLI::App* sub, std::string& arg, const std::string& flag, Index, Index,
                            const std::string& help) {
  return sub->add_option(flag, arg, help);
}
CLI::Option* add_row_option(CLI::App* sub, std::optional<std::uint64_t>& arg, const std::string& flag, Index, Index,
                            const std::string& help) {
  return add_uint64_option(sub, flag, arg, help);
}
CLI::Option* add_row_option(CLI::App* sub, std::optional<double>& arg, const std::string& flag, Index, Index,
                            const std::string& help) {
  return add_seconds_option(sub, flag, arg, help);
}
template <class T>
CLI::Option* add_row_option(CLI::App* sub, std::optional<T>& arg, const std::string& flag, Index min, Index max,
                            const std::string& help) {
  return add_int_option(sub, flag, arg, static_cast<T>(min), static_cast<T>(max), help);
}

// Rows registered by hand (add_row_by_hand) have no argument of the row's own.
CLI::Option* add_row_option(CLI::App*, std::monostate&, const std::string&, Index, Index, const std::string&) {
  return nullptr;
}
CLI::Option* add_row_option(CLI::App*, ReportFiles&, const std::string&, Index, Index, const std::string&) {
  return nullptr;
}

// The rows whose command-line spelling is text the row cannot parse (kCommandLineByHand),
// registered in their row's place; nullptr for a row with no flag of its own.
CLI::Option* add_row_by_hand(CLI::App* sub, CampaignArgs& args, std::string_view key) {
  if (key == "policy") return sub->add_option("--policy", args.policy_text, "strict (default) or legacy");
  if (key == "oracle") return sub->add_option("--oracle", args.oracle_text, oracle_help());
  if (key == "shard_index") return sub->add_option("--shard", args.shard_text, "Run part I of N (I/N), tables add up");
  if (key == "op") {
    return sub->add_option("--op", args.op_text,
                           "rebuild or extract: every case asks for that operation alone; reshard: pairs of "
                           "layouts over one shape, either side corrupted, through transfer plans (contract "
                           "section 11); default: rebuild, extract or both");
  }
  if (key == "reports") add_report_options(sub, args.reports);
  return nullptr;  // shard_count (--shard), share_backend and loopback_target (no flag)
}

}  // namespace

void register_campaign(CLI::App& app, RunState& state) {
  auto args = std::make_shared<CampaignArgs>();
  CLI::App* sub = app.add_subcommand("campaign", "Run generated (layout, corruption) cases through the oracle");
  auto add_row = [&](auto& arg, std::string_view key, const std::string& flag, Index min, Index max,
                     const std::string& help, unsigned traits) {
    CLI::Option* option = nullptr;
    if (traits & kCommandLineByHand)
      option = add_row_by_hand(sub, *args, key);
    else if (!flag.empty())
      option = add_row_option(sub, arg, flag, min, max, help);
    if (option == nullptr) return;
    if (traits & kHidden) option->group("");
    if (traits & kChangesCases) args->defining.emplace_back(option->get_name(), option);
  };
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  add_row(args->key, #key, flag, min, max, help, traits);
#define SHARDCHECK_CAMPAIGN_FLAG(key, type, default_value, flag, help, traits) \
  add_row(args->key, #key, flag, 0, 0, help, traits);
#include "shardcheck/campaign_options.def"
  // `campaign merge DIR... --out DIR` (campaign_merge.cc) runs instead of a campaign.
  CLI::App* merge = register_campaign_merge(sub, state);
  sub->callback([args, merge, &state] {
    if (merge->parsed()) return;
    state.exit_code = run_campaign(*args);
  });
}

}  // namespace shardcheck::cli
