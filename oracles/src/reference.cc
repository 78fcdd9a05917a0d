// The reference model of contract 3 and 4. It is deliberately naive: it walks
// every multi-index of every piece, computes each address from scratch with checked
// arithmetic and keeps plain counters, so that it can be trusted by reading it. It
// shares no code with the core checks or conversion on purpose: it is what they are
// compared against.
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
// Equal ids (a map condition 1 refuses) keep the order they were written in: the
// entries' addresses are that order. An explicit tie-break instead of stable_sort,
// whose temporary buffer is an allocation per call.
std::vector<const RankEntry*> ranks_by_id(const Map& map) {
  std::vector<const RankEntry*> out;
  out.reserve(map.ranks.size());
  for (const auto& entry : map.ranks) out.push_back(&entry);
  std::sort(out.begin(), out.end(), [](const RankEntry* a, const RankEntry* b) {
    return a->rank != b->rank ? a->rank < b->rank : a < b;
  });
  return out;
}

// "The lowest piece" of contract 3 needs an order that ignores how pieces were written:
// their content. strong_order keeps a NaN scale from breaking the sort.
std::strong_ordering naive_content_order(const Piece& a, const Piece& b) {
  auto key = [](const Piece& p) {
    return std::tie(p.source.offset, p.source.strides, p.shape, p.dest.offset, p.dest.strides,
                    p.locations);
  };
  if (const auto order = key(a) <=> key(b); order != 0) return order;
  return std::strong_order(a.scale, b.scale);
}

// One rank's pieces by content; equal pieces in the order they were written.
void append_pieces_of(const RankEntry& entry, std::vector<PieceRef>& out) {
  const std::size_t begin = out.size();
  for (std::size_t j = 0; j < entry.pieces.size(); ++j) {
    out.push_back(PieceRef{entry.rank, static_cast<Index>(j), &entry.pieces[j]});
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(begin), out.end(), [](const PieceRef& a, const PieceRef& b) {
    const auto order = naive_content_order(*a.piece, *b.piece);
    return order != 0 ? order < 0 : a.index < b.index;
  });
}

std::vector<PieceRef> pieces_of(const RankEntry& entry) {
  std::vector<PieceRef> out;
  out.reserve(entry.pieces.size());
  append_pieces_of(entry, out);
  return out;
}

// Every piece, lowest first: ranks by id, then pieces by content.
std::vector<PieceRef> all_pieces(const Map& map) {
  std::size_t count = 0;
  for (const auto& entry : map.ranks) count += entry.pieces.size();
  std::vector<PieceRef> out;
  out.reserve(count);
  for (const RankEntry* entry : ranks_by_id(map)) append_pieces_of(*entry, out);
  return out;
}

bool names_itself(const PieceRef& ref) {
  const auto& locs = ref.piece->locations;
  return std::find(locs.begin(), locs.end(), ref.rank) != locs.end();
}

// A walk's index lives on the stack for up to this many axes (every map the generators
// make), so that a walk allocates nothing.
constexpr std::size_t kStackAxes = 8;

// Calls visit(index) for every multi-index of `shape` in row-major order, until
// visit returns false. A 0-d shape has exactly one (empty) index.
template <class Visit>
bool for_each_index(const Extents& shape, Visit&& visit) {
  for (Index extent : shape) {
    if (extent <= 0) return true;
  }
  std::array<Index, kStackAxes> on_stack{};
  std::vector<Index> on_heap;
  if (shape.size() > kStackAxes) on_heap.assign(shape.size(), 0);
  const std::span<Index> index = shape.size() > kStackAxes ? std::span<Index>(on_heap)
                                                           : std::span<Index>(on_stack.data(), shape.size());
  while (true) {
    if (!visit(std::span<const Index>(index))) return false;
    std::size_t k = shape.size();
    while (true) {
      if (k == 0) return true;
      --k;
      if (++index[k] < shape[k]) break;
      index[k] = 0;
    }
  }
}

// Only called once structure() has shown that the view's last address fits in 64 bits
// (offsets and strides non-negative), so no address of it can overflow; the arithmetic
// is unsigned all the same, so that even a misuse could not be undefined behaviour.
std::optional<Index> address_of(const StridedView& view, std::span<const Index> index) {
  auto address = static_cast<std::uint64_t>(view.offset);
  for (std::size_t k = 0; k < index.size(); ++k) {
    address += static_cast<std::uint64_t>(index[k]) * static_cast<std::uint64_t>(view.strides[k]);
  }
  return static_cast<Index>(address);
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

bool any_negative(std::span<const Index> values) {
  return std::any_of(values.begin(), values.end(), [](Index v) { return v < 0; });
}

// The reference's own element count (never the core's checked_numel): an extent of 0
// empties a shape whatever the others are; nullopt when the product of the others
// overflows int64 (or an extent is negative).
std::optional<Index> count_of(const Extents& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  Index n = 1;
  for (const Index e : shape) {
    if (e < 0 || __builtin_mul_overflow(n, e, &n)) return std::nullopt;
  }
  return n;
}

// For shapes the structure check has passed.
Index numel_of(const Extents& shape) { return count_of(shape).value_or(0); }

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

// ---- conversion ------------------------------------------------------------

}  // namespace

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

