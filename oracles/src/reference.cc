// The reference model of contract 3 and 4. It is deliberately naive: it walks
// every multi-index of every piece, computes each address from scratch with checked
// arithmetic and keeps plain counters, so that it can be trusted by reading it. It
// shares no code with the core checks or conversion on purpose: it is what they are
// compared against.
//
// This file holds conversion (contract 4) and resharding (contract 11); the checks of
// contract 3 are reference_checks.cc, the rounding of contract 1.2 reference_rounding.cc,
// and the walk they share reference_internal.h.
#include "shardcheck/oracles/reference.h"

#include "shardcheck/digest.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <compare>
#include <limits>
#include <tuple>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include "reference_internal.h"

namespace shardcheck::oracles {

using namespace reference_detail;

namespace {

Status shard_refusal(const Map& map, const ShardSet& shards, DType dtype) {
  for (const auto& [rank, shard] : shards) {
    if (shard.dtype() != dtype) return fault::shard_dtype(rank, shard.dtype(), dtype);
    const RankEntry* entry = map.find_rank(rank);
    if (entry == nullptr) return fault::unlisted_shard(rank);
    if (!entry->shard_shape) {
      // Only a rank without pieces may omit its shard shape; its shard is empty.
      if (!entry->pieces.empty() || shard.numel() != 0) return fault::shard_without_shape(rank);
    } else if (shard.numel() != shard_numel(*entry)) {
      return fault::shard_numel(rank, shard.numel(), shard_numel(*entry));
    }
  }
  for (const RankEntry* entry : ranks_by_id(map)) {
    if (!entry->pieces.empty() && !shards.contains(entry->rank)) {
      return fault::missing_shard(entry->rank, entry->pieces.size());
    }
  }
  return {};
}

enum class Writer { nobody, single, replica };


// Contract 1.2: a finite element that scaling makes infinite, or a nonzero one it makes
// zero, is refused. The pieces in the model's order (rank, then content); within a
// piece the lowest address of the result (F for rebuild, the shard for extract).
// `input(rank, src, dst)`: the element's bits before scaling.
template <class Input>
Finding scaled_out_of_range(const std::vector<PieceRef>& pieces, std::optional<Rank> only, DType dtype,
                            int scale_power, bool multiply, Input&& input) {
  for (const PieceRef& ref : pieces) {
    const Piece& p = *ref.piece;
    if (p.scale == 1.0 || (only && ref.rank != *only)) continue;
    std::optional<std::array<Index, 2>> lowest;  // {src, dst}
    for_each_index(p.shape, [&](std::span<const Index> index) {
      const Index src = *address_of(p.source, index);
      const Index dst = *address_of(p.dest, index);
      const std::uint64_t in = input(ref.rank, src, dst);
      const Reading before = read_bits(dtype, in);
      if (before.nan) return true;
      const Reading after = read_bits(dtype, reference_scale(dtype, in, p.scale, scale_power, multiply));
      const bool lost = (after.infinite && !before.infinite) || (after.zero && !before.zero);
      const Index result_at = multiply ? dst : src;
      if (lost && (!lowest || result_at < (multiply ? (*lowest)[1] : (*lowest)[0]))) lowest = {src, dst};
      return true;
    });
    if (lowest) {
      const auto [src, dst] = *lowest;
      const std::uint64_t in = input(ref.rank, src, dst);
      return fault::scaled_out_of_range(at(ref), multiply, src, dst, dtype, in,
                                        reference_scale(dtype, in, p.scale, scale_power, multiply));
    }
  }
  return std::nullopt;
}

}  // namespace

namespace {

// The data part of rebuild, on a map whose conditions 1-6, shards and scales passed.
Result<Buffer> rebuild_checked(const Map& map, const ShardSet& shards, DType dtype, int scale_power) {
  const Index full_numel = numel_of(map.logical_shape);
  Buffer full(dtype, full_numel);
  std::vector<Writer> writer(static_cast<std::size_t>(full_numel), Writer::nobody);
  std::vector<std::size_t> first_writer(static_cast<std::size_t>(full_numel), 0);
  const std::vector<PieceRef> pieces = all_pieces(map);
  auto read_shard = [&](Rank rank, Index, Index dst) { return shards.at(rank).bits(dst); };
  if (auto found = scaled_out_of_range(pieces, std::nullopt, dtype, scale_power, false, read_shard)) return *found;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const PieceRef& ref = pieces[i];
    const Piece& p = *ref.piece;
    const Buffer& shard = shards.at(ref.rank);
    const bool replica = p.locations.size() >= 2;
    Finding error;
    for_each_index(p.shape, [&](std::span<const Index> index) {
      const Index src = *address_of(p.source, index);
      const Index dst = *address_of(p.dest, index);
      std::uint64_t value = shard.bits(dst);
      if (p.scale != 1.0) value = reference_scale(dtype, value, p.scale, scale_power, false);
      const auto e = static_cast<std::size_t>(src);
      if (writer[e] == Writer::nobody) {
        full.set_bits(src, value);
        writer[e] = replica ? Writer::replica : Writer::single;
        first_writer[e] = i;
        return true;
      }
      const PieceAt earlier = at(pieces[first_writer[e]]);
      if (writer[e] == Writer::replica && replica) {
        if (full.bits(src) != value) {
          error = fault::replicas_differ(at(ref), src, dst, dtype, value, full.bits(src), &earlier);
        }
      } else {
        error = fault::written_twice(at(ref), src, &earlier);
      }
      return !error;
    });
    if (error) return *error;
  }
  for (Index e = 0; e < full_numel; ++e) {
    if (writer[static_cast<std::size_t>(e)] == Writer::nobody) return fault::element_uncovered(e);
  }
  return full;
}

}  // namespace

