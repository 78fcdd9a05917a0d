// The in-tree constructors of contract 5 (DeepSpeed's layouts). All emit source
// strides rm(logical_shape) and dest strides rm(shard_shape); ranks are 0..tp-1 in order.
// Bad arguments (widths that do not sum, a dim out of range, negative sizes) are
// `format` errors, never a wrong map.
#pragma once

#include <utility>
#include <vector>

#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck {

// Every rank 0..tp-1 holds the whole tensor as one piece with locations = all ranks.
Result<Map> replicated_map(const Extents& shape, int tp, double scale = 1.0);

// Rank r holds sizes[r] (uneven, may be 0) along dim, starting at sum(sizes[:r]).
Result<Map> contiguous_split_map(const Extents& shape, const std::vector<Index>& sizes, int dim);

// shape[dim] is the concatenation of sub-parameters of sub_sizes; widths[i][r] is rank
// r's width of sub-parameter i; a shard holds its slice of each sub-parameter in turn.
Result<Map> sub_param_map(const Extents& shape, const std::vector<Index>& sub_sizes,
                          const std::vector<std::vector<Index>>& widths, int dim);

// Segments (size, replicated) along dim: replicated ones go whole to every rank,
// split ones by split_widths (one list of tp widths per split segment).
struct Segment {
  Index size = 0;
  bool replicated = false;
};
Result<Map> segmented_map(const Extents& shape, const std::vector<Segment>& segments, int dim,
                          int tp, const std::vector<std::vector<Index>>& split_widths);

// Rank r holds the listed blocks (of block_size along dim) in order; runs of
// consecutive ids merge into one piece. Each block must be held exactly once.
Result<Map> block_gather_map(const Extents& shape,
                             const std::vector<std::vector<Index>>& block_ids_by_rank,
                             Index block_size, int dim);

// AutoEP: shape (E, ...); rank r holds experts_by_rank[r] in order. An expert held by
// several ranks is replicated: one-expert pieces whose locations are its holders.
// A rank may hold none (empty shard (0, ...)).
Result<Map> expert_placement_map(const Extents& shape,
                                 const std::vector<std::vector<Index>>& experts_by_rank);

}  // namespace shardcheck
