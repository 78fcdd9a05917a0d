#include "shardcheck/gen/values.h"

#include <algorithm>
#include <bit>
#include <string>

#include <fmt/format.h>

#include "shardcheck/digest.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck::gen {

namespace {

struct FloatBits {
  int exponent_bits;
  int fraction_bits;
};

std::optional<FloatBits> float_bits(DType dtype) {
  switch (dtype) {
    case DType::float64: return FloatBits{11, 52};
    case DType::float32: return FloatBits{8, 23};
    case DType::float16: return FloatBits{5, 10};
    case DType::bfloat16: return FloatBits{8, 7};
    default: return std::nullopt;
  }
}

}  // namespace

bool carries_scales(DType dtype) { return float_bits(dtype).has_value(); }

namespace {

std::uint64_t width_mask(DType dtype) {
  const std::size_t bits = element_size(dtype) * 8;
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

std::vector<std::uint64_t> float_specials(FloatBits f) {
  const std::uint64_t one = 1;
  const std::uint64_t fraction = (one << f.fraction_bits) - 1;
  const std::uint64_t exponents = (one << f.exponent_bits) - 1;
  const std::uint64_t sign = one << (f.exponent_bits + f.fraction_bits);
  const std::uint64_t inf = exponents << f.fraction_bits;
  const std::uint64_t quiet = one << (f.fraction_bits - 1);
  const std::uint64_t bias = (one << (f.exponent_bits - 1)) - 1;
  const std::uint64_t one_value = bias << f.fraction_bits;
  const std::uint64_t max_finite = ((exponents - 1) << f.fraction_bits) | fraction;
  return {
      0,                         // +0
      sign,                      // -0
      inf,                       // +inf
      sign | inf,                // -inf
      inf | quiet,               // the canonical quiet NaN
      sign | inf | quiet | 1,    // a negative quiet NaN with a payload
      inf | quiet | (fraction >> 2),  // a quiet NaN with a wide payload
      inf | 1,                   // a signalling NaN, payload 1
      sign | inf | (quiet - 1),  // a negative signalling NaN, every other payload bit
      1,                         // the smallest subnormal
      sign | fraction,           // minus the largest subnormal
      one << f.fraction_bits,    // the smallest normal
      max_finite,                // the largest finite value
      sign | max_finite,
      max_finite - 1,
      one_value,                 // 1
      one_value - 1,             // just below 1: all fraction bits set
      one_value | 1,             // just above 1
      one_value | (fraction >> 1),  // 1.5 - ulp: times 3 rounds near a binade edge
      ((bias + 1) << f.fraction_bits) | 1,  // 2 + ulp: times 3 lands on a tie
  };
}

std::vector<std::uint64_t> integer_specials(DType dtype) {
  const std::uint64_t mask = width_mask(dtype);
  if (dtype == DType::boolean) return {0, 1};
  if (dtype == DType::uint8) return {0, 1, 0x7f, 0x80, 0xfe, 0xff};
  const std::uint64_t min = (mask >> 1) + 1;  // the sign bit alone
  return {0, 1, mask /* -1 */, min, min + 1, mask >> 1, (mask >> 1) - 1};
}

void rescale(Map& map) {
  for (auto& entry : map.ranks) {
    for (auto& piece : entry.pieces) {
      if (piece.scale == 2.0) piece.scale = kInexactScales[0];
      else if (piece.scale == 0.5) piece.scale = kInexactScales[1];
    }
  }
}

void rescale_text(std::string& text) {
  if (text == fmt::format("{}", 2.0)) text = fmt::format("{}", kInexactScales[0]);
  else if (text == fmt::format("{}", 0.5)) text = fmt::format("{}", kInexactScales[1]);
}

bool has_scale(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0) return true;
    }
  }
  return false;
}

// The producer's digest of the final data: a digest drawn from the markers no longer
// describes F. Every digest the map under test records came from that one value
// (recorded, or a bit of it flipped), so each is moved by the same difference.
void rerecord_digest(Case& c) {
  if (!c.digest_state) return;
  Map& truth = c.truth ? *c.truth : c.map;
  auto it = truth.content_digests.find(*c.digest_state);
  if (it == truth.content_digests.end()) return;
  Case producer;
  producer.map = truth;
  producer.dtype = c.dtype;
  producer.full = c.full;
  producer.scale_power = c.scale_power;
  auto recorded = oracles::truth_digest(producer);
  if (!recorded) return;  // no correct rebuild exists: strict refuses before any digest
  const std::uint64_t change = it->second ^ recorded.value();
  it->second = recorded.value();
  // The maps under test keep their corruptions: a damaged record stays damaged by as much.
  if (c.truth) {
    for (auto& [state, value] : c.map.content_digests) value ^= change;
  }
  // A reshard's target side records the same tensor.
  for (Map* target : {c.target_map ? &*c.target_map : nullptr, c.target_truth ? &*c.target_truth : nullptr}) {
    if (target == nullptr) continue;
    for (auto& [state, value] : target->content_digests) value ^= change;
  }
}

