// The campaign engine behind `shardcheck campaign`: generated (layout, corruption)
// cases through the oracle, tallied per constructor and per corruption kind.
//
// Deterministic: case i is generated from its own seed derived from (seed, i), so the
// same seed and count give the same tallies and findings for any number of jobs, and
// --shard I/N (cases with i % N == I) splits one campaign into parts whose tables add up.
// The same determinism makes a campaign resumable: a checkpoint records which cases are
// done (exact ranges), the tallies and the findings so far, and the rest can be run later
// with the same end result as one uninterrupted run.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardcheck/gen/case_gen.h"
#include "shardcheck/properties.h"
#include "shardcheck/reduce.h"

namespace shardcheck::campaign {

struct Tally {
  Index cases = 0;
  Index refused = 0;
  Index exact = 0;
  Index wrong = 0;
  Index valid_but_different = 0;
  Index crashed = 0;  // isolated cases that crashed, timed out or ran out of memory
  // An implementation under test (exec target) crashed, hung or answered garbage: no
  // verdict on the map, and never a pass (every such case is a finding too).
  Index target_faults = 0;
  void add(Outcome outcome);
  void add_crashed();
  void merge(const Tally& other);
  friend bool operator==(const Tally&, const Tally&) = default;
};

// The traits of a row of campaign_options.def (its header says what each means), in a
// namespace of their own so that code outside campaign:: that expands the rows can use them.
namespace option_traits {
enum OptionTrait : unsigned {
  kCheckpointed = 1u << 0,
  kOffWhenAbsent = 1u << 1,
  kDefaultWhenAbsent = 1u << 2,
  kComparedByMerge = 1u << 3,
  kHidden = 1u << 4,
  kChangesCases = 1u << 5,
  kCommandLineByHand = 1u << 6,
  kCopiedByHand = 1u << 7,
  kCheckpointedByHand = 1u << 8,
};
}  // namespace option_traits
using namespace option_traits;

// A row's key and traits, in row order: for code that needs no more of it.
struct OptionRow {
  std::string_view key;
  unsigned traits = 0;
};
inline constexpr OptionRow kOptionRows[] = {
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) {#key, traits},
#include "shardcheck/campaign_options.def"
};

struct Options {
  props::EvalOptions eval;
  gen::CaseOptions generate;
  // One member per OPTION row of campaign_options.def, which says what each is for.
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  type field = default_value;
#define SHARDCHECK_CAMPAIGN_NESTED_OPTION(key, field, type, default_value, flag, min, max, help, traits)
#include "shardcheck/campaign_options.def"
};

// The smallest case seen for one finding signature (minimised by size, then index).
struct FindingRecord {
  props::JudgeId judge = props::JudgeId::unusable_case;  // the judge that found it (findings.def)
  std::string signature;
  std::string message;
  Index first_case = 0;  // index of the kept case
  Index occurrences = 0;
  Case reproducer;
  // The size the minimisation compares: numel of the truth map, then the number of
  // pieces of the map under test, then the index.
  Index numel = 0;
  Index pieces = 0;
  // False when the case could not even be generated (a worker died generating it):
  // then there is no reproducer and no case file, only the index.
  bool has_case = true;
  // Set when `reproducer` is the kept case reduced (Options::reduce_evaluations).
  struct Reduction {
    Index steps = 0;
    Index evaluations = 0;
    bool minimal = false;
  };
  std::optional<Reduction> reduction;
};

// A file of the output directory that could not be written (a full disk, a folder gone).
struct OutputError {
  std::filesystem::path path;
  std::string why;  // the system's reason ("No space left on device")
};

struct Report {
  Options options;
  Index cases = 0;
  double seconds = 0;
  std::map<std::string, Tally> by_constructor;
  std::map<std::string, Tally> by_corruption;
  std::map<std::string, Tally> by_refusal_kind;  // refused cases per error kind
  // Per operation run ("rebuild", "extract"): a case with op both counts in each row.
  std::map<std::string, Tally> by_op;
  Tally total;
  std::vector<FindingRecord> findings;  // sorted by signature
  // Every requested case ran (or the time budget ran out); false for a stopped campaign.
  bool complete = false;
  // The end-of-run audit of the ledger (detail::Ledger::audit): empty when the cases
  // done are exactly the cases handed out less those waiting to run again, each counted
  // once; otherwise what was lost or duplicated. A campaign with a ledger error failed,
  // whatever its findings: its table does not describe the cases it claims.
  std::string ledger_error;
  // The files of Control::out whose last write failed, in path order: empty when the
  // directory holds the whole report, every finding's case file included. A write that
  // fails and later succeeds (space freed) leaves nothing here. Not part of failed(): the
  // campaign's verdict stands, but its outputs do not show all of it.
  std::vector<OutputError> output_errors;
  // Exit status of the campaign: anything silently wrong, any other property finding,
  // (with strict_layout) any valid-but-different case, or a ledger error.
  bool failed() const;
};

// Where a stopped campaign stands: its report so far (findings without reproducers)
// and the shard-local case ranges [first, end) that are done. The k-th case of shard
// I/N is case index I + k * N.
struct Checkpoint {
  Report report;
  std::vector<std::pair<Index, Index>> done;  // sorted, disjoint, not adjacent
};

Json checkpoint_to_json(const Checkpoint& checkpoint);
// Reads what checkpoint_to_json wrote; anything else is a `format` error whose sentence
// starts "malformed checkpoint: ", as every reader of untrusted input answers.
Result<Checkpoint> checkpoint_from_json(const Json& json);

// The seed of case `index` within a campaign of `seed`.
std::uint64_t case_seed(std::uint64_t seed, Index index);
// Case `index` of a campaign, exactly as the campaign generates it.
Case generate_indexed_case(const Options& options, Index index);

// Which of the shared variants (Options::digest_share, ...) case `index` takes.
struct Variant {
  bool digest = false;
  bool large = false;
  bool loopback = false;
  bool backend = false;
};
Variant variant_of(const Options& options, Index index);
// The evaluation options of case `index`: options.eval, or with the loopback target.
props::EvalOptions eval_options_of(const Options& options, Index index);

// Requests to stop, as a signal handler sets them.
inline constexpr int kStopGraceful = 1;   // finish the current case, then end as usual
inline constexpr int kStopImmediate = 2;  // end now (see Control::stop)

struct Control {
  // When set, the campaign keeps DIR up to date while it runs: findings/<signature>.json
  // the moment a signature is found (and again when a smaller case shows it),
  // report.json, table.txt and checkpoint.json every flush_interval seconds and at the
  // end. Every file is replaced by rename, so a reader never sees half a file.
  std::filesystem::path out;
  double flush_interval = 2.0;
  // Called from one thread about every `progress_interval` seconds with the number of
  // cases done so far.
  std::function<void(Index done)> progress;
  double progress_interval = 0.5;
  // Called from the writer thread once a new signature's case file is on disk.
  std::function<void(const FindingRecord& finding, const std::filesystem::path& file)> on_new_finding;
  // Called with a sentence when a file cannot be written (once per file until a write of
  // it succeeds again), and on other trouble the campaign survives.
  std::function<void(const std::string& message)> on_warning;
  // Polled every few milliseconds. kStopGraceful: no new case starts, the cases running
  // finish and run() returns an incomplete report. kStopImmediate: the workers are
  // killed, what is committed is written to `out`, and the process exits with status
  // 130 at once (an in-process case cannot be interrupted any other way).
  const std::atomic<int>* stop = nullptr;
  // Continue from here: its done ranges are skipped, its tallies and findings kept.
  const Checkpoint* resume = nullptr;
};

Report run(const Options& options, const Control& control);
// Runs a campaign. `progress` (may be empty) is called from one thread about every
// `progress_interval` seconds with the number of cases done so far.
Report run(const Options& options, const std::function<void(Index done)>& progress = {},
           double progress_interval = 0.5);

// The table: one row per constructor and per corruption kind, totals, rate, seed.
std::string format_table(const Report& report);
// report.json
Json report_to_json(const Report& report);

// A point of a campaign's progress, sampled each time its output directory is updated.
struct TimelineSample {
  double seconds = 0;
  Index cases = 0;
  Index findings = 0;  // signatures found so far
};

// report.html, written beside report.json: one self-contained page (inline CSS and SVG,
// no script, nothing fetched) with the verdict, outcomes per corruption kind and per
// constructor as stacked bars, cases/s and signatures found over time when `timeline`
// has two samples or more, the findings with their repro commands, and the table.
std::string report_html(const Report& report, std::span<const TimelineSample> timeline = {});
// A ready regression case file for a finding (props::finding_case_file, with the
// campaign's seed, case and policy or target).
Json finding_case_file(const Report& report, const FindingRecord& finding);
// The file name of a finding's case file inside findings/.
std::string finding_file_name(std::string_view signature);

}  // namespace shardcheck::campaign
