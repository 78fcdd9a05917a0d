// What the truth oracle's files share, not part of its interface (truth.h):
// truth_inputs.cc makes F, the shards and the expected tensor; truth.cc runs the
// operations; truth_judge.cc judges what they returned; truth_json.cc writes it;
// read_as_python.cc reads a map as an implementation written in Python does.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "shardcheck/oracles/truth.h"

namespace shardcheck::oracles {

struct Inputs {
  std::optional<Buffer> full;      // F, when the case needs it
  ShardSet shards;                 // what the map under test is converted from
  std::optional<Buffer> expected;  // the correct rebuild output, when one exists
  std::optional<Error> no_truth;   // why no correct output exists
  bool truth_wrote_shards = false;  // shards are the reference model's extract of F
  ExpectedVsFull vs_full;          // where the expected tensor is not F, and why
};

// The inputs of the case's operations and the tensor a correct conversion returns, or the
// error that makes the case unrunnable (its own fault, not the map under test's).
Result<Inputs> prepare_truth(const Case& c);

// Whether any piece of `map` is scaled (then a correct rebuild may round: contract 1.2).
bool has_scale(const Map& map);

// F as the case gives it (or a marker tensor), shaped by `map` ("truth" or "tested" names it).
Result<Buffer> make_full(const Case& c, const Map& map, std::string_view which);

Buffer to_buffer(DType dtype, const std::vector<std::uint64_t>& values);

// Where `actual` first differs from `expected`, and how many elements differ; nullopt
// when they are equal bit for bit.
std::optional<Difference> compare(const Buffer& expected, const Buffer& actual);

// Each operation's validity (contract 3, by the reference model) and the case's.
void set_valid_layout(CaseOutcome& outcome, const Case& c, const ShardSet* shards);

// The case's verdict from its operations' (a wrong tensor first, then a fault, then a refusal).
void summarize(CaseOutcome& outcome);

// Whether the outcome meets the case's own expectations, for this target's policy.
void judge(const Case& c, const Target& target, CaseOutcome& outcome);

// A map under test that shardcheck's decoder refuses, as an implementation that reads
// maps itself reads it (contract 9); nullopt when that reading gives no map either.
std::optional<Case> as_read_by_the_implementation(const Case& c);

}  // namespace shardcheck::oracles
