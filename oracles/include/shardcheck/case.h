// A Case: plain data that runs through checks and conversion and is judged by an
// oracle. Its JSON encoding is the case file (README "Case files").
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardcheck/dtype.h"
#include "shardcheck/error.h"
#include "shardcheck/json.h"
#include "shardcheck/map.h"
#include "shardcheck/outcome.h"

namespace shardcheck {

// The operations (ops.def). A case asks for a list of them, not a combination: an
// operation added to the table is one more entry a case may list.
enum class Op {
#define SHARDCHECK_OP(name, doc) name,
#include "shardcheck/ops.def"
#undef SHARDCHECK_OP
};
inline constexpr Op kAllOps[] = {
#define SHARDCHECK_OP(name, doc) Op::name,
#include "shardcheck/ops.def"
#undef SHARDCHECK_OP
};
std::string_view op_name(Op op);
std::string_view op_doc(Op op);
std::optional<Op> parse_op(std::string_view name);
// "rebuild, extract or reshard": the names, for help texts and refusals.
std::string op_choices(std::string_view last_separator = " or ");

// The operations of one case: each at most once, in the table's order (the order the
// oracle runs them and reports them), whatever order a case file lists them in.
class OpList {
 public:
  OpList() = default;
  OpList(std::initializer_list<Op> ops);  // NOLINT: implicit, so `c.ops = {Op::rebuild}` reads plainly
  bool has(Op op) const { return (bits_ >> static_cast<unsigned>(op)) & 1U; }
  void add(Op op) { bits_ |= 1U << static_cast<unsigned>(op); }
  void remove(Op op) { bits_ &= ~(1U << static_cast<unsigned>(op)); }
  bool empty() const { return bits_ == 0; }
  std::vector<Op> list() const;
  friend bool operator==(const OpList&, const OpList&) = default;

 private:
  unsigned bits_ = 0;
};

// What produced a generated case (contract 7: kind, rank, piece, field, old, new).
struct CorruptionRecord {
  std::string kind;  // e.g. "source_offset", "move_piece", "none"
  std::optional<Rank> rank;
  std::optional<Index> piece;
  std::string field;
  std::string old_value;
  std::string new_value;
  friend bool operator==(const CorruptionRecord&, const CorruptionRecord&) = default;
};

struct Case {
  std::string name;
  Map map;                      // the map under test
  // The map under test as the case file gives it, when it does not decode: conversion
  // refuses it with kind format, a verdict like any other (contract 9), and the
  // case re-encodes it as given. `map` is then empty and unused.
  std::optional<Json> undecoded_map;
  // The map under test as JSON text, when the case is about the text a converter reads
  // ("map_text" in a case file): text that does not parse or decode is refused with kind
  // format, like undecoded_map; text that decodes is what `map` holds.
  std::optional<std::string> map_text;
  // map_text came from the case file's inline "map", whose text JSON cannot hold as a value
  // (a key given twice, a number out of range): the same verdict as the same text in
  // "map_text" (contract 9), and written back in place under "map".
  bool map_text_inline = false;
  std::optional<Map> truth;     // the map that wrote the shards; default: map
  DType dtype = DType::float32;
  std::optional<std::vector<std::uint64_t>> full;                 // F's bits
  std::optional<std::map<Rank, std::vector<std::uint64_t>>> shards;  // supplied shards' bits
  int scale_power = 1;
  // Content digest (contract 10) the rebuild of `map` is asked to verify: a value
  // the consumer was given, and/or the state whose entry in map.content_digests counts.
  std::optional<std::uint64_t> digest;
  std::optional<std::string> digest_state;
  // What the case runs. Case files spell it "op": one name, a list of names, or "both"
  // (rebuild and extract, the spelling of older case files).
  OpList ops = {Op::rebuild};
  // Resharding (contract 11): the target map under test, and the target map the consumer
  // really uses (its extract of F is the expected shard; default: target_map). The
  // source side is `map` and `truth`, as for every other operation.
  std::optional<Map> target_map;
  // The target map as the case file gives it, when it does not decode: the target map is
  // under test too, so the case is refused format, a verdict (contract 9), and re-encodes
  // it as given. `target_map` then holds an empty map, unused.
  std::optional<Json> undecoded_target_map;
  std::optional<Map> target_truth;
  std::optional<Outcome> expect;
  std::optional<ErrorKind> expect_error;
  std::vector<ErrorKind> accept_errors;
  // Expectations under --policy legacy (reported corruptions): the verdict the
  // pre-fix model gives, and for rebuild the exact F it returns (bits).
  std::optional<Outcome> legacy_expect;
  std::optional<std::vector<std::uint64_t>> legacy_output;
  std::string constructor;  // generator provenance, informational
  std::optional<CorruptionRecord> corruption;

  const Map& truth_map() const { return truth ? *truth : map; }
  // The target map's truth: target_truth, else target_map. Only for a case with a target map.
  const Map& target_truth_map() const { return target_truth ? *target_truth : *target_map; }
  friend bool operator==(const Case&, const Case&) = default;
};

// A map as JSON text ("map_text"): a bare map, or an envelope (contract 2) that
// holds exactly one parameter, as a checkpoint's file for one tensor does. Every fault
// is kind format.
Result<Map> decode_map_text(std::string_view text);

// Why a map under test does not decode (kind format, its path under "$.map", else under
// "$.target_map" for a reshard's target map), or ok() when both do.
Status undecoded_map_error(const Case& c);
// The same for the source map alone (the map a target is handed for rebuild and extract).
Status undecoded_source_map_error(const Case& c);

// A rank id written as a JSON key: canonical decimal ("1", never "01" or "-1").
std::optional<Rank> parse_rank_key(const std::string& key);

// Case file codec. Unknown fields (comment, section, ...) are ignored. Values are JSON
// numbers or "0x..." raw-bit strings.
Result<Case> decode_case(const Json& json);
Result<Case> decode_case_text(std::string_view text);
Json encode_case(const Case& c);  // values written as "0x..." bits, maps in as-given order
std::string encode_case_text(const Case& c);  // pretty, ready for corpus/regressions/

}  // namespace shardcheck
