// The case judges (evaluate_case): one case run through its target by the truth oracle,
// then each named judge in turn, the first finding winning. The properties that are not
// judges of a single run (round trips, order independence, reference agreement) are
// properties.cc's.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "properties_internal.h"
#include "shardcheck/digest.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/backends.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/properties.h"

namespace shardcheck::props {

namespace {

// One instance per thread and target name: an exec target is a process, and a process
// answers one request at a time. A forked process (an isolated campaign's worker)
// inherits its parent thread's instances, whose processes are the parent's children,
// not its own: it lets go of them and starts its own.
struct ThreadTarget {
  std::unique_ptr<oracles::Target> target;
  std::string error;
  pid_t owner = -1;
};

ThreadTarget& thread_target(const EvalOptions& options) {
  thread_local std::map<std::string, ThreadTarget> targets;
  auto [it, fresh] = targets.try_emplace(options.target);
  if (!fresh && it->second.owner != getpid()) {
    if (it->second.target) it->second.target->detach();
    fresh = true;
  }
  if (fresh) {
    oracles::TargetOptions target_options;
    target_options.timeout_seconds = options.target_timeout_seconds;
    auto made = oracles::make_target(options.target, target_options);
    it->second.target = std::move(made.target);
    it->second.error = std::move(made.error);
    it->second.owner = getpid();
  }
  return it->second;
}

Result<oracles::CaseOutcome> run_on_target(const Case& c, const EvalOptions& options,
                                           std::optional<Finding>& start_failure) {
  if (options.target.empty()) {
    const auto policy = oracles::make_policy_target(convert_options(c, options), reshard_options(c, options));
    return oracles::run_case(c, *policy, options.oracle);
  }
  ThreadTarget& target = thread_target(options);
  if (!target.target) {
    oracles::CaseOutcome outcome;
    outcome.verdict = Outcome::target_fault;
    outcome.fault = oracles::TargetFault{oracles::FaultKind::crash, "start", target.error};
    outcome.message = target.error;
    outcome.target = options.target;
    start_failure = make_finding(JudgeId::target_crash, "start", target.error, c);
    return outcome;
  }
  return oracles::run_case(c, *target.target, options.oracle);
}

// What the judges of one case share: the case, the outcome of its conversion, and what
// is worth computing once (the reference model's verdict, the strict policy's outcome
// for another implementation, whether the map means what the truth map means).
class CaseJudgement {
 public:
  CaseJudgement(const Case& c, const EvalOptions& options) : c(c), options(options) {}

  const Case& c;
  const EvalOptions& options;
  Evaluation evaluation;
  // The conversion's outcome; none when the planted bugs make conversion memory-unsafe
  // (then only the map is judged).
  std::optional<Result<oracles::CaseOutcome>> converted;
  std::optional<Finding> start_failure;  // an implementation under test that did not start
  // Whether the map means what the truth map means, so that the case must convert
  // exactly (set by categorise, for a case that did not).
  bool must_convert_exactly = false;

  // The outcome, when the case converted and could be run.
  const oracles::CaseOutcome* result() const { return converted && converted->ok() ? &converted->value() : nullptr; }

  const oracles::ReferenceVerdict& reference_verdict() {
    if (!reference_) reference_ = oracles::reference_check(c.map);
    return *reference_;
  }

  // Fully valid = conditions 1-6 by the reference model and, for a rebuild, condition 7
  // (replica data) by the clean strict policy on the very shards the oracle converted. An
  // extract reads no shard data, so 1-6 decide it alone.
  bool fully_valid(const oracles::OpOutcome& op) {
    if (op.digest_ignored) return false;
    // Rebuild: condition 7 too; reshard: the target map too (the operation's valid_layout).
    if (!reference_verdict().valid() || !op.valid_layout) return false;
    if (options.target.empty()) return true;
    // Another implementation's wrong tensor on a valid map is its own bug unless the
    // strict policy, on the same case, is wrong the same way (a different layout).
    return strict_verdict(op.op) == Outcome::wrong;
  }

