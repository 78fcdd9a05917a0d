#include "shardcheck/constructors.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace shardcheck {

namespace {

// A replicated piece carries one location per holder on every holder, so memory
// grows with holders^2; this bound keeps a careless tp from exhausting memory.
constexpr Index kMaxLocationEntries = Index{1} << 24;

// One slab along `dim`: F's [start, start + width) lands next in the rank's shard.
struct Chunk {
  Index start = 0;
  Index width = 0;
  std::vector<Rank> locations;
};

// A constructor's refusal of its arguments: "in <who>, <what is wrong>".
Error bad(std::string_view who, std::string_view what, std::optional<Rank> rank = std::nullopt) {
  Where where;
  where.rank = rank;
  return make_error(ErrorKind::format, fmt::format("in {}, {}", who, what), where);
}

Status check_shape(std::string_view who, const Extents& shape) {
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] < 0) {
      return bad(who, fmt::format("shape {} has a negative extent at axis {}", shape_text(shape), k));
    }
  }
  if (!checked_numel(shape)) {
    return bad(who, fmt::format("shape {} has more elements than fit in 64 bits", shape_text(shape)));
  }
  return {};
}

Status check_dim(std::string_view who, const Extents& shape, int dim) {
  if (dim < 0 || static_cast<std::size_t>(dim) >= shape.size()) {
    return bad(who, fmt::format("dim {} is out of range for the {}-d shape {}", dim, shape.size(), shape_text(shape)));
  }
  return {};
}

// `what` names the list in messages, e.g. "sizes" or "widths[1]"; with per_rank, entry
// r is rank r's and the error names that rank.
Status check_widths(std::string_view who, std::string_view what, const std::vector<Index>& widths, Index total,
                    std::string_view total_name, bool per_rank = true) {
  Index sum = 0;
  for (std::size_t r = 0; r < widths.size(); ++r) {
    if (widths[r] < 0) {
      if (!per_rank) {
        return bad(who, fmt::format("{}[{}] = {} is negative", what, r, widths[r]));
      }
      return bad(who, fmt::format("{}[{}] = {} is negative", what, r, widths[r]), static_cast<Rank>(r));
    }
    auto next = checked_add(sum, widths[r]);
    if (!next) return bad(who, fmt::format("the entries of {} overflow 64 bits", what));
    sum = *next;
  }
  if (sum != total) {
    return bad(who, fmt::format("{} sum to {} but {} is {}", what, sum, total_name, total));
  }
  return {};
}

Status check_tp(std::string_view who, Index tp) {
  if (tp < 1) return bad(who, fmt::format("tp must be at least 1, got {}", tp));
  if (tp > kMaxLocationEntries / tp) {
    return bad(who, fmt::format("tp {} is too large to list every rank in each replica", tp));
  }
  return {};
}

