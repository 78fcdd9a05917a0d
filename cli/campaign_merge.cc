// `shardcheck campaign merge DIR... --out DIR`: the outputs of one campaign's shards
// (--shard I/N, run on N machines) combined into the output of one campaign: tables
// added, findings deduplicated by signature keeping the smallest case (as one run keeps
// it), one report.json, table.txt, report.html and, when asked, JUnit and Markdown. Shards of
// different campaigns, a shard given twice, a missing or an unfinished shard are refused:
// their sum would describe no campaign.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "reports.h"
#include "shardcheck/campaign.h"
#include "shardcheck/json.h"

namespace shardcheck::cli {

namespace {

namespace fs = std::filesystem;

struct MergeArgs {
  std::vector<std::string> dirs;
  std::string out;
  ReportFiles reports;
};

struct Shard {
  fs::path dir;
  Json checkpoint_json;
  campaign::Checkpoint checkpoint;
  std::string ledger_error;  // from its report.json, when it records one
};

// The checkpoint fields that say which campaign a shard belongs to: everything but how
// and where it ran (jobs, isolation, limits, timings) and what it found.
const char* const kCampaignFields[] = {"seed",        "requested_cases", "time_seconds", "policy", "target",
                                       "oracle",      "strict_layout",   "max_elements", "digest", "digest_share",
                                       "large_share", "loopback_share",  "shard_count"};

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
  // A campaign whose ledger did not add up says so in report.json only.
  FileText report = read_file((dir / "report.json").string());
  if (report.text) {
    if (auto parsed = parse_json(*report.text); parsed && parsed.value().is_object()) {
      const Json& r = parsed.value();
      if (r.contains("ledger_error") && r["ledger_error"].is_string()) shard.ledger_error = r["ledger_error"];
    }
  }
  return {};
}

std::string field_text(const Json& checkpoint, const char* field) {
  return checkpoint.contains(field) ? checkpoint[field].dump() : "(none)";
}

// Why the shards are not the N parts of one finished campaign, or empty.
std::string refuse_shards(const std::vector<Shard>& shards) {
  const Shard& first = shards.front();
  for (const Shard& shard : shards) {
    for (const char* field : kCampaignFields) {
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
                         count, shard.dir.string(), shard.dir.string());
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

// One campaign's report from its shards: what one unsharded run would have counted.
campaign::Report merge_reports(const std::vector<Shard>& shards, std::map<std::string, fs::path>& finding_files) {
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
      const fs::path file = shard.dir / "findings" / campaign::finding_file_name(finding.signature);
      if (fresh) {
        finding_files[finding.signature] = file;
        continue;
      }
      // The smallest case, as a single run minimises: numel, then pieces, then index.
      campaign::FindingRecord& kept = it->second;
      const Index occurrences = kept.occurrences + finding.occurrences;
      if (std::tie(finding.numel, finding.pieces, finding.first_case) <
          std::tie(kept.numel, kept.pieces, kept.first_case)) {
        kept = finding;
        finding_files[finding.signature] = file;
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

std::string write_merged(const campaign::Report& report, const fs::path& out,
                         const std::map<std::string, fs::path>& finding_files) {
  std::error_code ec;
  fs::create_directories(out / "findings", ec);
  if (ec) return fmt::format("cannot create {}: {}", (out / "findings").string(), ec.message());
  for (const auto& finding : report.findings) {
    if (!finding.has_case) continue;
    // The kept shard's case file is the file one run writes: the case is regenerated from
    // its global index, whatever shard ran it.
    const fs::path& from = finding_files.at(finding.signature);
    FileText text = read_file(from.string());
    if (!text.text) return fmt::format("cannot read the finding file {}: {}", from.string(), text.error);
    const fs::path to = out / "findings" / campaign::finding_file_name(finding.signature);
    if (std::string error = write_report_file(to, *text.text); !error.empty()) return error;
  }
  if (std::string error = write_report_file(out / "report.json", campaign::report_to_json(report).dump(2) + "\n");
      !error.empty()) {
    return error;
  }
  if (std::string error = write_report_file(out / "table.txt", campaign::format_table(report)); !error.empty()) {
    return error;
  }
  // The shards' timelines overlap in time: the merged page has the outcomes, not the timeline.
  return write_report_file(out / "report.html", campaign::report_html(report));
}

int run_merge(const MergeArgs& args) {
  std::vector<Shard> shards(args.dirs.size());
  for (std::size_t i = 0; i < args.dirs.size(); ++i) {
    if (std::string error = read_shard(args.dirs[i], shards[i]); !error.empty()) {
      fmt::print(stderr, "shardcheck campaign merge: {}\n", error);
      return kExitUsage;
    }
  }
  if (std::string refusal = refuse_shards(shards); !refusal.empty()) {
    fmt::print(stderr, "shardcheck campaign merge: {}\n", refusal);
    return kExitUsage;
  }
  std::map<std::string, fs::path> finding_files;
  const campaign::Report report = merge_reports(shards, finding_files);
  const fs::path out(args.out);
  if (std::string error = write_merged(report, out, finding_files); !error.empty()) {
    fmt::print(stderr, "shardcheck campaign merge: {}\n", error);
    return kExitUsage;
  }
  const bool reports_written = write_campaign_reports(report, out, args.reports, "campaign merge").empty();
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
  if (!reports_written) return kExitUsage;
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
  add_report_options(sub, args->reports);
  sub->callback([args, &state] { state.exit_code = run_merge(*args); });
  return sub;
}

}  // namespace shardcheck::cli
