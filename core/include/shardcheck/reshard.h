// Resharding (contract 11): a transfer plan that copies straight from the shards of a
// source map to the shards of a target map over the same logical shape, without F in
// one place.
//
// plan() checks both maps whole (check_map, contract 3), then intersects the pieces of
// both: as boxes of the logical tensor where every piece is one (the layouts DeepSpeed,
// DCP and Megatron-Core describe: planning costs the pieces, whatever the rows), else as
// address runs of F; and merges the overlaps into strided segments wherever one view on
// each side covers two. The plan is a pure function of the two maps' contents: rank order
// and piece order do not change a single segment. execute() runs a plan on shards,
// through a backend (core/include/shardcheck/backend.h), where the shards are.
//
// Nothing legitimate is refused as unsupported: a piece whose F view is not contiguous
// along its inner axis is cut into single elements (finer segments, same result). What
// is refused: an invalid map (its kind), different logical shapes (`shape`), an element
// whose source and target scales differ (`scale`, contract 1.2: a plan may not rescale),
// and a plan that would need more segments than the budget (`format`, never a truncated
// plan).
//
// reshard() is the three in one call, with content digests (contract 10): F as the source
// shards hold it is verified before anyone trusts the copy, and F as the target shards
// hold it after.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shardcheck/backend.h"
#include "shardcheck/checks.h"
#include "shardcheck/convert.h"
#include "shardcheck/error.h"
#include "shardcheck/json.h"
#include "shardcheck/map.h"

