// The pre-fix DeepSpeed behaviour (spec 4.1), kept to reproduce reported corruptions.
// It deliberately runs none of the strict checks: only what DeepSpeed checked itself
// (per-rank element counts) and what torch enforced for free (views inside their
// buffers, no negative strides, no write through a zero stride). The arithmetic that
// addresses buffers is still overflow-checked, so a malformed map cannot crash it.
#include <algorithm>
#include <set>

#include "shardcheck/convert.h"

namespace shardcheck {

namespace {

Backend& cpu_backend() {
  static const std::unique_ptr<Backend> cpu = make_cpu_backend();
  return *cpu;
}

std::optional<Index> numel_of(const Extents& shape) {
  if (std::any_of(shape.begin(), shape.end(), [](Index e) { return e < 0; })) return std::nullopt;
  return checked_numel(shape);
}

// What torch.as_strided refuses, and what addressing needs: equal lengths, no
// negative numbers, no overflow, non-empty views inside their buffers; then a write
// through a zero stride on an axis of extent > 1. `writes_source` tells which view
// is written (rebuild writes into F through the source view).
Status check_piece(const Piece& piece, Rank rank, Index index, Index numel_f, Index shard_numel,
                   bool writes_source) {
  const PieceAt at{rank, index, &piece};
  const std::size_t n = piece.shape.size();
  if (piece.source.strides.size() != n || piece.dest.strides.size() != n) return fault::piece(PieceFault::axes, at);
  auto negative = [](const std::vector<Index>& xs) {
    return std::any_of(xs.begin(), xs.end(), [](Index x) { return x < 0; });
  };
  if (negative(piece.shape)) return fault::piece(PieceFault::negative_extent, at);
  if (piece.source.offset < 0) return fault::piece(PieceFault::negative_source_offset, at);
  if (piece.dest.offset < 0) return fault::piece(PieceFault::negative_dest_offset, at);
  if (negative(piece.source.strides)) return fault::piece(PieceFault::negative_source_stride, at);
  if (negative(piece.dest.strides)) return fault::piece(PieceFault::negative_dest_stride, at);
  auto src = span_facts(piece.shape, piece.source);
  auto dst = span_facts(piece.shape, piece.dest);
  if (!src || !dst) return fault::piece(!src ? PieceFault::source_overflow : PieceFault::dest_overflow, at);
  if (src->empty) return {};
  if (src->max_address >= numel_f) return fault::out_of_bounds(at, Side::full, src->max_address, numel_f);
  if (dst->max_address >= shard_numel) return fault::out_of_bounds(at, Side::shard, dst->max_address, shard_numel);
  const Strides& written = writes_source ? piece.source.strides : piece.dest.strides;
  for (std::size_t k = 0; k < n; ++k) {
    if (piece.shape[k] > 1 && written[k] == 0) {
      return fault::zero_stride_write(at, writes_source ? Side::full : Side::shard, k);
    }
  }
  return {};
}

// DeepSpeed's only map check: each rank's pieces hold as many elements as its shard.
Status check_counts(const Map& map) {
  for (const auto& entry : map.ranks) {
    if (entry.pieces.empty()) continue;
    if (!entry.shard_shape) return fault::missing_shard_shape(entry.rank);
    auto expected = numel_of(*entry.shard_shape);
    if (!expected) return fault::bad_shard_shape(entry.rank, *entry.shard_shape);
    Index total = 0;
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      const Piece& piece = entry.pieces[i];
      const PieceAt at{entry.rank, static_cast<Index>(i), &piece};
      if (std::any_of(piece.shape.begin(), piece.shape.end(), [](Index e) { return e < 0; })) {
        return fault::piece(PieceFault::negative_extent, at);
      }
      auto n = checked_numel(piece.shape);
      if (!n) return fault::piece(PieceFault::source_overflow, at);
      // Python's integers do not overflow: a sum beyond 64 bits is a count mismatch.
      auto sum = checked_add(total, *n);
      if (!sum) return fault::count(entry.rank, std::nullopt, *expected);
      total = *sum;
    }
    if (total != *expected) return fault::count(entry.rank, total, *expected);
  }
  return {};
}

// DeepSpeed scales in torch's arithmetic, which may quieten or canonicalise a NaN; the
// legacy model keeps that behaviour rather than the contract's (section 1.2).
BlockCopy torch_arithmetic(BlockCopy copy) {
  copy.nan = NanScaling::arithmetic;
  return copy;
}

Buffer poisoned(DType dtype, Index numel) {
  Buffer out(dtype, numel);
  const std::uint64_t poison = poison_bits(dtype);
  for (Index i = 0; i < numel; ++i) out.set_bits(i, poison);
  return out;
}

}  // namespace

