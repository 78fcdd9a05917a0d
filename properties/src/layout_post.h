// Post-processing of a constructed map that keeps it valid: each edit is one the
// contract says no verdict may depend on (rank ids, piece order, rank order) or one
// that is valid by itself (a power-of-two scale on a floating dtype).
#pragma once

#include "shardcheck/gen/choice.h"
#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck::gen::detail {

// A scale valid for `dtype` data (contract 1.2): 2 or 0.5 half the time, otherwise a
// power of two anywhere in the exponent range the dtype and its arithmetic type hold,
// or (unless `powers_of_two`) such a power times a mantissa whose products round, some
// of them on ties.
double draw_scale(ChoiceSource& c, DType dtype, bool powers_of_two);

// Sometimes scales the whole map, or each piece independently (some of them by 1), with
// draw_scale.
void draw_scales(ChoiceSource& c, Map& map, DType dtype);

// Sometimes renames the ranks to increasing ids with gaps (0,1 -> 3,9), sometimes
// also permuted, updating every locations list and keeping it sorted.
void relabel_ranks(ChoiceSource& c, Map& map);

// Sometimes (1 in 16) adds one or two empty pieces (some extent 0) to a rank that has a
// shard shape: valid (contract 3: an empty piece covers nothing and is exempt from the
// bounds; placed inside F and the shard, so that a past-the-end corruption still
// changes it), naming its own
// rank as its only location, with the scale of a sibling piece (or 1). Constructors drop
// empty pieces, so without this no valid map would hold one.
void add_empty_pieces(ChoiceSource& c, Map& map);

// Sometimes (1 in 4) flattens the map as ZeRO partitions a flat parameter: each piece
// held by its own rank alone whose F view and shard view are both one contiguous
// row-major run becomes one axis over that run, cut in two at a point that need not end a
// row of F, so that the parts wrap from one row into the next (no box of the logical shape
// describes them, and planners that work on boxes must see that). The cut is the same
// function of the run's length for every piece. The map stays valid.
void flatten_runs(ChoiceSource& c, Map& map);

// Sometimes shuffles piece order within every rank, sometimes rank order.
void shuffle_order(ChoiceSource& c, Map& map);

// Sometimes (1 in 8) stores one rank's two-dimensional shard transposed, or every rank's
// (1 in 2 of those): the layout of GPT-2's Conv1D weights, which hold [in, out] where a
// Linear holds [out, in]. The shard shape (a, b) becomes (b, a) and each piece's
// destination view moves with its elements, a bijection of the shard's addresses, so the
// map stays valid. A rank with a view that is not a box of its shard (a stride neither a
// multiple of b nor below it, or a view that wraps a row) stays as it was. A view that is
// contiguous in F but strided in its shard then occurs in valid maps, where the column
// and row splits never make one.
void transpose_shards(ChoiceSource& c, Map& map);

}  // namespace shardcheck::gen::detail