std::vector<Rank> all_ranks(Index tp) {
  std::vector<Rank> ranks(static_cast<std::size_t>(tp));
  for (Index r = 0; r < tp; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

// Turns per-rank chunk lists into a map: rank r's shard is its chunks concatenated
// along `dim`. A chunk that covers no element (a rank of width 0, or an empty F) is
// still a piece, with the offsets its position gives it, one past the end where it
// is last: contract 5 and DeepSpeed's constructors emit it, the bounds exemption
// tolerates it, and the legacy model's replica record reads its offset.
Result<Map> assemble(std::string_view who, const Extents& shape, int dim,
                     const std::vector<std::vector<Chunk>>& chunks_by_rank) {
  const auto d = static_cast<std::size_t>(dim);
  const Strides source_strides = row_major_strides(shape);
  Map map;
  map.logical_shape = shape;
  map.ranks.reserve(chunks_by_rank.size());
  for (std::size_t r = 0; r < chunks_by_rank.size(); ++r) {
    Index along = 0;
    for (const Chunk& chunk : chunks_by_rank[r]) {
      auto next = checked_add(along, chunk.width);
      if (!next) return bad(who, fmt::format("rank {}'s shard overflows 64 bits", r));
      along = *next;
    }
    Extents shard = shape;
    shard[d] = along;
    if (!checked_numel(shard)) {
      return bad(who, fmt::format("rank {}'s shard {} has more elements than fit in 64 bits", r, shape_text(shard)),
                 static_cast<Rank>(r));
    }
    RankEntry entry;
    entry.rank = static_cast<Rank>(r);
    entry.shard_shape = shard;
    const Strides dest_strides = row_major_strides(shard);
    Index placed = 0;  // position along dim inside the shard
    for (const Chunk& chunk : chunks_by_rank[r]) {
      Piece piece;
      piece.shape = shape;
      piece.shape[d] = chunk.width;
      // At most numel of their buffer, except in an empty buffer whose other axes' product
      // overflows (row_major_strides): such an offset is refused rather than wrapped.
      const auto source_offset = checked_mul(chunk.start, source_strides[d]);
      const auto dest_offset = checked_mul(placed, dest_strides[d]);
      if (!source_offset || !dest_offset) {
        return bad(who, fmt::format("rank {}'s piece at {} along dim {} has an offset beyond 64 bits", r,
                                    chunk.start, dim),
                   static_cast<Rank>(r));
      }
      piece.source = {*source_offset, source_strides};
      piece.dest = {*dest_offset, dest_strides};
      piece.locations = chunk.locations;
      entry.pieces.push_back(std::move(piece));
      placed += chunk.width;
    }
    map.ranks.push_back(std::move(entry));
  }
  return map;
}

}  // namespace

Result<Map> replicated_map(const Extents& shape, int tp, double scale) {
  constexpr std::string_view who = "replicated_map";
  if (Status err = check_shape(who, shape); !err.ok()) return err.error();
  if (Status err = check_tp(who, tp); !err.ok()) return err.error();
  if (scale == 0.0 || !std::isfinite(scale)) {
    return bad(who, fmt::format("scale must be finite and non-zero, got {}", scale));
  }
  const Strides strides = row_major_strides(shape);
  const std::vector<Rank> holders = all_ranks(tp);
  Map map;
  map.logical_shape = shape;
  for (Rank r = 0; r < tp; ++r) {
    RankEntry entry;
    entry.rank = r;
    entry.shard_shape = shape;
    Piece piece;  // one piece even when F is empty, as contract 5 and DeepSpeed have it
    piece.shape = shape;
    piece.source = {0, strides};
    piece.dest = {0, strides};
    piece.locations = holders;
    piece.scale = scale;
    entry.pieces.push_back(std::move(piece));
    map.ranks.push_back(std::move(entry));
  }
  return map;
}

Result<Map> contiguous_split_map(const Extents& shape, const std::vector<Index>& sizes, int dim) {
  constexpr std::string_view who = "contiguous_split_map";
  if (Status err = check_shape(who, shape); !err.ok()) return err.error();
  if (Status err = check_dim(who, shape, dim); !err.ok()) return err.error();
  if (sizes.empty()) return bad(who, "sizes must list at least one rank");
  const std::string extent_name = fmt::format("shape[{}]", dim);
  if (Status err = check_widths(who, "sizes", sizes, shape[static_cast<std::size_t>(dim)], extent_name); !err.ok()) {
    return err.error();
  }
  std::vector<std::vector<Chunk>> chunks(sizes.size());
  Index start = 0;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    chunks[r].push_back({start, sizes[r], {static_cast<Rank>(r)}});
    start += sizes[r];
  }
  return assemble(who, shape, dim, chunks);
}

Result<Map> sub_param_map(const Extents& shape, const std::vector<Index>& sub_sizes,
                          const std::vector<std::vector<Index>>& widths, int dim) {
  constexpr std::string_view who = "sub_param_map";
  if (Status err = check_shape(who, shape); !err.ok()) return err.error();
  if (Status err = check_dim(who, shape, dim); !err.ok()) return err.error();
  if (sub_sizes.empty()) {
    return bad(who, "sub_sizes must list at least one sub-parameter");
  }
  const std::string extent_name = fmt::format("shape[{}]", dim);
  if (Status err = check_widths(who, "sub_sizes", sub_sizes, shape[static_cast<std::size_t>(dim)], extent_name, false);
      !err.ok()) {
    return err.error();
  }
  if (widths.size() != sub_sizes.size()) {
    return bad(who, fmt::format("{} width lists given for {} sub-parameters", widths.size(), sub_sizes.size()));
  }
  const std::size_t tp = widths[0].size();
  if (tp < 1) return bad(who, "widths[0] must list at least one rank");
  for (std::size_t i = 0; i < widths.size(); ++i) {
    if (widths[i].size() != tp) {
      return bad(who, fmt::format("widths[{}] lists {} ranks but widths[0] lists {}", i, widths[i].size(), tp));
    }
    if (Status err =
            check_widths(who, fmt::format("widths[{}]", i), widths[i], sub_sizes[i], fmt::format("sub_sizes[{}]", i));
        !err.ok()) {
      return err.error();
    }
  }
  std::vector<std::vector<Chunk>> chunks(tp);
  Index sub_start = 0;
  for (std::size_t i = 0; i < widths.size(); ++i) {
    Index start = sub_start;
    for (std::size_t r = 0; r < tp; ++r) {
      chunks[r].push_back({start, widths[i][r], {static_cast<Rank>(r)}});
      start += widths[i][r];
    }
    sub_start += sub_sizes[i];
  }
  return assemble(who, shape, dim, chunks);
}

