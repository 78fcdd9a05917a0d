// Pieces of the campaign engine shared by its parts: the ledger (which cases are
// handed out, which are done, and the tallies of the done ones), the batch results
// workers hand over, the writer that keeps the output directory current, and the two
// ways of running cases (threads in this process, or forked worker processes).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "shardcheck/campaign.h"

namespace shardcheck::campaign::detail {

using Clock = std::chrono::steady_clock;

// Shard-local case numbers [first, end): the k-th case of shard I/N is index I + k * N.
struct Range {
  Index first = 0;
  Index end = 0;
  Index size() const { return end - first; }
  bool empty() const { return end <= first; }
};

// Disjoint ranges, merged when they touch.
class RangeSet {
 public:
  void add(Range range);
  // Removes and returns up to `max_size` numbers from the lowest range.
  std::optional<Range> take_front(Index max_size);
  bool empty() const { return ranges_.empty(); }
  Index count() const;
  // Whether some number of `range` is in the set.
  bool overlaps(Range range) const;
  std::vector<std::pair<Index, Index>> ranges() const;

 private:
  std::map<Index, Index> ranges_;  // first -> end
};

// One signature's best case so far.
struct FindingState {
  props::JudgeId judge = props::JudgeId::unusable_case;
  std::string signature;
  std::string message;
  Index index = 0;
  Index occurrences = 0;
  Index numel = 0;
  Index pieces = 0;
  bool has_case = true;
  std::tuple<Index, Index, Index> key() const { return {numel, pieces, index}; }

  // The report's record of this finding (without its reproducer), and back.
  FindingRecord record() const {
    FindingRecord r;
    r.judge = judge;
    r.signature = signature;
    r.message = message;
    r.first_case = index;
    r.occurrences = occurrences;
    r.numel = numel;
    r.pieces = pieces;
    r.has_case = has_case;
    return r;
  }
  static FindingState from(const FindingRecord& r) {
    return FindingState{r.judge, r.signature, r.message, r.first_case, r.occurrences, r.numel, r.pieces, r.has_case};
  }
};

// Keeps the smaller case of the two and adds the occurrences: an order-independent
// merge, so any split of the cases among workers (and runs) gives the same result.
void merge_finding(FindingState& into, const FindingState& other);

// What a worker hands over for a range of cases.
struct BatchResult {
  std::map<std::string, Tally> by_constructor;
  std::map<std::string, Tally> by_corruption;
  std::map<std::string, Tally> by_refusal_kind;
  std::map<std::string, Tally> by_op;
  std::map<std::string, FindingState> findings;
  void add_finding(const FindingState& finding);
  void merge(const BatchResult& other);
  bool empty() const { return by_constructor.empty() && findings.empty(); }
};

// Generates and evaluates case `index` into `into`; returns its finding, if any. The
// planted test hooks of `options` act here, between generation and evaluation.
// `phase`, when given, is told 1 before generation and 2 before evaluation.
std::optional<FindingState> run_case(const Options& options, Index index, BatchResult& into,
                                     const std::function<void(int phase)>& phase = {});

// The tally and finding of a case that took its worker down: `kind` is "crash:<why>",
// "timeout" or "oom" (the judges worker_crash, worker_timeout and worker_oom). The case is generated again here (generation succeeded in the
// worker: it died evaluating) for its constructor, corruption and size.
void record_worker_death(const Options& options, Index index, const std::string& kind,
                         const std::string& message, bool generated, BatchResult& into);

// Hands out case ranges and keeps the committed state: what is done, its tallies and
// findings. Thread-safe.
class Ledger {
 public:
  Ledger(const Options& options, const Checkpoint* resume);

  Index index_of(Index k) const { return shard_index_ + k * shard_count_; }
  // The next range to run, at most `max_size` cases; none when stopping or all is out.
  std::optional<Range> take(Index max_size);
  // A range taken but not run (a stop, or the rest of a dead worker's batch).
  void give_back(Range range);
  // Cases `range` ran, with their results.
  void commit(Range range, const BatchResult& result);
  // The end-of-run audit: the cases done and the cases given back are disjoint and
  // together exactly [0, N) of what was handed out, each case committed once, the
  // tallies count the cases done, and a complete fixed-count campaign did all of its
  // cases. Empty when it all adds up; else a sentence saying what was lost or doubled.
  // Call when no range is handed out any more (every worker has returned).
  std::string audit(bool complete) const;

  void request_stop() { stopping_.store(true, std::memory_order_relaxed); }
  bool stopping() const { return stopping_.load(std::memory_order_relaxed); }
  // Every case of a fixed-count campaign is done.
  bool all_done() const;
  Index done_cases() const { return done_cases_.load(std::memory_order_relaxed); }

  // The committed state, as a checkpoint (findings without reproducers).
  Checkpoint snapshot(double seconds, bool complete) const;