Result<Buffer> reference_rebuild(const Map& map, const ShardSet& shards, DType dtype,
                                 int scale_power) {
  const ReferenceVerdict verdict = reference_check(map);
  if (!verdict.valid()) return *verdict.error;
  if (Status error = shard_refusal(map, shards, dtype); !error.ok()) return error.error();
  if (Status error = reference_scale_refusal(map, dtype, scale_power); !error.ok()) return error.error();
  return rebuild_checked(map, shards, dtype, scale_power);
}

std::optional<Error> reference_replicas_differ(const Map& map, const ShardSet& shards, DType dtype,
                                               int scale_power) {
  if (!reference_check(map).valid()) return std::nullopt;
  if (!shard_refusal(map, shards, dtype).ok() || !reference_scale_refusal(map, dtype, scale_power).ok()) {
    return std::nullopt;
  }
  // Each replicated element's copies, unscaled, each against the first: no writer
  // record, no output, nothing shared with the rebuild above but the walk.
  std::vector<std::optional<std::uint64_t>> first(static_cast<std::size_t>(numel_of(map.logical_shape)));
  const std::vector<PieceRef> pieces = all_pieces(map);
  for (const PieceRef& ref : pieces) {
    const Piece& p = *ref.piece;
    if (p.locations.size() < 2) continue;
    const Buffer& shard = shards.at(ref.rank);
    Finding error;
    for_each_index(p.shape, [&](std::span<const Index> index) {
      const Index src = *address_of(p.source, index);
      const Index dst = *address_of(p.dest, index);
      std::uint64_t value = shard.bits(dst);
      if (p.scale != 1.0) value = reference_scale(dtype, value, p.scale, scale_power, false);
      auto& seen = first[static_cast<std::size_t>(src)];
      if (!seen) {
        seen = value;
      } else if (*seen != value) {
        error = fault::replicas_differ(at(ref), src, dst, dtype, value, *seen, nullptr);
      }
      return !error;
    });
    if (error) return *error;
  }
  return std::nullopt;
}

std::vector<std::uint64_t> reference_copies(const Map& map, const ShardSet& shards, DType dtype, int scale_power,
                                            Index element) {
  std::vector<std::uint64_t> copies;
  if (!reference_check(map).valid()) return copies;
  bool complete = true;
  for (const PieceRef& ref : all_pieces(map)) {
    const Piece& p = *ref.piece;
    const auto shard = shards.find(ref.rank);
    for_each_index(p.shape, [&](std::span<const Index> index) {
      if (*address_of(p.source, index) != element) return true;
      const Index dst = *address_of(p.dest, index);
      if (shard == shards.end() || shard->second.dtype() != dtype || dst >= shard->second.numel()) {
        complete = false;
        return false;
      }
      std::uint64_t value = shard->second.bits(dst);
      if (p.scale != 1.0) value = reference_scale(dtype, value, p.scale, scale_power, false);
      copies.push_back(value);
      return true;
    });
    if (!complete) return {};
  }
  return copies;
}