// The generators' own reading of an element (as in special_values): NaN, infinite, zero.
struct Reading {
  bool nan = false;
  bool infinite = false;
  bool zero = false;
};

Reading read_element(FloatBits f, std::uint64_t bits) {
  const std::uint64_t one = 1;
  const std::uint64_t exponents = (one << f.exponent_bits) - 1;
  const std::uint64_t exponent = (bits >> f.fraction_bits) & exponents;
  const std::uint64_t fraction = bits & ((one << f.fraction_bits) - 1);
  const std::uint64_t magnitude = bits & ((one << (f.exponent_bits + f.fraction_bits)) - 1);
  return Reading{exponent == exponents && fraction != 0, exponent == exponents && fraction == 0, magnitude == 0};
}

// Whether the truth map can write `bits` through a piece of scale `scale` (p = 1):
// contract 1.2 refuses an extract that overflows a finite element or flushes a nonzero one,
bool keeps(FloatBits f, std::uint64_t before_bits, std::uint64_t after_bits) {
  const Reading before = read_element(f, before_bits);
  const Reading after = read_element(f, after_bits);
  return before.nan || (!(after.infinite && !before.infinite) && !(after.zero && !before.zero));
}

// ... and rebuild it again: a value that rounded up on the way out may overflow on the
// way back.
bool survives_scale(DType dtype, FloatBits f, std::uint64_t bits, double scale) {
  const std::uint64_t written = oracles::reference_scale(dtype, bits, scale, 1, true);
  return keeps(f, bits, written) && keeps(f, written, oracles::reference_scale(dtype, written, scale, 1, false));
}

}  // namespace

bool fit_data_to_scales(Case& c) {
  const Map& truth = c.truth_map();
  const auto f = float_bits(c.dtype);
  const auto numel = checked_numel(truth.logical_shape);
  if (!f || c.scale_power != 1 || !has_scale(truth) || !numel || *numel < 0 || *numel > (Index{1} << 20)) {
    return false;
  }
  if (c.full && static_cast<Index>(c.full->size()) != *numel) return false;
  std::vector<std::uint64_t> full = c.full ? *c.full : std::vector<std::uint64_t>(static_cast<std::size_t>(*numel));
  if (!c.full) {
    for (Index i = 0; i < *numel; ++i) full[static_cast<std::size_t>(i)] = marker_bits(c.dtype, i);
  }
  // A lost element becomes what the scale's own rebuild of its marker gives (a value the
  // piece keeps, near the edge it fell off), and +0 where even that is lost or another
  // piece's scale loses it: zero survives every scale. The second pass settles elements
  // that several pieces with different scales share.
  bool changed = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& entry : truth.ranks) {
      for (const Piece& piece : entry.pieces) {
        if (piece.scale == 1.0) continue;
        const Index count = checked_numel(piece.shape).value_or(0);
        for (Index k = 0; k < count; ++k) {
          const Index src = address_at(piece.shape, piece.source, k);
          if (src < 0 || src >= *numel) continue;
          std::uint64_t& value = full[static_cast<std::size_t>(src)];
          if (survives_scale(c.dtype, *f, value, piece.scale)) continue;
          const std::uint64_t near = oracles::reference_scale(c.dtype, marker_bits(c.dtype, src), piece.scale, 1, false);
          value = pass == 0 && survives_scale(c.dtype, *f, near, piece.scale) ? near : 0;
          changed = true;
        }
      }
    }
  }
  if (changed) c.full = std::move(full);
  return changed;
}

std::vector<std::uint64_t> special_values(DType dtype) {
  const auto f = float_bits(dtype);
  std::vector<std::uint64_t> out = f ? float_specials(*f) : integer_specials(dtype);
  const std::uint64_t poison = poison_bits(dtype);
  out.erase(std::remove(out.begin(), out.end(), poison), out.end());
  return out;
}

void draw_adversarial_data(ChoiceSource& c, Case& out) {
  // A case about the map's text keeps the markers: its text was encoded from the map as
  // drawn, scales and recorded digests included.
  if (c.between(0, 3) < 2 || out.map_text) return;
  const bool inexact = c.coin();
  const auto numel = checked_numel(out.truth_map().logical_shape);
  if (!numel || *numel < 0 || *numel > (Index{1} << 20)) return;
  const std::vector<std::uint64_t> specials = special_values(out.dtype);
  const std::uint64_t mask = width_mask(out.dtype);
  const std::uint64_t poison = poison_bits(out.dtype);
  const Index salt = c.between(0, 1 << 16);
  std::vector<std::uint64_t> full(static_cast<std::size_t>(*numel));
  for (Index i = 0; i < *numel; ++i) {
    std::uint64_t value = marker_bits(out.dtype, i + salt);
    switch (c.between(0, 5)) {
      case 0:
      case 1:
        value = c.pick(specials);
        break;
      case 2: {
        // Any bit pattern: subnormals, NaN payloads, mantissas whose scaled values tie.
        const auto lo = static_cast<std::uint64_t>(c.between(0, 0xffffffff));
        const auto hi = static_cast<std::uint64_t>(c.between(0, 0xffffffff));
        value = ((hi << 32) | lo) & mask;
        if (out.dtype == DType::boolean) value &= 1;
        if (value == poison) value ^= 1;
        break;
      }
      default:
        break;
    }
    full[static_cast<std::size_t>(i)] = value;
  }
  out.full = std::move(full);
  if (inexact && carries_scales(out.dtype) && has_scale(out.truth_map())) {
    rescale(out.map);
    if (out.truth) rescale(*out.truth);
    if (out.corruption && out.corruption->field == "scale") {
      rescale_text(out.corruption->old_value);
      rescale_text(out.corruption->new_value);
    }
  }
  rerecord_digest(out);
}

