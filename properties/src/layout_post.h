// Post-processing of a constructed map that keeps it valid: each edit is one the
// contract says no verdict may depend on (rank ids, piece order, rank order) or one
// that is valid by itself (a power-of-two scale on a floating dtype).
#pragma once

#include "shardcheck/gen/choice.h"
#include "shardcheck/map.h"

namespace shardcheck::gen::detail {

// Sometimes scales the whole map, or each piece independently, by 2 or 0.5.
void draw_scales(ChoiceSource& c, Map& map);

// Sometimes renames the ranks to increasing ids with gaps (0,1 -> 3,9), sometimes
// also permuted, updating every locations list and keeping it sorted.
void relabel_ranks(ChoiceSource& c, Map& map);

// Sometimes shuffles piece order within every rank, sometimes rank order.
void shuffle_order(ChoiceSource& c, Map& map);

}  // namespace shardcheck::gen::detail
