#include "shardcheck/campaign.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "shardcheck/gen/choice.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"

namespace shardcheck::campaign {

void Tally::add(props::Category category) {
  ++cases;
  switch (category) {
    case props::Category::refused: ++refused; break;
    case props::Category::exact: ++exact; break;
    case props::Category::wrong: ++wrong; break;
    case props::Category::valid_but_different: ++valid_but_different; break;
    case props::Category::target_fault: ++target_faults; break;
  }
}

void Tally::merge(const Tally& other) {
  cases += other.cases;
  refused += other.refused;
  exact += other.exact;
  wrong += other.wrong;
  valid_but_different += other.valid_but_different;
  target_faults += other.target_faults;
}

bool Report::failed() const {
  if (total.wrong > 0 || !findings.empty()) return true;
  return options.eval.strict_layout && total.valid_but_different > 0;
}

std::uint64_t case_seed(std::uint64_t seed, Index index) {
  // splitmix64 finaliser over (seed, index): independent streams per case.
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<std::uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Case generate_indexed_case(const Options& options, Index index) {
  gen::SeededChoices choices(case_seed(options.seed, index));
  return gen::generate_case(choices, options.generate);
}

namespace {

using Clock = std::chrono::steady_clock;

// Smaller is a better reproducer: fewer elements, fewer pieces, then the earlier case.
std::tuple<Index, std::size_t, Index> reproducer_size(const Case& c, Index index) {
  const Map& truth = c.truth_map();
  Index numel = checked_numel(truth.logical_shape).value_or(0);
  std::size_t pieces = 0;
  for (const auto& entry : c.map.ranks) pieces += entry.pieces.size();
  return {numel, pieces, index};
}

struct WorkerState {
  std::map<std::string, Tally> by_constructor;
  std::map<std::string, Tally> by_corruption;
  std::map<std::string, Tally> by_refusal_kind;
  std::map<std::string, FindingRecord> findings;
};

void record_finding(WorkerState& state, const props::Finding& finding, Index index) {
  auto [it, inserted] = state.findings.try_emplace(finding.signature);
  FindingRecord& record = it->second;
  if (inserted || reproducer_size(finding.reproducer, index) <
                      reproducer_size(record.reproducer, record.first_case)) {
    const Index seen = record.occurrences;
    record = FindingRecord{finding.signature, finding.message, index, seen, finding.reproducer};
  }
  ++record.occurrences;
}

void run_one(const Options& options, Index index, WorkerState& state) {
  const Case c = generate_indexed_case(options, index);
  const props::Evaluation evaluation = props::evaluate_case(c, options.eval);
  state.by_constructor[c.constructor].add(evaluation.category);
  state.by_corruption[c.corruption ? c.corruption->kind : std::string(gen::kNoCorruption)].add(
      evaluation.category);
  if (evaluation.refusal) {
    state.by_refusal_kind[std::string(kind_name(*evaluation.refusal))].add(evaluation.category);
  } else if (evaluation.category == props::Category::refused) {
    state.by_refusal_kind["unknown"].add(evaluation.category);  // an implementation's own error
  }
  if (evaluation.finding) record_finding(state, *evaluation.finding, index);
}

void merge_into(Report& report, std::map<std::string, FindingRecord>& findings, WorkerState& state) {
  for (auto& [name, tally] : state.by_constructor) report.by_constructor[name].merge(tally);
  for (auto& [name, tally] : state.by_corruption) report.by_corruption[name].merge(tally);
  for (auto& [name, tally] : state.by_refusal_kind) report.by_refusal_kind[name].merge(tally);
  for (auto& [signature, record] : state.findings) {
    auto [it, inserted] = findings.try_emplace(signature, record);
    if (!inserted) {
      const Index occurrences = it->second.occurrences + record.occurrences;
      if (reproducer_size(record.reproducer, record.first_case) <
          reproducer_size(it->second.reproducer, it->second.first_case)) {
        it->second = record;
      }
      it->second.occurrences = occurrences;
    }
  }
}

}  // namespace

Report run(const Options& options, const std::function<void(Index)>& progress,
           double progress_interval) {
  Report report;
  report.options = options;
  const int jobs = std::max(1, options.jobs);
  const int shard_count = std::max(1, options.shard_count);
  const Index shard_index = std::clamp(options.shard_index, 0, shard_count - 1);
  // Cases of this shard are indices shard_index + k * shard_count, k = 0, 1, ...
  const Index limit = options.cases ? *options.cases : std::numeric_limits<Index>::max();
  const Index shard_cases = options.cases ? (limit > shard_index ? (limit - shard_index + shard_count - 1) / shard_count : 0)
                                          : std::numeric_limits<Index>::max();
  const auto start = Clock::now();
  const auto deadline = options.time_seconds
                            ? start + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(*options.time_seconds))
                            : Clock::time_point::max();
  constexpr Index kChunk = 64;
  std::atomic<Index> next_k{0};
  std::atomic<Index> done{0};
  std::atomic<bool> stop{false};
  std::vector<WorkerState> states(jobs);
  auto worker = [&](int id) {
    WorkerState& state = states[id];
    while (!stop.load(std::memory_order_relaxed)) {
      const Index first = next_k.fetch_add(kChunk);
      if (first >= shard_cases) break;
      const Index last = std::min(first + kChunk, shard_cases);
      for (Index k = first; k < last; ++k) run_one(options, shard_index + k * shard_count, state);
      done.fetch_add(last - first, std::memory_order_relaxed);
      if (Clock::now() >= deadline) stop = true;
    }
  };
  std::vector<std::thread> threads;
  for (int j = 0; j < jobs; ++j) threads.emplace_back(worker, j);
  if (progress) {
    const auto interval = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(progress_interval));
    auto last_report = start;
    while (done.load() < shard_cases && !stop.load()) {
      std::this_thread::sleep_for(std::min(interval, std::chrono::duration_cast<Clock::duration>(
                                                         std::chrono::milliseconds(50))));
      if (Clock::now() - last_report >= interval) {
        last_report = Clock::now();
        progress(done.load());
      }
      if (Clock::now() >= deadline) stop = true;
    }
  }
  for (auto& thread : threads) thread.join();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::map<std::string, FindingRecord> findings;
  for (auto& state : states) merge_into(report, findings, state);
  for (const auto& [name, tally] : report.by_constructor) report.total.merge(tally);
  report.cases = report.total.cases;
  for (auto& [signature, record] : findings) report.findings.push_back(std::move(record));
  return report;
}

