// The properties of the harness, written once as plain functions over a Case (or a
// map) and called by every driver: the RapidCheck/GoogleTest suite, the libFuzzer
// targets and `shardcheck campaign`. A failed property is a Finding: one stable
// signature line (so campaigns deduplicate), a message, and the case that shows it,
// ready to be saved as a regression case file.
#pragma once

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/checks.h"
#include "shardcheck/convert.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/reshard.h"

namespace shardcheck::props {

// The judges of findings.def: every finding names the judge that made it.
enum class JudgeId {
#define SHARDCHECK_JUDGE(id, prefix, finding_class, expectation, doc) id,
#include "shardcheck/findings.def"
#undef SHARDCHECK_JUDGE
};

// findings.def's class column: what went wrong, and whose defect it is.
enum class FindingClass {
  silently_wrong,
  false_refusal,
  accepts_invalid,
  valid_but_different,
  misreport,
  target_fault,
  worker_death,
  disagreement,
  harness_defect,
};

// findings.def's expectation column: what a finding file of the judge expects.
enum class FindingExpectation { refused, exact, wrong_valid_layout, contract, the_case, none };

struct JudgeRow {
  JudgeId id;
  std::string_view name;    // the id as text, as checkpoints and finding files record it
  std::string_view prefix;  // how its signatures begin
  FindingClass finding_class;
  FindingExpectation expectation;
  std::string_view doc;
};

// Every row of findings.def, in its order.
std::span<const JudgeRow> judges();
const JudgeRow& judge_row(JudgeId judge);
std::optional<JudgeId> judge_named(std::string_view name);
std::string_view finding_class_name(FindingClass finding_class);
std::string_view expectation_name(FindingExpectation expectation);

// The judge's prefix, and ":detail" unless the detail is empty.
std::string signature_of(JudgeId judge, std::string_view detail);

struct Finding {
  JudgeId judge = JudgeId::unusable_case;
  std::string signature;  // one line, stable across runs: signature_of(judge, detail)
  std::string message;
  Case reproducer;
};

Finding make_finding(JudgeId judge, std::string_view detail, std::string message, Case reproducer);

// What produced a finding: a policy, or an implementation under test (a target name as
// oracles::make_target takes it; empty: the policy), and who ran it, for the comment.
struct FoundWith {
  Policy policy = Policy::strict;
  std::string target;
  std::string backend;  // the backend run beside the CPU backend, if any
  std::string by;       // "shardcheck campaign --seed 3 (case 12)", "fuzz target conversion"
};

// The one way a finding becomes a case file, ready for corpus/regressions/: the
// reproducer, with the expectations its judge's row names (findings.def) so that
// `shardcheck repro` fails on it until the bug is fixed, plus `signature`, `judge`,
// `policy` or `target` (what repro replays it with by default) and a `comment`.
Json finding_case_file(const Finding& finding, const FoundWith& found);

// The policy or target a case file's `policy` / `target` fields record (empty when it
// records none): what `shardcheck repro` replays the case with when not told otherwise.
std::string recorded_target(const Json& case_file);

struct EvalOptions {
  Policy policy = Policy::strict;
  oracles::OracleKind oracle = oracles::OracleKind::truth;
  PlantedBugs bugs;               // planted bugs (property 5); none in production
  // Planted planner bugs (contract 11) in the built-in policy's plans, so that a fuzz
  // canary can prove the reshard judges see a broken planner; none in production. An
  // implementation under test (`target`) makes its own plans and ignores them.
  PlannerBugs planner_bugs;
  bool compare_reference = true;  // also run property 3 on the case's map
  bool strict_layout = false;     // a valid-but-different outcome is a finding too
  // An implementation under test other than the policy (oracles::make_target's names:
  // "deepspeed", "exec:COMMAND"); empty: the policy. Each thread that evaluates cases
  // gets its own instance, started on first use and kept for the thread's life; a
  // campaign's worker process is one such thread, so it owns its own target process
  // (a fork copies no started target: the parent never evaluates a case itself).
  std::string target;
  double target_timeout_seconds = 10.0;
  // A backend run beside the CPU backend on the case (oracles::backend_named's names:
  // "device-omp", "cuda"), strict conversion and a reshard's plan with shards from the
  // truth map (oracles::compare_backends), each on two threads with the case's own launch
  // shape: any difference in verdict, error or output bits is a `backend:` finding.
  // Empty: none.
  std::string backend;
  // Profiling (the bench's campaign/parts row): when set, evaluate_case calls it as each
  // of its parts starts ("oracle": the case run on the policy or target with the oracle's
  // expected tensor; "judge:<name>": each judge in turn) and with "" when it returns.
  // Judgements do not depend on it.
  std::function<void(const char* part)> part_starts;
};

// How an operation's outcome is named in a finding's signature and in the campaign
// table's operation rows: the operation, or "<op>-after-fallback" where the
// implementation under test did not go through the map and a fallback made its answer
// (oracles::Declined: DeepSpeed's reshard declining to plan, its restore cutting the
// legacy chunk), so that a silently wrong answer there is counted apart.
std::string op_label(Op op, bool after_fallback);

// The campaign table's "refused as" row of a refusal: its kind ("unknown" when it has
// none), followed by " (TYPE)" where an implementation under test named its error type.
std::string refusal_row(std::optional<ErrorKind> kind, const std::string& type);
// The kind a refusal_row names, or nullopt when it names none ("unknown", or not a row).
std::optional<ErrorKind> refusal_row_kind(const std::string& row);

struct Evaluation {
  // How the case ended, as the campaign table counts it: wrong_valid_layout is the
  // valid-but-different class.
  Outcome category = Outcome::exact;
  std::optional<ErrorKind> refusal;  // the kind, when refused
  // An implementation under test in another process: its own error type, when refused
  // ("InvalidMapError"), so that the table tells its refusals apart by type as well.
  std::string refusal_type;
  std::optional<Finding> finding;
  // Each operation the case ran (rebuild and/or extract) with its own category, so that
  // a table can show the valid-but-different class per operation: a content digest
  // closes it for rebuild, nothing closes it for extract (contract 10).
  struct OpCategory {
    Op op = Op::rebuild;
    Outcome category = Outcome::exact;
    bool after_fallback = false;  // answered by the target's fallback (oracles::Declined)
    std::string label() const { return op_label(op, after_fallback); }
  };
  std::vector<OpCategory> ops;
};

// Property 2 (and 3 when compare_reference): the case through the oracle. A silently
// wrong outcome is a finding unless the reference model says the map is fully valid,
// in which case it is the valid-but-different class (a finding only with
// strict_layout). A rebuild that accepts a tensor without the content digest it was
// asked to verify is silently wrong whatever the layout. An unusable case (its truth map refused) is a finding too: the
// generators must only produce usable cases.
Evaluation evaluate_case(const Case& c, const EvalOptions& options = {});

// Property 1: an uncorrupted constructor map is accepted and round-trips bit-exact
// (extract every rank, rebuild) for the case's dtype.
std::optional<Finding> check_constructor_roundtrip(const Case& c);

// Property 3: the fast core checks against the reference model. The fast checks never
// accept what the reference refuses; they refuse what it accepts only where the spec's
// conservative stride rule is the reason; when both refuse, the kinds agree.
std::optional<Finding> check_reference_agreement(const Case& c, const PlantedBugs& bugs = {});

// Property 4: the verdict, error kind and output do not depend on rank or piece order.
// `choices` draws the permutations.
std::optional<Finding> check_order_independence(const Case& c, gen::ChoiceSource& choices);

// Property 6: decode(encode(map)) == map, for the map under test and the truth map,
// through a Json value and through text.
std::optional<Finding> check_json_roundtrip(const Case& c);

// Contract 3 on the case's map alone: the core checks' verdict and the kind,
// rank, address and piece (by its content) of their error do not depend on the order
// in which ranks and pieces are listed; and a refusal carries a message.
std::optional<Finding> check_verdict_order(const Case& c, const PlantedBugs& bugs = {});

// Property 6 on untrusted text: read straight into maps (parse_document; with `as_map`,
// parse_map with path "$.m" too) it answers as read into a Json value first and decoded
// from that (as case files are), every map and every error field word for word.
// `document` is parse_document(text) when the caller has it already. The tests' JSON
// corpus and the map_json fuzz target both ask it.
std::optional<Finding> check_text_readings(std::string_view text,
                                           const Result<std::vector<NamedMap>>* document = nullptr,
                                           bool as_map = true);

// Property 5's planted bugs: each scenario disables strict checks; the harness must
// produce a finding for every scenario within a bounded number of generated cases.
// Built from planted_bugs.def: one scenario per switch that shows on its own, and one
// that switches off every switch marked `in_blind` together.
struct PlantedScenario {
  std::string_view name;
  std::string_view disables;  // what is switched off, for messages
  PlantedBugs bugs;
  // Judged by the truth oracle alone (no reference comparison): the scenario must show
  // up as silently wrong tensors, not only as a disagreement about the map.
  bool truth_oracle_only = false;
  // Run with content digests recorded and verified (gen::CaseOptions::record_digest):
  // what the switch turns off only exists there.
  bool record_digest = false;
};
std::span<const PlantedScenario> planted_scenarios();

// Reorders ranks and the pieces inside each rank (a relabelling-free permutation).
Map permute_order(const Map& map, gen::ChoiceSource& choices);

}  // namespace shardcheck::props
