// The pre-fix DeepSpeed behaviour (spec 4.1), kept to reproduce reported corruptions.
// It deliberately runs none of the strict checks: only what DeepSpeed checked itself
// (per-rank element counts) and what torch enforced for free (views inside their
// buffers, no negative strides, no write through a zero stride). The arithmetic that
// addresses buffers is still overflow-checked, so a malformed map cannot crash it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
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

// DeepSpeed's element count of a shape: a plain product, so a negative extent beside a
// zero one still counts 0. Only overflow is refused.
std::optional<Index> signed_product(const Extents& shape) {
  Index product = 1;
  for (Index extent : shape) {
    auto next = checked_mul(product, extent);
    if (!next) return std::nullopt;
    product = *next;
  }
  return product;
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
// through a zero stride on an axis of extent > 1. `writes` tells which view is written:
// rebuild writes F through the source view, extract the shard through the dest view,
// and a replica comparison writes neither.
enum class Writes { source, dest, nothing };
Status check_piece(const Piece& piece, Rank rank, Index index, Index numel_f, Index shard_numel,
                   Writes writes) {
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
  if (writes == Writes::nothing) return std::nullopt;
  const bool writes_source = writes == Writes::source;
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

// DeepSpeed's only map check: each rank's pieces hold as many elements as its shard,
// for every rank the map lists (a rank with no pieces must have an empty shard). Its
// piece constructor refuses a zero scale, so no map holding one is ever built.
Status check_counts(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      if (entry.pieces[i].scale == 0.0) {
        return piece_error(ErrorKind::scale, entry.rank, static_cast<Index>(i),
                           "a zero scale is not invertible, so the full tensor could not be rebuilt.");
      }
    }
  }
  for (const auto& entry : map.ranks) {
    if (entry.pieces.empty() && !entry.shard_shape) continue;  // an empty shard
    if (!entry.shard_shape) {
      return rank_error(ErrorKind::format, entry.rank,
                        fmt::format("Rank {} lists pieces but has no shard shape.", entry.rank));
    }
    auto expected = signed_product(*entry.shard_shape);
    if (!expected) {
      return rank_error(ErrorKind::format, entry.rank,
                        fmt::format("Rank {}'s shard shape overflows 64 bits.", entry.rank));
    }
    Index total = 0;
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      auto n = signed_product(entry.pieces[i].shape);
      auto sum = n ? checked_add(total, *n) : std::nullopt;
      if (!sum) {
        return piece_error(ErrorKind::format, entry.rank, static_cast<Index>(i),
                           "the shape's element count overflows.");
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

// Moving an optimizer state through a scaled piece is refused, in both directions.
Status check_optimizer_scale(const Map& map, int scale_power) {
  if (scale_power == 1) return std::nullopt;
  for (const auto& entry : map.ranks) {
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      if (entry.pieces[i].scale == 1.0) continue;
      return piece_error(ErrorKind::scale, entry.rank, static_cast<Index>(i),
                         fmt::format("converting an optimizer state (scale_power {}) through a scaled piece "
                                     "is not supported.",
                                     scale_power));
    }
  }
  return std::nullopt;
}

// Integer and bool data meet a scale through torch's type promotion: the division
// happens in float32 (the default dtype) and the result is cast back on the copy.
bool scaled_integers(DType dtype, const Piece& piece, int scale_power) {
  return !is_floating(dtype) && std::pow(piece.scale, scale_power) != 1.0;
}

// The element's value as torch promotes it to float32 (bool as 0 or 1).
float promoted(DType dtype, std::uint64_t bits) {
  if (dtype == DType::boolean) return bits != 0 ? 1.0f : 0.0f;
  if (dtype == DType::uint8) return static_cast<float>(bits);
  const int width = static_cast<int>(element_size(dtype)) * 8;
  const std::uint64_t sign = std::uint64_t{1} << (width - 1);
  const auto value = width == 64 ? static_cast<std::int64_t>(bits)
                                 : static_cast<std::int64_t>(bits ^ sign) - static_cast<std::int64_t>(sign);
  return static_cast<float>(value);
}

// float32 cast back to the element type: truncation toward zero, wrapped to the width
// (what the CPU's conversion through a 64-bit integer gives); bool is "non-zero".
std::uint64_t demoted(DType dtype, float value) {
  if (dtype == DType::boolean) return value != 0.0f ? 1 : 0;
  const float limit = 9.2233720368547758e18f;  // 2^63
  const std::int64_t whole = std::isfinite(value) && std::fabs(value) < limit
                                 ? static_cast<std::int64_t>(value)
                                 : std::numeric_limits<std::int64_t>::min();
  const std::size_t size = element_size(dtype);
  const std::uint64_t mask = size == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (size * 8)) - 1;
  return static_cast<std::uint64_t>(whole) & mask;
}

// Rebuilds one piece element by element where the backend's copy does not model torch:
// integers divided through float32. The copy keeps the value written last.
void copy_promoted(DType dtype, const Piece& piece, const Buffer& shard, Buffer& full, int scale_power) {
  const float factor = static_cast<float>(std::pow(piece.scale, scale_power));
  const Index n = checked_numel(piece.shape).value_or(0);
  for (Index k = 0; k < n; ++k) {
    const std::uint64_t bits = shard.bits(address_at(piece.shape, piece.dest, k));
    full.set_bits(address_at(piece.shape, piece.source, k), demoted(dtype, promoted(dtype, bits) / factor));
  }
}

// torch.equal between what F holds and the unscaled replica: value equality in the
// (promoted) element type, so +0.0 equals -0.0 and a NaN equals nothing. Returns the
// row-major index of the first element that differs.
std::optional<Index> first_unequal(DType dtype, const Piece& piece, const Buffer& shard, const Buffer& full,
                                   int scale_power) {
  const Index n = checked_numel(piece.shape).value_or(0);
  const bool integers_scaled = scaled_integers(dtype, piece, scale_power);
  const float factor = static_cast<float>(std::pow(piece.scale, scale_power));
  for (Index k = 0; k < n; ++k) {
    const std::uint64_t incoming = shard.bits(address_at(piece.shape, piece.dest, k));
    const std::uint64_t held = full.bits(address_at(piece.shape, piece.source, k));
    bool equal = false;
    if (is_floating(dtype)) {
      const bool unscaled = std::pow(piece.scale, scale_power) == 1.0;  // DeepSpeed skips the division
      equal = bits_to_double(dtype, held) ==
              bits_to_double(dtype, unscaled ? incoming : apply_scale(dtype, incoming, piece.scale, scale_power, false));
    } else if (integers_scaled) {
      equal = promoted(dtype, held) == promoted(dtype, incoming) / factor;
    } else {
      equal = held == incoming;
    }
    if (!equal) return k;
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
  if (auto e = check_optimizer_scale(map, scale_power)) return *e;
  // Every supplied shard must belong to a listed rank and have its element count.
  Index supplied = 0;
  for (const auto& [rank, shard] : shards) {
    const RankEntry* entry = map.find_rank(rank);
    if (entry == nullptr) {
      return rank_error(ErrorKind::shape, rank,
                        fmt::format("A shard was supplied for rank {}, which the map does not list.", rank));
    }
    const Index expected = entry->shard_shape ? *signed_product(*entry->shard_shape) : 0;  // check_counts vouched
    if (shard.dtype() != dtype || shard.numel() != expected) {
      return rank_error(ErrorKind::shape, rank,
                        fmt::format("The shard supplied for rank {} has {} elements of {}, but the map "
                                    "expects {} elements of {}.",
                                    rank, shard.numel(), dtype_name(shard.dtype()), expected, dtype_name(dtype)));
    }
    supplied = checked_add(supplied, expected).value_or(supplied);
  }
  if (shards.empty()) {
    return make_error(ErrorKind::shape, "No shard was supplied, so there is nothing to rebuild from.");
  }
  for (const auto& entry : map.ranks) {
    if (!entry.pieces.empty() && shards.count(entry.rank) == 0) {
      return rank_error(ErrorKind::shape, entry.rank,
                        fmt::format("Rank {} lists pieces but no shard was supplied for it.", entry.rank));
    }
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
      // A comparison only reads, so only a write is refused for a zero stride.
      if (auto e = check_piece(piece, entry.rank, index, *numel_f, shard.numel(),
                               compare ? Writes::nothing : Writes::source)) {
        return *e;
      }
      if (compare) {
        if (auto k = first_unequal(dtype, piece, shard, full, scale_power)) {
          const Index element = address_at(piece.shape, piece.source, *k);
          const Index shard_address = address_at(piece.shape, piece.dest, *k);
          Error e = piece_error(
              ErrorKind::different_data, entry.rank, index,
              fmt::format("this replica holds {} at shard address {} (after unscaling), which does not "
                          "compare equal (torch.equal: by value, a NaN equals nothing) to the {} F already "
                          "holds at element {}, written by an earlier piece from source offset {}.",
                          format_element(dtype, apply_scale(dtype, shard.bits(shard_address), piece.scale,
                                                            scale_power, false)),
                          shard_address, format_element(dtype, full.bits(element)), element,
                          piece.source.offset));
          e.address = element;
          e.side = Side::full;
          return e;
        }
      } else if (scaled_integers(dtype, piece, scale_power)) {
        copy_promoted(dtype, piece, shard, full, scale_power);
      } else {
        backend.copy_block(dtype, rebuild_block(piece, shard, full, scale_power));
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
  for (const auto& other : map.ranks) {
    for (std::size_t i = 0; i < other.pieces.size(); ++i) {
      if (other.pieces[i].scale == 0.0) {
        return piece_error(ErrorKind::scale, other.rank, static_cast<Index>(i),
                           "a zero scale is not invertible, so the full tensor could not be rebuilt.");
      }
    }
  }
  if (auto e = check_optimizer_scale(map, scale_power)) return *e;

  Buffer shard = poisoned(full.dtype(), *shard_numel);
  Backend& backend = cpu_backend();
  for (std::size_t i = 0; i < entry->pieces.size(); ++i) {
    const Piece& piece = entry->pieces[i];
    const auto index = static_cast<Index>(i);
    if (auto e = check_piece(piece, rank, index, *numel_f, *shard_numel, Writes::dest)) return *e;
    if (scaled_integers(full.dtype(), piece, scale_power)) {
      // torch cannot multiply integer data by a float scale in place.
      return piece_error(ErrorKind::scale, rank, index,
                         fmt::format("{} data cannot be multiplied in place by the scale {}.",
                                     dtype_name(full.dtype()), piece.scale));
    }
    backend.copy_block(full.dtype(), extract_block(piece, full, shard, scale_power));
  }
  return shard;
}

}  // namespace shardcheck
