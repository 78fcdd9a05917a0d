// The pre-fix DeepSpeed behaviour (spec 4.1), kept to reproduce reported corruptions.
// It deliberately runs none of the strict checks: only what DeepSpeed checked itself
// (per-rank element counts) and what torch enforced for free (views inside their
// buffers, no negative strides, no write through a zero stride). The arithmetic that
// addresses buffers is still overflow-checked, so a malformed map cannot crash it.
#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "shardcheck/convert.h"

namespace shardcheck {

namespace {

Backend& cpu_backend() {
  static const std::unique_ptr<Backend> cpu = make_cpu_backend();
  return *cpu;
}

Error piece_error(ErrorKind kind, Rank rank, Index piece, std::string message) {
  Error e = make_error(kind, fmt::format("Rank {} piece {}: {}", rank, piece, message));
  e.rank = rank;
  e.piece = piece;
  return e;
}

Error rank_error(ErrorKind kind, Rank rank, std::string message) {
  Error e = make_error(kind, std::move(message));
  e.rank = rank;
  return e;
}

std::optional<Index> numel_of(const Extents& shape) {
  if (std::any_of(shape.begin(), shape.end(), [](Index e) { return e < 0; })) return std::nullopt;
  return checked_numel(shape);
}

// Legacy buffers are sized by the map; nothing checked vouches for that size, so it is
// capped by what the caller really supplied (or a generous fixed limit).
Status allocation_guard(Index wanted, Index backed, std::string_view what) {
  if (wanted <= std::max(backed, CheckLimits{}.max_walked_addresses)) return std::nullopt;
  return make_error(ErrorKind::format,
                    fmt::format("The map asks for {} of {} elements, more than the data supplied can "
                                "account for; refusing to allocate it.",
                                what, wanted));
}

// What torch.as_strided refuses, and what addressing needs: equal lengths, no
// negative numbers, no overflow, non-empty views inside their buffers; then a write
// through a zero stride on an axis of extent > 1. `writes_source` tells which view
// is written (rebuild writes into F through the source view).
Status check_piece(const Piece& piece, Rank rank, Index index, Index numel_f, Index shard_numel,
                   bool writes_source) {
  const std::size_t n = piece.shape.size();
  if (piece.source.strides.size() != n || piece.dest.strides.size() != n) {
    return piece_error(ErrorKind::format, rank, index,
                       fmt::format("the shape has {} axes but the views have {} and {} strides.", n,
                                   piece.source.strides.size(), piece.dest.strides.size()));
  }
  auto negative = [](const std::vector<Index>& xs) {
    return std::any_of(xs.begin(), xs.end(), [](Index x) { return x < 0; });
  };
  if (negative(piece.shape)) return piece_error(ErrorKind::format, rank, index, "the shape has a negative extent.");
  if (piece.source.offset < 0 || piece.dest.offset < 0 || negative(piece.source.strides) ||
      negative(piece.dest.strides)) {
    return piece_error(ErrorKind::format, rank, index, "a view has a negative offset or stride.");
  }
  auto src = span_facts(piece.shape, piece.source);
  auto dst = span_facts(piece.shape, piece.dest);
  if (!src || !dst) return piece_error(ErrorKind::format, rank, index, "a view overflows 64 bits.");
  if (src->empty) return std::nullopt;
  if (src->max_address >= numel_f) {
    Error e = piece_error(ErrorKind::bounds, rank, index,
                          fmt::format("the source view reaches element {} of F, which has {} elements.",
                                      src->max_address, numel_f));
    e.address = src->max_address;
    e.side = Side::full;
    return e;
  }
  if (dst->max_address >= shard_numel) {
    Error e = piece_error(ErrorKind::bounds, rank, index,
                          fmt::format("the dest view reaches shard address {}, but the shard has {} elements.",
                                      dst->max_address, shard_numel));
    e.address = dst->max_address;
    e.side = Side::shard;
    return e;
  }
  const Strides& written = writes_source ? piece.source.strides : piece.dest.strides;
  for (std::size_t k = 0; k < n; ++k) {
    if (piece.shape[k] > 1 && written[k] == 0) {
      return piece_error(ErrorKind::itself, rank, index,
                         fmt::format("the {} view writes through a zero stride on axis {} of extent {}.",
                                     writes_source ? "source" : "dest", k, piece.shape[k]));
    }
  }
  return std::nullopt;
}

// DeepSpeed's only map check: each rank's pieces hold as many elements as its shard.
Status check_counts(const Map& map) {
  for (const auto& entry : map.ranks) {
    if (entry.pieces.empty()) continue;
    if (!entry.shard_shape) {
      return rank_error(ErrorKind::format, entry.rank,
                        fmt::format("Rank {} lists pieces but has no shard shape.", entry.rank));
    }
    auto expected = numel_of(*entry.shard_shape);
    if (!expected) {
      return rank_error(ErrorKind::format, entry.rank,
                        fmt::format("Rank {}'s shard shape has a negative extent or overflows.", entry.rank));
    }
    Index total = 0;
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      auto n = numel_of(entry.pieces[i].shape);
      auto sum = n ? checked_add(total, *n) : std::nullopt;
      if (!sum) {
        return piece_error(ErrorKind::format, entry.rank, static_cast<Index>(i),
                           "the shape has a negative extent or its element count overflows.");
      }
      total = *sum;
    }
    if (total != *expected) {
      return rank_error(ErrorKind::count, entry.rank,
                        fmt::format("Rank {}'s pieces hold {} elements but its shard shape holds {}.",
                                    entry.rank, total, *expected));
    }
  }
  return std::nullopt;
}

Buffer poisoned(DType dtype, Index numel) {
  Buffer out(dtype, numel);
  const std::uint64_t poison = poison_bits(dtype);
  for (Index i = 0; i < numel; ++i) out.set_bits(i, poison);
  return out;
}

}  // namespace

