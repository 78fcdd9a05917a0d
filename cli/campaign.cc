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
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
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

struct CampaignArgs {
  std::optional<std::uint64_t> seed;
  std::optional<Index> cases;
  std::optional<double> time_seconds;
  std::string policy = "strict";
  std::string oracle{oracles::oracle_kind_name(oracles::OracleKind::truth)};
  std::string target;
  double target_timeout = 10.0;
  int jobs = 0;
  std::string shard = "0/1";
  std::string out = "campaign-out";
  bool strict_layout = false;
  bool digest = false;
  std::string op;  // "" (rebuild and extract, as always) or "reshard"
  Index max_elements = 256;
  bool quiet = false;
  bool verbose = false;  // every finding again at the end, with its count of cases
  std::string resume;
  bool overwrite = false;  // a used --out: its outputs are removed first
  bool isolate = false;
  bool no_isolate = false;
  std::optional<double> case_time_limit;
  std::optional<Index> case_memory_limit_mib;
  std::optional<Index> plant_crash_at;
  std::optional<Index> plant_hang_at;
  std::optional<Index> plant_oom_at;
  std::optional<Index> plant_garbage_at;
  std::optional<Index> digest_share;
  std::optional<Index> large_share;
  std::optional<Index> loopback_share;
  std::optional<Index> reduce_evaluations;
  std::string backend;
  std::optional<Index> backend_share;
  ReportFiles reports;  // --junit, --markdown
  // Options that define the campaign, so that --resume refuses them: name -> given.
  std::vector<std::pair<std::string, CLI::Option*>> defining;
};

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
  options.seed = args.seed ? *args.seed : std::random_device{}();
  if (args.cases)
    options.cases = *args.cases;
  else
    options.time_seconds = args.time_seconds ? *args.time_seconds : 60.0;
  if (args.cases && args.time_seconds) options.time_seconds = *args.time_seconds;
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
      options.eval.target = args.target;
      options.eval.target_timeout_seconds = args.target_timeout;
    }
  }
  if (auto oracle = oracles::parse_oracle_kind(args.oracle)) {
    options.eval.oracle = *oracle;
  } else {
    std::fprintf(stderr, "shardcheck campaign: unknown oracle '%s' (%s)\n", args.oracle.c_str(),
                 oracles::oracle_choices().c_str());
    return kExitUsage;
  }
  options.eval.strict_layout = args.strict_layout;
  if (!args.op.empty() && args.op != op_name(Op::reshard)) {
    std::fprintf(stderr, "shardcheck campaign: --op takes reshard (without it, cases rebuild and extract), got '%s'\n",
                 args.op.c_str());
    return kExitUsage;
  }
  options.generate.reshard = !args.op.empty();
  options.generate.record_digest = args.digest;
  options.generate.layout.max_elements = args.max_elements;
  if (args.digest_share) options.digest_share = static_cast<int>(*args.digest_share);
  if (args.large_share) options.large_share = static_cast<int>(*args.large_share);
  if (args.loopback_share) options.loopback_share = static_cast<int>(*args.loopback_share);
  options.reduce_evaluations = args.reduce_evaluations.value_or(props::kDefaultMaxEvaluations);
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
  if (args.backend_share) options.backend_share = static_cast<int>(*args.backend_share);
  if (options.generate.reshard) {
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
  if (args.jobs > 0)
    options.jobs = args.jobs;
  else if (args.resume.empty())
    options.jobs = std::max(1u, std::thread::hardware_concurrency());
  if (args.isolate) options.isolate = true;
  if (args.no_isolate) options.isolate = false;
  if (args.case_time_limit) options.case_time_limit = *args.case_time_limit;
  if (args.case_memory_limit_mib) options.case_memory_limit = *args.case_memory_limit_mib << 20;
  // The loopback target: this very program, serving the strict policy over the protocol
  // (a share of the cases, Options::loopback_share; not with a target of the user's).
  if (options.eval.target.empty() && options.loopback_share > 0) {
    std::error_code self_error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", self_error);
    if (!self_error) options.loopback_target = "exec:exec " + oracles::shell_word(self.string()) + " serve-protocol";
  }
  options.plant_crash_at = args.plant_crash_at;
  options.plant_hang_at = args.plant_hang_at;
  options.plant_oom_at = args.plant_oom_at;
  options.plant_garbage_at = args.plant_garbage_at;
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
  if (options.generate.reshard && !probe.target->supports(Op::reshard)) {
    std::fprintf(stderr, "shardcheck campaign: target %s does not implement reshard\n", options.eval.target.c_str());
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

}  // namespace

void register_campaign(CLI::App& app, RunState& state) {
  auto args = std::make_shared<CampaignArgs>();
  CLI::App* sub = app.add_subcommand("campaign", "Run generated (layout, corruption) cases through the oracle");
  auto defining = [&](CLI::Option* option) { args->defining.emplace_back(option->get_name(), option); };
  defining(add_uint64_option(sub, "--seed", args->seed, "Seed, 0 to 2^64-1 (default: random, printed)"));
  defining(add_int_option(sub, "--cases", args->cases, Index{0}, std::numeric_limits<Index>::max(),
                          "Number of cases (deterministic)"));
  defining(
      add_seconds_option(sub, "--time", args->time_seconds, "Time budget in seconds (default 60 without --cases)"));
  defining(sub->add_option("--policy", args->policy, "strict (default) or legacy"));
  defining(sub->add_option("--oracle", args->oracle, oracle_help()));
  add_int_option(sub, "--jobs", args->jobs, 0, 4096,
                 "Worker processes or threads, at most 4096; 0 (the default) means all cores");
  defining(sub->add_option("--shard", args->shard, "Run part I of N (I/N), tables add up"));
  defining(sub->add_option("--out", args->out, "Directory for report.json and findings/ (default campaign-out)"));
  defining(sub->add_flag("--strict-layout", args->strict_layout, "Valid-but-different cases fail the run too"));
  defining(sub->add_flag("--digest", args->digest,
                         "The producer records a content digest and every rebuild (with --op reshard: every "
                         "reshard, on both sides of its plan) verifies it; the catalogue also corrupts the record"));
  defining(sub->add_option("--op", args->op,
                           "reshard: pairs of layouts over one shape, either side corrupted, through transfer "
                           "plans (contract section 11); default: rebuild and extract cases"));
  defining(add_int_option(sub, "--max-elements", args->max_elements, Index{1}, Index{1} << 20,
                          "Largest numel(F) generated (default 256)"));
  defining(sub->add_option("--target", args->target,
                           "Implementation under test: strict, legacy, deepspeed, deepspeed-restore, "
                           "deepspeed-convert, dcp, megatron or exec:COMMAND (overrides --policy)"));
  defining(
      sub->add_option("--backend", args->backend,
                      "Also convert every case on this backend beside the CPU backend (device-omp, cuda), and with "
                      "--op reshard execute its plan there; any difference in verdict, error or bits is a finding"));
  defining(add_seconds_option(sub, "--target-timeout", args->target_timeout,
                              "Seconds an exec target may take per request before it counts as hung (default 10)"));
  add_report_options(sub, args->reports);
  sub->add_flag("--quiet", args->quiet, "Print the verdict line and errors only: no progress, table or finding lines (table.txt and report.json still have them)");
  sub->add_flag("-v,--verbose", args->verbose,
                "At the end, list every finding with its count of cases (by default each finding shows once, "
                "when it is found)");
  sub->add_option("--resume", args->resume, "Continue the stopped campaign in DIR from its checkpoint.json");
  sub->add_flag("--overwrite", args->overwrite,
                "Start the campaign in an --out that holds an earlier run's outputs: they are removed first");
  sub->add_flag("--isolate", args->isolate, "Run cases in worker processes (the default)");
  sub->add_flag("--no-isolate", args->no_isolate, "Run cases in threads of this process");
  add_seconds_option(sub, "--case-time-limit", args->case_time_limit,
                     "Seconds one case may take before its worker is killed (isolated; default 60)");
  add_int_option(sub, "--case-memory-limit", args->case_memory_limit_mib, Index{16}, Index{1} << 30,
                 "MiB of memory one worker may use (isolated; default 2048)");
  // Test-only hooks (hidden): plant a case that aborts, hangs or exhausts memory.
  constexpr Index kMaxIndex = std::numeric_limits<Index>::max();
  add_int_option(sub, "--plant-crash-at", args->plant_crash_at, Index{0}, kMaxIndex, "")->group("");
  add_int_option(sub, "--plant-hang-at", args->plant_hang_at, Index{0}, kMaxIndex, "")->group("");
  add_int_option(sub, "--plant-oom-at", args->plant_oom_at, Index{0}, kMaxIndex, "")->group("");
  add_int_option(sub, "--plant-garbage-at", args->plant_garbage_at, Index{0}, kMaxIndex, "")->group("");
  // Hidden: the shares of the default campaign's variants (1 in N cases; 0: none).
  defining(add_int_option(sub, "--digest-share", args->digest_share, Index{0}, Index{1} << 20, "")->group(""));
  defining(add_int_option(sub, "--large-share", args->large_share, Index{0}, Index{1} << 20, "")->group(""));
  defining(add_int_option(sub, "--loopback-share", args->loopback_share, Index{0}, Index{1} << 20, "")->group(""));
  defining(add_int_option(sub, "--reduce-evaluations", args->reduce_evaluations, Index{0}, Index{1} << 30,
                          fmt::format("At the end of a campaign that ran every case, reduce each finding's case "
                                      "while it shows the same finding, with at most N replays each (default {}; "
                                      "0: none; a target in another process N/10); its case file records how far",
                                      props::kDefaultMaxEvaluations)));
  defining(add_int_option(sub, "--backend-share", args->backend_share, Index{0}, Index{1} << 20, "")->group(""));
  // `campaign merge DIR... --out DIR` (campaign_merge.cc) runs instead of a campaign.
  CLI::App* merge = register_campaign_merge(sub, state);
  sub->callback([args, merge, &state] {
    if (merge->parsed()) return;
    state.exit_code = run_campaign(*args);
  });
}

}  // namespace shardcheck::cli
