// What the properties' own files share and the public header does not promise.
#pragma once

#include "shardcheck/case.h"

namespace shardcheck::props {

// Whether the map under test means exactly what the truth map means: the reference
// model accepts it (`map_valid`) and pairs every element of F with the same shard
// address of the same rank at the same scale, and it records the same content digests.
// A refusal or a wrong tensor is then a bug, as on an uncorrupted map. Cases with
// supplied shards, digests or expectations of their own are judged by those instead.
bool equivalent_to_truth(const Case& c, bool map_valid);

}  // namespace shardcheck::props
