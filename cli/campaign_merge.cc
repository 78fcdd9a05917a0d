// `shardcheck campaign merge DIR... --out DIR`: the outputs of one campaign's shards
// (--shard I/N, run on N machines) combined into the output of one campaign: tables
// added, findings deduplicated by signature keeping the smallest case (as one run keeps
// it), one report.json, table.txt, report.html and, when asked, JUnit and Markdown. Shards of
// different campaigns, a shard given twice, a missing or an unfinished shard are refused:
// their sum would describe no campaign. So is a shard whose record does not hold together
// (its tallies against its findings, its findings against findings/, its checkpoint
// against its report), and a finding file that is not the case its shard records or that
// does not fail when replayed: the merged report vouches for every file it carries.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "outputs.h"
#include "reports.h"
#include "shardcheck/campaign.h"
#include "shardcheck/case.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/target.h"

namespace shardcheck::cli {

namespace {

namespace fs = std::filesystem;

struct MergeArgs {
  std::vector<std::string> dirs;
  std::string out;
  std::string target;  // the shards' exec: target, given to replay their findings
  bool overwrite = false;
  ReportFiles reports;
};

struct Shard {
  fs::path dir;
  Json checkpoint_json;
  campaign::Checkpoint checkpoint;
  Json report_json;          // its report.json, null when it cannot be read
  std::string report_error;  // why not
  std::string ledger_error;  // from its report.json, when it records one
};

// A finding file the merge carries: where it comes from, and its text once checked.
struct KeptFile {
  fs::path from;
  const Shard* shard = nullptr;
  std::string text;
};

// The report.json fields that must say what the checkpoint says.
const char* const kReportFields[] = {"cases",         "complete",        "total", "by_constructor",
                                     "by_corruption", "by_refusal_kind", "by_op", "findings"};

std::string read_shard(const fs::path& dir, Shard& shard) {
  shard.dir = dir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fmt::format("{} is not a campaign output directory", dir.string());
  const fs::path file = dir / "checkpoint.json";
  FileText text = read_file(file.string());
  if (!text.text) return fmt::format("{} is not a campaign's output: {}", dir.string(), text.error);
  auto json = parse_json(*text.text);
  if (!json) return fmt::format("{}: {}", file.string(), json.error().to_string());
  shard.checkpoint_json = std::move(json).value();
  auto checkpoint = campaign::checkpoint_from_json(shard.checkpoint_json);
  if (!checkpoint) return fmt::format("{}: {}", file.string(), checkpoint.error().message);
  shard.checkpoint = std::move(checkpoint).value();
  FileText report = read_file((dir / "report.json").string());
  if (!report.text) {
    shard.report_error = report.error;
    return {};
  }
  auto parsed = parse_json(*report.text);
  if (!parsed || !parsed.value().is_object()) {
    shard.report_error = parsed ? "it is not a JSON object" : parsed.error().to_string();
    return {};
  }
  shard.report_json = std::move(parsed).value();
  // A campaign whose ledger did not add up says so in report.json only.
  const Json& r = shard.report_json;
  if (r.contains("ledger_error") && r["ledger_error"].is_string()) shard.ledger_error = r["ledger_error"];
  return {};
}

std::string field_text(const Json& checkpoint, const std::string& field) {
  return checkpoint.contains(field) ? checkpoint[field].dump() : "(none)";
}

// Why the shards are not the N parts of one finished campaign, or empty.
std::string refuse_shards(const std::vector<Shard>& shards) {
  const Shard& first = shards.front();
  for (const Shard& shard : shards) {
    // The checkpoint fields that say which campaign a shard belongs to (campaign_options.def's
    // kComparedByMerge): not how and where it ran (jobs, isolation, limits) nor what it found.
    for (const campaign::OptionRow& row : campaign::kOptionRows) {
      if ((row.traits & campaign::kComparedByMerge) == 0) continue;
      const std::string field(row.key);
      if (field_text(shard.checkpoint_json, field) != field_text(first.checkpoint_json, field)) {
        return fmt::format("{} and {} are shards of different campaigns: {} {} and {}", first.dir.string(),
                           shard.dir.string(), field, field_text(first.checkpoint_json, field),
                           field_text(shard.checkpoint_json, field));
      }
    }
  }
  const int count = first.checkpoint.report.options.shard_count;
  std::map<int, const Shard*> by_index;
  for (const Shard& shard : shards) {
    const int index = shard.checkpoint.report.options.shard_index;
    auto [it, fresh] = by_index.emplace(index, &shard);
    if (!fresh) {
      return fmt::format("shard {}/{} is given twice ({} and {}): its cases would count twice", index, count,
                         it->second->dir.string(), shard.dir.string());
    }
    if (!shard.checkpoint.report.complete) {
      return fmt::format("shard {}/{} in {} did not finish; finish it first: shardcheck campaign --resume {}", index,
                         count, shard.dir.string(), oracles::shell_word(shard.dir.string()));
    }
  }
  std::vector<std::string> missing;
  for (int index = 0; index < count; ++index) {
    if (by_index.count(index) == 0) missing.push_back(fmt::format("{}/{}", index, count));
  }
  if (!missing.empty()) {
    return fmt::format("shard{} {} {} missing: the merge would not be the whole campaign",
                       missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), missing.size() == 1 ? "is" : "are");
  }
  return {};
}

std::string shard_name(const Shard& shard) {
  const campaign::Options& o = shard.checkpoint.report.options;
  return fmt::format("shard {}/{} ({})", o.shard_index, o.shard_count, shard.dir.string());
}

// Whether shard-local case k of the shard is in its done ranges.
bool case_done(const campaign::Checkpoint& checkpoint, Index index) {
  const campaign::Options& o = checkpoint.report.options;
  if (index < o.shard_index || (index - o.shard_index) % o.shard_count != 0) return false;
  const Index k = (index - o.shard_index) / o.shard_count;
  return std::any_of(checkpoint.done.begin(), checkpoint.done.end(),
                     [&](const auto& range) { return range.first <= k && k < range.second; });
}

// A case has at most one finding, and every silently wrong, crashed or target-fault case
// (valid-but-different too under --strict-layout) has one: the findings' cases lie
// between the two. Each finding names a case the shard ran.
std::string check_tallies(const Shard& shard) {
  const campaign::Report& r = shard.checkpoint.report;
  Index covered = 0;
  Index with_case = 0;  // a finding without a case file may count no case (garbage no case repeats)
  for (const auto& finding : r.findings) {
    covered += finding.occurrences;
    if (!finding.has_case) continue;
    with_case += finding.occurrences;
    if (!case_done(shard.checkpoint, finding.first_case)) {
      return fmt::format("{}: its finding {} names case {}, which the shard did not run", shard_name(shard),
                         finding.signature, finding.first_case);
    }
  }
  const campaign::Tally& t = r.total;
  const Index failing =
      t.wrong + t.crashed + t.target_faults + (r.options.eval.strict_layout ? t.valid_but_different : 0);
  if (with_case > r.cases) {
    return fmt::format("{}: its findings count {} cases, more than the {} cases it ran", shard_name(shard), with_case,
                       r.cases);
  }
  if (covered < failing) {
    return fmt::format(
        "{}: it counts {} silently wrong, crashed or target-fault cases but its findings cover only {}: its record "
        "was changed after it ran; run the shard again with --overwrite",
        shard_name(shard), failing, covered);
  }
  Index by_corruption = 0;
  for (const auto& [name, tally] : r.by_corruption) by_corruption += tally.cases;
  if (by_corruption != r.cases) {
    return fmt::format("{}: its rows per corruption count {} cases, its rows per constructor {}", shard_name(shard),
                       by_corruption, r.cases);
  }
  return {};
}

// findings/ holds exactly the case files of the findings the checkpoint records.
std::string check_finding_files(const Shard& shard) {
  std::set<std::string> recorded;
  for (const auto& finding : shard.checkpoint.report.findings) {
    if (finding.has_case) recorded.insert(campaign::finding_file_name(finding.signature));
  }
  const std::vector<std::string> present = finding_files_in(shard.dir);
  std::vector<std::string> extra;
  for (const std::string& name : present) {
    if (recorded.count(name) == 0) extra.push_back(name);
  }
  if (!extra.empty()) {
    return fmt::format(
        "{}: findings/ holds {} finding files its checkpoint does not record (first: {}), of {} findings it records: "
        "its record was changed after it ran; run the shard again with --overwrite",
        shard_name(shard), extra.size(), extra.front(), shard.checkpoint.report.findings.size());
  }
  const std::set<std::string> on_disk(present.begin(), present.end());
  for (const std::string& name : recorded) {
    if (on_disk.count(name) == 0) {
      return fmt::format(
          "{}: findings/{} is missing, one of the {} finding files its checkpoint records; write them "
          "again with: shardcheck campaign --resume {}",
          shard_name(shard), name, recorded.size(), oracles::shell_word(shard.dir.string()));
    }
  }
  return {};
}

// report.json says what checkpoint.json says: both are written from one snapshot.
std::string check_report(const Shard& shard) {
  const std::string resume = "shardcheck campaign --resume " + oracles::shell_word(shard.dir.string());
  if (!shard.report_json.is_object()) {
    return fmt::format("{}: its report.json cannot be read ({}); write it again with: {}", shard_name(shard),
                       shard.report_error, resume);
  }
  const Json expected = campaign::report_to_json(shard.checkpoint.report);
  for (const char* field : kReportFields) {
    if (!shard.report_json.contains(field) || shard.report_json[field] != expected[field]) {
      return fmt::format(
          "{}: its report.json and checkpoint.json disagree on {}; if the shard's files were not "
          "edited, write them again with: {}",
          shard_name(shard), field, resume);
    }
  }
  return {};
}

// One campaign's report from its shards: what one unsharded run would have counted.
campaign::Report merge_reports(const std::vector<Shard>& shards, std::map<std::string, KeptFile>& kept_files) {
  campaign::Report merged;
  merged.options = shards.front().checkpoint.report.options;
  merged.options.shard_index = 0;
  merged.options.shard_count = 1;
  merged.complete = true;
  std::map<std::string, campaign::FindingRecord> findings;
  std::vector<std::string> ledger_errors;
  for (const Shard& shard : shards) {
    const campaign::Report& r = shard.checkpoint.report;
    merged.cases += r.cases;
    // The shards ran side by side: the campaign took as long as its slowest shard.
    merged.seconds = std::max(merged.seconds, r.seconds);
    merged.total.merge(r.total);
    for (const auto& [name, t] : r.by_constructor) merged.by_constructor[name].merge(t);
    for (const auto& [name, t] : r.by_corruption) merged.by_corruption[name].merge(t);
    for (const auto& [name, t] : r.by_refusal_kind) merged.by_refusal_kind[name].merge(t);
    for (const auto& [name, t] : r.by_op) merged.by_op[name].merge(t);
    for (const auto& finding : r.findings) {
      auto [it, fresh] = findings.try_emplace(finding.signature, finding);
      const KeptFile file{shard.dir / "findings" / campaign::finding_file_name(finding.signature), &shard, {}};
      if (fresh) {
        kept_files[finding.signature] = file;
        continue;
      }
      // The smallest case, as a single run minimises: numel, then pieces, then index.
      campaign::FindingRecord& kept = it->second;
      const Index occurrences = kept.occurrences + finding.occurrences;
      if (std::tie(finding.numel, finding.pieces, finding.first_case) <
          std::tie(kept.numel, kept.pieces, kept.first_case)) {
        kept = finding;
        kept_files[finding.signature] = file;
      }
      kept.occurrences = occurrences;
    }
    if (!shard.ledger_error.empty()) {
      ledger_errors.push_back(fmt::format("shard {}: {}", r.options.shard_index, shard.ledger_error));
    }
  }
  for (auto& [signature, record] : findings) merged.findings.push_back(std::move(record));
  merged.ledger_error = fmt::format("{}", fmt::join(ledger_errors, "; "));
  return merged;
}

// --- the replay of the finding files ----------------------------------------------------

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// The case's memory limit on top of what this process holds, as RLIMIT_DATA, the limit
// of the campaign's workers (AddressSanitizer's shadow is data it reserves up front: there
// none is set, as in the campaign).
void limit_data(Index limit) {
  if (kAddressSanitizer || limit <= 0) return;
  std::ifstream statm("/proc/self/statm");
  unsigned long long size = 0, resident = 0, shared = 0, text = 0, library = 0, data = 0;
  if (!(statm >> size >> resident >> shared >> text >> library >> data)) return;
  rlimit r{};
  r.rlim_cur = r.rlim_max =
      static_cast<rlim_t>(data) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + static_cast<rlim_t>(limit);
  setrlimit(RLIMIT_DATA, &r);
}

// How the merge replays the shards' findings: the campaign's options (with this
// program's own loopback target, as a campaign sets it) and the implementation to run.
struct Replayer {
  campaign::Options options;
  std::string target;  // the shards' exec: target, as --target gave it; empty otherwise
  std::string loopback;
  ReplayTargets targets;
};

// Why a replay of `path` does not show its finding, or empty. A worker death's case
// (crash, time-out, memory) replays in a child process, under the shard's limits, as the
// campaign's worker ran it: its crash, hang or memory there is the finding shown again.
std::string replay_in_child(const std::string& path, const std::string& implementation, const Replayer& replayer) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) return fmt::format("it cannot be replayed: a process cannot be started: {}", std::strerror(errno));
  if (pid == 0) {
    limit_data(replayer.options.case_memory_limit);
    ReplayTargets targets;
    const ReplayedCase replayed =
        replay_case_file(path, implementation, replayer.options.eval.target_timeout_seconds, targets);
    std::_Exit(replayed.exit_code);
  }
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(replayer.options.case_time_limit + 10.0);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return {};  // it hangs again: the time-out is shown
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (WIFSIGNALED(status) ||
      (WIFEXITED(status) && WEXITSTATUS(status) != kExitOk && WEXITSTATUS(status) != kExitUsage)) {
    return {};
  }
  return WEXITSTATUS(status) == kExitOk ? "its case ran to the end and passed when replayed"
                                        : "it cannot be replayed as a case file";
}