 private:
  const Options& options_;
  Index shard_index_;
  Index shard_count_;
  Index shard_cases_;  // numeric_limits<Index>::max() for a time budget
  std::atomic<bool> stopping_{false};
  std::atomic<Index> done_cases_{0};
  mutable std::mutex mutex_;
  RangeSet pending_;  // below frontier_, not done and not handed out
  Index frontier_ = 0;
  RangeSet done_;
  BatchResult committed_;
  // The first inconsistency seen as it happened (a range committed or given back twice,
  // or outside what was handed out), reported by audit().
  std::string fault_;
  Index committed_cases_ = 0;  // the sum of the sizes of the ranges committed this run
};

// A report from a checkpoint: totals summed, findings in signature order.
Report make_report(const Options& options, const BatchResult& state, double seconds, bool complete);

// The findings' kept cases reduced (Options::reduce_evaluations): each reproducer that can
// be reduced replaced by its reduction, with the record of it. In worker processes when
// the campaign isolates (a replay that crashes or hangs costs its worker), else threads.
// No finding's reduction starts after `seconds` (the campaign's own time, 60 s at least):
// those left keep the case as found.
void reduce_findings(const Options& options, std::vector<FindingRecord>& findings, const Control& control,
                     double seconds);

// Keeps `out` current (see Control::out): a thread that writes new findings' case files
// as workers offer them, and report.json, table.txt, checkpoint.json every
// flush_interval seconds.
class Writer {
 public:
  Writer(const Options& options, const Control& control, const Ledger& ledger,
         std::function<double()> seconds);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // `known`: findings already on record (a resumed campaign); their files are written
  // again from the record, without announcing them. `threaded`: a thread of its own
  // does the writing; otherwise the caller calls pump() often (the worker pool does:
  // it forks, and a process that forks is best left with one thread, since another
  // thread may hold a lock of the allocator at that moment, AddressSanitizer's
  // included, which the child would then wait for forever).
  void start(const std::vector<FindingRecord>& known, bool threaded);
  // A worker saw `finding`; written when its signature is new or the case smaller.
  void offer(const FindingState& finding);
  // Writes what was offered since, and the report when it is due (see start()).
  void pump();
  // Synchronous best effort for an immediate stop: the committed state, now.
  void flush_now();
  // Drains the queue, makes every case file match the committed findings, writes the
  // final report, table and checkpoint, and stops the thread.
  void finish(bool complete);
  // The case files of reduced findings written again, with their reductions; after finish().
  void write_reduced(const std::vector<FindingRecord>& findings);
  // The files whose last write failed (Report::output_errors); call after finish().
  std::vector<OutputError> output_errors();

 private:
  struct Written {
    Index index = 0;
    std::tuple<Index, Index, Index> key;
  };
  void loop();
  void write_findings(std::vector<FindingState> batch, bool announce);
  void write_state(bool complete, bool final = false);
  bool write_file(const std::filesystem::path& path, const std::string& text);
  void warn(const std::string& message);

  const Options& options_;
  const Control& control_;
  const Ledger& ledger_;
  std::function<double()> seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, FindingState> best_;  // the best case offered per signature
  std::vector<FindingState> queue_;
  bool finishing_ = false;
  Clock::time_point next_flush_;            // of report, table and checkpoint
  std::mutex write_mutex_;                 // one writer of the files at a time
  std::map<std::string, Written> on_disk_;  // what each case file holds (under write_mutex_)
  std::vector<TimelineSample> timeline_;    // one per report written (under write_mutex_), for report.html
  std::map<std::filesystem::path, std::string> failing_;  // path -> why its last write failed (under write_mutex_)
  std::thread thread_;
};

// Watches the clock, the stop requests and progress for the loops that run cases.
class Monitor {
 public:
  Monitor(const Options& options, const Control& control, const Ledger& ledger, Clock::time_point start,
          double previous_seconds);
  // Called every few milliseconds: reports progress, and returns the stop wanted now
  // (0, kStopGraceful, kStopImmediate).
  int poll();
  bool deadline_reached() const { return deadline_reached_; }

 private:
  const Control& control_;
  const Ledger& ledger_;
  Clock::time_point deadline_;
  Clock::time_point last_progress_;
  bool deadline_reached_ = false;
};

// The two ways of running the ledger's cases. Both return when every worker is done
// (all cases run, or a stop request honoured). On an immediate stop they stop what
// they can (the worker processes) and call `immediate`, which does not return.
void run_threads(const Options& options, Ledger& ledger, Writer* writer, Monitor& monitor,
                 const std::function<void()>& immediate);
void run_processes(const Options& options, const Control& control, Ledger& ledger, Writer* writer,
                   Monitor& monitor, const std::function<void()>& immediate);

}  // namespace shardcheck::campaign::detail