// ---- the rounding model of contract 1.2 ----------------------------

// A binary interchange format: `exponent_bits` and `fraction_bits` stored bits.
struct Format {
  int exponent_bits = 0;
  int fraction_bits = 0;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  std::uint64_t exponent_mask() const { return (std::uint64_t{1} << exponent_bits) - 1; }
  std::uint64_t fraction_mask() const { return (std::uint64_t{1} << fraction_bits) - 1; }
  std::uint64_t sign_bit() const { return std::uint64_t{1} << (exponent_bits + fraction_bits); }
};

std::optional<Format> narrow_format(DType dtype) {
  switch (dtype) {
    case DType::float32: return Format{8, 23};
    case DType::float16: return Format{5, 10};
    case DType::bfloat16: return Format{8, 7};
    default: return std::nullopt;
  }
}

bool is_nan_in(const Format& f, std::uint64_t bits) {
  const std::uint64_t exponent = (bits >> f.fraction_bits) & f.exponent_mask();
  return exponent == f.exponent_mask() && (bits & f.fraction_mask()) != 0;
}

// The exact value of a non-NaN element of a format no wider than float32: every such
// value is a double.
double decode_value(const Format& f, std::uint64_t bits) {
  const bool negative = (bits & f.sign_bit()) != 0;
  const std::uint64_t exponent = (bits >> f.fraction_bits) & f.exponent_mask();
  const std::uint64_t fraction = bits & f.fraction_mask();
  double magnitude = 0.0;
  if (exponent == f.exponent_mask()) {
    magnitude = std::numeric_limits<double>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(fraction), 1 - f.bias() - f.fraction_bits);
  } else {
    const auto significand = static_cast<double>(fraction | (std::uint64_t{1} << f.fraction_bits));
    magnitude = std::ldexp(significand, static_cast<int>(exponent) - f.bias() - f.fraction_bits);
  }
  return negative ? -magnitude : magnitude;
}

// A double rounded to nearest, ties to even, into the format, by integer arithmetic on
// its significand: the quantum is that of the result's binade, or of the subnormals
// below the smallest normal binade; a carry out of the significand moves up a binade,
// and a binade past the largest is infinity.
std::uint64_t round_to_format(const Format& f, double value) {
  const std::uint64_t sign = std::signbit(value) ? f.sign_bit() : 0;
  if (std::isnan(value)) {
    // Only arithmetic on infinities or zero makes a NaN here: quiet, payload dropped.
    return sign | (f.exponent_mask() << f.fraction_bits) | (std::uint64_t{1} << (f.fraction_bits - 1));
  }
  const double magnitude = std::fabs(value);
  if (std::isinf(magnitude)) return sign | (f.exponent_mask() << f.fraction_bits);
  if (magnitude == 0.0) return sign;
  int e = 0;
  const double m = std::frexp(magnitude, &e);  // magnitude = m * 2^e, m in [0.5, 1)
  const auto significand = static_cast<std::uint64_t>(std::ldexp(m, 53));  // 53 bits, exact
  const int lowest = 1 - f.bias();               // the smallest normal binade
  const int binade = std::max(e - 1, lowest);    // magnitude < 2^(binade + 1)
  const int quantum = binade - f.fraction_bits;  // result = n * 2^quantum
  const int shift = quantum - (e - 53);          // >= 53 - 1 - fraction_bits > 0
  std::uint64_t n = 0;
  if (shift < 64) {
    n = significand >> shift;
    const std::uint64_t rest = significand & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    if (rest > half || (rest == half && (n & 1) != 0)) ++n;
  }  // else below a quarter quantum: rounds to zero
  const std::uint64_t implicit = std::uint64_t{1} << f.fraction_bits;
  if (e - 1 < lowest) return sign | n;  // subnormal; n == implicit is the smallest normal
  int exponent = binade + f.bias();
  if (n == 2 * implicit) {
    n = implicit;
    ++exponent;
  }
  if (exponent >= static_cast<int>(f.exponent_mask())) return sign | (f.exponent_mask() << f.fraction_bits);
  return sign | (static_cast<std::uint64_t>(exponent) << f.fraction_bits) | (n - implicit);
}

constexpr Format kFloat32{8, 23};