// Why the kept file of `finding` is not what the merge may carry, or empty: it must be the
// case file its shard's campaign writes for the record (regenerated from the case's index,
// so a truncated file or another campaign's case shows), and fail when replayed as
// `shardcheck repro FILE` replays it.
std::string check_finding_file(const campaign::FindingRecord& finding, KeptFile& kept, Replayer& replayer) {
  const std::string path = kept.from.string();
  FileText text = read_file(path);
  if (!text.text) return fmt::format("{}: the finding {} has no case file there", text.error, finding.signature);
  if (auto decoded = decode_case_text(*text.text); !decoded) {
    return fmt::format("{} does not decode as a case file ({}); run its shard again with --overwrite", path,
                       decoded.error().to_string());
  }
  campaign::Report context;
  context.options = replayer.options;
  campaign::FindingRecord record = finding;
  record.reproducer = campaign::generate_indexed_case(replayer.options, finding.first_case);
  // A reduced case (Options::reduce_evaluations) is no longer the generated one: the file
  // must be the case file of its own case, reduced from this record's case, and still
  // fail as the finding when replayed (below).
  if (auto file_json = parse_json(*text.text); file_json && file_json.value().contains("reduced")) {
    const Json& reduced = file_json.value()["reduced"];
    if (!reduced.is_object() || reduced.value("from_case", Index{-1}) != finding.first_case) {
      return fmt::format("{} records a reduction from another case than case {} that {} records for {}", path,
                         finding.first_case, shard_name(*kept.shard), finding.signature);
    }
    auto decoded = decode_case(file_json.value());
    if (!decoded) return fmt::format("{} does not decode: {}", path, decoded.error().to_string());
    record.reproducer = std::move(decoded).value();
    record.reproducer.expect.reset();
    record.reproducer.expect_error.reset();
    record.reproducer.accept_errors.clear();
    record.reproducer.legacy_expect.reset();
    record.reproducer.legacy_output.reset();
    record.reproducer.name.clear();
    record.reduction = campaign::FindingRecord::Reduction{reduced.value("steps", Index{0}),
                                                          reduced.value("evaluations", Index{0}),
                                                          reduced.value("locally_minimal", false)};
  }
  Json expected = campaign::finding_case_file(context, record);
  const bool loopback = campaign::variant_of(replayer.options, finding.first_case).loopback;
  if (loopback) {
    // The shard's loopback target names its own program's path; the case is the same.
    auto json = parse_json(*text.text);
    if (json && json.value().is_object() && json.value().contains("target")) {
      expected["target"] = json.value()["target"];
    }
  }
  if (expected.dump(2) + "\n" != *text.text) {
    return fmt::format(
        "{} is not the case file of case {} that {} records for {}; run its shard again with --overwrite", path,
        finding.first_case, shard_name(*kept.shard), finding.signature);
  }
  const std::string implementation = loopback ? replayer.loopback : replayer.target;
  std::string why;
  const props::JudgeId judge = finding.judge;
  if (judge == props::JudgeId::worker_crash || judge == props::JudgeId::worker_timeout ||
      judge == props::JudgeId::worker_oom) {
    why = replay_in_child(path, implementation, replayer);
  } else {
    const ReplayedCase replayed =
        replay_case_file(path, implementation, replayer.options.eval.target_timeout_seconds, replayer.targets);
    const std::string line = replayed.lines.empty() ? "" : replayed.lines.front();
    if (replayed.exit_code == kExitOk) why = "its case passes when replayed: " + line;
    if (replayed.exit_code == kExitUsage) why = "it cannot be replayed: " + line;
  }
  if (!why.empty()) {
    return fmt::format(
        "{} does not show its finding {}: {}; the merge carries only findings that replay, see for yourself with: "
        "shardcheck repro {}",
        path, finding.signature, why, oracles::shell_word(path));
  }
  kept.text = std::move(*text.text);
  return {};
}