namespace shardcheck {

// Test-only switches that break the planner on purpose (the harness must catch each).
struct PlannerBugs {
  // Rows of one rank pair are merged into one strided segment even where the source
  // distance between rows changes: the rows after the first read the wrong place.
  bool merge_unequal_strides = false;
  // A target element whose scale is not its source copy's is copied as it is, where the
  // plan must refuse (kind scale): the shard holds the value under the wrong scale.
  bool copy_across_scales = false;
  friend bool operator==(const PlannerBugs&, const PlannerBugs&) = default;
};

struct ReshardOptions {
  // Read every holder of a replicated source element and compare their bits at execute
  // time (refused `different_data` when they differ). Off: the lowest holder alone is read.
  bool compare_replicas = false;
  // The most segments a plan may hold, counted after merging (and as many replica
  // checks). Past it the plan is refused `format`: a plan is whole or it is an error.
  // Maps planned on runs may also hold at most max(max_segments, 2^22) runs and rows on
  // the way (the planner's memory).
  Index max_segments = Index{1} << 22;
  // Plan on boxes where both maps allow it. Off: always on address runs, the planner
  // every map can take (tests hold the two to the same copies).
  bool plan_on_boxes = true;
  CheckOptions checks;  // how both maps are checked (limits)
  PlannerBugs bugs;
  // Content digest (contract 10), reshard() only: digest(F) of F as the source shards
  // hold it through the source map, and again as the target shards hold it through the
  // target map after the copy, must equal the expected value, or the reshard is refused
  // with kind `digest`; and every target replica must hold its lowest holder's bits (the
  // copy the digest counted), or it is refused `different_data`. `expected_digest` is a value the caller has; `digest_state` asks
  // for the source map's record, content_digests[state] (a source map without one is
  // refused `digest`; a target map that records another value for the state is refused
  // too, since the two maps describe one tensor). Neither: no digest is computed.
  // The source side's check closes the valid-but-different class of a source map; a
  // target map that is valid but wrong puts F's elements in the wrong places
  // consistently with itself, which no digest of F can see (as for extract).
  std::optional<std::uint64_t> expected_digest;
  std::optional<std::string> digest_state;
  // Which tensor the shards hold (1 parameter, -1 exp_avg, -2 exp_avg_sq): the digest is
  // of F after unscaling. A plan itself never rescales, so nothing else depends on it.
  int scale_power = 1;
  // reshard() only: the backend the plan executes on (nullptr: the CPU backend), and its
  // threads and tile (Threading); neither changes a result or which error is reported.
  // The shards are where the backend reaches (see execute), and the target shards stay
  // there.
  Backend* backend = nullptr;
  Threading threading;
};

// One copy: `shape` elements seen through a view of a source rank's flat shard and a
// view of a target rank's flat shard (DeepSpeed's TransferSegment, spelled the same).
struct TransferSegment {
  Rank source_rank = 0;
  StridedView source;
  Rank target_rank = 0;
  StridedView target;
  Extents shape;
  friend bool operator==(const TransferSegment&, const TransferSegment&) = default;
};

struct PlanStatistics {
  Index segments = 0;
  Index elements_moved = 0;                                 // elements written into target shards
  std::map<Rank, Index> elements_read;                      // per source rank (replica checks not counted)
  std::map<std::pair<Rank, Rank>, Index> elements_by_pair;  // (source rank, target rank)
  Index replica_checks = 0;                                 // segments compared, with compare_replicas
  friend bool operator==(const PlanStatistics&, const PlanStatistics&) = default;
};

struct Plan {
  Extents logical_shape;
  std::map<Rank, Index> source_numel;     // the source shards execute expects (ranks with a shard shape)
  std::map<Rank, Index> target_numel;     // the target shards execute writes
  std::vector<TransferSegment> segments;  // in a content-defined order
  // With compare_replicas: `source` is the holder read, `target` another holder's view
  // of the same elements in its (source) shard, compared bit for bit.
  std::vector<TransferSegment> replica_checks;
  // Contract 1.2's refusals that depend on the dtype, which only execute knows (where to
  // point an error, so it names pieces as written; the copies above never depend on the
  // order of ranks or pieces, this list's indices do): of the
  // pieces of either map with a scale other than 1 (empty ones too, as a conversion judges
  // them), the first of each distinct scale, source map first, each map by rank and then
  // content order. A plan copies plainly, yet a scale on integers, or one the dtype's
  // arithmetic cannot hold, is refused (kind scale) as rebuild and extract refuse it.
  struct ScaledPiece {
    bool in_target = false;
    Rank rank = 0;
    Index written = 0;  // its index in the rank's list
    Piece piece;
    friend bool operator==(const ScaledPiece&, const ScaledPiece&) = default;
  };
  std::vector<ScaledPiece> scaled_pieces;
  PlanStatistics statistics;
  friend bool operator==(const Plan&, const Plan&) = default;
};

Result<Plan> plan(const Map& source, const Map& target, const ReshardOptions& options = {});

// Whether two plans make the same copies (segments, replica checks, shard sizes and
// statistics): what rank and piece order may not change.
bool same_copies(const Plan& a, const Plan& b);

// The target shards (one per target rank with a shard shape), every address written once.
// The segments run as one batch of BlockCopy through `backend` (nullptr: the CPU backend;
// Backend::copy_blocks, on `threading`), the replica checks through compare_blocks. The
// shards must all be in one memory that the backend reaches, and the target shards are
// put there: a device's memory on device-omp or CUDA (else std::invalid_argument, a
// caller's mistake). Segments must write disjoint target addresses, as plan() makes
// them; where a plan edited by hand makes two write one address, which value remains is
// unspecified (its views are still checked to stay inside the shards).
Result<ShardSet> execute(const Plan& plan, const ShardSet& source_shards, DType dtype, Backend* backend = nullptr,
                         const Threading& threading = {});
// The same into caller-provided target shards, which must have the plan's ranks, sizes
// and `dtype`, in the memory of the source shards; on an error their contents are
// unspecified.
Status execute_into(const Plan& plan, const ShardSet& source_shards, ShardSet& target_shards,
                    Backend* backend = nullptr, const Threading& threading = {});

// plan(), execute() on options.backend and, when a digest is asked for, its two checks:
// the target shards, or the first refusal. The checks come after every other check and
// the copy, as a rebuild verifies its digest last; shards in a device's memory are
// copied to the host for the digest shares.
Result<ShardSet> reshard(const Map& source, const Map& target, const ShardSet& source_shards, DType dtype,
                         const ReshardOptions& options = {});

// {"logical_shape": [...], "segments": [{"shape": [...], "source": [rank, offset, [strides]],
// "target": [rank, offset, [strides]]}, ...], "statistics": {...}}: segments as DeepSpeed's
// TransferSegment.to_dict spells them, so the two planners' plans can be compared.
Json plan_to_json(const Plan& plan);

}  // namespace shardcheck
