// What the reference model's files share: how it walks a map (pieces in its own order,
// every multi-index, addresses from scratch) and its reading of element bits. Written
// once here, naively, for the same reason as the model itself (reference.cc): so that it
// can be trusted by reading it. Not part of its interface (reference.h).
#pragma once

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <optional>
#include <span>
#include <tuple>
#include <vector>

#include "shardcheck/oracles/reference.h"

namespace shardcheck::oracles::reference_detail {

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

inline PieceAt at(const PieceRef& ref) { return PieceAt{ref.rank, ref.index, ref.piece}; }

// Ranks in id order, so that no verdict depends on the order they were written in.
// Equal ids (a map condition 1 refuses) keep the order they were written in: the
// entries' addresses are that order. An explicit tie-break instead of stable_sort,
// whose temporary buffer is an allocation per call.
inline std::vector<const RankEntry*> ranks_by_id(const Map& map) {
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
inline std::strong_ordering naive_content_order(const Piece& a, const Piece& b) {
  auto key = [](const Piece& p) {
    return std::tie(p.source.offset, p.source.strides, p.shape, p.dest.offset, p.dest.strides,
                    p.locations);
  };
  if (const auto order = key(a) <=> key(b); order != 0) return order;
  return std::strong_order(a.scale, b.scale);
}

// One rank's pieces by content; equal pieces in the order they were written.
inline void append_pieces_of(const RankEntry& entry, std::vector<PieceRef>& out) {
  const std::size_t begin = out.size();
  for (std::size_t j = 0; j < entry.pieces.size(); ++j) {
    out.push_back(PieceRef{entry.rank, static_cast<Index>(j), &entry.pieces[j]});
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(begin), out.end(), [](const PieceRef& a, const PieceRef& b) {
    const auto order = naive_content_order(*a.piece, *b.piece);
    return order != 0 ? order < 0 : a.index < b.index;
  });
}

inline std::vector<PieceRef> pieces_of(const RankEntry& entry) {
  std::vector<PieceRef> out;
  out.reserve(entry.pieces.size());
  append_pieces_of(entry, out);
  return out;
}

// Every piece, lowest first: ranks by id, then pieces by content.
inline std::vector<PieceRef> all_pieces(const Map& map) {
  std::size_t count = 0;
  for (const auto& entry : map.ranks) count += entry.pieces.size();
  std::vector<PieceRef> out;
  out.reserve(count);
  for (const RankEntry* entry : ranks_by_id(map)) append_pieces_of(*entry, out);
  return out;
}

inline bool names_itself(const PieceRef& ref) {
  const auto& locs = ref.piece->locations;
  return std::find(locs.begin(), locs.end(), ref.rank) != locs.end();
}

// A walk's index lives on the stack for up to this many axes (every map the generators
// make), so that a walk allocates nothing.
inline constexpr std::size_t kStackAxes = 8;

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
inline std::optional<Index> address_of(const StridedView& view, std::span<const Index> index) {
  auto address = static_cast<std::uint64_t>(view.offset);
  for (std::size_t k = 0; k < index.size(); ++k) {
    address += static_cast<std::uint64_t>(index[k]) * static_cast<std::uint64_t>(view.strides[k]);
  }
  return static_cast<Index>(address);
}

// The largest address a non-empty view reaches; nullopt on overflow.
inline std::optional<Index> last_address(const Extents& shape, const StridedView& view) {
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

inline bool any_negative(std::span<const Index> values) {
  return std::any_of(values.begin(), values.end(), [](Index v) { return v < 0; });
}

// The reference's own element count (never the core's checked_numel): an extent of 0
// empties a shape whatever the others are; nullopt when the product of the others
// overflows int64 (or an extent is negative).
inline std::optional<Index> count_of(const Extents& shape) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) return 0;
  Index n = 1;
  for (const Index e : shape) {
    if (e < 0 || __builtin_mul_overflow(n, e, &n)) return std::nullopt;
  }
  return n;
}

// For shapes the structure check has passed.
inline Index numel_of(const Extents& shape) { return count_of(shape).value_or(0); }

inline Index shard_numel(const RankEntry& entry) {
  return entry.shard_shape ? numel_of(*entry.shard_shape) : 0;
}

// What an element's bits say about its value: the model's own reading of each format.
struct Reading {
  bool nan = false;
  bool infinite = false;
  bool zero = false;
};

Reading read_bits(DType dtype, std::uint64_t bits);

// Whether one scale may convert `dtype` data with power `power` (contract 1.2).
bool scale_may_convert(double scale, DType dtype, int power);

}  // namespace shardcheck::oracles::reference_detail
