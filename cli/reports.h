// Reports in the formats CI systems already read: JUnit XML (test reporters, GitLab,
// Jenkins, GitHub Actions summaries) and Markdown (a CI job summary page), for a campaign
// and for a replayed folder of case files (docs/reports.md says what each holds).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "shardcheck/campaign.h"

namespace shardcheck::oracles {
class Target;
}

namespace shardcheck::cli {

// The report files a run was asked for (empty: not asked).
struct ReportFiles {
  std::string junit;
  std::string markdown;
};

// --junit FILE and --markdown FILE on a subcommand (`markdown`: only where it has one).
void add_report_options(CLI::App* sub, ReportFiles& files, bool markdown = true);

// A campaign's JUnit: one test case per finding signature (a failure naming the case
// file and the `shardcheck repro` command), one per table row (constructor, corruption,
// refusal kind, operation; a failure when the row holds silently wrong, crashed or
// target-fault cases, or valid-but-different ones under --strict-layout), and one for
// the ledger when it does not add up. `out` is the campaign's output directory.
std::string campaign_junit(const campaign::Report& report, const std::filesystem::path& out);

// A campaign's Markdown summary: the verdict, the run, its findings with their repro
// commands, and the table's non-empty rows.
std::string campaign_markdown(const campaign::Report& report, const std::filesystem::path& out);

// Writes what `files` asks for; the files that could not be written, each also printed
// to stderr as "shardcheck <command>: cannot write PATH: WHY".
std::vector<campaign::OutputError> write_campaign_reports(const campaign::Report& report,
                                                          const std::filesystem::path& out, const ReportFiles& files,
                                                          const char* command);

// One replayed case file of `shardcheck repro DIR`.
struct ReplayedCase {
  std::string path;
  int exit_code = 0;               // kExitOk, kExitFound or kExitUsage
  std::vector<std::string> lines;  // what the replay printed (the outcome, expectations)
  std::string implementation;      // what it was replayed with
  double seconds = 0;
};

// Implementations started by replays, by name, kept for the next case file.
using ReplayTargets = std::map<std::string, std::unique_ptr<oracles::Target>>;

// Replays the case file at `path` as `shardcheck repro FILE` does (the truth oracle, the
// file's expectations, its recorded backend): with `implementation`, or when that is
// empty the policy or built-in target the file records (an exec: target a file records
// is never run: exit 2). repro.cc.
ReplayedCase replay_case_file(const std::string& path, const std::string& implementation, double target_timeout,
                              ReplayTargets& targets);

// JUnit of a replayed folder: one test case per file; exit 1 is a failure carrying the
// replay's lines and its command, exit 2 (unreadable, not a case) an error.
std::string repro_junit(const std::string& folder, const std::vector<ReplayedCase>& cases);

// Writes `text` to `path`, replacing a file by rename (a reader sees the old one or the
// new one) and writing a device or a pipe in place; an error sentence, or empty.
std::string write_report_file(const std::filesystem::path& path, const std::string& text);
// The same, giving the system's reason alone ("No space left on device"), or empty.
std::string write_report_reason(const std::filesystem::path& path, const std::string& text);

}  // namespace shardcheck::cli
