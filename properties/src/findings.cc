// The judges' table (findings.def) and the one way a finding becomes a case file.
#include <array>

#include <fmt/format.h>

#include "properties_internal.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/properties.h"

namespace shardcheck::props {

namespace {

constexpr std::array kJudges = {
#define SHARDCHECK_JUDGE(id, prefix, finding_class, expectation, doc) \
  JudgeRow{JudgeId::id, #id, prefix, FindingClass::finding_class, FindingExpectation::expectation, doc},
#include "shardcheck/findings.def"
#undef SHARDCHECK_JUDGE
};

// Rows are looked up by index: each row must sit at its own id's place, which the
// X-macro guarantees, and no two rows may share a prefix.
constexpr bool rows_in_order_with_unique_prefixes() {
  for (std::size_t i = 0; i < kJudges.size(); ++i) {
    if (static_cast<std::size_t>(kJudges[i].id) != i) return false;
    for (std::size_t j = 0; j < i; ++j) {
      if (kJudges[i].prefix == kJudges[j].prefix) return false;
    }
  }
  return true;
}
static_assert(rows_in_order_with_unique_prefixes(), "findings.def: two rows share a prefix");

// What the contract says of the case's map, where the reference model decides it: a
// refusal (with its kind, unless the only broken rule is the conservative stride rule,
// which lets the kinds differ), or the tensor for a map that means what the truth map
// means. nullopt where it decides nothing (a valid map of another layout, a map too
// large to walk).
struct ContractOutcome {
  Outcome outcome = Outcome::refused;
  std::optional<ErrorKind> kind;
};

std::optional<ContractOutcome> contract_outcome(const Case& c) {
  if (Status undecoded = undecoded_map_error(c); !undecoded.ok()) {
    return ContractOutcome{Outcome::refused, undecoded.error().kind};
  }
  const oracles::ReferenceVerdict verdict = oracles::reference_check(c.map);
  if (verdict.too_large) return std::nullopt;
  if (verdict.refused_only_by_stride_rule) return ContractOutcome{Outcome::refused, std::nullopt};
  if (verdict.kind) return ContractOutcome{Outcome::refused, verdict.kind};
  // A reshard checks the target map whole next (contract 11), before any scale.
  if (c.ops.has(Op::reshard) && c.target_map) {
    const oracles::ReferenceVerdict target = oracles::reference_check(*c.target_map);
    if (target.too_large) return std::nullopt;
    if (target.refused_only_by_stride_rule) return ContractOutcome{Outcome::refused, std::nullopt};
    if (target.kind) return ContractOutcome{Outcome::refused, target.kind};
  }
  if (Status scale = oracles::reference_scale_refusal(c.map, c.dtype, c.scale_power); !scale.ok()) {
    return ContractOutcome{Outcome::refused, scale.error().kind};
  }
  // truth_digest fails where the truth map's shards admit no correct rebuild (replicas
  // that disagree once unscaled): then the contract wants a refusal the map cannot show.
  if (equivalent_to_truth(c, true) && oracles::truth_digest(c).ok()) {
    return ContractOutcome{Outcome::exact, std::nullopt};
  }
  return std::nullopt;
}

// The expectations of the judge's row, on a case that states none of its own (a case
// generated with an expectation, such as a damaged replica, keeps its own, which is
// narrower). `legacy`: found under the legacy model, which repro judges by the case's
// `legacy` block.
void set_expectations(Case& c, FindingExpectation expectation, bool legacy) {
  std::optional<Outcome> expect;
  std::optional<ErrorKind> kind;
  std::optional<Outcome> legacy_expect;
  switch (expectation) {
    case FindingExpectation::refused:
      expect = Outcome::refused;
      // The legacy model keeps the bug (it models DeepSpeed before the fix): its wrong
      // tensor is the expectation, and the replay fails on it.
      legacy_expect = Outcome::wrong;
      break;
    case FindingExpectation::exact:
      expect = legacy_expect = Outcome::exact;
      break;
    case FindingExpectation::wrong_valid_layout:
      expect = legacy_expect = Outcome::wrong_valid_layout;
      break;
    case FindingExpectation::contract:
      if (auto contract = contract_outcome(c)) {
        expect = legacy_expect = contract->outcome;
        kind = contract->kind;
      }
      break;
    case FindingExpectation::the_case:
    case FindingExpectation::none:
      return;
  }
  if (!c.expect && !c.expect_error && c.accept_errors.empty() && expect) {
    c.expect = expect;
    if (*expect == Outcome::refused) c.expect_error = kind;
  }
  if (legacy && !c.legacy_expect) c.legacy_expect = legacy_expect;
}

}  // namespace

std::span<const JudgeRow> judges() { return kJudges; }

const JudgeRow& judge_row(JudgeId judge) { return kJudges[static_cast<std::size_t>(judge)]; }

std::optional<JudgeId> judge_named(std::string_view name) {
  for (const JudgeRow& row : kJudges) {
    if (row.name == name) return row.id;
  }
  return std::nullopt;
}

std::string_view finding_class_name(FindingClass finding_class) {
  switch (finding_class) {
    case FindingClass::silently_wrong: return "silently wrong";
    case FindingClass::false_refusal: return "false refusal";
    case FindingClass::accepts_invalid: return "accepts an invalid map";
    case FindingClass::valid_but_different: return "valid but different";
    case FindingClass::misreport: return "misreported refusal";
    case FindingClass::target_fault: return "target fault";
    case FindingClass::worker_death: return "worker death";
    case FindingClass::disagreement: return "disagreement";
    case FindingClass::harness_defect: return "harness defect";
  }
  return "unknown";
}

std::string_view expectation_name(FindingExpectation expectation) {
  switch (expectation) {
    case FindingExpectation::refused: return "refused";
    case FindingExpectation::exact: return "exact";
    case FindingExpectation::wrong_valid_layout: return "wrong_valid_layout";
    case FindingExpectation::contract: return "contract";
    case FindingExpectation::the_case: return "the case's own";
    case FindingExpectation::none: return "none";
  }
  return "unknown";
}

std::string signature_of(JudgeId judge, std::string_view detail) {
  const std::string_view prefix = judge_row(judge).prefix;
  return detail.empty() ? std::string(prefix) : fmt::format("{}:{}", prefix, detail);
}

Finding make_finding(JudgeId judge, std::string_view detail, std::string message, Case reproducer) {
  return Finding{judge, signature_of(judge, detail), std::move(message), std::move(reproducer)};
}

Json finding_case_file(const Finding& finding, const FoundWith& found) {
  const JudgeRow& row = judge_row(finding.judge);
  Case c = finding.reproducer;
  const bool legacy = found.target.empty() && found.policy == Policy::legacy;
  set_expectations(c, row.expectation, legacy);
  c.name = finding.signature;
  Json j = encode_case(c);
  j["signature"] = finding.signature;
  j["judge"] = std::string(row.name);
  if (found.target.empty()) {
    j["policy"] = std::string(policy_name(found.policy));
  } else {
    j["target"] = found.target;
  }
  if (!found.backend.empty()) j["backend"] = found.backend;
  j["comment"] = fmt::format("found by {}: {}", found.by, finding.message);
  return j;
}

std::string recorded_target(const Json& case_file) {
  if (!case_file.is_object()) return {};
  for (const char* field : {"target", "policy"}) {
    const auto it = case_file.find(field);
    if (it != case_file.end() && it->is_string()) return it->get<std::string>();
  }
  return {};
}

}  // namespace shardcheck::props