namespace {

std::string table_row(std::string_view name, const Tally& t) {
  return fmt::format("  {:<28} {:>10} {:>10} {:>10} {:>10} {:>10}\n", name, t.cases, t.refused,
                     t.exact, t.wrong, t.valid_but_different);
}

std::string table_header(std::string_view title) {
  return fmt::format("  {:<28} {:>10} {:>10} {:>10} {:>10} {:>10}\n", title, "cases", "refused",
                     "exact", "wrong", "valid-diff");
}

}  // namespace

std::string format_table(const Report& report) {
  std::string out = table_header("constructor");
  for (std::string_view name : gen::constructor_names()) {
    auto it = report.by_constructor.find(std::string(name));
    out += table_row(name, it == report.by_constructor.end() ? Tally{} : it->second);
  }
  out += "\n" + table_header("corruption");
  std::vector<std::string_view> kinds{gen::kNoCorruption};
  for (std::string_view kind : gen::corruption_kinds()) kinds.push_back(kind);
  for (std::string_view kind : kinds) {
    auto it = report.by_corruption.find(std::string(kind));
    out += table_row(kind, it == report.by_corruption.end() ? Tally{} : it->second);
  }
  if (!report.by_refusal_kind.empty()) {
    out += "\n" + table_header("refused as");
    for (const auto& [kind, tally] : report.by_refusal_kind) out += table_row(kind, tally);
  }
  out += "\n" + table_row("total", report.total);
  if (report.total.target_faults > 0) {
    out += fmt::format("  target faults (crash, hang, garbage): {}\n", report.total.target_faults);
  }
  const double rate = report.seconds > 0 ? static_cast<double>(report.cases) / report.seconds : 0.0;
  const Options& o = report.options;
  out += fmt::format(
      "\n{} cases in {:.1f} s ({:.0f} cases/s, {} job{}); {} {}, oracle {}\n", report.cases,
      report.seconds, rate, o.jobs, o.jobs == 1 ? "" : "s", o.eval.target.empty() ? "policy" : "target",
      o.eval.target.empty() ? std::string(policy_name(o.eval.policy)) : o.eval.target,
      o.eval.oracle == oracles::OracleKind::truth ? "truth" : "same-map");
  out += fmt::format("rerun: shardcheck campaign --seed {} --cases {} --{} {} --oracle {}{}\n", o.seed,
                     o.cases ? *o.cases : report.cases, o.eval.target.empty() ? "policy" : "target",
                     o.eval.target.empty() ? std::string(policy_name(o.eval.policy)) : o.eval.target,
                     o.eval.oracle == oracles::OracleKind::truth ? "truth" : "same-map",
                     o.shard_count > 1 ? fmt::format(" --shard {}/{}", o.shard_index, o.shard_count)
                                       : std::string());
  return out;
}