std::optional<std::map<Rank, std::uint64_t>> reference_digest_shares(const Map& map, const ShardSet& shards,
                                                                     DType dtype, int scale_power) {
  if (!reference_check(map).valid() || !shard_refusal(map, shards, dtype).ok() ||
      !reference_scale_refusal(map, dtype, scale_power).ok()) {
    return std::nullopt;
  }
  // An element unscaling loses (contract 1.2) has no share: rebuild refuses it.
  auto read_shard = [&](Rank rank, Index, Index dst) { return shards.at(rank).bits(dst); };
  if (scaled_out_of_range(all_pieces(map), std::nullopt, dtype, scale_power, false, read_shard)) return std::nullopt;
  std::map<Rank, std::uint64_t> shares;
  std::map<Rank, std::vector<bool>> counted;
  const auto numel = static_cast<std::size_t>(numel_of(map.logical_shape));
  for (const RankEntry* entry : ranks_by_id(map)) {
    if (shards.contains(entry->rank)) shares[entry->rank] = 0;
  }
  for (const PieceRef& ref : all_pieces(map)) {
    const Piece& p = *ref.piece;
    if (p.locations.empty() || *std::min_element(p.locations.begin(), p.locations.end()) != ref.rank) continue;
    std::vector<bool>& seen = counted[ref.rank];
    seen.resize(numel, false);
    const Buffer& shard = shards.at(ref.rank);
    for_each_index(p.shape, [&](std::span<const Index> index) {
      const Index src = *address_of(p.source, index);
      if (seen[static_cast<std::size_t>(src)]) return true;
      seen[static_cast<std::size_t>(src)] = true;
      std::uint64_t value = shard.bits(*address_of(p.dest, index));
      if (p.scale != 1.0) value = reference_scale(dtype, value, p.scale, scale_power, false);
      shares[ref.rank] += digest_term(static_cast<std::uint64_t>(src), value);
      return true;
    });
  }
  return shares;
}

std::optional<Buffer> reference_agreed_rebuild(const Map& map, const ShardSet& shards, DType dtype, int scale_power) {
  constexpr Index kMaxWalked = Index{1} << 22;  // the shards of a case, and then some
  for (Index e : map.logical_shape) {
    if (e < 0) return std::nullopt;
  }
  const auto numel = checked_numel(map.logical_shape);
  if (!numel || *numel > kMaxWalked) return std::nullopt;
  auto non_negative = [](const auto& xs) { return std::all_of(xs.begin(), xs.end(), [](Index x) { return x >= 0; }); };
  Buffer full(dtype, *numel);
  std::vector<std::uint8_t> covered(static_cast<std::size_t>(*numel), 0);
  Index walked = 0;
  for (const RankEntry& entry : map.ranks) {
    for (const Piece& p : entry.pieces) {
      const auto count = checked_numel(p.shape);
      if (!count || *count == 0) continue;
      const auto shard = shards.find(entry.rank);
      if (shard == shards.end() || shard->second.dtype() != dtype) return std::nullopt;
      if (p.source.strides.size() != p.shape.size() || p.dest.strides.size() != p.shape.size() ||
          !non_negative(p.shape) || !non_negative(p.source.strides) || !non_negative(p.dest.strides) ||
          p.source.offset < 0 || p.dest.offset < 0) {
        return std::nullopt;
      }
      const auto src_last = last_address(p.shape, p.source);
      const auto dst_last = last_address(p.shape, p.dest);
      if (!src_last || !dst_last || *src_last >= *numel || *dst_last >= shard->second.numel()) return std::nullopt;
      if (p.scale != 1.0 && !scale_may_convert(p.scale, dtype, scale_power)) return std::nullopt;
      walked += *count;
      if (walked > kMaxWalked) return std::nullopt;
      bool agree = true;
      for_each_index(p.shape, [&](std::span<const Index> index) {
        const Index src = *address_of(p.source, index);
        std::uint64_t value = shard->second.bits(*address_of(p.dest, index));
        if (p.scale != 1.0) {
          const Reading before = read_bits(dtype, value);
          value = reference_scale(dtype, value, p.scale, scale_power, false);
          const Reading after = read_bits(dtype, value);
          // A value scaling overflows or flushes cannot come back (1.2): no tensor is determined.
          if ((after.infinite && !before.infinite) || (after.zero && !before.zero)) agree = false;
        }
        auto& seen = covered[static_cast<std::size_t>(src)];
        if (seen == 0) {
          seen = 1;
          full.set_bits(src, value);
        } else if (full.bits(src) != value) {
          agree = false;
        }
        return agree;
      });
      if (!agree) return std::nullopt;
    }
  }
  if (std::find(covered.begin(), covered.end(), std::uint8_t{0}) != covered.end()) return std::nullopt;
  return full;
}

