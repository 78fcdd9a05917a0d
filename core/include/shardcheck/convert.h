// Conversion (contract 4): rebuild F from shards, extract a rank's shard from F.
//
// Policy::strict (the default) runs check_map on the whole map first, then moves
// data while recording who wrote each element of F and which shard addresses were
// read; it refuses instead of ever returning a wrong tensor, and its result does not
// depend on rank or piece order. Policy::legacy reproduces DeepSpeed before the fix
// (contract 4.1) and lives apart in legacy.cc.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "shardcheck/backend.h"
#include "shardcheck/checks.h"
#include "shardcheck/dtype.h"
#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck {

enum class Policy { strict, legacy };
std::string_view policy_name(Policy policy);
std::optional<Policy> parse_policy(std::string_view name);

using ShardSet = std::map<Rank, Buffer>;

// Every shard copied into `memory` through `backend` (Backend::copy_to): how shards get to
// a device for a conversion there, and back.
ShardSet copy_shards_to(Backend& backend, const ShardSet& shards, Memory memory);

struct ConvertOptions {
  Policy policy = Policy::strict;
  int scale_power = 1;         // p: 1 parameter, -1 exp_avg, -2 exp_avg_sq
  Backend* backend = nullptr;  // nullptr: the CPU backend
  CheckOptions checks;         // planted bugs and limits (strict only)
  // Content digest (contract 10), strict rebuild only: after every check and the
  // copy, digest(F) of F as rebuilt (after unscaling) must equal the expected value, or
  // the rebuild is refused with kind `digest`. `expected_digest` is a value the caller
  // has; `digest_state` asks for the map's own record, map.content_digests[state] (a map
  // without an entry for that state is refused `digest`). Both may be given; both must
  // match. Neither: no digest is computed. The legacy policy ignores both, as DeepSpeed
  // before the fix had no digests.
  std::optional<std::uint64_t> expected_digest;
  std::optional<std::string> digest_state;
  // Threads for the data movement of a strict conversion on the CPU backend: 0 takes what
  // OpenMP offers (OMP_NUM_THREADS, else the cores). Below `parallel_min_bytes` moved, one
  // thread. Neither changes any result or which error is reported.
  int threads = 0;
  Index parallel_min_bytes = Index{1} << 22;
  // The launch shape of a backend that cuts rows into work items (the device backend):
  // the most elements one item moves, 0 for its default. Changes no result either.
  Index tile = 0;
  // A map that check_map proves moves as one batch (Backend::copy_blocks), with no writer
  // or read records (strict, a backend that runs_batches()). The same results either way;
  // off only to compare the two paths.
  bool wide_copies = true;
};

// F of numel(logical_shape) elements of `dtype`. Shards must all have `dtype`.
Result<Buffer> rebuild(const Map& map, const ShardSet& shards, DType dtype,
                       const ConvertOptions& options = {});

// The shard of `rank` (prod(shard_shape) elements). Never leaves an address unwritten.
Result<Buffer> extract(const Map& map, const Buffer& full, Rank rank,
                       const ConvertOptions& options = {});

// Every rank's shard (ranks that list a shard shape).
Result<ShardSet> extract_all(const Map& map, const Buffer& full,
                             const ConvertOptions& options = {});

// A buffer of `wanted` elements that the map asks for but that nothing real backs
// (`backed`: what the supplied data can account for) is refused rather than
// allocated; strict and legacy conversion both ask here.
Status allocation_guard(Index wanted, Index backed, const CheckLimits& limits, std::string_view what);

// Contract 1.2 as a strict rebuild of `map` from `shards` applies it, without moving any
// data: each piece's scale (power, dtype, the arithmetic type's range), then each element
// that dividing by its scale would overflow or flush; the error rebuild reports, found in
// the same order. For code that reads shards through a map without building F
// (digest_shares). `map` has passed check_map and `shards` fit it (all of `dtype`).
Status rebuild_scale_refusal(const Map& map, const ShardSet& shards, DType dtype, int scale_power);

// The legacy entry points, also reachable through options.policy.
Result<Buffer> legacy_rebuild(const Map& map, const ShardSet& shards, DType dtype,
                              int scale_power = 1);
Result<Buffer> legacy_extract(const Map& map, const Buffer& full, Rank rank,
                              int scale_power = 1);
// The only map check the legacy model runs before converting: per-rank element counts.
Status legacy_check(const Map& map);

}  // namespace shardcheck
