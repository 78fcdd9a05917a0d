// Adversarial element values: what marker data never holds. Markers are distinct,
// normal and far from overflow, so scaling them by a power of two is exact and a
// converter that mishandles a sign, a NaN payload, an infinity, a subnormal or a tie
// in rounding is never asked to show it.
#pragma once

#include <cstdint>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/dtype.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/gen/corruption.h"

namespace shardcheck::gen {

// The special bit patterns of a dtype, for floats: +-0, +-infinity, quiet and
// signalling NaNs of either sign with payloads, the smallest and largest subnormals,
// the smallest normal, +-the largest finite value, 1 and the values just below 1 and
// the largest finite value, whose products with 3 or 0.1 round to a tie or across a
// binade. For integers: 0, 1, -1, the extremes. Never the poison pattern.
std::vector<std::uint64_t> special_values(DType dtype);

// Whether the generators give `dtype` scaled pieces: the floating-point dtypes, by the
// generators' own list rather than the core's is_floating, so that a core that misjudges
// a dtype is judged by the cases instead of shaping them.
bool carries_scales(DType dtype);

// Scales that are not powers of two, each inexact in some floating dtype; the drawn
// data maps the layout's 2 and 0.5 onto them (contract 1.2 allows any finite
// non-zero scale).
inline constexpr double kInexactScales[] = {3.0, 0.1};

// Drawn after everything else in generate_case. Half the answers leave the markers; the
// others set Case::full to markers mixed with special values and random bit patterns
// of the dtype, and half of those rescale the truth map and the map under test alike
// (2 -> 3, 0.5 -> 0.1, so equal scales stay equal and the corruption's meaning is
// kept). A recorded content digest is recomputed for the final data and scales;
// settle_data then fits the data to the scales.
void draw_adversarial_data(ChoiceSource& choices, Case& c);

// Contract 1.2 refuses an extract that turns a finite element infinite or a nonzero one
// zero, so the truth map could not have written such data: every element of F (drawn, or
// the markers) that a scaled piece of the truth map would lose is replaced by one that
// piece keeps, or by +0. Sets Case::full when anything changed, and says so.
bool fit_data_to_scales(Case& c);
// fit_data_to_scales, and the recorded digest moved to the data it leaves; with
// `wanted_state` (a case that records digests) a digest the markers could not give is
// recorded for the fitted data.
void settle_data(Case& c, const std::optional<std::string>& wanted_state);

// The replica_copy_flip row: supplies the shards the truth map wrote (the reference
// model's extract of F, markers or drawn) with one element of one replica's copy
// damaged (its sign bit flipped, a bool's bit), and states what strict must do: refuse
// the rebuild with different_data (contract 3, condition 7). A sign flip
// differs after unscaling too, NaNs (kept bits) and zeros included. An extract-only
// case becomes a rebuild: extract reads no shard.
void damage_replica(Case& c, const ReplicaFlip& flip);

}  // namespace shardcheck::gen
