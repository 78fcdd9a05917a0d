// The pre-fix DeepSpeed behaviour (contract 4.1), kept to reproduce reported corruptions.
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

// What torch.as_strided refuses, and what addressing needs: equal lengths, no
// negative numbers, no overflow, non-empty views inside their buffers; then a write
// through a zero stride on an axis of extent > 1. `writes` tells which view is written:
// rebuild writes F through the source view, extract the shard through the dest view,
// and a replica comparison writes neither.
enum class Writes { source, dest, nothing };
Status check_piece(const Piece& piece, Rank rank, Index index, Index numel_f, Index shard_numel,
                   Writes writes) {
  const PieceAt at{rank, index, &piece};
  const std::size_t n = piece.shape.size();
  if (piece.source.strides.size() != n || piece.dest.strides.size() != n) return fault::piece(PieceFault::axes, at);
  auto negative = [](std::span<const Index> xs) {
    return std::any_of(xs.begin(), xs.end(), [](Index x) { return x < 0; });
  };
  if (negative(piece.shape)) return fault::piece(PieceFault::negative_extent, at);
  if (piece.source.offset < 0) return fault::piece(PieceFault::negative_source_offset, at);
  if (piece.dest.offset < 0) return fault::piece(PieceFault::negative_dest_offset, at);
  if (negative(piece.source.strides)) return fault::piece(PieceFault::negative_source_stride, at);
  if (negative(piece.dest.strides)) return fault::piece(PieceFault::negative_dest_stride, at);
  // torch sizes a view as a running product of its extents in 64 unsigned bits and
  // refuses any overflow, even one that a later extent of 0 would cancel
  // (as_strided([2^62, 4, 0], ...) raises; [0, 2^62, 4] and [2^62, 0, 2^62] do not).
  std::uint64_t running = 1;
  for (const Index extent : piece.shape) {
    if (__builtin_mul_overflow(running, static_cast<std::uint64_t>(extent), &running)) {
      return fault::piece(PieceFault::source_overflow, at);
    }
  }
  auto src = span_facts(piece.shape, piece.source);
  auto dst = span_facts(piece.shape, piece.dest);
  if (!src || !dst) return fault::piece(!src ? PieceFault::source_overflow : PieceFault::dest_overflow, at);
  if (src->empty) return {};
  if (src->max_address >= numel_f) return fault::out_of_bounds(at, Side::full, src->max_address, numel_f);
  if (dst->max_address >= shard_numel) return fault::out_of_bounds(at, Side::shard, dst->max_address, shard_numel);
  if (writes == Writes::nothing) return {};
  const bool writes_source = writes == Writes::source;
  const Strides& written = writes_source ? piece.source.strides : piece.dest.strides;
  for (std::size_t k = 0; k < n; ++k) {
    if (piece.shape[k] > 1 && written[k] == 0) {
      return fault::zero_stride_write(at, writes_source ? Side::full : Side::shard, k);
    }
  }
  return {};
}

// DeepSpeed's from_dict reads every rank's shard_shape, so a rank entry without one,
// even one with no pieces (which the contract allows, section 2), is a KeyError before
// any conversion: format.
Status every_rank_has_a_shape(const Map& map) {
  for (const auto& entry : map.ranks) {
    if (!entry.shard_shape) return fault::missing_shard_shape(entry.rank);
  }
  return {};
}

