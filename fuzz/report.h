// What every fuzz target does with a finding, so campaigns can deduplicate them: one
// stable line `SHARDCHECK-FINDING: <signature>` on stderr, then the reproducer as a
// ready regression case file between marker lines, then abort().
#pragma once

#include <string_view>

#include "shardcheck/properties.h"

namespace shardcheck::fuzz {

inline constexpr std::string_view kFindingPrefix = "SHARDCHECK-FINDING: ";
inline constexpr std::string_view kCaseBegin = "SHARDCHECK-CASE-BEGIN";
inline constexpr std::string_view kCaseEnd = "SHARDCHECK-CASE-END";

// `found_by` names the target in the case file's comment; `under_legacy`: the finding was
// made under the legacy policy. The case file is props::finding_case_file's, with the
// expectations of the finding's judge.
[[noreturn]] void report_finding(const props::Finding& finding, std::string_view found_by,
                                 bool under_legacy = false);

// SHARDCHECK_REPLAY_STRICT=1: the replay of corpus/regressions, where an input that no
// longer decodes or no longer meets its expectations is itself a failure.
bool replay_strict();

// Counters for the share of inputs a target could use, printed at exit when
// SHARDCHECK_FUZZ_STATS=1 (how the structure-aware mutator is measured).
void count_input(bool usable);

// Declared first in every LLVMFuzzerTestOneInput: an input frees, before it returns,
// what the oracles keep per thread between calls (oracles::forget_reference_verdicts),
// so that no input leaves allocations behind. libFuzzer runs such an input a second
// time to look for a leak: 12-14% of each target's profile went to those second runs.
struct InputScope {
  InputScope() = default;
  InputScope(const InputScope&) = delete;
  InputScope& operator=(const InputScope&) = delete;
  ~InputScope();
};

}  // namespace shardcheck::fuzz