Status legacy_check(const Map& map) { return check_counts(map); }

Result<Buffer> legacy_rebuild(const Map& map, const ShardSet& shards, DType dtype, int scale_power) {
  auto numel_f = numel_of(map.logical_shape);
  if (!numel_f) return make_error(ErrorKind::format, "The logical shape has a negative extent or overflows 64 bits.");
  if (auto e = check_counts(map)) return *e;
  Index supplied = 0;
  for (const auto& entry : map.ranks) {
    if (entry.pieces.empty()) continue;
    auto it = shards.find(entry.rank);
    if (it == shards.end()) {
      return rank_error(ErrorKind::shape, entry.rank,
                        fmt::format("Rank {} lists pieces but no shard was supplied for it.", entry.rank));
    }
    const Index expected = *numel_of(*entry.shard_shape);  // check_counts vouched for it
    if (it->second.dtype() != dtype || it->second.numel() != expected) {
      return rank_error(ErrorKind::shape, entry.rank,
                        fmt::format("The shard supplied for rank {} has {} elements of {}, but the map "
                                    "expects {} elements of {}.",
                                    entry.rank, it->second.numel(), dtype_name(it->second.dtype()), expected,
                                    dtype_name(dtype)));
    }
    supplied = checked_add(supplied, expected).value_or(supplied);
  }
  if (auto e = allocation_guard(*numel_f, supplied, "F")) return *e;

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
      if (auto e = check_piece(piece, entry.rank, index, *numel_f, shard.numel(), !compare)) return *e;
      const BlockCopy copy = rebuild_block(piece, shard, full, scale_power);
      if (compare) {
        if (auto k = backend.compare_block(dtype, copy)) {
          const Index element = address_at(piece.shape, piece.source, *k);
          const Index shard_address = address_at(piece.shape, piece.dest, *k);
          Error e = piece_error(
              ErrorKind::different_data, entry.rank, index,
              fmt::format("this replica holds {} at shard address {} (after unscaling) but F already "
                          "holds {} at element {}, written by an earlier piece from source offset {}.",
                          format_element(dtype, apply_scale(dtype, shard.bits(shard_address), piece.scale,
                                                            scale_power, false)),
                          shard_address, format_element(dtype, full.bits(element)), element,
                          piece.source.offset));
          e.address = element;
          e.side = Side::full;
          return e;
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
  if (entry == nullptr || !entry->shard_shape) {
    return rank_error(ErrorKind::format, rank,
                      fmt::format("Rank {} is not listed in the map with a shard shape.", rank));
  }
  auto numel_f = numel_of(map.logical_shape);
  if (!numel_f) return make_error(ErrorKind::format, "The logical shape has a negative extent or overflows 64 bits.");
  if (full.numel() != *numel_f) {
    return make_error(ErrorKind::shape, fmt::format("The supplied F has {} elements but the logical shape holds {}.",
                                                    full.numel(), *numel_f));
  }
  auto shard_numel = numel_of(*entry->shard_shape);
  if (!shard_numel) {
    return rank_error(ErrorKind::format, rank,
                      fmt::format("Rank {}'s shard shape has a negative extent or overflows.", rank));
  }
  if (auto e = allocation_guard(*shard_numel, full.numel(), "a shard")) return *e;

  Buffer shard = poisoned(full.dtype(), *shard_numel);
  Backend& backend = cpu_backend();
  for (std::size_t i = 0; i < entry->pieces.size(); ++i) {
    const Piece& piece = entry->pieces[i];
    const auto index = static_cast<Index>(i);
    if (auto e = check_piece(piece, rank, index, *numel_f, *shard_numel, false)) return *e;
    backend.copy_block(full.dtype(), extract_block(piece, full, shard, scale_power));
  }
  return shard;
}

}  // namespace shardcheck
