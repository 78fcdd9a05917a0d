// Whole generated Cases: a layout, usually corrupted, with an op and a scale power.
#pragma once

#include <optional>
#include <string>

#include "shardcheck/case.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/gen/layout.h"

namespace shardcheck::gen {

struct CaseOptions {
  LayoutOptions layout;
  double corrupt_probability = 0.9;  // clamped to [0, 1]
  bool allow_scale_power = true;     // otherwise always p = 1; scaled layouts always get p = 1
  // The producer records a content digest (contract 10): digest(F) of the tensor
  // the truth oracle writes, in the layout's content_digests under the case's state
  // (digest_state_for(scale_power)), before the corruption, which may then damage that
  // record itself; the case asks rebuild to verify that state (Case::digest_state).
  bool record_digest = false;
  // Half the cases carry a drawn F (Case::full) instead of markers: special values and
  // rounding edge cases of the dtype, and some of those cases rescale the map by a
  // scale that is not a power of two (gen/values.h).
  bool adversarial_data = true;
  // Every case asks for this one operation (unset: rebuild, extract or both, by
  // kOpWeights), so that a target serving one operation is asked on every case. Op::reshard
  // makes resharding cases (contract 11) instead: a pair of layouts over one shape, either
  // side or both corrupted (large layouts do not apply to them; a recorded digest is in
  // both maps of the pair, under "param").
  std::optional<Op> op;
};

// How often a rebuild/extract case asks for each list of operations: rebuild alone,
// extract alone, or both, in parts of their sum (a reshard case is op reshard alone).
struct OpWeights {
  int rebuild = 8;
  int extract = 1;
  int both = 1;
};
inline constexpr OpWeights kOpWeights{};

// The state a tensor converted with scale_power p is recorded under: "param" (1),
// "exp_avg" (-1), "exp_avg_sq" (-2), otherwise "p<power>".
std::string digest_state_for(int scale_power);

// Case.map is the corrupted map and Case.truth the layout that wrote the shards. An
// uncorrupted case leaves truth empty (truth_map() is then the map itself, which saves
// a copy in the campaign's hot loop) and records corruption kind "none". Data fields
// (full, shards) are left empty: the oracle fills them with markers.
// Name: "gen-<constructor>-<corruption kind>".
Case generate_case(ChoiceSource& choices, const CaseOptions& options);

}  // namespace shardcheck::gen
