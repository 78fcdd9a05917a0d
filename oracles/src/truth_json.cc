// An outcome as JSON (repro --json, campaign reports): hex bits beside values, small
// outputs whole.
#include <string>

#include <fmt/format.h>

#include "truth_internal.h"

namespace shardcheck::oracles {

namespace {

std::string hex(DType dtype, std::uint64_t bits) {
  return fmt::format("0x{:0{}x}", bits, element_size(dtype) * 2);
}

Json error_to_json(const Error& error) {
  Json out = Json::object();
  out["kind"] = std::string(kind_name(error.kind));
  if (error.rank) out["rank"] = *error.rank;
  if (error.piece) out["piece"] = *error.piece;
  if (error.address) {
    out["address"] = *error.address;
    out["side"] = error.side == Side::full ? "full" : error.side == Side::shard ? "shard" : "none";
  }
  if (!error.path.empty()) out["path"] = error.path;
  out["message"] = error.message;
  return out;
}

// Small outputs are worth showing whole: a reproduction is read by a person.
constexpr Index kMaxOutputInJson = 64;

Json op_to_json(DType dtype, const OpOutcome& op) {
  Json out = Json::object();
  out["op"] = std::string(op_name(op.op));
  out["verdict"] = std::string(outcome_name(op.verdict));
  if (op.error) out["kind"] = std::string(kind_name(op.error->kind));
  if (op.rank) out["rank"] = *op.rank;
  if (op.digest_ignored) out["digest_ignored"] = true;
  out["valid_layout"] = op.valid_layout;
  out["message"] = op.message;
  if (op.error) out["error"] = error_to_json(*op.error);
  if (op.refusal) {
    if (!op.error) out["kind"] = "unknown";
    out["target_error"] = {{"type", op.refusal->type}, {"message", op.refusal->message}};
  }
  if (op.fallback) out["fallback"] = {{"type", op.fallback->type}, {"message", op.fallback->message}};
  if (op.fault) {
    out["fault"] = {{"kind", std::string(fault_name(op.fault->kind))},
                    {"reason", op.fault->reason},
                    {"detail", op.fault->detail}};
  }
  if (op.difference) {
    const Difference& d = *op.difference;
    out["difference"] = {{"element", d.element},
                         {"expected", hex(dtype, d.expected_bits)},
                         {"actual", hex(dtype, d.actual_bits)},
                         {"expected_value", bits_to_double(dtype, d.expected_bits)},
                         {"actual_value", bits_to_double(dtype, d.actual_bits)},
                         {"count", d.count}};
  }
  if (op.output && op.output->numel() <= kMaxOutputInJson) {
    Json values = Json::array();
    for (Index i = 0; i < op.output->numel(); ++i) values.push_back(hex(dtype, op.output->bits(i)));
    out["output"] = std::move(values);
  }
  return out;
}

}  // namespace

Json outcome_to_json(const Case& c, const CaseOutcome& outcome) {
  Json out = Json::object();
  out["name"] = c.name;
  out["policy"] = std::string(policy_name(outcome.policy));
  if (!outcome.target.empty()) out["target"] = outcome.target;
  out["verdict"] = std::string(outcome_name(outcome.verdict));
  if (outcome.error) out["kind"] = std::string(kind_name(outcome.error->kind));
  else if (outcome.verdict == Outcome::refused) out["kind"] = "unknown";
  if (outcome.fault) out["fault"] = std::string(fault_name(outcome.fault->kind));
  out["message"] = outcome.message;
  out["valid_layout"] = outcome.valid_layout;
  out["accepted_invalid"] = outcome.accepted_invalid;
  if (const auto& d = outcome.expected_vs_full.difference) {
    out["expected_differs_from_full"] = {{"element", d->element},
                                         {"full", hex(c.dtype, d->expected_bits)},
                                         {"expected", hex(c.dtype, d->actual_bits)},
                                         {"count", d->count},
                                         {"reason", outcome.expected_vs_full.reason}};
  }
  if (!outcome.expected_vs_full.harness_defect.empty()) out["harness_defect"] = outcome.expected_vs_full.harness_defect;
  out["matches_expectation"] = outcome.matches_expectation;
  if (!outcome.matches_expectation) out["expectation_message"] = outcome.expectation_message;
  Json ops = Json::array();
  for (const auto& op : outcome.ops) ops.push_back(op_to_json(c.dtype, op));
  out["ops"] = std::move(ops);
  if (!outcome.unsupported.empty()) {
    Json names = Json::array();
    for (Op op : outcome.unsupported) names.push_back(std::string(op_name(op)));
    out["unsupported"] = std::move(names);
  }
  return out;
}


}  // namespace shardcheck::oracles
