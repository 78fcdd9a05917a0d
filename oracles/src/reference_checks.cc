// The reference model of contract 3: conditions 1-6 on a map, walked naively (see
// reference.cc), and the last few verdicts remembered per thread.
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
  auto numel = count_of(p.shape);
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
    if (any_negative(*entry.shard_shape) || !count_of(*entry.shard_shape)) {
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
  if (any_negative(map.logical_shape) || !count_of(map.logical_shape)) {
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
Finding too_large(const Map& map, const std::vector<PieceRef>& pieces, Index max_elements) {
  bool large = numel_of(map.logical_shape) > max_elements;
  for (const auto& entry : map.ranks) large = large || shard_numel(entry) > max_elements;
  Index total = 0;
  for (const PieceRef& ref : pieces) {
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
  for_each_index(shape, [&](std::span<const Index> index) {
    most = std::max(most, *address_of(view, index));
    return true;
  });
  return most;
}

Finding bounds(const Map& map, const std::vector<PieceRef>& pieces) {
  const Index full = numel_of(map.logical_shape);
  for (const PieceRef& ref : pieces) {
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
  addresses.reserve(static_cast<std::size_t>(numel_of(shape)));
  for_each_index(shape, [&](std::span<const Index> index) {
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

SelfOverlap self_overlap(const std::vector<PieceRef>& pieces) {
  SelfOverlap out;
  for (const PieceRef& ref : pieces) {
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
      for_each_index(p.shape, [&](std::span<const Index> index) {
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
          for_each_index(ref.piece->shape, [&](std::span<const Index> index) {
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
  Index count = 0;
  for (const PieceRef& ref : pieces) count += numel_of(ref.piece->shape);
  covers.reserve(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    for_each_index(pieces[i].piece->shape, [&](std::span<const Index> index) {
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
  std::vector<std::size_t> group;
  while (begin < covers.size()) {
    std::size_t end = begin;
    group.clear();
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

// Contract 1.1 and 6, element by element. An element two single-holder pieces both claim
// is written twice; any other disagreement is about holders. The reported fault is
// the lowest piece's, at its lowest element, so neither order can change the kind.
Finding homogeneity(const std::vector<Cover>& covers, const std::vector<PieceRef>& pieces) {
  std::vector<std::optional<Fault>> first(pieces.size());
  std::vector<Rank> holders;  // the ranks listing a piece that covers the element, sorted
  for_each_group(covers, [&](Index element, const std::vector<std::size_t>& group) {
    holders.clear();
    int singles = 0;
    for (std::size_t i : group) {
      holders.push_back(pieces[i].rank);
      if (pieces[i].piece->locations.size() == 1) ++singles;
    }
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    const auto& some_locations = pieces[group.front()].piece->locations;
    bool pairs_ok = group.size() == 1;
    if (!pairs_ok) {
      pairs_ok = std::all_of(group.begin(), group.end(), [&](std::size_t i) {
        const auto& locs = pieces[i].piece->locations;
        return locs.size() >= 2 && locs == some_locations;
      });
    }
    const ErrorKind kind = singles >= 2 ? ErrorKind::twice : ErrorKind::holders;
    // The pieces to fix are those whose own locations are wrong (1.1); only when every
    // piece's are right (two single holders on one rank) does the pair rule name them all.
    auto own_fault = [&](std::size_t i) { return pieces[i].piece->locations != holders || !names_itself(pieces[i]); };
    const bool some_own_fault = std::any_of(group.begin(), group.end(), own_fault);
    for (std::size_t i : group) {
      const bool bad = own_fault(i) || (!pairs_ok && !some_own_fault);
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
Finding walked_conditions(const Map& map, const std::vector<PieceRef>& pieces) {
  if (auto found = dest_tiling(map)) return found;
  const std::vector<Cover> covers = covers_of(pieces);
  if (auto found = coverage(map, covers)) return found;
  return homogeneity(covers, pieces);
}

}  // namespace

namespace {
ReferenceVerdict check_uncached(const Map& map, Index max_elements);

// The oracles ask about the same few maps (the map under test, the truth map, the maps
// derived from them) several times per case; the verdict is a pure function of the map,
// so the last few are remembered, per thread, and compared by value, scales bit for bit
// (a scale of -0.0 is worded otherwise than one of 0.0, though the two compare equal).
struct RememberedVerdict {
  Map map;
  Index max_elements = 0;
  ReferenceVerdict verdict;
};

bool same_scales(const Map& a, const Map& b) {
  for (std::size_t r = 0; r < a.ranks.size(); ++r) {
    const auto& x = a.ranks[r].pieces;
    const auto& y = b.ranks[r].pieces;
    for (std::size_t j = 0; j < x.size(); ++j) {
      if (std::bit_cast<std::uint64_t>(x[j].scale) != std::bit_cast<std::uint64_t>(y[j].scale)) return false;
    }
  }
  return true;
}

constexpr std::size_t kRemembered = 6;
using Remembered = std::array<std::optional<RememberedVerdict>, kRemembered>;

Remembered& remembered_verdicts() {
  thread_local Remembered remembered;
  return remembered;
}
}  // namespace

ReferenceVerdict reference_check(const Map& map, Index max_elements) {
  Remembered& remembered = remembered_verdicts();
  for (std::size_t i = 0; i < kRemembered; ++i) {
    auto& entry = remembered[i];
    if (entry && entry->max_elements == max_elements && entry->map == map && same_scales(entry->map, map)) {
      // The most recently asked first.
      std::rotate(remembered.begin(), remembered.begin() + static_cast<std::ptrdiff_t>(i),
                  remembered.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return remembered[0]->verdict;
    }
  }
  ReferenceVerdict verdict = check_uncached(map, max_elements);
  // The oldest slot becomes the newest. Assigning into it, rather than constructing a
  // new entry, reuses the vectors of the map it held: maps of one campaign are alike.
  std::rotate(remembered.begin(), remembered.end() - 1, remembered.end());
  if (!remembered[0]) remembered[0].emplace();
  remembered[0]->map = map;
  remembered[0]->max_elements = max_elements;
  remembered[0]->verdict = verdict;
  return verdict;
}

void forget_reference_verdicts() {
  for (auto& entry : remembered_verdicts()) entry.reset();
}

namespace {
ReferenceVerdict check_uncached(const Map& map, Index max_elements) {
  auto refuse = [](const Error& error) {
    ReferenceVerdict verdict;
    verdict.kind = error.kind;
    verdict.reason = error.message;
    verdict.error = error;
    return verdict;
  };
  if (auto found = structure(map)) return refuse(*found);
  // Every piece, lowest first, for the conditions that go piece by piece.
  const std::vector<PieceRef> pieces = all_pieces(map);
  if (auto found = too_large(map, pieces, max_elements)) {
    ReferenceVerdict verdict = refuse(*found);
    verdict.too_large = true;
    return verdict;
  }
  if (auto found = bounds(map, pieces)) return refuse(*found);
  // Conditions 4-6 are walked even when the rule refuses a view, to tell a map the
  // conservative rule alone refuses from one that is broken in fact.
  const SelfOverlap overlap = self_overlap(pieces);
  const Finding walked = walked_conditions(map, pieces);
  if (overlap.first) {
    ReferenceVerdict verdict = refuse(*overlap.first);
    verdict.refused_only_by_stride_rule = overlap.all_really_unique && !walked;
    return verdict;
  }
  if (walked) return refuse(*walked);
  return ReferenceVerdict{};
}
}  // namespace

}  // namespace shardcheck::oracles