// DeepSpeed's only map check: each rank's pieces hold as many elements as its shard,
// for every rank the map lists (a rank with no pieces must have an empty shard). Its
// piece constructor refuses a zero scale, so no map holding one is ever built.
Status check_counts(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      if (entry.pieces[i].scale == 0.0) {
        return fault::piece(PieceFault::bad_scale, PieceAt{entry.rank, static_cast<Index>(i), &entry.pieces[i]});
      }
    }
  }
  if (Status e = every_rank_has_a_shape(map); !e.ok()) return e;
  for (const auto& entry : map.ranks) {
    auto expected = signed_product(*entry.shard_shape);
    if (!expected) return fault::bad_shard_shape(entry.rank, *entry.shard_shape);
    Index total = 0;
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      const Piece& piece = entry.pieces[i];
      const PieceAt at{entry.rank, static_cast<Index>(i), &piece};
      auto n = signed_product(piece.shape);
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

// DeepSpeed scales in torch's arithmetic (in the element type, on CPU), which may also
// quieten or canonicalise a NaN; the legacy model keeps that behaviour rather than the
// contract's (section 1.2).
BlockCopy torch_arithmetic(BlockCopy copy) {
  copy.arithmetic = Arithmetic::legacy_torch;
  return copy;
}

// Moving an optimizer state through a scaled piece is refused, in both directions.
Status check_optimizer_scale(const Map& map, int scale_power) {
  if (scale_power == 1) return {};
  for (const auto& entry : map.ranks) {
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      if (entry.pieces[i].scale == 1.0) continue;
      return fault::scale_needs_power_one(PieceAt{entry.rank, static_cast<Index>(i), &entry.pieces[i]}, scale_power);
    }
  }
  return {};
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

// float32 cast back to the element type as torch's CPU kernels do it on x86: truncation
// toward zero through a 32-bit integer (64-bit for int64), whose out-of-range and NaN
// result is the "integer indefinite" (the lowest value), then wrapped to the width. So
// int32 data divided to -2^32 becomes INT32_MIN, not 0. Bool is "non-zero".
std::uint64_t demoted(DType dtype, float value) {
  if (dtype == DType::boolean) return value != 0.0f ? 1 : 0;
  const std::size_t size = element_size(dtype);
  if (size == 8) {
    const float limit = 9.2233720368547758e18f;  // 2^63
    const bool fits = std::isfinite(value) && value >= -limit && value < limit;
    return static_cast<std::uint64_t>(fits ? static_cast<std::int64_t>(value) : std::numeric_limits<std::int64_t>::min());
  }
  const float limit = 2147483648.0f;  // 2^31
  const bool fits = std::isfinite(value) && value >= -limit && value < limit;
  const std::int32_t whole = fits ? static_cast<std::int32_t>(value) : std::numeric_limits<std::int32_t>::min();
  const std::uint64_t mask = (std::uint64_t{1} << (size * 8)) - 1;
  return static_cast<std::uint64_t>(static_cast<std::int64_t>(whole)) & mask;
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

// A replica's element as DeepSpeed unscales it before comparing: floating data divided
// in torch's arithmetic (not at all when scale^p is 1: DeepSpeed skips the division, so a
// NaN keeps its bits), integer data divided in float32 after promotion.
struct Unscaled {
  std::uint64_t bits = 0;  // floating, or integers without a scale
  std::optional<float> promoted_quotient;  // integers with a scale
};
Unscaled unscaled_replica(DType dtype, const Piece& piece, std::uint64_t incoming, int scale_power) {
  if (scaled_integers(dtype, piece, scale_power)) {
    return {incoming, promoted(dtype, incoming) / static_cast<float>(std::pow(piece.scale, scale_power))};
  }
  if (!is_floating(dtype) || std::pow(piece.scale, scale_power) == 1.0) return {incoming, std::nullopt};
  return {apply_scale(dtype, incoming, piece.scale, scale_power, false, Arithmetic::legacy_torch), std::nullopt};
}

std::string unscaled_text(DType dtype, const Unscaled& value) {
  if (!value.promoted_quotient) return format_element(dtype, value.bits);
  return fmt::format("{} ({} divided by the scale in float32)", *value.promoted_quotient,
                     format_element(dtype, value.bits));
}

// torch.equal between what F holds and the unscaled replica: value equality in the
// (promoted) element type, so +0.0 equals -0.0 and a NaN equals nothing. Returns the
// row-major index of the first element that differs, with the replica's element as
// compared (what the refusal names).
struct Unequal {
  Index index;
  Unscaled incoming;
};
std::optional<Unequal> first_unequal(DType dtype, const Piece& piece, const Buffer& shard, const Buffer& full,
                                     int scale_power) {
  const Index n = checked_numel(piece.shape).value_or(0);
  for (Index k = 0; k < n; ++k) {
    const Unscaled incoming =
        unscaled_replica(dtype, piece, shard.bits(address_at(piece.shape, piece.dest, k)), scale_power);
    const std::uint64_t held = full.bits(address_at(piece.shape, piece.source, k));
    bool equal = false;
    if (incoming.promoted_quotient) {
      equal = promoted(dtype, held) == *incoming.promoted_quotient;
    } else if (is_floating(dtype)) {
      equal = bits_to_double(dtype, held) == bits_to_double(dtype, incoming.bits);
    } else {
      equal = held == incoming.bits;
    }
    if (!equal) return Unequal{k, incoming};
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
  if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  if (Status e = check_counts(map); !e.ok()) return e.error();
  if (Status e = check_optimizer_scale(map, scale_power); !e.ok()) return e.error();
  // Every supplied shard must belong to a listed rank and have its element count.
  Index supplied = 0;
  for (const auto& [rank, shard] : shards) {
    const RankEntry* entry = map.find_rank(rank);
    if (entry == nullptr) return fault::unlisted_shard(rank);
    if (!entry->shard_shape && shard.numel() != 0) return fault::shard_without_shape(rank);
    const Index expected = entry->shard_shape ? *signed_product(*entry->shard_shape) : 0;  // check_counts vouched
    if (shard.dtype() != dtype) return fault::shard_dtype(rank, shard.dtype(), dtype);
    if (shard.numel() != expected) return fault::shard_numel(rank, shard.numel(), expected);
    supplied = checked_add(supplied, expected).value_or(supplied);
  }
  if (shards.empty()) return fault::no_shards();
  for (const auto& entry : map.ranks) {
    if (!entry.pieces.empty() && shards.count(entry.rank) == 0) {
      return fault::missing_shard(entry.rank, entry.pieces.size());
    }
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
      // DeepSpeed keeps locations as a frozenset: a rank listed twice is one holder.
      const bool replicated = std::set<Rank>(piece.locations.begin(), piece.locations.end()).size() > 1;
      const bool compare = replicated && started.count(piece.source.offset) > 0;
      // A comparison only reads, so only a write is refused for a zero stride.
      if (Status e = check_piece(piece, entry.rank, index, *numel_f, shard.numel(),
                                 compare ? Writes::nothing : Writes::source);
          !e.ok()) {
        return e.error();
      }
      if (compare) {
        if (auto unequal = first_unequal(dtype, piece, shard, full, scale_power)) {
          const Index element = address_at(piece.shape, piece.source, unequal->index);
          const Index shard_address = address_at(piece.shape, piece.dest, unequal->index);
          return fault::replica_differs_from_full(PieceAt{entry.rank, index, &piece}, element, shard_address,
                                                  unscaled_text(dtype, unequal->incoming), dtype,
                                                  full.bits(element));
        }
      } else if (scaled_integers(dtype, piece, scale_power)) {
        copy_promoted(dtype, piece, shard, full, scale_power);
      } else {
        backend.copy_block(dtype, torch_arithmetic(block_of(piece, Direction::rebuild, shard, full, scale_power)));
      }
      started.insert(piece.source.offset);
    }
  }
  return full;
}

Result<Buffer> legacy_extract(const Map& map, const Buffer& full, Rank rank, int scale_power) {
  if (Status e = every_rank_has_a_shape(map); !e.ok()) return e.error();
  const RankEntry* entry = map.find_rank(rank);
  if (entry == nullptr || !entry->shard_shape) return fault::no_shard_to_extract(rank);
  auto numel_f = numel_of(map.logical_shape);
  if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  if (full.numel() != *numel_f) return fault::full_numel(full.numel(), *numel_f);
  auto shard_numel = numel_of(*entry->shard_shape);
  if (!shard_numel) return fault::bad_shard_shape(rank, *entry->shard_shape);
  if (Status e = allocation_guard(*shard_numel, full.numel(), CheckLimits{}, "a shard"); !e.ok()) return e.error();
  for (const auto& other : map.ranks) {
    for (std::size_t i = 0; i < other.pieces.size(); ++i) {
      if (other.pieces[i].scale == 0.0) {
        return fault::piece(PieceFault::bad_scale, PieceAt{other.rank, static_cast<Index>(i), &other.pieces[i]});
      }
    }
  }
  if (Status e = check_optimizer_scale(map, scale_power); !e.ok()) return e.error();

  Buffer shard = poisoned(full.dtype(), *shard_numel);
  Backend& backend = cpu_backend();
  for (std::size_t i = 0; i < entry->pieces.size(); ++i) {
    const Piece& piece = entry->pieces[i];
    const auto index = static_cast<Index>(i);
    if (Status e = check_piece(piece, rank, index, *numel_f, *shard_numel, Writes::dest); !e.ok()) return e.error();
    if (scaled_integers(full.dtype(), piece, scale_power)) {
      // torch cannot multiply integer data by a float scale in place.
      return fault::scale_on_integer(PieceAt{rank, index, &piece}, full.dtype());
    }
    backend.copy_block(full.dtype(), torch_arithmetic(block_of(piece, Direction::extract, full, shard, scale_power)));
  }
  return shard;
}

}  // namespace shardcheck