std::optional<Pairing> reference_pairing(const Map& map) {
  if (!reference_check(map).valid()) return std::nullopt;
  Pairing out;
  out.numel = numel_of(map.logical_shape);
  for (const RankEntry* entry : ranks_by_id(map)) {
    if (entry->shard_shape) out.shards.emplace_back(entry->rank, shard_numel(*entry));
    for (const Piece& p : entry->pieces) {
      for_each_index(p.shape, [&](std::span<const Index> index) {
        out.pairs.push_back(Pairing::Pair{*address_of(p.source, index), entry->rank,
                                          *address_of(p.dest, index), p.scale});
        return true;
      });
    }
  }
  std::sort(out.pairs.begin(), out.pairs.end());
  return out;
}

namespace {

// Extract on a map whose conditions 1-6 passed.
// What refuses an extract before any rank is looked at: F's size and the scales.
Status extract_refusal(const Map& map, const Buffer& full, int scale_power) {
  if (full.numel() != numel_of(map.logical_shape)) {
    return fault::full_numel(full.numel(), numel_of(map.logical_shape));
  }
  return reference_scale_refusal(map, full.dtype(), scale_power);
}

// One rank's shard, once extract_refusal has passed.
Result<Buffer> extract_rank(const Map& map, const Buffer& full, Rank rank, int scale_power) {
  const RankEntry* entry = map.find_rank(rank);
  if (!entry || !entry->shard_shape) return fault::no_shard_to_extract(rank);
  const DType dtype = full.dtype();

  auto read_full = [&](Rank, Index src, Index) { return full.bits(src); };
  if (auto found = scaled_out_of_range(all_pieces(map), rank, dtype, scale_power, true, read_full)) return *found;
  const Index numel = shard_numel(*entry);
  Buffer shard(dtype, numel);
  std::vector<bool> written(static_cast<std::size_t>(numel), false);
  for (std::size_t j = 0; j < entry->pieces.size(); ++j) {
    const Piece& p = entry->pieces[j];
    Finding error;
    for_each_index(p.shape, [&](std::span<const Index> index) {
      const Index src = *address_of(p.source, index);
      const Index dst = *address_of(p.dest, index);
      if (written[static_cast<std::size_t>(dst)]) {
        error = fault::shard_address_twice(PieceAt{rank, static_cast<Index>(j), &p}, dst, nullptr);
        return false;
      }
      std::uint64_t value = full.bits(src);
      if (p.scale != 1.0) value = reference_scale(dtype, value, p.scale, scale_power, true);
      shard.set_bits(dst, value);
      written[static_cast<std::size_t>(dst)] = true;
      return true;
    });
    if (error) return *error;
  }
  for (Index a = 0; a < numel; ++a) {
    if (!written[static_cast<std::size_t>(a)]) return fault::shard_address_uncovered(rank, a);
  }
  return shard;
}

}  // namespace

Result<Buffer> reference_extract(const Map& map, const Buffer& full, Rank rank,
                                 int scale_power) {
  const ReferenceVerdict verdict = reference_check(map);
  if (!verdict.valid()) return *verdict.error;
  if (full.numel() != numel_of(map.logical_shape)) {
    return fault::full_numel(full.numel(), numel_of(map.logical_shape));
  }
  const RankEntry* entry = map.find_rank(rank);
  if (!entry || (!entry->shard_shape && !entry->pieces.empty())) return fault::no_shard_to_extract(rank);
  if (!entry->shard_shape) return Buffer(full.dtype(), 0);  // no pieces, no shape: an empty shard
  if (Status error = reference_scale_refusal(map, full.dtype(), scale_power); !error.ok()) return error.error();
  return extract_rank(map, full, rank, scale_power);
}

Result<ShardSet> reference_extract_all(const Map& map, const Buffer& full, int scale_power) {
  const ReferenceVerdict verdict = reference_check(map);
  if (!verdict.valid()) return *verdict.error;
  ShardSet out;
  const auto ranks = ranks_by_id(map);
  // Refused for every rank alike, so decided once (and only if some rank has a shard).
  if (std::any_of(ranks.begin(), ranks.end(), [](const RankEntry* entry) { return entry->shard_shape.has_value(); })) {
    if (Status error = extract_refusal(map, full, scale_power); !error.ok()) return error.error();
  }
  for (const RankEntry* entry : ranks) {
    if (!entry->shard_shape) continue;
    auto shard = extract_rank(map, full, entry->rank, scale_power);
    if (!shard) return shard.error();
    out.emplace(entry->rank, std::move(shard).value());
  }
  return out;
}

