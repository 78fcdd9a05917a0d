// The reference model of spec sections 3 and 4. It is deliberately naive: it walks
// every multi-index of every piece, computes each address from scratch with checked
// arithmetic and keeps plain counters, so that it can be trusted by reading it. It
// shares no code with the core checks or conversion on purpose: it is what they are
// compared against.
#include "shardcheck/oracles/reference.h"

#include <algorithm>
#include <cmath>
#include <compare>
#include <tuple>
#include <set>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace shardcheck::oracles {
namespace {

// The first fault found, if any. Faults are worded by the core's fault table, so the
// same fault reads the same here and in the fast checks; what is found, and where, is
// decided here alone.
using Finding = std::optional<Error>;

// A piece together with the rank that lists it and its index as written.
struct PieceRef {
  Rank rank = 0;
  Index index = 0;
  const Piece* piece = nullptr;
};

PieceAt at(const PieceRef& ref) { return PieceAt{ref.rank, ref.index, ref.piece}; }

// Ranks in id order, so that no verdict depends on the order they were written in.
std::vector<const RankEntry*> ranks_by_id(const Map& map) {
  std::vector<const RankEntry*> out;
  for (const auto& entry : map.ranks) out.push_back(&entry);
  std::stable_sort(out.begin(), out.end(),
                   [](const RankEntry* a, const RankEntry* b) { return a->rank < b->rank; });
  return out;
}

// "The lowest piece" of spec 3 needs an order that ignores how pieces were written:
// their content. strong_order keeps a NaN scale from breaking the sort.
bool naive_content_less(const Piece& a, const Piece& b) {
  auto key = [](const Piece& p) {
    return std::tie(p.source.offset, p.source.strides, p.shape, p.dest.offset, p.dest.strides,
                    p.locations);
  };
  if (key(a) != key(b)) return key(a) < key(b);
  return std::strong_order(a.scale, b.scale) < 0;
}

std::vector<PieceRef> pieces_of(const RankEntry& entry) {
  std::vector<PieceRef> out;
  for (std::size_t j = 0; j < entry.pieces.size(); ++j) {
    out.push_back(PieceRef{entry.rank, static_cast<Index>(j), &entry.pieces[j]});
  }
  std::stable_sort(out.begin(), out.end(), [](const PieceRef& a, const PieceRef& b) {
    return naive_content_less(*a.piece, *b.piece);
  });
  return out;
}

// Every piece, lowest first: ranks by id, then pieces by content.
std::vector<PieceRef> all_pieces(const Map& map) {
  std::vector<PieceRef> out;
  for (const RankEntry* entry : ranks_by_id(map)) {
    for (const PieceRef& ref : pieces_of(*entry)) out.push_back(ref);
  }
  return out;
}

bool names_itself(const PieceRef& ref) {
  const auto& locs = ref.piece->locations;
  return std::find(locs.begin(), locs.end(), ref.rank) != locs.end();
}

// Calls visit(index) for every multi-index of `shape` in row-major order, until
// visit returns false. A 0-d shape has exactly one (empty) index.
template <class Visit>
bool for_each_index(const Extents& shape, Visit&& visit) {
  for (Index extent : shape) {
    if (extent <= 0) return true;
  }
  std::vector<Index> index(shape.size(), 0);
  while (true) {
    if (!visit(index)) return false;
    std::size_t k = shape.size();
    while (true) {
      if (k == 0) return true;
      --k;
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
}

std::optional<Index> address_of(const StridedView& view, const std::vector<Index>& index) {
  Index address = view.offset;
  for (std::size_t k = 0; k < index.size(); ++k) {
    auto step = checked_mul(index[k], view.strides[k]);
    if (!step) return std::nullopt;
    auto next = checked_add(address, *step);
    if (!next) return std::nullopt;
    address = *next;
  }
  return address;
}

// The largest address a non-empty view reaches; nullopt on overflow.
std::optional<Index> last_address(const Extents& shape, const StridedView& view) {
  Index address = view.offset;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    auto step = checked_mul(shape[k] - 1, view.strides[k]);
    if (!step) return std::nullopt;
    auto next = checked_add(address, *step);
    if (!next) return std::nullopt;
    address = *next;
  }
  return address;
}

bool any_negative(const std::vector<Index>& values) {
  return std::any_of(values.begin(), values.end(), [](Index v) { return v < 0; });
}

Index numel_of(const Extents& shape) { return checked_numel(shape).value_or(0); }

Index shard_numel(const RankEntry& entry) {
  return entry.shard_shape ? numel_of(*entry.shard_shape) : 0;
}

// ---- condition 1: structure ------------------------------------------------

// One piece's malformed fields, in the order the contract's condition 1 lists them:
// lengths, extents, offsets, strides, overflow, locations; then its scale.
std::optional<PieceFault> piece_fault(const Piece& p) {
  if (p.source.strides.size() != p.shape.size() || p.dest.strides.size() != p.shape.size()) {
    return PieceFault::axes;
  }
  if (any_negative(p.shape)) return PieceFault::negative_extent;
  if (p.source.offset < 0) return PieceFault::negative_source_offset;
  if (p.dest.offset < 0) return PieceFault::negative_dest_offset;
  if (any_negative(p.source.strides)) return PieceFault::negative_source_stride;
  if (any_negative(p.dest.strides)) return PieceFault::negative_dest_stride;
  auto numel = checked_numel(p.shape);
  if (!numel) return PieceFault::source_overflow;
  if (*numel > 0 && !last_address(p.shape, p.source)) return PieceFault::source_overflow;
  if (*numel > 0 && !last_address(p.shape, p.dest)) return PieceFault::dest_overflow;
  if (p.locations.empty()) return PieceFault::no_locations;
  for (std::size_t k = 0; k < p.locations.size(); ++k) {
    if (p.locations[k] < 0) return PieceFault::negative_location;
    if (k > 0 && p.locations[k] <= p.locations[k - 1]) return PieceFault::unsorted_locations;
  }
  if (p.scale == 0.0 || !std::isfinite(p.scale)) return PieceFault::bad_scale;
  return std::nullopt;
}

Finding shard_structure(const RankEntry& entry) {
  if (entry.shard_shape) {
    if (any_negative(*entry.shard_shape) || !checked_numel(*entry.shard_shape)) {
      return fault::bad_shard_shape(entry.rank, *entry.shard_shape);
    }
  } else if (!entry.pieces.empty()) {
    return fault::missing_shard_shape(entry.rank);
  }
  return std::nullopt;
}

// The first fault in spec order: F's shape, then rank by rank (id, shard, pieces by
// content), each piece's malformed fields before its scale.
Finding structure(const Map& map) {
  if (any_negative(map.logical_shape) || !checked_numel(map.logical_shape)) {
    return fault::bad_logical_shape(map.logical_shape);
  }
  std::set<Rank> seen;
  for (const RankEntry* entry : ranks_by_id(map)) {
    if (entry->rank < 0) return fault::negative_rank_id(entry->rank);
    if (!seen.insert(entry->rank).second) return fault::duplicate_rank(entry->rank);
    if (auto found = shard_structure(*entry)) return found;
    for (const PieceRef& ref : pieces_of(*entry)) {
      if (auto which = piece_fault(*ref.piece)) return fault::piece(*which, at(ref));
    }
  }
  return std::nullopt;
}

// Run after structure, so every count below is known not to overflow.
Finding too_large(const Map& map, Index max_elements) {
  bool large = numel_of(map.logical_shape) > max_elements;
  for (const auto& entry : map.ranks) large = large || shard_numel(entry) > max_elements;
  Index total = 0;
  for (const PieceRef& ref : all_pieces(map)) {
    auto next = checked_add(total, numel_of(ref.piece->shape));
    if (!next || *next > max_elements) {
      large = true;
      break;
    }
    total = *next;
  }
  if (!large) return std::nullopt;
  return fault::too_large_for_reference(max_elements);
}

// ---- condition 2: bounds ---------------------------------------------------

// The largest address a view really reaches, found by walking it.
Index walked_max(const Extents& shape, const StridedView& view) {
  Index most = -1;
  for_each_index(shape, [&](const std::vector<Index>& index) {
    most = std::max(most, *address_of(view, index));
    return true;
  });
  return most;
}

Finding bounds(const Map& map) {
  const Index full = numel_of(map.logical_shape);
  for (const PieceRef& ref : all_pieces(map)) {
    const Index shard = shard_numel(*map.find_rank(ref.rank));
    const Index src = walked_max(ref.piece->shape, ref.piece->source);
    if (src >= full) return fault::out_of_bounds(at(ref), Side::full, src, full);
    const Index dst = walked_max(ref.piece->shape, ref.piece->dest);
    if (dst >= shard) return fault::out_of_bounds(at(ref), Side::shard, dst, shard);
  }
  return std::nullopt;
}

// ---- condition 3: views that overlap themselves ----------------------------

// The spec's conservative rule, exactly as written there.
bool stride_rule_accepts(const Extents& shape, const Strides& strides) {
  std::vector<std::pair<Index, Index>> axes;  // (stride, extent) for extents > 1
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0) return true;  // covers nothing
    if (shape[k] > 1) axes.emplace_back(strides[k], shape[k]);
  }
  std::sort(axes.begin(), axes.end());
  Index reach = 0;
  for (const auto& [stride, extent] : axes) {
    if (stride == 0 || stride <= reach) return false;
    auto step = checked_mul(extent - 1, stride);
    auto next = step ? checked_add(reach, *step) : std::nullopt;
    if (!next) return false;
    reach = *next;
  }
  return true;
}

