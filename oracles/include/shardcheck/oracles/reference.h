// The reference model: a naive, element-by-element implementation of spec sections
// 3 and 4, written independently of the core checks (it never calls them). It is the
// ground truth that the fast checks are compared against.
#pragma once

#include <optional>
#include <string>

#include "shardcheck/convert.h"
#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck::oracles {

struct ReferenceVerdict {
  // Conditions 1-6 per spec section 3, with condition 3 as the spec's conservative rule.
  std::optional<ErrorKind> kind;  // nullopt: valid
  std::string reason;             // the error's message
  std::optional<Error> error;     // the refusal, located and worded as the core words it
  // True when the only broken condition is the conservative stride rule: every view
  // is in fact unique (checked by walking its addresses) and conditions 1, 2, 4, 5, 6
  // hold. The fast checks may refuse such a map; they must accept no other refused map.
  bool refused_only_by_stride_rule = false;
  // True when the map was beyond max_elements and not judged (kind is format then).
  bool too_large = false;
  bool valid() const { return !kind.has_value(); }
};

// Walks every element; refuses maps whose walk would exceed `max_elements`
// (kind format) so fuzzers cannot make it allocate without bound.
ReferenceVerdict reference_check(const Map& map, Index max_elements = Index{1} << 22);

// Element-by-element strict rebuild / extract (spec 4) including condition 7.
Result<Buffer> reference_rebuild(const Map& map, const ShardSet& shards, DType dtype,
                                 int scale_power = 1);
Result<Buffer> reference_extract(const Map& map, const Buffer& full, Rank rank,
                                 int scale_power = 1);

}  // namespace shardcheck::oracles