  // What the strict policy does with the same case and operation (for an implementation
  // under test); nullopt when the case cannot run under strict.
  std::optional<Outcome> strict_verdict(Op op) {
    if (!strict_) {
      ConvertOptions clean;
      clean.scale_power = c.scale_power;
      strict_ = oracles::run_case(c, clean, options.oracle);
    }
    if (!strict_->ok()) return std::nullopt;
    for (const auto& same : strict_->value().ops) {
      if (same.op == op) return same.verdict;
    }
    return std::nullopt;
  }

  // The implementation that acted, as a signature names it: "legacy", "deepspeed",
  // "exec" (a command line is no name), or "strict".
  std::string implementation() const {
    if (options.target.empty()) return std::string(policy_name(options.policy));
    if (options.target.rfind("exec:", 0) == 0) return "exec";
    return options.target;
  }

 private:
  std::optional<oracles::ReferenceVerdict> reference_;
  std::optional<Result<oracles::CaseOutcome>> strict_;
};

// The campaign table's view of the case: its category, its refusal's kind, and each
// operation's category. Judges no finding.
void categorise(CaseJudgement& judged) {
  Evaluation& evaluation = judged.evaluation;
  const Case& c = judged.c;
  if (!judged.converted) {
    const bool valid = check_map(c.map, CheckOptions{judged.options.bugs, {}}).ok();
    evaluation.category = valid ? Outcome::exact : Outcome::refused;
    return;
  }
  if (!judged.converted->ok()) {
    evaluation.category = Outcome::refused;
    evaluation.refusal = judged.converted->error().kind;
    return;
  }
  const oracles::CaseOutcome& result = *judged.result();
  for (const auto& op : result.ops) {
    Outcome category = op.verdict;
    if (op.verdict == Outcome::wrong && judged.fully_valid(op)) category = Outcome::wrong_valid_layout;
    evaluation.ops.push_back({op.op, category, op.fallback.has_value()});
  }
  evaluation.category = result.verdict;
  if (result.verdict == Outcome::refused && result.error) evaluation.refusal = result.error->kind;
  // Only another implementation's refusal (an exec target's) has an error type of its own.
  if (result.verdict == Outcome::refused && result.refusal) evaluation.refusal_type = result.refusal->type;
  if (result.verdict == Outcome::wrong || result.verdict == Outcome::wrong_valid_layout) {
    const bool silently_wrong = std::any_of(evaluation.ops.begin(), evaluation.ops.end(),
                                            [](const auto& op) { return op.category == Outcome::wrong; });
    evaluation.category = silently_wrong ? Outcome::wrong : Outcome::wrong_valid_layout;
  }
  judged.must_convert_exactly = judged.options.oracle == oracles::OracleKind::truth && !result.no_correct_rebuild &&
                                result.verdict != Outcome::exact &&
                                equivalent_to_truth(c, judged.reference_verdict().valid());
  if (!judged.must_convert_exactly) return;
  // A map that means what the truth map means has no valid-but-different: every tensor
  // it gives other than F is wrong.
  for (std::size_t i = 0; i < result.ops.size(); ++i) {
    const Outcome verdict = result.ops[i].verdict;
    if (verdict == Outcome::exact || verdict == Outcome::target_fault || verdict == Outcome::refused) continue;
    evaluation.ops[i].category = Outcome::wrong;
    evaluation.category = Outcome::wrong;
  }
}

// The judges of a case, each one question of findings.def. A judge that needs the
// conversion's outcome asks nothing of a case that has none.
using CaseJudge = std::optional<Finding> (*)(CaseJudgement&);

// target-crash / target-timeout / target-garbage: crash, hang and garbage are findings
// whatever else was found, never a pass.
std::optional<Finding> judge_target_fault(CaseJudgement& judged) {
  if (judged.start_failure) return judged.start_failure;
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->verdict != Outcome::target_fault) return std::nullopt;
  const oracles::OpOutcome* shown = nullptr;
  for (const auto& op : result->ops) {
    if (op.fault && shown == nullptr) shown = &op;
  }
  const oracles::TargetFault& fault = *result->fault;
  JudgeId judge = JudgeId::target_crash;
  switch (fault.kind) {
    case oracles::FaultKind::crash:
      judge = JudgeId::target_crash;
      break;
    case oracles::FaultKind::timeout:
      judge = JudgeId::target_timeout;
      break;
    case oracles::FaultKind::garbage:
      judge = JudgeId::target_garbage;
      break;
  }
  return make_finding(judge,
                      fmt::format("{}:{}:{}", shown ? op_name(shown->op) : "start", fault.reason, case_label(judged.c)),
                      result->message, judged.c);
}

// Property 3 on the case's map and the maps derived from it.
std::optional<Finding> judge_reference_agreement(CaseJudgement& judged) {
  if (!judged.options.compare_reference) return std::nullopt;
  return check_reference_agreement(judged.c, judged.options.bugs);
}

// Property 6: the codec is judged on every map too.
std::optional<Finding> judge_json_roundtrip(CaseJudgement& judged) {
  if (!judged.options.compare_reference) return std::nullopt;
  return check_json_roundtrip(judged.c);
}

// unusable-case: the generators must only make cases that can be run.
std::optional<Finding> judge_unusable_case(CaseJudgement& judged) {
  if (!judged.converted || judged.converted->ok()) return std::nullopt;
  return make_finding(JudgeId::unusable_case, constructor_label(judged.c),
                      "the generated case cannot be run: " + judged.converted->error().to_string(), judged.c);
}

// false-refusal / valid-map-wrong: a map equivalent to the truth map must convert exactly.
std::optional<Finding> judge_equivalent_map(CaseJudgement& judged) {
  if (!judged.must_convert_exactly) return std::nullopt;
  for (const oracles::OpOutcome& op : judged.result()->ops) {
    // A target that crashed or hung said nothing about the map: that is its own finding.
    if (op.verdict == Outcome::exact || op.verdict == Outcome::target_fault) continue;
    // A target that says it cannot express the case (an `unsupported` refusal) has not
    // refused the map: it is tallied in its own row, never a false refusal.
    if (op.verdict == Outcome::refused && op.refusal && op.refusal->type == oracles::kUnsupportedType) continue;
    const bool refused = op.verdict == Outcome::refused;
    return make_finding(refused ? JudgeId::false_refusal : JudgeId::valid_map_wrong,
                        fmt::format("{}:{}", op_label(op.op, op.fallback.has_value()), case_label(judged.c)),
                        fmt::format("a map equivalent to the truth map must convert exactly: {}", op.message),
                        judged.c);
  }
  return std::nullopt;
}

// silently-wrong, or valid-but-different (a finding only with strict_layout): the first
// wrong operation, a silently wrong one first.
std::optional<Finding> judge_wrong_tensor(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || (result->verdict != Outcome::wrong && result->verdict != Outcome::wrong_valid_layout)) {
    return std::nullopt;
  }
  const oracles::OpOutcome* silently_wrong = nullptr;
  const oracles::OpOutcome* different = nullptr;
  for (std::size_t i = 0; i < result->ops.size(); ++i) {
    const oracles::OpOutcome& op = result->ops[i];
    if (op.verdict != Outcome::wrong) continue;
    const bool valid = judged.evaluation.ops[i].category == Outcome::wrong_valid_layout;
    const oracles::OpOutcome*& first = valid ? different : silently_wrong;
    if (!first) first = &op;
  }
  const oracles::OpOutcome* shown = silently_wrong ? silently_wrong : different;
  if (shown == nullptr || (!silently_wrong && !judged.options.strict_layout)) return std::nullopt;
  // An implementation's wrong tensor from a valid map that strict converts exactly: the
  // contract's outcome is that tensor, not a refusal.
  if (silently_wrong && !judged.options.target.empty() && judged.reference_verdict().valid() && shown->valid_layout &&
      judged.strict_verdict(shown->op) == Outcome::exact) {
    return make_finding(JudgeId::target_wrong,
                        fmt::format("{}:{}:{}", judged.implementation(), op_label(shown->op, shown->fallback.has_value()),
                                    case_label(judged.c)),
                        result->message, judged.c);
  }
  return make_finding(
      silently_wrong ? JudgeId::silently_wrong : JudgeId::valid_but_different,
      fmt::format("{}{}:{}", op_label(shown->op, shown->fallback.has_value()),
                  shown->digest_ignored ? "-ignoring-digest" : "", case_label(judged.c)),
      result->message, judged.c);
}