namespace {

// The copy each element of F is read from: its lowest holder's (pairs are sorted by
// element, then rank, then address).
std::vector<const Pairing::Pair*> lowest_holders(const Pairing& from) {
  std::vector<const Pairing::Pair*> held(static_cast<std::size_t>(from.numel), nullptr);
  for (const auto& pair : from.pairs) {
    auto& slot = held[static_cast<std::size_t>(pair.element)];
    if (slot == nullptr) slot = &pair;
  }
  return held;
}

// Scales, by target rank and then element, as the plan is refused before data is seen.
Status scales_disagree(const std::vector<const Pairing::Pair*>& held, const Pairing& to) {
  std::vector<const Pairing::Pair*> wanted;
  for (const auto& pair : to.pairs) wanted.push_back(&pair);
  std::stable_sort(wanted.begin(), wanted.end(), [](const Pairing::Pair* a, const Pairing::Pair* b) {
    return std::tie(a->rank, a->element) < std::tie(b->rank, b->element);
  });
  for (const Pairing::Pair* pair : wanted) {
    const Pairing::Pair& source_copy = *held[static_cast<std::size_t>(pair->element)];
    if (source_copy.scale != pair->scale) {
      return make_error(ErrorKind::scale, "the source and target scales of an element differ",
                        Where::in_rank(pair->rank).at(Side::full, pair->element));
    }
  }
  return {};
}

}  // namespace

Status reference_reshard_scale_refusal(const Map& source, const Map& target) {
  if (source.logical_shape != target.logical_shape) return {};
  const auto from = reference_pairing(source);
  const auto to = reference_pairing(target);
  if (!from || !to) return {};
  return scales_disagree(lowest_holders(*from), *to);
}

// Contract 11, element by element and through the pairings alone (no runs, no segments,
// nothing of the core's planner): each element of F is read from the copy of its lowest
// holder, and every (rank, address) the target map pairs with it gets those bits.
Result<ShardSet> reference_reshard(const Map& source, const Map& target, const ShardSet& shards, DType dtype,
                                   bool compare_replicas) {
  for (const auto& [map, side] : {std::pair{&source, "source"}, std::pair{&target, "target"}}) {
    const ReferenceVerdict verdict = reference_check(*map);
    if (!verdict.valid()) {
      return reworded(*verdict.error, fmt::format("in the {} map, {}", side, verdict.error->sentence));
    }
  }
  if (source.logical_shape != target.logical_shape) {
    return fault::reshard_shapes_differ(source.logical_shape, target.logical_shape);
  }
  const Pairing from = *reference_pairing(source);
  const Pairing to = *reference_pairing(target);
  const std::vector<const Pairing::Pair*> held = lowest_holders(from);
  if (Status refused = scales_disagree(held, to); !refused.ok()) return std::move(refused).error();
  std::map<Rank, Index> sizes(from.shards.begin(), from.shards.end());
  for (const auto& [rank, buffer] : shards) {
    if (!sizes.contains(rank)) return fault::unlisted_shard(rank);
    if (buffer.dtype() != dtype) return fault::shard_dtype(rank, buffer.dtype(), dtype);
    if (buffer.numel() != sizes.at(rank)) return fault::shard_numel(rank, buffer.numel(), sizes.at(rank));
  }
  for (const auto& [rank, numel] : sizes) {
    if (numel > 0 && !shards.contains(rank)) return fault::missing_source_shard(rank, numel);
  }
  // Contract 1.2's refusals that depend on the dtype, on every piece of both maps.
  for (const auto& [map, side] : {std::pair{&source, "source"}, std::pair{&target, "target"}}) {
    if (Status refused = reference_scale_refusal(*map, dtype, 1); !refused.ok()) {
      return reworded(refused.error(), fmt::format("in the {} map, {}", side, refused.error().sentence));
    }
  }
  if (compare_replicas) {
    for (const auto& pair : from.pairs) {
      const Pairing::Pair& first = *held[static_cast<std::size_t>(pair.element)];
      if (first.scale != pair.scale) continue;  // compared only after unscaling, which a plan does not do
      const std::uint64_t a = shards.at(first.rank).bits(first.address);
      const std::uint64_t b = shards.at(pair.rank).bits(pair.address);
      if (a != b) return fault::replica_holders_differ(first.rank, first.address, pair.rank, pair.address, dtype, a, b);
    }
  }
  ShardSet out;
  for (const auto& [rank, numel] : to.shards) out.emplace(rank, Buffer(dtype, numel));
  for (const auto& pair : to.pairs) {
    const Pairing::Pair& copy = *held[static_cast<std::size_t>(pair.element)];
    out.at(pair.rank).set_bits(pair.address, shards.at(copy.rank).bits(copy.address));
  }
  return out;
}

}  // namespace shardcheck::oracles

