#include "layout_post.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

namespace shardcheck::gen::detail {

namespace {

// Powers of two whose scale is a normal number of the arithmetic type (contract 1.2:
// float32 for every dtype but float64), limited to where `dtype`'s own values reach, so
// that scaled data still has room: float16 spans 2^-24 to 2^16.
std::pair<Index, Index> power_range(DType dtype) {
  switch (dtype) {
    case DType::float64: return {-1022, 1023};
    case DType::float16: return {-24, 24};
    default: return {-126, 127};
  }
}

// Mantissas whose products tie: 1.5 times an odd significand lands halfway between two
// neighbours, 1 + 2^-11 does the same for float16 after float32 arithmetic, 1 + 2^-8 for
// bfloat16; 0.1 and 3 round every time.
constexpr double kMantissas[] = {1.5, 1.0 + 0x1p-11, 1.0 + 0x1p-8, 0.1 * 8, 0.75, 3.0 / 2 + 0x1p-20};

}  // namespace

double draw_scale(ChoiceSource& c, DType dtype, bool powers_of_two) {
  const auto [lo, hi] = power_range(dtype);
  switch (c.between(0, 3)) {
    case 0:
      return std::ldexp(1.0, static_cast<int>(c.between(lo, hi)));
    case 1:
      if (powers_of_two) return std::ldexp(1.0, static_cast<int>(c.between(lo, hi)));
      return std::ldexp(c.pick(kMantissas), static_cast<int>(c.between(std::max<Index>(lo, -60), std::min<Index>(hi, 60))));
    default:
      return c.coin() ? 2.0 : 0.5;
  }
}

void draw_scales(ChoiceSource& c, Map& map, DType dtype) {
  if (!c.chance(1, 3)) return;
  if (c.coin()) {
    // Replicas of one block may then carry different scales: powers of two, so that
    // their copies of marker data still agree once unscaled.
    for (auto& entry : map.ranks) {
      for (auto& piece : entry.pieces) piece.scale = c.coin() ? 1.0 : draw_scale(c, dtype, true);
    }
    return;
  }
  const double scale = draw_scale(c, dtype, false);
  for (auto& entry : map.ranks) {
    for (auto& piece : entry.pieces) piece.scale = scale;
  }
}

void relabel_ranks(ChoiceSource& c, Map& map) {
  if (!c.coin()) return;
  // (old, new) pairs; tp is small, so a linear lookup beats any associative container.
  std::vector<std::pair<Rank, Rank>> rename;
  rename.reserve(map.ranks.size());
  Rank id = c.between(0, 3);
  for (const auto& entry : map.ranks) {
    rename.emplace_back(entry.rank, id);
    id += c.between(1, 6);
  }
  if (c.coin()) {
    for (std::size_t i = rename.size(); i > 1; --i) {
      std::swap(rename[i - 1].second, rename[c.below(i)].second);
    }
  }
  auto lookup = [&](Rank old) {
    for (const auto& [from, to] : rename) {
      if (from == old) return to;
    }
    return old;  // constructors only name listed ranks; keep anything else as is
  };
  for (auto& entry : map.ranks) {
    entry.rank = lookup(entry.rank);
    for (auto& piece : entry.pieces) {
      for (Rank& r : piece.locations) r = lookup(r);
      std::sort(piece.locations.begin(), piece.locations.end());
    }
  }
}

namespace {

// Whether `strides` walk `shape` row-major with no gap (axes of extent 1 step anywhere).
bool contiguous_row_major(const Extents& shape, const Strides& strides) {
  Index running = 1;
  for (std::size_t k = shape.size(); k-- > 0;) {
    if (shape[k] == 1) continue;
    if (strides[k] != running) return false;
    running *= shape[k];
  }
  return true;
}

}  // namespace

void flatten_runs(ChoiceSource& c, Map& map) {
  if (!c.chance(1, 4)) return;
  const Index cut = c.between(1, 1 << 20);
  for (auto& entry : map.ranks) {
    const std::size_t pieces = entry.pieces.size();
    for (std::size_t i = 0; i < pieces; ++i) {
      Piece& piece = entry.pieces[i];
      const Index n = checked_numel(piece.shape).value_or(0);
      if (piece.shape.size() < 2 || n < 2 || piece.locations.size() > 1 ||
          !contiguous_row_major(piece.shape, piece.source.strides) ||
          !contiguous_row_major(piece.shape, piece.dest.strides)) {
        continue;
      }
      const Index at = 1 + (cut - 1) % (n - 1);
      piece.shape = {at};
      piece.source.strides = {1};
      piece.dest.strides = {1};
      Piece tail = piece;
      tail.shape = {n - at};
      tail.source.offset += at;
      tail.dest.offset += at;
      entry.pieces.push_back(std::move(tail));
    }
  }
}

void add_empty_pieces(ChoiceSource& c, Map& map) {
  if (!c.chance(1, 16)) return;
  std::vector<RankEntry*> sites;
  for (auto& entry : map.ranks) {
    if (entry.shard_shape) sites.push_back(&entry);
  }
  if (sites.empty()) return;
  const Index numel_f = checked_numel(map.logical_shape).value_or(0);
  const Index count = c.between(1, 2);
  for (Index n = 0; n < count; ++n) {
    RankEntry& entry = *sites[c.below(sites.size())];
    const Index shard_numel = checked_numel(*entry.shard_shape).value_or(0);
    Piece piece;
    const auto ndim = static_cast<std::size_t>(c.between(1, 3));
    piece.shape.resize(ndim);
    piece.source.strides.resize(ndim);
    piece.dest.strides.resize(ndim);
    for (std::size_t k = 0; k < ndim; ++k) {
      piece.shape[k] = c.between(0, 4);
      piece.source.strides[k] = c.between(1, 6);
      piece.dest.strides[k] = c.between(1, 6);
    }
    piece.shape[c.below(ndim)] = 0;
    // Anywhere inside the buffer (an offset past the end is a corruption's to make; an
    // empty buffer has no inside: 1, which is not its end either).
    piece.source.offset = numel_f > 0 ? c.between(0, numel_f - 1) : 1;
    piece.dest.offset = shard_numel > 0 ? c.between(0, shard_numel - 1) : 1;
    piece.locations = {entry.rank};
    if (!entry.pieces.empty()) piece.scale = entry.pieces[c.below(entry.pieces.size())].scale;
    entry.pieces.push_back(std::move(piece));
  }
}

namespace {

// The piece's destination view in the transposed (b, a) shard of a row-major (a, b) one,
// or nothing where the view is not a box of it. An empty piece covers nothing: only its
// offset moves, to the same element's new address.
std::optional<StridedView> transposed_dest(const Piece& piece, Index a, Index b) {
  const StridedView& view = piece.dest;
  if (view.offset < 0 || view.offset >= a * b) return std::nullopt;
  const Index row = view.offset / b;
  const Index column = view.offset % b;
  StridedView out = view;
  out.offset = column * a + row;
  if (checked_numel(piece.shape).value_or(0) == 0) return out;
  Index last_row = row;
  Index last_column = column;
  for (std::size_t k = 0; k < piece.shape.size(); ++k) {
    const Index extent = piece.shape[k];
    const Index stride = view.strides[k];
    if (extent <= 1) continue;
    if (stride <= 0) return std::nullopt;
    const bool down = stride % b == 0;
    if (!down && stride >= b) return std::nullopt;
    const Index rows = down ? stride / b : 0;
    const Index columns = down ? 0 : stride;
    last_row += rows * (extent - 1);
    last_column += columns * (extent - 1);
    out.strides[k] = rows + columns * a;
  }
  if (last_row >= a || last_column >= b) return std::nullopt;
  return out;
}

void transpose_shard(RankEntry& entry) {
  if (!entry.shard_shape || entry.shard_shape->size() != 2) return;
  const Index a = (*entry.shard_shape)[0];
  const Index b = (*entry.shard_shape)[1];
  if (a <= 1 || b <= 1) return;
  std::vector<StridedView> views;
  for (const Piece& piece : entry.pieces) {
    auto moved = transposed_dest(piece, a, b);
    if (!moved) return;
    views.push_back(std::move(*moved));
  }
  for (std::size_t i = 0; i < views.size(); ++i) entry.pieces[i].dest = std::move(views[i]);
  *entry.shard_shape = Extents{b, a};
}

}  // namespace

void transpose_shards(ChoiceSource& c, Map& map) {
  if (map.ranks.empty() || !c.chance(1, 8)) return;
  if (c.coin()) {
    for (RankEntry& entry : map.ranks) transpose_shard(entry);
  } else {
    transpose_shard(map.ranks[c.below(map.ranks.size())]);
  }
}

void shuffle_order(ChoiceSource& c, Map& map) {
  if (c.coin()) {
    for (auto& entry : map.ranks) c.shuffle(entry.pieces);
  }
  if (c.coin()) c.shuffle(map.ranks);
}

}  // namespace shardcheck::gen::detail