// refusal-misreported: a refusal must report what is there, the values a condition-7
// error names.
std::optional<Finding> judge_refusal_report(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr) return std::nullopt;
  for (const auto& op : result->ops) {
    if (op.misreported.empty()) continue;
    return make_finding(
        JudgeId::refusal_misreported,
        fmt::format("{}:{}:{}", op_name(op.op), op.error ? kind_name(op.error->kind) : "unknown", case_label(judged.c)),
        op.misreported, judged.c);
  }
  return std::nullopt;
}

// digest-shares: each rank's share of digest(F), on a case that verifies digests.
std::optional<Finding> judge_digest_shares(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->digest_shares_wrong.empty()) return std::nullopt;
  return make_finding(JudgeId::digest_shares, case_label(judged.c), result->digest_shares_wrong, judged.c);
}

// strict-accepts: strict promises a refusal for every map that breaks conditions 1-6 or
// section 1.2, whatever the data: a tensor returned for one is a bug even when it
// happens to be the right one (a scale on integers moved bit for bit, say).
std::optional<Finding> judge_strict_accepts(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->policy != Policy::strict || !judged.options.target.empty() || judged.c.map_text) {
    return std::nullopt;
  }
  const oracles::OpOutcome* accepted = nullptr;
  std::optional<Error> refusal;
  const auto exact = std::find_if(result->ops.begin(), result->ops.end(),
                                  [](const oracles::OpOutcome& op) { return op.verdict == Outcome::exact; });
  if (exact != result->ops.end()) {
    const oracles::ReferenceVerdict& verdict = judged.reference_verdict();
    if (!verdict.refused_only_by_stride_rule && !verdict.too_large) refusal = verdict.error;
    if (verdict.valid()) {
      const Case& c = judged.c;
      if (Status scale = oracles::reference_scale_refusal(c.map, c.dtype, c.scale_power); !scale.ok()) {
        refusal = scale.error();
      }
    }
    // Resharding reads the target map as well: its refusal is owed too.
    if (!refusal && exact->op == Op::reshard && judged.c.target_map) {
      const oracles::ReferenceVerdict target = oracles::reference_check(*judged.c.target_map);
      if (!target.refused_only_by_stride_rule && !target.too_large) refusal = target.error;
      if (target.valid()) {
        Status scale = oracles::reference_scale_refusal(*judged.c.target_map, judged.c.dtype, judged.c.scale_power);
        if (scale.ok()) scale = oracles::reference_reshard_scale_refusal(judged.c.map, *judged.c.target_map);
        if (!scale.ok()) refusal = scale.error();
      }
    }
    if (refusal) accepted = &*exact;
  }
  // An element the scale overflows or flushes (contract 1.2): a refusal owed on the data
  // at hand, which no check of the map sees.
  for (const auto& op : result->ops) {
    if (accepted == nullptr && op.owed_refusal && (op.verdict == Outcome::exact || op.verdict == Outcome::wrong)) {
      accepted = &op;
      refusal = op.owed_refusal;
    }
  }
  if (accepted == nullptr) return std::nullopt;
  return make_finding(JudgeId::strict_accepts,
                      fmt::format("{}:{}:{}", op_name(accepted->op), kind_name(refusal->kind), case_label(judged.c)),
                      fmt::format("strict conversion returned a tensor for a map the reference model refuses: {}",
                                  refusal->to_string()),
                      judged.c);
}

