// What check_map hands to conversion once it has proven a map valid (conditions 1-6):
// every piece, in the strict visiting order, with the facts the proof derived about it,
// so that conversion moves data without deriving any of them again. A device path or a
// resharding plan (contract 11) starts from the same list. Internal to core.
#pragma once

#include <functional>

#include "shardcheck/checks.h"
#include "shardcheck/map.h"

namespace shardcheck::detail {

struct ProvenPiece {
  const Piece* piece = nullptr;
  Rank rank = 0;
  Index written = 0;      // index in the rank's list as written (what errors report)
  Index numel = 0;        // elements it moves; 0 for an empty piece
  Index source_max = -1;  // its last address in F, -1 when empty
  Index dest_max = -1;    // its last address in its rank's shard, -1 when empty
  Index shard_numel = 0;  // its rank's shard, from the map's shard shape
  double scale = 1.0;
  bool replica = false;   // more than one rank holds it
};

// check_map with `options` (no planted bugs: a disabled check proves nothing); when the
// map is valid, calls `each` for every piece of it in the strict visiting order: ranks
// by id, then pieces in content order (contract 3), before returning ok.
Status check_map_proving(const Map& map, const CheckOptions& options,
                         const std::function<void(const ProvenPiece&)>& each);

}  // namespace shardcheck::detail