// The truth the rule approximates: no address is visited twice.
bool walks_injectively(const Extents& shape, const StridedView& view) {
  std::vector<Index> addresses;
  for_each_index(shape, [&](const std::vector<Index>& index) {
    addresses.push_back(*address_of(view, index));
    return true;
  });
  std::sort(addresses.begin(), addresses.end());
  return std::adjacent_find(addresses.begin(), addresses.end()) == addresses.end();
}

struct SelfOverlap {
  Finding first;                   // the first view the rule refuses
  bool all_really_unique = true;   // every refused view is injective when walked
};

SelfOverlap self_overlap(const Map& map) {
  SelfOverlap out;
  for (const PieceRef& ref : all_pieces(map)) {
    const Piece& p = *ref.piece;
    for (const auto& [view, side] : {std::pair{&p.source, Side::full}, std::pair{&p.dest, Side::shard}}) {
      if (stride_rule_accepts(p.shape, view->strides)) continue;
      if (!out.first) out.first = fault::overlaps_itself(at(ref), side);
      out.all_really_unique = out.all_really_unique && walks_injectively(p.shape, *view);
    }
  }
  return out;
}

// ---- condition 4: per-rank destination tiling ------------------------------

Finding dest_tiling(const Map& map) {
  for (const RankEntry* entry : ranks_by_id(map)) {
    const Index shard = shard_numel(*entry);
    Index written = 0;
    for (const Piece& p : entry->pieces) written += numel_of(p.shape);
    if (written != shard) return fault::count(entry->rank, written, shard);
    std::vector<Index> hits(static_cast<std::size_t>(shard), 0);
    for (const Piece& p : entry->pieces) {
      for_each_index(p.shape, [&](const std::vector<Index>& index) {
        ++hits[static_cast<std::size_t>(*address_of(p.dest, index))];
        return true;
      });
    }
    // With equal counts a collision always leaves a hole too; the collision is the cause.
    for (Index a = 0; a < shard; ++a) {
      if (hits[a] > 1) {
        // The two lowest pieces writing it; one piece alone only when its view overlaps itself.
        std::vector<PieceRef> writers;
        for (const PieceRef& ref : pieces_of(*entry)) {
          for_each_index(ref.piece->shape, [&](const std::vector<Index>& index) {
            if (*address_of(ref.piece->dest, index) != a) return true;
            writers.push_back(ref);
            return false;
          });
          if (writers.size() == 2) break;
        }
        const PieceAt other = at(writers.back());
        return fault::shard_address_twice(at(writers.front()), a, &other);
      }
    }
    for (Index a = 0; a < shard; ++a) {
      if (hits[a] == 0) return fault::shard_address_uncovered(entry->rank, a);
    }
  }
  return std::nullopt;
}