Result<Map> segmented_map(const Extents& shape, const std::vector<Segment>& segments, int dim, int tp,
                          const std::vector<std::vector<Index>>& split_widths) {
  constexpr std::string_view who = "segmented_map";
  if (Status err = check_shape(who, shape); !err.ok()) return err.error();
  if (Status err = check_dim(who, shape, dim); !err.ok()) return err.error();
  if (Status err = check_tp(who, tp); !err.ok()) return err.error();
  std::vector<Index> sizes;
  Index replicated_count = 0;
  for (const Segment& segment : segments) {
    sizes.push_back(segment.size);
    if (segment.replicated) ++replicated_count;
  }
  const std::string extent_name = fmt::format("shape[{}]", dim);
  if (Status err = check_widths(who, "segment sizes", sizes, shape[static_cast<std::size_t>(dim)], extent_name, false);
      !err.ok()) {
    return err.error();
  }
  const auto split_count = static_cast<Index>(segments.size()) - replicated_count;
  if (static_cast<Index>(split_widths.size()) != split_count) {
    return bad(who, fmt::format("{} width lists given for {} split segments", split_widths.size(), split_count));
  }
  // Each replicated segment puts tp locations on each of tp ranks.
  if (replicated_count > kMaxLocationEntries / (Index{tp} * tp)) {
    return bad(who, fmt::format("{} replicated segments on {} ranks list too many locations", replicated_count, tp));
  }
  const std::vector<Rank> everyone = all_ranks(tp);
  std::vector<std::vector<Chunk>> chunks(static_cast<std::size_t>(tp));
  Index start = 0;
  std::size_t split_index = 0;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    if (segments[s].replicated) {
      for (auto& rank_chunks : chunks) rank_chunks.push_back({start, segments[s].size, everyone});
    } else {
      const auto& widths = split_widths[split_index];
      const std::string what = fmt::format("split_widths[{}]", split_index);
      if (widths.size() != static_cast<std::size_t>(tp)) {
        return bad(who, fmt::format("{} lists {} ranks but tp is {}", what, widths.size(), tp));
      }
      if (Status err = check_widths(who, what, widths, segments[s].size, fmt::format("segment {}'s size", s));
          !err.ok()) {
        return err.error();
      }
      Index at = start;
      for (std::size_t r = 0; r < widths.size(); ++r) {
        chunks[r].push_back({at, widths[r], {static_cast<Rank>(r)}});
        at += widths[r];
      }
      ++split_index;
    }
    start += segments[s].size;
  }
  return assemble(who, shape, dim, chunks);
}