namespace {
Json tally_json(const Tally& t) {
  return Json{{"cases", t.cases},
              {"refused", t.refused},
              {"exact", t.exact},
              {"silently_wrong", t.wrong},
              {"valid_but_different", t.valid_but_different},
              {"target_faults", t.target_faults}};
}
}  // namespace

Json report_to_json(const Report& report) {
  const Options& o = report.options;
  Json j;
  j["seed"] = o.seed;
  j["requested_cases"] = o.cases ? Json(*o.cases) : Json(nullptr);
  j["time_seconds"] = o.time_seconds ? Json(*o.time_seconds) : Json(nullptr);
  j["policy"] = policy_name(o.eval.policy);
  if (!o.eval.target.empty()) j["target"] = o.eval.target;
  j["oracle"] = o.eval.oracle == oracles::OracleKind::truth ? "truth" : "same-map";
  j["jobs"] = o.jobs;
  j["shard"] = fmt::format("{}/{}", o.shard_index, o.shard_count);
  j["max_elements"] = o.generate.layout.max_elements;
  j["cases"] = report.cases;
  j["seconds"] = report.seconds;
  j["cases_per_second"] = report.seconds > 0 ? static_cast<double>(report.cases) / report.seconds : 0.0;
  j["total"] = tally_json(report.total);
  for (const auto& [name, tally] : report.by_constructor) j["by_constructor"][name] = tally_json(tally);
  for (const auto& [name, tally] : report.by_corruption) j["by_corruption"][name] = tally_json(tally);
  for (const auto& [name, tally] : report.by_refusal_kind) j["by_refusal_kind"][name] = tally_json(tally);
  j["findings"] = Json::array();
  for (const auto& finding : report.findings) {
    j["findings"].push_back(Json{{"signature", finding.signature},
                                 {"message", finding.message},
                                 {"case_index", finding.first_case},
                                 {"occurrences", finding.occurrences}});
  }
  j["failed"] = report.failed();
  return j;
}

Json finding_case_file(const Report& report, const FindingRecord& finding) {
  Case c = finding.reproducer;
  c.name = finding.signature;
  const bool other_target = !report.options.eval.target.empty();
  if ((report.options.eval.policy == Policy::legacy || other_target) &&
      finding.signature.rfind("silently-wrong", 0) == 0) {
    // Found under the legacy model or another implementation: strict must refuse it.
    c.expect = Expectation::refused;
    if (!other_target) c.legacy_expect = "wrong";
  }
  Json j = encode_case(c);
  j["signature"] = finding.signature;
  j["comment"] = fmt::format("found by shardcheck campaign --seed {} (case {}, {} {}): {}",
                             report.options.seed, finding.first_case, other_target ? "target" : "policy",
                             other_target ? report.options.eval.target
                                          : std::string(policy_name(report.options.eval.policy)),
                             finding.message);
  return j;
}

}  // namespace shardcheck::campaign