// ---- conditions 5 and 6: coverage and homogeneity --------------------------

// One (element of F, piece covering it) pair; sorted, equal elements form a group.
struct Cover {
  Index element = 0;
  std::size_t piece = 0;  // into all_pieces()
  auto operator<=>(const Cover&) const = default;
};

std::vector<Cover> covers_of(const std::vector<PieceRef>& pieces) {
  std::vector<Cover> covers;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for_each_index(pieces[i].piece->shape, [&](const std::vector<Index>& index) {
      covers.push_back(Cover{*address_of(pieces[i].piece->source, index), i});
      return true;
    });
  }
  std::sort(covers.begin(), covers.end());
  return covers;
}

// Calls visit(element, pieces covering it) for each element covered at all, in
// element order. `covers` must be sorted.
template <class Visit>
void for_each_group(const std::vector<Cover>& covers, Visit&& visit) {
  std::size_t begin = 0;
  while (begin < covers.size()) {
    std::size_t end = begin;
    std::vector<std::size_t> group;
    while (end < covers.size() && covers[end].element == covers[begin].element) {
      group.push_back(covers[end].piece);
      ++end;
    }
    visit(covers[begin].element, group);
    begin = end;
  }
}

Finding coverage(const Map& map, const std::vector<Cover>& covers) {
  const Index full = numel_of(map.logical_shape);
  Index expected = 0;
  for (const Cover& c : covers) {
    if (c.element > expected) break;
    if (c.element == expected) ++expected;
  }
  if (expected >= full) return std::nullopt;
  return fault::element_uncovered(expected);
}