// The replayer of the shards' findings, or the sentence why they cannot be replayed.
std::string make_replayer(const MergeArgs& args, const campaign::Options& options, Replayer& replayer) {
  replayer.options = options;
  const std::string& ran = options.eval.target;
  if (!args.target.empty() && args.target != ran) {
    return fmt::format("--target {} is not the target the shards ran ({}); give theirs, to replay their findings",
                       oracles::shell_word(args.target), ran.empty() ? "none: they ran a policy" : ran);
  }
  if (ran.rfind("exec:", 0) == 0 && args.target.empty()) {
    return fmt::format(
        "the shards ran target '{}', and shardcheck does not run a command named by a file: give it as --target to "
        "replay their findings",
        ran);
  }
  replayer.target = args.target;
  std::error_code ec;
  const auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) replayer.loopback = "exec:exec " + oracles::shell_word(self.string()) + " serve-protocol";
  if (ran.empty() && options.loopback_share > 0) replayer.options.loopback_target = replayer.loopback;
  return {};
}

// --- writing the merged campaign -------------------------------------------------------

std::vector<campaign::OutputError> write_merged(const campaign::Report& report, const fs::path& out,
                                                const std::map<std::string, KeptFile>& kept_files) {
  std::vector<campaign::OutputError> errors;
  auto write = [&](const fs::path& path, const std::string& text) {
    if (std::string why = write_report_reason(path, text); !why.empty()) {
      fmt::print(stderr, "shardcheck campaign merge: cannot write {}: {}\n", path.string(), why);
      errors.push_back(campaign::OutputError{path, why});
    }
  };
  // The kept shard's case file is the file one run writes: the case is regenerated from
  // its global index, whatever shard ran it.
  for (const auto& finding : report.findings) {
    if (!finding.has_case) continue;
    write(out / "findings" / campaign::finding_file_name(finding.signature), kept_files.at(finding.signature).text);
  }
  write(out / "report.json", campaign::report_to_json(report).dump(2) + "\n");
  write(out / "table.txt", campaign::format_table(report));
  // The shards' timelines overlap in time: the merged page has the outcomes, not the timeline.
  write(out / "report.html", campaign::report_html(report));
  return errors;
}

