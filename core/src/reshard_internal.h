// What execution (reshard.cc) needs of the planner (reshard_plan.cc). Internal to core.
#pragma once

#include <vector>

#include "shardcheck/reshard.h"

namespace shardcheck::detail {

// The replica checks of `map` alone: each copy of a replicated element (a holder other
// than the lowest) against its lowest holder's copy, as plan() makes them for the source
// map under compare_replicas. reshard() checks the target shards it wrote with them.
Result<std::vector<TransferSegment>> replica_checks_of(const Map& map, const ReshardOptions& options);

}  // namespace shardcheck::detail
