// Content digests (contract 10): a 64-bit sum over the elements of F that
// depends on each value and its logical position only, so it is the same whatever the
// layout, and each rank can compute its share from its own shard.
//
//   digest(F) = sum over i of mix(i, bits(F[i]))  (mod 2^64)
//   mix(i, b) = splitmix64 finaliser of x = i * 0x9E3779B97F4A7C15 + b  (mod 2^64)
//
// `bits` is the element's raw bit pattern zero-extended to 64 bits. It detects
// accidents, not an adversary.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardcheck/convert.h"
#include "shardcheck/dtype.h"
#include "shardcheck/error.h"
#include "shardcheck/map.h"
#include "shardcheck/splitmix.h"

namespace shardcheck {

inline constexpr std::uint64_t kDigestGamma = kSplitMixGamma;

// One element's term: mix(index, bits). The definition, written once; the fast
// kernels must agree with it (tests compare them).
constexpr std::uint64_t digest_term(std::uint64_t index, std::uint64_t bits) {
  return splitmix64_mix(index * kDigestGamma + bits);
}

// digest(F) of a whole buffer of any dtype.
std::uint64_t digest(const Buffer& full);

// The terms of `count` raw elements of `dtype` read from `data` (every element, packed),
// taken as elements first_index, first_index + 1, ... of F. digest(F) is this with
// first_index 0 over all of F; sums of disjoint parts add up (mod 2^64).
std::uint64_t digest_elements(DType dtype, const std::byte* data, Index count, Index first_index = 0);

namespace detail {
// The kernels digest_elements chooses among by CPU features (best first: "avx512",
// "avx2", "baseline"), those this CPU runs, and the one it chose. Tests hold every kernel
// that runs here to the definition, not only the chosen one.
std::vector<std::string> digest_kernels_here();
std::string digest_kernel_chosen();
// digest_elements through the named kernel; std::nullopt when it does not run here.
std::optional<std::uint64_t> digest_elements_with(std::string_view kernel, DType dtype, const std::byte* data,
                                                  Index count, Index first_index);
// Copies `count` packed elements from `from` to `to` (not overlapping, each aligned to its
// element) and returns their terms, as digest_elements(dtype, from, count, first_index):
// the copy and the digest in one pass over the data (a rebuild that verifies a digest).
// With `streaming`, the stores go around the caches and the caller fences
// (detail::stream_fence) before the data is read by another thread.
std::uint64_t copy_digesting(DType dtype, const std::byte* from, std::byte* to, Index count, Index first_index,
                             bool streaming);
// copy_digesting through the named kernel; std::nullopt when it does not run here.
std::optional<std::uint64_t> copy_digesting_with(std::string_view kernel, DType dtype, const std::byte* from,
                                                 std::byte* to, Index count, Index first_index, bool streaming);
}  // namespace detail

// Each rank's share of digest(F), computed from its own shard alone: the elements of its
// pieces, unscaled (scale^scale_power, as rebuild does), at their positions in F. An
// element of a replicated piece is counted by the lowest rank of the piece's locations,
// once. For a map that passes contract 3 and shards that agree (condition 7,
// which is not checked here: only the counting rank's copy is read), the shares add up
// to digest(F) of the rebuilt tensor. Every rank with a shard gets an entry (0 when it
// counts nothing). Refused as rebuild would refuse: an invalid map (conditions 1-6),
// shards that do not fit it (`shape`), a scale that cannot be applied or an
// element it would overflow or flush (`scale`, contract 1.2; rebuild_scale_refusal).
Result<std::map<Rank, std::uint64_t>> digest_shares(const Map& map, const ShardSet& shards, int scale_power = 1);

// "0x" followed by exactly 16 hex digits, as maps and case files carry a digest.
std::string format_digest(std::uint64_t digest);
// Accepts exactly "0x" + 16 hex digits (either case); std::nullopt otherwise.
std::optional<std::uint64_t> parse_digest(std::string_view text);

}  // namespace shardcheck
