// The campaign engine behind `shardcheck campaign`: generated (layout, corruption)
// cases through the oracle, tallied per constructor and per corruption kind.
//
// Deterministic: case i is generated from its own seed derived from (seed, i), so the
// same seed and count give the same tallies and findings for any number of jobs, and
// --shard I/N (cases with i % N == I) splits one campaign into parts whose tables add up.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardcheck/gen/case_gen.h"
#include "shardcheck/properties.h"

namespace shardcheck::campaign {

struct Tally {
  Index cases = 0;
  Index refused = 0;
  Index exact = 0;
  Index wrong = 0;
  Index valid_but_different = 0;
  Index target_faults = 0;  // an exec target crashed, hung or answered garbage
  void add(props::Category category);
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
};

// The smallest case seen for one finding signature (minimised by size, then index).
struct FindingRecord {
  std::string signature;
  std::string message;
  Index first_case = 0;  // index of the kept case
  Index occurrences = 0;
  Case reproducer;
};

struct Report {
  Options options;
  Index cases = 0;
  double seconds = 0;
  std::map<std::string, Tally> by_constructor;
  std::map<std::string, Tally> by_corruption;
  std::map<std::string, Tally> by_refusal_kind;  // refused cases per error kind
  Tally total;
  std::vector<FindingRecord> findings;  // sorted by signature
  // Exit status of the campaign: anything silently wrong, any other property finding,
  // or (with strict_layout) any valid-but-different case.
  bool failed() const;
};

// The seed of case `index` within a campaign of `seed`.
std::uint64_t case_seed(std::uint64_t seed, Index index);
// Case `index` of a campaign, exactly as the campaign generates it.
Case generate_indexed_case(const Options& options, Index index);

// Runs a campaign. `progress` (may be empty) is called from one thread about every
// `progress_interval` seconds with the number of cases done so far.
Report run(const Options& options, const std::function<void(Index done)>& progress = {},
           double progress_interval = 0.5);

// The table: one row per constructor and per corruption kind, totals, rate, seed.
std::string format_table(const Report& report);
// report.json
Json report_to_json(const Report& report);
// A ready regression case file for a finding (signature and message included).
Json finding_case_file(const Report& report, const FindingRecord& finding);

}  // namespace shardcheck::campaign