// accepts-invalid: an implementation under test (DeepSpeed, an exec target) returned the
// right tensor through a map the contract refuses (contract 9: reported apart
// from the data verdict, which is exact; a wrong tensor is silently-wrong instead).
std::optional<Finding> judge_accepts_invalid(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || !result->accepted_invalid || result->verdict != Outcome::exact) return std::nullopt;
  // The legacy model accepts invalid maps by design (it models DeepSpeed before the fix,
  // which checked counts alone): what a legacy campaign is for is its wrong tensors.
  if (judged.options.target.empty()) return std::nullopt;
  const oracles::ReferenceVerdict& verdict = judged.reference_verdict();
  std::optional<ErrorKind> kind = verdict.kind;
  if (Status undecoded = undecoded_map_error(judged.c); !undecoded.ok()) kind = ErrorKind::format;
  if (!kind) {
    const Case& c = judged.c;
    Status scale = oracles::reference_scale_refusal(c.map, c.dtype, c.scale_power);
    kind = scale.ok() ? ErrorKind::different_data : scale.error().kind;
  }
  const auto accepted = std::find_if(result->ops.begin(), result->ops.end(),
                                     [](const oracles::OpOutcome& op) { return op.verdict == Outcome::exact; });
  return make_finding(JudgeId::accepts_invalid,
                      fmt::format("{}:{}:{}:{}", judged.implementation(),
                                  op_label(accepted->op, accepted->fallback.has_value()), kind_name(*kind),
                                  case_label(judged.c)),
                      fmt::format("{} returned the right tensor through a map the contract refuses ({})",
                                  judged.implementation(), kind_name(*kind)),
                      judged.c);
}

