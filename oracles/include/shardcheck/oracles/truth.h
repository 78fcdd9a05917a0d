// Oracles that judge a Case (contract 8): the truth oracle (shards written by the
// uncorrupted map, converted through the map under test) and the same-map round trip.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/convert.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/outcome.h"

namespace shardcheck::oracles {

enum class OracleKind { truth, same_map };

// The oracles' names, as the command line takes them (--oracle) and reports print them:
// the one table of them.
struct OracleName {
  OracleKind kind;
  std::string_view name;
};
inline constexpr OracleName kOracleNames[] = {
    {OracleKind::truth, "truth"},
    {OracleKind::same_map, "same-map"},
};

constexpr std::string_view oracle_kind_name(OracleKind kind) {
  for (const auto& row : kOracleNames) {
    if (row.kind == kind) return row.name;
  }
  return "truth";
}

constexpr std::optional<OracleKind> parse_oracle_kind(std::string_view name) {
  for (const auto& row : kOracleNames) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}

// "truth or same-map": the names, for help texts and refusals.
std::string oracle_choices(std::string_view last_separator = " or ");

// First element that differs between expected and actual output.
struct Difference {
  Index element = 0;
  std::uint64_t expected_bits = 0;
  std::uint64_t actual_bits = 0;
  Index count = 0;  // how many elements differ in total
  // Every differing element is a NaN in both: only NaN bits changed (payload, sign,
  // quieting), a fault of scaling or copying, not of the layout.
  bool nan_bits_only = false;
};

// Contract 8: the truth oracle's expected tensor is the truth map's own rebuild of the
// shards (by the reference model), which is F unless scaling rounded.
struct ExpectedVsFull {
  std::optional<Difference> difference;  // expected vs F: the first element, both values
  std::string reason;                    // why they differ, one sentence; empty when equal
  // With every truth scale a power of two the expected tensor must be F (but for gradual
  // underflow): what differs otherwise, a defect of the harness; empty when none.
  std::string harness_defect;
};

struct OpOutcome {
  Op op = Op::rebuild;
  Outcome verdict = Outcome::exact;      // refused, exact, wrong or target_fault
  std::optional<Error> error;            // when refused
  std::optional<Rank> rank;              // extract: the rank that was wrong or refused
  std::optional<Difference> difference;  // when wrong
  std::optional<Buffer> output;          // the tensor returned: F (rebuild) or the shard (extract)
  // Rebuild accepted although it was asked to verify a content digest that F as returned
  // does not have (or that the map does not record): wrong whatever the layout.
  bool digest_ignored = false;
  // A refusal whose report is wrong: a condition-7 error naming values that no copy of
  // the element holds. Why, or empty.
  std::string misreported;
  std::string message;
  // Exec targets: the refusal in the implementation's own words (error stays empty when
  // its text names no kind: "unknown"), or what went wrong with the process.
  std::optional<TargetRefusal> refusal;
  std::optional<TargetFault> fault;
  // Reshard: the implementation declined to plan and took its documented fallback (what
  // it declined with); the verdict is on what the fallback returned or refused.
  std::optional<Declined> fallback;
  // A tensor returned through a scaled map where the reference model refuses the same
  // conversion (contract 1.2: an element the scale overflows or flushes): the refusal owed.
  std::optional<Error> owed_refusal;
  // The map passes every check of contract 3 that this operation owes (by the reference
  // model): conditions 1-6 and section 1.2's refusals; a rebuild also condition 7 on the
  // shards it read, a reshard also the target map. An extract reads no shard, so a replica
  // the truth map's shards contradict does not make its map invalid.
  bool valid_layout = false;
};

struct CaseOutcome {
  // wrong if any op wrong, else target_fault if any, else refused if any, else exact
  Outcome verdict = Outcome::exact;
  std::optional<Error> error;  // the first refusal
  bool valid_layout = false;   // valid for every operation the case lists (OpOutcome::valid_layout)
  // The implementation returned a tensor through a map that is not valid (contract 9):
  // reported apart from the data verdict, which may still be exact.
  bool accepted_invalid = false;
  // Why the shards the truth map wrote admit no correct rebuild (replicas scaled
  // differently that disagree once unscaled, contract 1.2); nullopt when one exists.
  std::optional<Error> no_correct_rebuild;
  ExpectedVsFull expected_vs_full;  // truth oracle: where the expected tensor is not F
  std::vector<OpOutcome> ops;
  // Operations the case lists that the target does not implement (Target::supports):
  // not run, and no verdict on them.
  std::vector<Op> unsupported;
  std::string message;  // one line: "refused twice: ...", "exact", "WRONG at element 4: ..."
  // Whether the outcome matches the case's expectations for this policy.
  // A case that verifies digests: why the core's per-rank shares of the digest
  // (contract 10) are not the reference model's count, or empty.
  std::string digest_shares_wrong;
  bool matches_expectation = true;
  // False where the target ran none of the operations the case's expectation is about
  // (it serves none of them): nothing was held to it.
  bool expectation_judged = true;
  std::string expectation_message;       // why not, when it does not
  Policy policy = Policy::strict;        // the policy the case ran under (for outcome_to_json)
  std::string target;                    // the implementation under test ("strict", "deepspeed", ...)
  std::optional<TargetRefusal> refusal;  // the first refusal, from an exec target
  std::optional<TargetFault> fault;      // the first fault, when the verdict is target_fault
};

// Wrong, and each wrong operation's map passes every check that operation owes: the
// "valid but different layout" class of contract 8, which no map check can see.
bool wrong_on_valid_layout(const CaseOutcome& outcome);

// Runs a case. The map under test always gets a verdict (contract 9): one that
// does not decode is refused with kind format; with neither truth nor shards an invalid
// one converts the shards it wrote itself through DeepSpeed's unchecked extract.
// Errors in what the case knows about the data (a refused truth map, values of the
// wrong count for a valid map) come back as a Result error: the case is unusable.
Result<CaseOutcome> run_case(const Case& c, const ConvertOptions& options = {}, OracleKind oracle = OracleKind::truth);
// The same oracle with the conversions done by an implementation under test; the
// ground truth (shards, expected tensors) still comes from the strict policy. The case
// is judged against the target's expectations: the contract's (kinds only where the
// target judges kinds), or the case's `legacy` block for the legacy model.
Result<CaseOutcome> run_case(const Case& c, Target& target, OracleKind oracle = OracleKind::truth);

// Contract 10, the producer's side: digest(F) of F as the truth oracle writes the
// shards of this case (its full tensor, or markers over the truth map's logical shape).
// An unusable case is an error, as in run_case.
Result<std::uint64_t> truth_digest(const Case& c);

// Whether value * scale, exactly, lies below the dtype's smallest normal (gradual underflow:
// contract 1.2 does not refuse it, and a power-of-two scale may not give the value back).
bool underflows_when_scaled(DType dtype, std::uint64_t bits, double scale);

// One JSON object: verdict, kind, message, valid_layout, ops, difference.
Json outcome_to_json(const Case& c, const CaseOutcome& outcome);

}  // namespace shardcheck::oracles