Result<Map> block_gather_map(const Extents& shape, const std::vector<std::vector<Index>>& block_ids_by_rank,
                             Index block_size, int dim) {
  constexpr std::string_view who = "block_gather_map";
  if (Status err = check_shape(who, shape); !err.ok()) return err.error();
  if (Status err = check_dim(who, shape, dim); !err.ok()) return err.error();
  if (block_ids_by_rank.empty()) {
    return bad(who, "block_ids_by_rank must list at least one rank");
  }
  if (block_size < 1) {
    return bad(who, fmt::format("block_size must be at least 1, got {}", block_size));
  }
  const Index extent = shape[static_cast<std::size_t>(dim)];
  if (extent % block_size != 0) {
    return bad(who, fmt::format("shape[{}] = {} is not a multiple of block_size {}", dim, extent, block_size));
  }
  const Index blocks = extent / block_size;
  // Every block is listed exactly once, so the listings bound the block count; checking
  // that first keeps the table below proportional to input the caller already holds.
  std::size_t listed = 0;
  for (const auto& ids : block_ids_by_rank) listed += ids.size();
  if (static_cast<std::size_t>(blocks) != listed) {
    return bad(who, fmt::format("{} block ids are listed but shape[{}] holds {} blocks; each "
                                "block must be held exactly once",
                                listed, dim, blocks));
  }
  std::vector<Rank> owner(static_cast<std::size_t>(blocks), -1);
  std::vector<std::vector<Chunk>> chunks(block_ids_by_rank.size());
  for (std::size_t r = 0; r < block_ids_by_rank.size(); ++r) {
    const auto rank = static_cast<Rank>(r);
    for (Index id : block_ids_by_rank[r]) {
      if (id < 0 || id >= blocks) {
        return bad(who, fmt::format("rank {} lists block {}, outside 0..{}", r, id, blocks - 1), rank);
      }
      Rank& held_by = owner[static_cast<std::size_t>(id)];
      if (held_by >= 0) {
        return bad(who, fmt::format("block {} is listed by rank {} and again by rank {}", id, held_by, r), rank);
      }
      held_by = rank;
      auto& list = chunks[r];
      const Index start = id * block_size;
      if (!list.empty() && list.back().start + list.back().width == start) {
        list.back().width += block_size;
      } else {
        list.push_back({start, block_size, {rank}});
      }
    }
  }
  return assemble(who, shape, dim, chunks);
}

Result<Map> expert_placement_map(const Extents& shape, const std::vector<std::vector<Index>>& experts_by_rank) {
  constexpr std::string_view who = "expert_placement_map";
  if (Status err = check_shape(who, shape); !err.ok()) return err.error();
  if (shape.empty()) {
    return bad(who, "shape must have a leading expert axis, got a 0-d shape");
  }
  if (experts_by_rank.empty()) {
    return bad(who, "experts_by_rank must list at least one rank");
  }
  const Index experts = shape[0];
  std::size_t listed = 0;
  for (const auto& ids : experts_by_rank) listed += ids.size();
  // Every expert has a holder, so E <= listings: the table below stays proportional
  // to input the caller already holds.
  if (static_cast<std::size_t>(experts) > listed) {
    return bad(who, fmt::format("{} experts but only {} placements; every expert needs a holder", experts, listed));
  }
  std::vector<std::vector<Rank>> holders(static_cast<std::size_t>(experts));
  for (std::size_t r = 0; r < experts_by_rank.size(); ++r) {
    const auto rank = static_cast<Rank>(r);
    for (Index id : experts_by_rank[r]) {
      if (id < 0 || id >= experts) {
        return bad(who, fmt::format("rank {} lists expert {}, outside 0..{}", r, id, experts - 1), rank);
      }
      auto& list = holders[static_cast<std::size_t>(id)];
      // Ranks are visited in increasing order, so a repeat shows up at the back.
      if (!list.empty() && list.back() == rank) {
        return bad(who, fmt::format("rank {} lists expert {} twice", r, id), rank);
      }
      list.push_back(rank);
    }
  }
  Index location_entries = 0;
  for (std::size_t e = 0; e < holders.size(); ++e) {
    if (holders[e].empty()) {
      return bad(who, fmt::format("expert {} is held by no rank", e));
    }
    // holders.size() <= number of ranks, so the square cannot overflow before the
    // running sum is compared with the bound.
    const auto k = static_cast<Index>(holders[e].size());
    if (k > kMaxLocationEntries || k * k > kMaxLocationEntries - location_entries) {
      return bad(who, "replicated experts list too many locations");
    }
    location_entries += k * k;
  }
  std::vector<std::vector<Chunk>> chunks(experts_by_rank.size());
  for (std::size_t r = 0; r < experts_by_rank.size(); ++r) {
    auto& list = chunks[r];
    for (Index id : experts_by_rank[r]) {
      const auto& where = holders[static_cast<std::size_t>(id)];
      // Only singly held experts merge: a replica is cut per expert on every holder,
      // so all holders agree on its boundaries whatever order each lists it in.
      const bool single = where.size() == 1;
      if (single && !list.empty() && list.back().locations.size() == 1 && list.back().start + list.back().width == id) {
        list.back().width += 1;
      } else {
        list.push_back({id, 1, where});
      }
    }
  }
  return assemble(who, shape, 0, chunks);
}

}  // namespace shardcheck