struct Fault {
  Index element = 0;
  ErrorKind kind = ErrorKind::holders;
};

// Spec 1.1 and 6, element by element. An element two single-holder pieces both claim
// is written twice; any other disagreement is about holders. The reported fault is
// the lowest piece's, at its lowest element, so neither order can change the kind.
Finding homogeneity(const std::vector<Cover>& covers, const std::vector<PieceRef>& pieces) {
  std::vector<std::optional<Fault>> first(pieces.size());
  for_each_group(covers, [&](Index element, const std::vector<std::size_t>& group) {
    std::set<Rank> holder_set;
    int singles = 0;
    for (std::size_t i : group) {
      holder_set.insert(pieces[i].rank);
      if (pieces[i].piece->locations.size() == 1) ++singles;
    }
    const std::vector<Rank> holders(holder_set.begin(), holder_set.end());
    const auto& some_locations = pieces[group.front()].piece->locations;
    bool pairs_ok = group.size() == 1;
    if (!pairs_ok) {
      pairs_ok = std::all_of(group.begin(), group.end(), [&](std::size_t i) {
        const auto& locs = pieces[i].piece->locations;
        return locs.size() >= 2 && locs == some_locations;
      });
    }
    const ErrorKind kind = singles >= 2 ? ErrorKind::twice : ErrorKind::holders;
    for (std::size_t i : group) {
      const bool bad = pieces[i].piece->locations != holders || !names_itself(pieces[i]) ||
                       !pairs_ok;
      if (bad && !first[i]) first[i] = Fault{element, kind};
    }
  });
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const PieceRef& ref = pieces[i];
    if (numel_of(ref.piece->shape) == 0 && !names_itself(ref)) {
      // An empty piece covers nothing, but it must still name the rank listing it.
      return fault::not_own_rank(at(ref));
    }
    if (!first[i]) continue;
    const Index element = first[i]->element;
    std::set<Rank> holders;
    std::optional<std::size_t> other_single;  // the lowest other single holder there
    for (const Cover& c : covers) {
      if (c.element != element) continue;
      holders.insert(pieces[c.piece].rank);
      if (c.piece != i && pieces[c.piece].piece->locations.size() == 1 &&
          (!other_single || c.piece < *other_single)) {
        other_single = c.piece;
      }
    }
    if (first[i]->kind == ErrorKind::twice && other_single) {
      return fault::claimed_twice(at(ref), element, at(pieces[*other_single]));
    }
    return fault::holders(at(ref), element, std::vector<Rank>(holders.begin(), holders.end()));
  }
  return std::nullopt;
}

// Conditions 4-6, evaluated by walking whatever the views really address.
Finding walked_conditions(const Map& map) {
  if (auto found = dest_tiling(map)) return found;
  const std::vector<PieceRef> pieces = all_pieces(map);
  const std::vector<Cover> covers = covers_of(pieces);
  if (auto found = coverage(map, covers)) return found;
  return homogeneity(covers, pieces);
}

// ---- conversion ------------------------------------------------------------

// Spec 1.2: scaling with p != 1 would need the optimizer's lr and eps rescaled too,
// and integers cannot be scaled at all.
Status scale_refusal(const Map& map, DType dtype, int power) {
  for (const PieceRef& ref : all_pieces(map)) {
    if (ref.piece->scale == 1.0) continue;
    if (power != 1) return fault::scale_needs_power_one(at(ref), power);
    if (!is_floating(dtype)) return fault::scale_on_integer(at(ref), dtype);
  }
  return {};
}

