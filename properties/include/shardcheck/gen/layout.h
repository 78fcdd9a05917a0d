// Random valid layouts from every in-tree constructor (contract 5), post-processed
// in ways that must not change any verdict: ranks relabelled to non-contiguous ids,
// piece order and rank order shuffled, and sometimes empty pieces added (valid, and
// otherwise never generated: constructors drop them).
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "shardcheck/dtype.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/map.h"

namespace shardcheck::gen {

struct Layout {
  std::string constructor;  // one of constructor_names()
  Map map;
  DType dtype = DType::float32;
};

// Bounds on what is generated. Out-of-range values are clamped to something sane
// (max_elements >= 1, 0 <= max_dims <= 8, 0 <= max_extent <= 4096, 1 <= max_tp <= 64),
// so a caller cannot make generation expensive by accident.
struct LayoutOptions {
  Index max_elements = 256;  // numel(F) <= max_elements
  int max_dims = 4;
  int max_extent = 16;
  int max_tp = 8;
  // A large layout instead: F of 4 to 4.5 MiB (by the dtype's width) whatever the bounds
  // above say, past the parallel threshold (ConvertOptions::parallel_min_bytes) and the
  // wide copy's chunk size, with a split axis of at most 64 so that its pieces stay few.
  // Half of them: F of 8 to 8.5 MiB of an eight-byte dtype, past the streaming copies'
  // threshold (8 MiB), every piece cut along its last axis at an odd count of elements so
  // that the rows of its second half start misaligned (16 bytes) on both sides.
  bool large = false;
};

// "replicated", "contiguous_split", "sub_param", "segmented", "block_gather",
// "expert_placement": stable names, used as table rows.
std::span<const std::string_view> constructor_names();

// Always a map the constructor accepted and that passes check_map. Scales (2, 0.5)
// appear only on floating dtypes.
Layout generate_layout(ChoiceSource& choices, const LayoutOptions& options);

// Resharding (contract 11): two layouts over one logical shape and dtype, each from any
// constructor (TP degree, split axis and placement drawn independently), both valid.
// Their scales are 1, or one scale on every piece of both (a plain copy), or drawn per
// piece on one side only (which a plan must refuse where they differ). `large` is ignored.
struct LayoutPair {
  Layout source;
  Layout target;
};
LayoutPair generate_layout_pair(ChoiceSource& choices, const LayoutOptions& options);

}  // namespace shardcheck::gen