void settle_data(Case& c, const std::optional<std::string>& wanted_state) {
  const bool changed = fit_data_to_scales(c);
  // The text of the map under test was written with the records it had; nothing was
  // recorded anyway when the markers could not be written (the only data fitting changes).
  if (c.map_text) return;
  if (c.digest_state || !wanted_state) {
    if (changed) rerecord_digest(c);
    return;
  }
  // The markers could not be written through the truth map's scales, so nothing was
  // recorded before the corruption; the final data can be, in both maps alike.
  Case producer;
  producer.map = c.truth_map();
  producer.dtype = c.dtype;
  producer.full = c.full;
  producer.scale_power = c.scale_power;
  // Without a correct rebuild (replicas scaled apart disagree once unscaled) strict
  // refuses before any digest, and the producer's record is digest(F) itself.
  auto recorded = oracles::truth_digest(producer);
  std::uint64_t value = 0;
  if (recorded) {
    value = recorded.value();
  } else if (c.full) {
    Buffer full(c.dtype, static_cast<Index>(c.full->size()));
    for (std::size_t i = 0; i < c.full->size(); ++i) full.set_bits(static_cast<Index>(i), (*c.full)[i]);
    value = digest(full);
  }
  if (c.truth) c.truth->content_digests[*wanted_state] = value;
  c.map.content_digests[*wanted_state] = value;
  // A reshard's target side records the same tensor.
  if (c.target_truth) c.target_truth->content_digests[*wanted_state] = value;
  if (c.target_map) c.target_map->content_digests[*wanted_state] = value;
  c.digest_state = wanted_state;
}

void damage_replica(Case& c, const ReplicaFlip& flip) {
  const Map& truth = c.truth_map();
  const RankEntry* entry = truth.find_rank(flip.rank);
  const auto numel = checked_numel(truth.logical_shape);
  if (entry == nullptr || flip.piece >= static_cast<Index>(entry->pieces.size()) || !numel) return;
  Buffer full = marker_buffer(c.dtype, *numel);
  if (c.full) {
    for (Index i = 0; i < *numel; ++i) full.set_bits(i, (*c.full)[static_cast<std::size_t>(i)]);
  }
  auto shards = oracles::reference_extract_all(truth, full, c.scale_power);
  if (!shards) return;  // a truth map the reference refuses: the case stays as it is
  const Piece& piece = entry->pieces[static_cast<std::size_t>(flip.piece)];
  Index rest = flip.element;
  Index address = piece.dest.offset;
  for (std::size_t k = piece.shape.size(); k-- > 0;) {
    address += (rest % piece.shape[k]) * piece.dest.strides[k];
    rest /= piece.shape[k];
  }
  Buffer& shard = shards.value().at(flip.rank);
  const std::uint64_t bit = c.dtype == DType::boolean ? 1 : std::uint64_t{1} << (element_size(c.dtype) * 8 - 1);
  shard.set_bits(address, shard.bits(address) ^ bit);
  std::vector<std::uint64_t> values(static_cast<std::size_t>(*numel));
  for (Index i = 0; i < *numel; ++i) values[static_cast<std::size_t>(i)] = full.bits(i);
  c.full = std::move(values);
  std::map<Rank, std::vector<std::uint64_t>> supplied;
  for (const auto& [rank, buffer] : shards.value()) {
    auto& out = supplied[rank];
    for (Index i = 0; i < buffer.numel(); ++i) out.push_back(buffer.bits(i));
  }
  c.shards = std::move(supplied);
  if (!c.ops.has(Op::rebuild)) c.ops = {Op::rebuild};
  c.expect = Outcome::refused;
  // Condition 7, unless the reference model refuses these shards for a reason that comes
  // first (section 1.2: a copy that scaling back overflows or flushes, in every copy).
  const auto judged = oracles::reference_rebuild(truth, shards.value(), c.dtype, c.scale_power);
  c.expect_error = judged.ok() ? ErrorKind::different_data : judged.error().kind;
}

}  // namespace shardcheck::gen