Status shard_refusal(const Map& map, const ShardSet& shards, DType dtype) {
  for (const auto& [rank, shard] : shards) {
    if (shard.dtype() != dtype) return fault::shard_dtype(rank, shard.dtype(), dtype);
    const RankEntry* entry = map.find_rank(rank);
    if (entry && entry->shard_shape && shard.numel() != shard_numel(*entry)) {
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

}  // namespace

ReferenceVerdict reference_check(const Map& map, Index max_elements) {
  auto refuse = [](const Error& error) {
    ReferenceVerdict verdict;
    verdict.kind = error.kind;
    verdict.reason = error.message;
    verdict.error = error;
    return verdict;
  };
  if (auto found = structure(map)) return refuse(*found);
  if (auto found = too_large(map, max_elements)) {
    ReferenceVerdict verdict = refuse(*found);
    verdict.too_large = true;
    return verdict;
  }
  if (auto found = bounds(map)) return refuse(*found);
  // Conditions 4-6 are walked even when the rule refuses a view, to tell a map the
  // conservative rule alone refuses from one that is broken in fact.
  const SelfOverlap overlap = self_overlap(map);
  const Finding walked = walked_conditions(map);
  if (overlap.first) {
    ReferenceVerdict verdict = refuse(*overlap.first);
    verdict.refused_only_by_stride_rule = overlap.all_really_unique && !walked;
    return verdict;
  }
  if (walked) return refuse(*walked);
  return ReferenceVerdict{};
}

Result<Buffer> reference_rebuild(const Map& map, const ShardSet& shards, DType dtype,
                                 int scale_power) {
  const ReferenceVerdict verdict = reference_check(map);
  if (!verdict.valid()) return *verdict.error;
  if (Status error = shard_refusal(map, shards, dtype); !error.ok()) return error.error();
  if (Status error = scale_refusal(map, dtype, scale_power); !error.ok()) return error.error();

  const Index full_numel = numel_of(map.logical_shape);
  Buffer full(dtype, full_numel);
  std::vector<Writer> writer(static_cast<std::size_t>(full_numel), Writer::nobody);
  std::vector<std::size_t> first_writer(static_cast<std::size_t>(full_numel), 0);
  const std::vector<PieceRef> pieces = all_pieces(map);
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const PieceRef& ref = pieces[i];
    const Piece& p = *ref.piece;
    const Buffer& shard = shards.at(ref.rank);
    const bool replica = p.locations.size() >= 2;
    Finding error;
    for_each_index(p.shape, [&](const std::vector<Index>& index) {
      const Index src = *address_of(p.source, index);
      const Index dst = *address_of(p.dest, index);
      std::uint64_t value = shard.bits(dst);
      if (p.scale != 1.0) value = apply_scale(dtype, value, p.scale, scale_power, false);
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

Result<Buffer> reference_extract(const Map& map, const Buffer& full, Rank rank,
                                 int scale_power) {
  const ReferenceVerdict verdict = reference_check(map);
  if (!verdict.valid()) return *verdict.error;
  if (full.numel() != numel_of(map.logical_shape)) {
    return fault::full_numel(full.numel(), numel_of(map.logical_shape));
  }
  const RankEntry* entry = map.find_rank(rank);
  if (!entry || !entry->shard_shape) return fault::no_shard_to_extract(rank);
  const DType dtype = full.dtype();
  if (Status error = scale_refusal(map, dtype, scale_power); !error.ok()) return error.error();

  const Index numel = shard_numel(*entry);
  Buffer shard(dtype, numel);
  std::vector<bool> written(static_cast<std::size_t>(numel), false);
  for (std::size_t j = 0; j < entry->pieces.size(); ++j) {
    const Piece& p = entry->pieces[j];
    Finding error;
    for_each_index(p.shape, [&](const std::vector<Index>& index) {
      const Index src = *address_of(p.source, index);
      const Index dst = *address_of(p.dest, index);
      if (written[static_cast<std::size_t>(dst)]) {
        error = fault::shard_address_twice(PieceAt{rank, static_cast<Index>(j), &p}, dst, nullptr);
        return false;
      }
      std::uint64_t value = full.bits(src);
      if (p.scale != 1.0) value = apply_scale(dtype, value, p.scale, scale_power, true);
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

}  // namespace shardcheck::oracles