// Contract 1.2: the arithmetic type is float32 for every format no wider than float32.
// The scale is rounded once into it; the element's value (exact in a double) is
// multiplied or divided once there and rounded once more into the element's format.
// Products of two values of at most 24 significant bits are exact in a double; a
// quotient is rounded twice, to 53 bits and then to 24, which gives the correctly
// rounded float32 result because 53 >= 2 * 24 + 2. Powers other than 1 multiply the
// rounded scale in float32 (conversion refuses them with a scale other than 1 anyway).
double float32_power(double scale, int power) {
  const double factor = decode_value(kFloat32, round_to_format(kFloat32, scale));
  const long steps = power > 0 ? static_cast<long>(power) : -static_cast<long>(power);
  double scale_power = factor;
  for (long k = 1; k < steps; ++k) {
    const double next = decode_value(kFloat32, round_to_format(kFloat32, scale_power * factor));
    scale_power = next;
    // Once 0, infinite, NaN or of magnitude 1 the power can only change sign.
    if (std::isnan(next) || std::isinf(next) || next == 0.0 || std::fabs(next) == 1.0) {
      if (!std::isnan(next) && std::signbit(factor) && (steps - 1 - k) % 2 == 1) scale_power = -scale_power;
      break;
    }
  }
  return scale_power;
}

std::uint64_t narrow_scale(const Format& f, std::uint64_t bits, double scale, int power, bool multiply) {
  const double factor = float32_power(scale, power);
  const bool up = multiply == (power > 0);
  const double value = decode_value(f, bits);
  const double in_float32 = decode_value(kFloat32, round_to_format(kFloat32, up ? value * factor : value / factor));
  return round_to_format(f, in_float32);
}

// float64's arithmetic is the double arithmetic itself, correctly rounded by IEEE 754.
std::uint64_t double_scale(std::uint64_t bits, double scale, int power, bool multiply) {
  const bool up = multiply == (power > 0);
  const long steps = power > 0 ? static_cast<long>(power) : -static_cast<long>(power);
  double scale_power = scale;
  for (long k = 1; k < steps; ++k) {
    const double next = scale_power * scale;
    scale_power = next;
    if (std::isnan(next) || std::isinf(next) || next == 0.0 || std::fabs(next) == 1.0) {
      if (!std::isnan(next) && std::signbit(scale) && (steps - 1 - k) % 2 == 1) scale_power = -scale_power;
      break;
    }
  }
  const double value = std::bit_cast<double>(bits);
  return std::bit_cast<std::uint64_t>(up ? value * scale_power : value / scale_power);
}
}  // namespace

std::uint64_t reference_scale(DType dtype, std::uint64_t bits, double scale, int power, bool multiply) {
  if (power == 0) return bits;
  if (dtype == DType::float64) {
    if ((bits & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL) return bits;  // NaN: kept
    return double_scale(bits, scale, power, multiply);
  }
  const std::optional<Format> format = narrow_format(dtype);
  if (!format) return bits;  // integers are never scaled
  if (is_nan_in(*format, bits)) return bits;
  return narrow_scale(*format, bits, scale, power, multiply);
}

namespace {

// Contract 1.2: the scale, rounded once to the arithmetic type (float64 for float64
// data, float32 otherwise), must be a normal number there.
bool scale_fits(DType dtype, double scale) {
  if (dtype == DType::float64) return std::fpclassify(scale) == FP_NORMAL;
  const double rounded = decode_value(kFloat32, round_to_format(kFloat32, scale));
  return std::isfinite(rounded) && std::fabs(rounded) >= std::ldexp(1.0, -126);
}

// What an element's bits say about its value: the model's own reading of each format.
struct Reading {
  bool nan = false;
  bool infinite = false;
  bool zero = false;
};

Reading read_bits(DType dtype, std::uint64_t bits) {
  if (dtype == DType::float64) {
    const double v = std::bit_cast<double>(bits);
    return Reading{std::isnan(v), std::isinf(v), v == 0.0};
  }
  const Format f = *narrow_format(dtype);
  if (is_nan_in(f, bits)) return Reading{true, false, false};
  const double v = decode_value(f, bits);
  return Reading{false, std::isinf(v), v == 0.0};
}

}  // namespace

namespace {
// Whether one scale may convert `dtype` data with power `power` (the rules below).
bool scale_may_convert(double scale, DType dtype, int power) {
  const bool floating =
      dtype == DType::float64 || dtype == DType::float32 || dtype == DType::float16 || dtype == DType::bfloat16;
  return scale == 1.0 || (power == 1 && floating && scale_fits(dtype, scale));
}
}  // namespace

// Contract 1.2: scaling with p != 1 would need the optimizer's lr and eps rescaled too,
// integers cannot be scaled at all, and the arithmetic type must hold the scale as a
// normal number. Which dtypes are floating is the model's own list, not the core's
// is_floating, which is under test.
Status reference_scale_refusal(const Map& map, DType dtype, int power) {
  const bool floating =
      dtype == DType::float64 || dtype == DType::float32 || dtype == DType::float16 || dtype == DType::bfloat16;
  for (const PieceRef& ref : all_pieces(map)) {
    if (ref.piece->scale == 1.0) continue;
    if (power != 1) return fault::scale_needs_power_one(at(ref), power);
    if (!floating) return fault::scale_on_integer(at(ref), dtype);
    if (!scale_fits(dtype, ref.piece->scale)) return fault::scale_outside_arithmetic(at(ref), dtype);
  }
  return {};
}

namespace {

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
