// What the properties' own files share and the public header does not promise.
#pragma once

#include <string>

#include "shardcheck/case.h"
#include "shardcheck/convert.h"
#include "shardcheck/reshard.h"
#include "shardcheck/properties.h"

namespace shardcheck::props {

// Whether the map under test means exactly what the truth map means: the reference
// model accepts it (`map_valid`) and pairs every element of F with the same shard
// address of the same rank at the same scale, and it records the same content digests.
// A refusal or a wrong tensor is then a bug, as on an uncorrupted map. Cases with
// supplied shards, digests or expectations of their own are judged by those instead.
bool equivalent_to_truth(const Case& c, bool map_valid);

// "constructor/corruption": how most signatures end, so that a campaign tells the
// generators' places apart; and its two halves ("unknown" and "none" where unset).
std::string case_label(const Case& c);
std::string constructor_label(const Case& c);
std::string corruption_label(const Case& c);

// Whether conversion with these planted bugs stays inside its buffers (planted_bugs.def's
// last column): those that do not are judged on the map checks alone.
bool conversion_is_memory_safe(const PlantedBugs& bugs);

// The conversion options a case is judged with: the policy, its scale power, the planted
// bugs, and the box proof on half the cases (case_hash picks which).
ConvertOptions convert_options(const Case& c, const EvalOptions& options);
// How the strict policy plans a case's reshard: half the cases (by a hash bit of their
// own) with box plans off, so that the run planner, which box plans otherwise take over
// for every generated pair, is judged on the same pairs.
ReshardOptions reshard_options(const Case& c, const EvalOptions& options);

}  // namespace shardcheck::props