// Reads, checks and replays the shards; the merged report in `report`, or the exit code.
int gather(const MergeArgs& args, std::vector<Shard>& shards, campaign::Report& report,
           std::map<std::string, KeptFile>& kept_files, OutDirLock& lock) {
  auto refuse = [](const std::string& why) {
    fmt::print(stderr, "shardcheck campaign merge: {}\n", why);
    return kExitUsage;
  };
  for (std::size_t i = 0; i < args.dirs.size(); ++i) {
    if (std::string error = read_shard(args.dirs[i], shards[i]); !error.empty()) return refuse(error);
  }
  if (std::string refusal = refuse_shards(shards); !refusal.empty()) return refuse(refusal);
  for (const Shard& shard : shards) {
    for (auto check : {check_tallies, check_finding_files, check_report}) {
      if (std::string why = check(shard); !why.empty()) return refuse(why);
    }
  }
  Replayer replayer;
  if (std::string why = make_replayer(args, shards.front().checkpoint.report.options, replayer); !why.empty()) {
    return refuse(why);
  }
  if (std::string error = probe_report_files(args.reports); !error.empty()) return refuse(error);
  report = merge_reports(shards, kept_files);
  for (const auto& finding : report.findings) {
    if (!finding.has_case) continue;
    if (std::string why = check_finding_file(finding, kept_files.at(finding.signature), replayer); !why.empty()) {
      return refuse(why);
    }
  }
  // Made and locked only now, so that a refused merge leaves no folder behind.
  const Reuse reuse = args.overwrite ? Reuse::overwrite : Reuse::refuse;
  if (std::string error = prepare_out_dir(args.out, reuse, "--out", lock); !error.empty()) return refuse(error);
  return kExitOk;
}