// harness:expected-not-f: with power-of-two truth scales the truth oracle's expected
// tensor must be F but where scaling wrote below the smallest normal (contract 8).
std::optional<Finding> judge_expected_tensor(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->expected_vs_full.harness_defect.empty()) return std::nullopt;
  return make_finding(JudgeId::expected_not_full, case_label(judged.c), result->expected_vs_full.harness_defect,
                      judged.c);
}

// expectation: a case that states what strict must do (a damaged replica in the supplied
// shards, a map text to refuse) is judged by that statement too.
std::optional<Finding> judge_case_expectation(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || judged.options.policy != Policy::strict ||
      judged.options.oracle != oracles::OracleKind::truth || result->matches_expectation) {
    return std::nullopt;
  }
  return make_finding(JudgeId::expectation, fmt::format("{}:{}", outcome_name(result->verdict), case_label(judged.c)),
                      result->expectation_message + ": " + result->message, judged.c);
}

// The JSON path, in the grammar of Error::path ("$.ranks.1.pieces[0].source"), of the
// value a JSON pointer ("/ranks/1/pieces/0/source") names in `text`; empty when the
// pointer leaves the document or a key would need quoting (generated maps have none).
// Written apart from the decoder's own path building, which it judges.
std::optional<std::string> json_path_of(std::string_view text, std::string_view pointer) {
  const Json document = Json::parse(text, nullptr, false);  // a repeated key: the last one
  if (document.is_discarded()) return std::nullopt;
  const Json* at = &document;
  std::string path = "$";
  while (!pointer.empty() && pointer.front() == '/') {
    pointer.remove_prefix(1);
    const std::string token(pointer.substr(0, pointer.find('/')));
    pointer.remove_prefix(token.size());
    if (at->is_array()) {
      std::size_t index = 0;
      const auto [end, bad] = std::from_chars(token.data(), token.data() + token.size(), index);
      if (bad != std::errc() || end != token.data() + token.size() || index >= at->size()) return std::nullopt;
      path += fmt::format("[{}]", index);
      at = &(*at)[index];
      continue;
    }
    const bool plain = !token.empty() && std::all_of(token.begin(), token.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
    if (!plain || !at->is_object() || !at->contains(token)) return std::nullopt;
    path += "." + token;
    at = &(*at)[token];
  }
  return path;
}

// json-text-misread: a neutral edit of the text must read as the map it means, and a
// repeated key is refused at the key (a text that does not decode is otherwise judged by
// its expected refusal).
std::optional<Finding> judge_map_text(CaseJudgement& judged) {
  const Case& c = judged.c;
  if (judged.result() == nullptr || !c.map_text) return std::nullopt;
  auto read = decode_map_text(*c.map_text);
  if (!read && c.corruption && c.corruption->kind == "text_duplicate_key") {
    constexpr std::string_view kTextField = "map_text";
    const std::string_view field = c.corruption->field;
    if (!field.starts_with(kTextField)) return std::nullopt;
    const auto expected = json_path_of(*c.map_text, field.substr(kTextField.size()));
    if (!expected || read.error().path == *expected) return std::nullopt;
    return make_finding(JudgeId::map_text_misread, case_label(c),
                        fmt::format("the repeated key {} is refused at another place: {}", *expected,
                                    read.error().to_string()),
                        c);
  }
  if (!read || read.value() == c.map) return std::nullopt;
  return make_finding(JudgeId::map_text_misread, case_label(c),
                      "the map text decodes to another map than the one it means", c);
}

// The backend differential (cryptofuzz's executor): the CPU backend and the named one on
// the same case; one backend pair per evaluating thread, made on first use.
std::optional<Finding> judge_backends(CaseJudgement& judged) {
  const std::string& name = judged.options.backend;
  if (name.empty() || judged.c.map_text) return std::nullopt;
  thread_local std::string made_for;
  thread_local std::vector<std::unique_ptr<Backend>> backends;
  if (made_for != name) {
    backends.clear();
    backends.push_back(make_cpu_backend());
    if (auto other = oracles::backend_named(name)) backends.push_back(std::move(other));
    made_for = name;
  }
  // A backend the campaign found present but this worker cannot make (a device runtime
  // that failed here) would compare nothing: say so rather than pass the case.
  if (backends.size() < 2) {
    return make_finding(JudgeId::backend_differs, name + "-vs-cpu:unavailable",
                        "backend " + name + " could not be made where this case ran", judged.c);
  }
  auto difference = oracles::compare_backends(judged.c, backends);
  if (!difference) return std::nullopt;
  // The signature is "backend:" + the executor's own "<name>-vs-cpu:<op>:<what>".
  std::string_view detail = difference->signature;
  detail.remove_prefix(std::min(detail.size(), std::string_view("backend:").size()));
  return make_finding(JudgeId::backend_differs, detail, difference->message, judged.c);
}

// In order of precedence: the first judge that finds something names the case's finding.
struct NamedJudge {
  const char* name;  // the part a profile of evaluate_case names (EvalOptions::part_starts)
  CaseJudge judge;
};

constexpr std::array<NamedJudge, 14> kCaseJudges = {{
    {"judge:target-fault", judge_target_fault},
    {"judge:expected-tensor", judge_expected_tensor},
    {"judge:reference-agreement", judge_reference_agreement},
    {"judge:json-roundtrip", judge_json_roundtrip},
    {"judge:unusable-case", judge_unusable_case},
    {"judge:equivalent-map", judge_equivalent_map},
    {"judge:wrong-tensor", judge_wrong_tensor},
    {"judge:refusal-report", judge_refusal_report},
    {"judge:digest-shares", judge_digest_shares},
    {"judge:backends", judge_backends},
    {"judge:strict-accepts", judge_strict_accepts},
    {"judge:accepts-invalid", judge_accepts_invalid},
    {"judge:case-expectation", judge_case_expectation},
    {"judge:map-text", judge_map_text},
}};

}  // namespace

Evaluation evaluate_case(const Case& c, const EvalOptions& options) {
  auto part = [&](const char* name) {
    if (options.part_starts) options.part_starts(name);
  };
  CaseJudgement judged(c, options);
  // Conversion with some checks disabled may address memory outside the buffers: then
  // only the map is judged.
  part("oracle");
  if (conversion_is_memory_safe(options.bugs)) judged.converted = run_on_target(c, options, judged.start_failure);
  categorise(judged);
  for (const NamedJudge& named : kCaseJudges) {
    part(named.name);
    if (auto finding = named.judge(judged)) {
      judged.evaluation.finding = std::move(finding);
      break;
    }
  }
  part("");
  return std::move(judged.evaluation);
}

}  // namespace shardcheck::props
