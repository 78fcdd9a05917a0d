// The reference model: a naive, element-by-element implementation of spec sections
// 3 and 4, written independently of the core checks (it never calls them). It is the
// ground truth that the fast checks are compared against.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardcheck/convert.h"
#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck::oracles {

struct ReferenceVerdict {
  // Conditions 1-6 per contract 3, with condition 3 as the spec's conservative rule.
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

// reference_check remembers its last few verdicts on each thread, with a copy of each map
// (the oracles ask about the same maps several times per case). This forgets them. A fuzz
// target does after each input: libFuzzer runs an input again, looking for a leak,
// whenever it leaves more allocations behind than it freed, and remembered maps are such
// allocations.
void forget_reference_verdicts();

// Element-by-element strict rebuild / extract (contract 4) including condition 7.
Result<Buffer> reference_rebuild(const Map& map, const ShardSet& shards, DType dtype,
                                 int scale_power = 1);
Result<Buffer> reference_extract(const Map& map, const Buffer& full, Rank rank,
                                 int scale_power = 1);
// Every rank that has a shard shape, extracted after one check of the whole map: what a
// producer that follows the contract writes (the truth oracle's shards).
Result<ShardSet> reference_extract_all(const Map& map, const Buffer& full, int scale_power = 1);

// Section 1.2's refusals of a conversion, whatever the layout: a scaled piece with
// scale_power != 1 or on a dtype that is not floating (kind scale); ok() otherwise.
Status reference_scale_refusal(const Map& map, DType dtype, int scale_power);

// Condition 7 alone, for a map that passes conditions 1-6: the first replicated element
// whose copies differ after unscaling, compared naively copy against copy. nullopt when
// the copies agree or the map cannot be judged (invalid, a shard missing or of the wrong
// size, a scale the power refuses): those are other conditions' refusals.
std::optional<Error> reference_replicas_differ(const Map& map, const ShardSet& shards, DType dtype,
                                               int scale_power = 1);

// Every copy of one element of F that the map's pieces hold in `shards`, unscaled
// (section 1.2), in no particular order: what a condition-7 refusal may report for that
// element. Empty when the map is invalid or a copy's shard is missing or too small.
std::vector<std::uint64_t> reference_copies(const Map& map, const ShardSet& shards, DType dtype, int scale_power,
                                            Index element);

// Contract 10's per-rank shares of digest(F), counted naively: every element of
// every piece a rank lists, unscaled, once per rank, by the lowest rank of the piece's
// locations; every rank whose shard is supplied has a share. nullopt where a rebuild would
// refuse (conditions 1-6, shards that do not fit, a scale that cannot be applied, an
// element that unscaling overflows or flushes).
std::optional<std::map<Rank, std::uint64_t>> reference_digest_shares(const Map& map, const ShardSet& shards,
                                                                     DType dtype, int scale_power = 1);

// What a valid map means: which shard address of which rank holds which element of F,
// at which scale, and which ranks own a shard of how many elements. Two valid maps with
// equal pairings convert every tensor identically, so they are equivalent whatever
// their JSON looks like (piece order, splits, strides of extent-1 axes, rank order).
struct Pairing {
  struct Pair {
    Index element = 0;
    Rank rank = 0;
    Index address = 0;
    double scale = 1.0;
    friend auto operator<=>(const Pair&, const Pair&) = default;
  };
  Index numel = 0;                                 // numel(F)
  std::vector<std::pair<Rank, Index>> shards;      // (rank, shard numel), by rank
  std::vector<Pair> pairs;                         // sorted
  friend bool operator==(const Pairing&, const Pairing&) = default;
};
// nullopt when the reference model refuses the map.
std::optional<Pairing> reference_pairing(const Map& map);

// The tensor the shards determine through `map`, valid or not: every element of F
// covered by some piece inside F and its shard, and every copy of it (unscaled) the same
// bits; nullopt otherwise. An invalid map may still leave no doubt about the data (a
// replica declared over a single holder whose copies agree): an implementation that
// returns this tensor has the data right, and its acceptance of the map is judged apart
// (contract 9).
std::optional<Buffer> reference_agreed_rebuild(const Map& map, const ShardSet& shards, DType dtype, int scale_power);

// Contract 11's refusal of a pair of maps valid by conditions 1-6 over one logical shape:
// kind `scale` at the lowest target rank, then element of F, whose target scale is not the
// scale of the copy it is read from (its lowest holder's); ok() otherwise. A plan copies
// and never rescales, so no data makes such a pair convertible.
Status reference_reshard_scale_refusal(const Map& source, const Map& target);

// Contract 11, naively: both maps checked by this model, the same logical shape, every
// element of F read from its lowest holder's copy (compare_replicas: every holder's copy
// under the same scale compared bit for bit first) and written to every (rank, address)
// the target map pairs it with. Refused `scale` where an element's source and target
// scales differ, and where reference_scale_refusal refuses either map for the dtype (after
// the shards are checked). The target shards, one per target rank with a shard shape.
Result<ShardSet> reference_reshard(const Map& source, const Map& target, const ShardSet& shards, DType dtype,
                                   bool compare_replicas = false);

// Contract 1.2 as an independent rounding model: value * scale^p (multiply) or
// value / scale^p, in the element type's arithmetic, each operation rounded to nearest
// even into the target format by bit-level code of this file (not the core's dtype code
// nor Eigen's half/bfloat16). A NaN keeps its bits. Integers are returned unchanged.
std::uint64_t reference_scale(DType dtype, std::uint64_t bits, double scale, int power, bool multiply);

}  // namespace shardcheck::oracles