int run_merge(const MergeArgs& args) {
  std::vector<Shard> shards(args.dirs.size());
  campaign::Report report;
  std::map<std::string, KeptFile> kept_files;
  OutDirLock lock;
  if (int code = gather(args, shards, report, kept_files, lock); code != kExitOk) return code;
  const fs::path out(args.out);
  std::vector<campaign::OutputError> unwritten = write_merged(report, out, kept_files);
  for (auto& error : write_campaign_reports(report, out, args.reports, "campaign merge")) unwritten.push_back(error);
  std::fputs(campaign::format_table(report).c_str(), stdout);
  for (const auto& finding : report.findings) {
    fmt::print("finding: {} ({} cases) -> {}\n", finding.signature, finding.occurrences,
               (out / "findings" / campaign::finding_file_name(finding.signature)).string());
  }
  fmt::print("merged {} shards: {}\n", shards.size(), (out / "report.json").string());
  if (!report.ledger_error.empty()) {
    fmt::print("verdict: ERROR, exit 2: a shard's cases are not exactly the cases it ran: {}\n", report.ledger_error);
    return kExitUsage;
  }
  if (!unwritten.empty()) {
    fmt::print(
        "verdict: INCOMPLETE, exit {}: the outputs are incomplete: {} could not be written: {}{}; once there is room, "
        "run the merge again with --overwrite\n",
        kExitIncomplete, unwritten.front().path.string(), unwritten.front().why,
        unwritten.size() > 1 ? fmt::format(" (and {} other files)", unwritten.size() - 1) : "");
    return kExitIncomplete;
  }
  if (report.failed()) {
    fmt::print("verdict: FAIL, exit 1: {} finding signatures, {} silently wrong cases in {} cases\n",
               report.findings.size(), report.total.wrong, report.cases);
    return kExitFound;
  }
  fmt::print("verdict: PASS, exit 0: nothing silently wrong and no finding in {} cases\n", report.cases);
  return kExitOk;
}

}  // namespace

CLI::App* register_campaign_merge(CLI::App* campaign_command, RunState& state) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* sub = campaign_command->add_subcommand(
      "merge", "Combine the output directories of one campaign's shards (--shard I/N) into one campaign's output");
  sub->add_option("dirs", args->dirs, "the shards' output directories (all N of them)")->required();
  sub->add_option("--out", args->out, "Directory for the merged report.json, table.txt and findings/")->required();
  sub->add_flag("--overwrite", args->overwrite,
                "Write into an --out that holds an earlier run's outputs: they are removed first");
  sub->add_option("--target", args->target,
                  "The exec: target the shards ran, to replay their findings with (a command a checkpoint names is "
                  "never run without it)");
  add_report_options(sub, args->reports);
  sub->callback([args, &state] { state.exit_code = run_merge(*args); });
  return sub;
}

}  // namespace shardcheck::cli