Result<Buffer> legacy_rebuild(const Map& map, const ShardSet& shards, DType dtype, int scale_power) {
  auto numel_f = numel_of(map.logical_shape);
  if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  if (Status e = check_counts(map); !e.ok()) return e.error();
  Index supplied = 0;
  for (const auto& entry : map.ranks) {
    if (entry.pieces.empty()) continue;
    auto it = shards.find(entry.rank);
    if (it == shards.end()) return fault::missing_shard(entry.rank, entry.pieces.size());
    const Index expected = *numel_of(*entry.shard_shape);  // check_counts vouched for it
    if (it->second.dtype() != dtype) return fault::shard_dtype(entry.rank, it->second.dtype(), dtype);
    if (it->second.numel() != expected) return fault::shard_numel(entry.rank, it->second.numel(), expected);
    supplied = checked_add(supplied, expected).value_or(supplied);
  }
  // Legacy buffers are sized by the map; nothing checked vouches for that size, so it is
  // capped by what the caller really supplied (or a generous fixed limit).
  if (Status e = allocation_guard(*numel_f, supplied, CheckLimits{}, "F"); !e.ok()) return e.error();

  Buffer full = poisoned(dtype, *numel_f);
  Backend& backend = cpu_backend();
  std::set<Index> started;  // source offsets some earlier piece already wrote from
  for (const auto& entry : map.ranks) {
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      const Piece& piece = entry.pieces[i];
      const Buffer& shard = shards.at(entry.rank);
      const auto index = static_cast<Index>(i);
      const bool compare = piece.locations.size() > 1 && started.count(piece.source.offset) > 0;
      // A comparison only reads F, so only a write is refused for a zero stride.
      if (Status e = check_piece(piece, entry.rank, index, *numel_f, shard.numel(), !compare); !e.ok()) {
        return e.error();
      }
      const BlockCopy copy = torch_arithmetic(rebuild_block(piece, shard, full, scale_power));
      if (compare) {
        if (auto k = backend.compare_block(dtype, copy)) {
          const Index element = address_at(piece.shape, piece.source, *k);
          const Index shard_address = address_at(piece.shape, piece.dest, *k);
          return fault::replicas_differ(
              PieceAt{entry.rank, index, &piece}, element, shard_address, dtype,
              apply_scale(dtype, shard.bits(shard_address), piece.scale, scale_power, false, NanScaling::arithmetic),
              full.bits(element),
              nullptr);
        }
      } else {
        backend.copy_block(dtype, copy);
      }
      started.insert(piece.source.offset);
    }
  }
  return full;
}

Result<Buffer> legacy_extract(const Map& map, const Buffer& full, Rank rank, int scale_power) {
  const RankEntry* entry = map.find_rank(rank);
  if (entry == nullptr || !entry->shard_shape) return fault::no_shard_to_extract(rank);
  auto numel_f = numel_of(map.logical_shape);
  if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  if (full.numel() != *numel_f) return fault::full_numel(full.numel(), *numel_f);
  auto shard_numel = numel_of(*entry->shard_shape);
  if (!shard_numel) return fault::bad_shard_shape(rank, *entry->shard_shape);
  if (Status e = allocation_guard(*shard_numel, full.numel(), CheckLimits{}, "a shard"); !e.ok()) return e.error();

  Buffer shard = poisoned(full.dtype(), *shard_numel);
  Backend& backend = cpu_backend();
  for (std::size_t i = 0; i < entry->pieces.size(); ++i) {
    const Piece& piece = entry->pieces[i];
    const auto index = static_cast<Index>(i);
    if (Status e = check_piece(piece, rank, index, *numel_f, *shard_numel, false); !e.ok()) return e.error();
    backend.copy_block(full.dtype(), torch_arithmetic(extract_block(piece, full, shard, scale_power)));
  }
  return shard;
}

}  // namespace shardcheck
