// The ledger of a campaign (which cases are handed out and done, and what they found),
// running one case, and the in-process way of running cases: worker threads.
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "campaign_internal.h"
#include "shardcheck/gen/corruption.h"

namespace shardcheck::campaign::detail {

void RangeSet::add(Range range) {
  if (range.empty()) return;
  auto next = ranges_.upper_bound(range.first);
  if (next != ranges_.begin()) {
    auto previous = std::prev(next);
    if (previous->second >= range.first) {
      range.first = previous->first;
      range.end = std::max(range.end, previous->second);
      ranges_.erase(previous);
    }
  }
  while (next != ranges_.end() && next->first <= range.end) {
    range.end = std::max(range.end, next->second);
    next = ranges_.erase(next);
  }
  ranges_.emplace(range.first, range.end);
}

std::optional<Range> RangeSet::take_front(Index max_size) {
  if (ranges_.empty()) return std::nullopt;
  auto front = ranges_.begin();
  const Range whole{front->first, front->second};
  ranges_.erase(front);
  if (whole.size() <= max_size) return whole;
  ranges_.emplace(whole.first + max_size, whole.end);
  return Range{whole.first, whole.first + max_size};
}

Index RangeSet::count() const {
  Index total = 0;
  for (const auto& [first, end] : ranges_) total += end - first;
  return total;
}

bool RangeSet::overlaps(Range range) const {
  if (range.empty()) return false;
  auto next = ranges_.upper_bound(range.first);
  if (next != ranges_.begin() && std::prev(next)->second > range.first) return true;
  return next != ranges_.end() && next->first < range.end;
}

std::vector<std::pair<Index, Index>> RangeSet::ranges() const {
  return {ranges_.begin(), ranges_.end()};
}

void merge_finding(FindingState& into, const FindingState& other) {
  const Index occurrences = into.occurrences + other.occurrences;
  if (other.key() < into.key()) into = other;
  into.occurrences = occurrences;
}

void BatchResult::add_finding(const FindingState& finding) {
  auto [it, inserted] = findings.try_emplace(finding.signature, finding);
  if (!inserted) merge_finding(it->second, finding);
}

void BatchResult::merge(const BatchResult& other) {
  for (const auto& [name, tally] : other.by_constructor) by_constructor[name].merge(tally);
  for (const auto& [name, tally] : other.by_corruption) by_corruption[name].merge(tally);
  for (const auto& [name, tally] : other.by_refusal_kind) by_refusal_kind[name].merge(tally);
  for (const auto& [name, tally] : other.by_op) by_op[name].merge(tally);
  for (const auto& [signature, finding] : other.findings) add_finding(finding);
}

namespace {

std::string corruption_of(const Case& c) {
  return c.corruption ? c.corruption->kind : std::string(gen::kNoCorruption);
}

void size_of(const Case& c, FindingState& finding) {
  finding.numel = checked_numel(c.truth_map().logical_shape).value_or(0);
  Index pieces = 0;
  for (const auto& entry : c.map.ranks) pieces += static_cast<Index>(entry.pieces.size());
  finding.pieces = pieces;
}

[[noreturn]] void plant_hang() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

// Allocates and touches memory until a limit stops it; if none does by four times the
// configured limit, the plant gives up loudly rather than eat the machine.
[[noreturn]] void plant_oom(Index limit) {
  constexpr std::size_t kBlock = std::size_t{64} << 20;
  static std::vector<std::unique_ptr<char[]>> blocks;
  for (Index total = 0; total < 4 * limit; total += static_cast<Index>(kBlock)) {
    blocks.push_back(std::make_unique<char[]>(kBlock));
    std::memset(blocks.back().get(), 1, kBlock);
  }
  std::abort();
}

void plant(const Options& options, Index index) {
  if (options.plant_crash_at == index) std::abort();
  if (options.plant_hang_at == index) plant_hang();
  if (options.plant_oom_at == index) plant_oom(options.case_memory_limit);
}

}  // namespace

std::optional<FindingState> run_case(const Options& options, Index index, BatchResult& into,
                                     const std::function<void(int)>& phase) {
  if (phase) phase(1);
  const Case c = generate_indexed_case(options, index);
  if (phase) phase(2);
  plant(options, index);
  const Variant variant = variant_of(options, index);
  const props::Evaluation evaluation =
      props::evaluate_case(c, variant.loopback ? eval_options_of(options, index) : options.eval);
  into.by_constructor[c.constructor].add(evaluation.category);
  into.by_corruption[corruption_of(c)].add(evaluation.category);
  // An implementation's own error without a kind counts as "unknown".
  if (evaluation.refusal || evaluation.category == Outcome::refused) {
    into.by_refusal_kind[props::refusal_row(evaluation.refusal, evaluation.refusal_type)].add(evaluation.category);
  }
  for (const auto& op : evaluation.ops) into.by_op[op.label()].add(op.category);
  if (!evaluation.finding) return std::nullopt;
  // evaluate_case's reproducer is the case itself, so the index alone brings it back.
  FindingState finding{evaluation.finding->judge, evaluation.finding->signature, evaluation.finding->message, index, 1};
  size_of(c, finding);
  into.add_finding(finding);
  return finding;
}

void record_worker_death(const Options& options, Index index, const std::string& kind,
                         const std::string& message, bool generated, BatchResult& into) {
  FindingState finding;
  finding.index = index;
  finding.occurrences = 1;
  finding.message = message;
  std::string constructor = "unknown";
  std::string corruption = "unknown";
  if (generated) {
    const Case c = generate_indexed_case(options, index);
    constructor = c.constructor;
    corruption = corruption_of(c);
    size_of(c, finding);
  } else {
    finding.has_case = false;
  }
  // kind: "crash:<why>", "timeout" or "oom", as the parent names a worker's death.
  const std::string_view cause = std::string_view(kind).substr(0, kind.find(':'));
  finding.judge = cause == "timeout" ? props::JudgeId::worker_timeout
                  : cause == "oom"   ? props::JudgeId::worker_oom
                                     : props::JudgeId::worker_crash;
  const std::string why = kind.find(':') == std::string::npos ? std::string() : kind.substr(kind.find(':') + 1) + ":";
  finding.signature =
      props::signature_of(finding.judge, generated ? why + constructor + "/" + corruption : why + "generator");
  into.by_constructor[constructor].add_crashed();
  into.by_corruption[corruption].add_crashed();
  into.add_finding(finding);
}

Ledger::Ledger(const Options& options, const Checkpoint* resume) : options_(options) {
  shard_count_ = std::max(1, options.shard_count);
  shard_index_ = std::clamp(options.shard_index, 0, static_cast<int>(shard_count_) - 1);
  // Cases of this shard are indices shard_index + k * shard_count, k = 0, 1, ...
  if (options.cases) {
    const Index limit = *options.cases;
    shard_cases_ = limit > shard_index_ ? (limit - shard_index_ + shard_count_ - 1) / shard_count_ : 0;
  } else {
    shard_cases_ = std::numeric_limits<Index>::max();
  }
  if (!resume) return;
  Index previous_end = 0;
  for (const auto& [first, end] : resume->done) {
    const Index clipped = std::min(end, shard_cases_);
    if (first >= clipped) continue;
    done_.add({first, clipped});
    pending_.add({previous_end, first});
    previous_end = clipped;
  }
  frontier_ = previous_end;
  done_cases_ = done_.count();
  const Report& report = resume->report;
  committed_.by_constructor = report.by_constructor;
  committed_.by_corruption = report.by_corruption;
  committed_.by_refusal_kind = report.by_refusal_kind;
  committed_.by_op = report.by_op;
  for (const auto& record : report.findings) {
    committed_.findings[record.signature] = FindingState::from(record);
  }
}

std::optional<Range> Ledger::take(Index max_size) {
  std::lock_guard lock(mutex_);
  if (stopping()) return std::nullopt;
  if (auto range = pending_.take_front(max_size)) return range;
  if (frontier_ >= shard_cases_) return std::nullopt;
  const Range range{frontier_, frontier_ + std::min(max_size, shard_cases_ - frontier_)};
  frontier_ = range.end;
  return range;
}

namespace {

std::string range_text(Range range) {
  return range.size() == 1 ? fmt::format("case {}", range.first)
                           : fmt::format("cases [{}, {})", range.first, range.end);
}

}  // namespace

void Ledger::give_back(Range range) {
  std::lock_guard lock(mutex_);
  if (range.empty()) return;
  if (fault_.empty()) {
    if (range.first < 0 || range.end > frontier_) {
      fault_ = fmt::format("{} given back, beyond the {} cases handed out", range_text(range), frontier_);
    } else if (done_.overlaps(range)) {
      fault_ = fmt::format("{} given back after being done", range_text(range));
    } else if (pending_.overlaps(range)) {
      fault_ = fmt::format("{} given back twice", range_text(range));
    }
  }
  pending_.add(range);
}

void Ledger::commit(Range range, const BatchResult& result) {
  std::lock_guard lock(mutex_);
  if (fault_.empty() && !range.empty()) {
    if (range.first < 0 || range.end > frontier_) {
      fault_ = fmt::format("{} committed, beyond the {} cases handed out", range_text(range), frontier_);
    } else if (done_.overlaps(range)) {
      fault_ = fmt::format("{} committed twice", range_text(range));
    } else if (pending_.overlaps(range)) {
      fault_ = fmt::format("{} committed while waiting to run again", range_text(range));
    }
  }
  committed_cases_ += std::max<Index>(0, range.size());
  done_.add(range);
  committed_.merge(result);
  done_cases_.fetch_add(range.size(), std::memory_order_relaxed);
}

std::string Ledger::audit(bool complete) const {
  std::lock_guard lock(mutex_);
  if (!fault_.empty()) return fault_;
  RangeSet both = done_;
  for (const auto& [first, end] : pending_.ranges()) both.add({first, end});
  const auto whole = both.ranges();
  const Index done = done_.count();
  if (done + pending_.count() != frontier_ || (frontier_ > 0 && (whole.size() != 1 || whole[0].first != 0))) {
    const Index lost = frontier_ - both.count();
    return fmt::format("of the {} cases handed out, {} are neither done nor waiting to run (done {}, waiting {})",
                       frontier_, lost, done, pending_.count());
  }
  Index tallied = 0;
  for (const auto& [name, tally] : committed_.by_constructor) tallied += tally.cases;
  if (tallied != done) {
    return fmt::format("the tallies count {} cases, the ledger {} done", tallied, done);
  }
  const Index resumed = done - committed_cases_;
  if (resumed < 0 || done_cases() != done) {
    return fmt::format("{} cases were committed this run, {} counted, for {} done", committed_cases_, done_cases(),
                       done);
  }
  if (complete && options_.cases && (frontier_ != shard_cases_ || !pending_.empty())) {
    return fmt::format("the campaign calls itself complete with {} of its {} cases done", done, shard_cases_);
  }
  return {};
}

bool Ledger::all_done() const {
  return options_.cases && done_cases() == shard_cases_;
}

Checkpoint Ledger::snapshot(double seconds, bool complete) const {
  std::lock_guard lock(mutex_);
  Checkpoint checkpoint;
  checkpoint.report = make_report(options_, committed_, seconds, complete);
  checkpoint.done = done_.ranges();
  return checkpoint;
}

Report make_report(const Options& options, const BatchResult& state, double seconds, bool complete) {
  Report report;
  report.options = options;
  report.seconds = seconds;
  report.complete = complete;
  report.by_constructor = state.by_constructor;
  report.by_corruption = state.by_corruption;
  report.by_refusal_kind = state.by_refusal_kind;
  report.by_op = state.by_op;
  for (const auto& [name, tally] : report.by_constructor) report.total.merge(tally);
  report.cases = report.total.cases;
  for (const auto& [signature, f] : state.findings) report.findings.push_back(f.record());
  return report;
}

Monitor::Monitor(const Options& options, const Control& control, const Ledger& ledger,
                 Clock::time_point start, double previous_seconds)
    : control_(control), ledger_(ledger), deadline_(Clock::time_point::max()), last_progress_(start) {
  // With a count the time budget is a cap on this run; alone it is the whole campaign's.
  if (options.time_seconds) {
    const double left = options.cases ? *options.time_seconds : *options.time_seconds - previous_seconds;
    deadline_ = start + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, left)));
  }
}

