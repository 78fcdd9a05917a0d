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

struct Options {
  std::uint64_t seed = 1;
  std::optional<Index> cases;          // a fixed count (deterministic)...
  std::optional<double> time_seconds;  // ...or a time budget
  int jobs = 1;
  int shard_index = 0;
  int shard_count = 1;
  props::EvalOptions eval;
  gen::CaseOptions generate;

  // Shares of the cases (1 in N; 0: none) that a default campaign also runs in ways the
  // plain case does not, each chosen by a hash of (seed, index) (variant_of), so that a
  // case regenerated from its index is the case that ran:
  // - digest_share: the producer records digest(F) and rebuild (or reshard) verifies it,
  //   as with --digest (generate.record_digest, which makes it every case); only without
  //   a target of the user's (eval.target), which may ignore digests;
  // - large_share: a large layout (gen::LayoutOptions::large), past the wide copy's
  //   chunking and the parallel threshold, whatever max_elements says;
  // - loopback_share: the case goes to `loopback_target` (an exec: target, normally
  //   `shardcheck serve-protocol`, the strict policy behind the protocol codec) instead
  //   of the in-process policy; only when eval.target is empty and loopback_target set.
  // - backend_share: the case also runs on `share_backend` beside the CPU backend (the
  //   backend differential, props::EvalOptions::backend); only when eval.backend is empty
  //   and share_backend names a backend this build has.
  int digest_share = 8;
  int large_share = 10000;
  int loopback_share = 64;
  std::string loopback_target;
  int backend_share = 64;
  std::string share_backend;

  // Isolation: cases run in forked worker processes (batches of cases per process), so
  // a case that crashes, hangs or exhausts memory becomes a finding of its own
  // ("crash:<signal>:...", "timeout:...", "oom:...") and a fresh worker carries on
  // after it. Off: worker threads in this process (a crash ends the campaign).
  // The workers are forked from the thread that calls run(), without exec: threads of
  // the caller's own must not be inside the allocator or hold library locks then.
  bool isolate = false;
  // At the end of a campaign that ran every case, each finding's kept case is reduced
  // while it shows the same (props::reduce_case) with at most this many replays, and its
  // case file rewritten with the result and a `reduced` record; 0: no reduction. An
  // implementation in another process (eval.target) takes a tenth of it: each replay is
  // a round trip. On by default, since a finding is meant to be a minimal case (see
  // props::kDefaultMaxEvaluations). A reduction is deterministic; only one that the
  // campaign's reduction deadline (reduce_findings) cuts off leaves its case as found.
  Index reduce_evaluations = props::kDefaultMaxEvaluations;
  double case_time_limit = 60.0;             // seconds of wall time per case (isolated)
  Index case_memory_limit = Index{2} << 30;  // bytes per worker process (isolated)
  // Test-only hooks that plant a bad case: case INDEX aborts, sleeps forever, or
  // allocates memory without bound. They exist to show isolation at work.
  std::optional<Index> plant_crash_at;
  std::optional<Index> plant_hang_at;
  std::optional<Index> plant_oom_at;
  // Test-only: the worker that runs case INDEX (isolated) reports its batch with one
  // case too many in a tally, as a worker whose memory was damaged might.
  std::optional<Index> plant_garbage_at;
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
