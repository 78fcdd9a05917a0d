// The affine shard map (contract 1), in mdspan's vocabulary.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardcheck/types.h"

namespace shardcheck {

// One strided view: addresses offset + sum_k i_k * strides[k] for 0 <= i_k < extents[k]
// (torch.as_strided's arguments). Extents live in the piece, shared by both views.
struct StridedView {
  Index offset = 0;
  Strides strides;
  friend bool operator==(const StridedView&, const StridedView&) = default;
};

// Span facts of a view over `extents`, computed with overflow checks.
struct SpanFacts {
  bool empty = false;      // some extent is 0: the view covers nothing
  Index numel = 0;         // number of (multi-)indices
  Index max_address = -1;  // the last address the view touches; -1 when empty
  // max address + 1, 0 when empty; saturates at INT64_MAX when the last address is
  // INT64_MAX itself (compare max_address against a size instead).
  Index required_span_size = 0;
};
// std::nullopt on 64-bit overflow of an address. Requires extents, strides, offset >= 0.
std::optional<SpanFacts> span_facts(const Extents& extents, const StridedView& view);

// The conservative uniqueness rule of contract 3.3: axes with extent > 1, a zero stride
// refuses, sorted by stride each stride must be >= 1 + sum (extent-1)*stride of the
// smaller axes. (3,2) with strides (2,3) is unique but refused: documented as conservative.
// Requires non-negative extents and strides.
bool is_unique(const Extents& extents, const Strides& strides);

struct Piece {
  Extents shape;
  StridedView source;  // into flat F
  StridedView dest;    // into the flat shard of the rank that lists it
  RankList locations;  // ranks holding identical data; sorted as written
  double scale = 1.0;
  friend bool operator==(const Piece&, const Piece&) = default;
};

struct RankEntry {
  Rank rank = 0;
  std::optional<Extents> shard_shape;  // required when the rank lists pieces
  std::vector<Piece> pieces;           // order as written; carries no meaning
  friend bool operator==(const RankEntry&, const RankEntry&) = default;
};

// Rank order and piece order are kept as written (the legacy model depends on them;
// the strict path must not).
struct Map {
  Extents logical_shape;
  std::vector<RankEntry> ranks;
  // Content digests recorded by the producer per stored tensor ("param", "exp_avg", ...;
  // contract 10). They describe data, not the layout: no check reads them, and
  // conversion compares one only when asked (ConvertOptions::digest_state). Part of
  // equality so that a codec round trip must keep them.
  std::map<std::string, std::uint64_t> content_digests{};

  const RankEntry* find_rank(Rank r) const;
  RankEntry* find_rank(Rank r);
  friend bool operator==(const Map&, const Map&) = default;
};

// Notation of contract 6: "P(4) src(0,(1)) dst(0,(1)) loc{0,1}" (scale appended when != 1).
std::string describe(const Piece& piece);
std::string describe(const Map& map);  // multi-line, one rank per line
// A shape or stride list as errors write it: "(4,2)", "()" when empty.
std::string shape_text(std::span<const Index> values);

// The content-defined order of pieces (source offset, source strides, shape, dest
// offset, dest strides, locations, scale): what makes verdicts independent of the
// order pieces are written in. Total even for a NaN scale.
bool content_less(const Piece& a, const Piece& b);

// The address of row-major element k (0 <= k < numel(shape)) of a block seen through
// `view`. The caller has checked the view (no overflow).
Index address_at(const Extents& shape, const StridedView& view, Index k);

// The same map with ranks sorted by id and each rank's pieces in a content-defined
// order: two maps that differ only in rank or piece order have equal canonical forms.
Map canonical(const Map& map);

}  // namespace shardcheck