int Monitor::poll() {
  const auto now = Clock::now();
  if (control_.progress &&
      now - last_progress_ >= std::chrono::duration<double>(control_.progress_interval)) {
    last_progress_ = now;
    control_.progress(ledger_.done_cases());
  }
  const int requested = control_.stop ? control_.stop->load(std::memory_order_relaxed) : 0;
  if (requested >= kStopImmediate) return kStopImmediate;
  if (requested >= kStopGraceful) return kStopGraceful;
  if (now >= deadline_) {
    deadline_reached_ = true;
    return kStopGraceful;
  }
  return 0;
}

void run_threads(const Options& options, Ledger& ledger, Writer* writer, Monitor& monitor,
                 const std::function<void()>& immediate) {
  constexpr Index kChunk = 64;
  const int jobs = std::max(1, options.jobs);
  std::atomic<int> running{jobs};
  auto worker = [&] {
    // The smallest case this thread offered per signature: only a smaller one can be
    // news to the writer, which keeps its lock out of the hot loop.
    std::map<std::string, std::tuple<Index, Index, Index>, std::less<>> offered;
    while (auto range = ledger.take(kChunk)) {
      BatchResult result;
      Index k = range->first;
      for (; k < range->end && !ledger.stopping(); ++k) {
        auto finding = run_case(options, ledger.index_of(k), result);
        if (!finding || !writer) continue;
        auto [it, inserted] = offered.try_emplace(finding->signature, finding->key());
        if (!inserted && !(finding->key() < it->second)) continue;
        it->second = finding->key();
        writer->offer(*finding);
      }
      ledger.commit({range->first, k}, result);
      if (k < range->end) ledger.give_back({k, range->end});
    }
    running.fetch_sub(1);
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < jobs; ++j) threads.emplace_back(worker);
  while (running.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int stop = monitor.poll();
    if (stop == kStopImmediate) immediate();
    if (stop != 0) ledger.request_stop();
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace shardcheck::campaign::detail
