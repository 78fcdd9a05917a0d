// Private helpers shared by the generators: shapes and widths drawn from a ChoiceSource.
// Each asks O(result size) questions and never retries.
#pragma once

#include <vector>

#include "shardcheck/gen/choice.h"
#include "shardcheck/types.h"

namespace shardcheck::gen::detail {

// A shape of `ndim` axes with numel <= max_elements (>= 1), extents <= max_extent.
// Axis `first` is drawn first so that it gets the largest share of the budget.
Extents draw_shape(ChoiceSource& c, int ndim, int first, Index max_extent, Index max_elements);

// A divisor of n (n >= 1); 1 on the lo answer.
Index draw_divisor(ChoiceSource& c, Index n);

// `total` (>= 0) cut into `parts` (>= 1) non-negative widths that sum to it: even
// (DeepSpeed's default), at random cut points (uneven, zeros allowed), and sometimes
// head-aligned (every width a multiple of one divisor of total).
std::vector<Index> draw_widths(ChoiceSource& c, Index total, int parts);

// `total` cut into `parts` widths, each >= 1 when total >= parts.
std::vector<Index> draw_positive_widths(ChoiceSource& c, Index total, int parts);

}  // namespace shardcheck::gen::detail
