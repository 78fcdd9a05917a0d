// What the truth oracle converts and expects (contract 8): F from the truth map, the
// shards it writes (or a producer's, or the case's own), and the tensor a correct
// conversion returns, with where and why it is not F.
#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "shardcheck/digest.h"
#include "shardcheck/oracles/reference.h"
#include "truth_internal.h"

namespace shardcheck::oracles {

namespace {

// Marker tensors are allocated from a case file's logical shape, which is untrusted.
constexpr Index kMaxCaseElements = Index{1} << 26;

Result<Index> case_numel(const Map& map, std::string_view which) {
  for (Index extent : map.logical_shape) {
    if (extent < 0) {
      return make_error(ErrorKind::format,
                        fmt::format("the {} map's logical shape has a negative extent", which));
    }
  }
  auto numel = checked_numel(map.logical_shape);
  if (!numel) {
    return make_error(ErrorKind::format,
                      fmt::format("the {} map's logical shape overflows 64 bits", which));
  }
  if (*numel > kMaxCaseElements) {
    return make_error(ErrorKind::format,
                      fmt::format("the {} map's logical shape holds {} elements, more than the "
                                  "{} a case may use",
                                  which, *numel, kMaxCaseElements));
  }
  return *numel;
}

}  // namespace

bool has_scale(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0) return true;
    }
  }
  return false;
}

namespace {

bool is_power_of_two(double scale) {
  int exponent = 0;
  return std::fabs(std::frexp(scale, &exponent)) == 0.5;
}


// Contract 8: the expected tensor is the truth map's own rebuild of the shards; where it
// is not F, says where and why. With every truth scale a power of two it must be F, but
// for an element the truth map wrote as a subnormal of fewer bits (gradual underflow,
// which section 1.2 does not refuse): anything else is a defect of the harness itself.
// `shards_given`: the case file's own shards, which need not have been written from its F;
// the difference is then theirs to explain, never the harness's.
ExpectedVsFull compare_with_full(const Case& c, const Buffer& expected, const Buffer& full, bool shards_given = false) {
  ExpectedVsFull out;
  out.difference = compare(full, expected);
  if (!out.difference) return out;
  if (shards_given) {
    out.reason = fmt::format("element {} of F holds {} but the truth map's rebuild of the case's shards gives {}: "
                             "the shards were not written from this F",
                             out.difference->element, format_element(c.dtype, out.difference->expected_bits),
                             format_element(c.dtype, out.difference->actual_bits));
    return out;
  }
  const Map& truth = c.truth_map();
  std::optional<double> inexact;
  for (const auto& entry : truth.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0 && !is_power_of_two(piece.scale) && !inexact) inexact = piece.scale;
    }
  }
  const Index element = out.difference->element;
  const std::string where = fmt::format("element {} of F holds {} but the truth map's rebuild gives {}", element,
                                        format_element(c.dtype, out.difference->expected_bits),
                                        format_element(c.dtype, out.difference->actual_bits));
  if (inexact) {
    out.reason = fmt::format("{}: the scale {} is not a power of two, so scaling rounds", where, *inexact);
    return out;
  }
  // Every differing element must be one whose scaled copy underflowed into fewer bits.
  const auto pairing = reference_pairing(truth);
  for (Index e = 0; pairing && e < full.numel(); ++e) {
    if (full.bits(e) == expected.bits(e)) continue;
    bool underflowed = false;
    for (const auto& pair : pairing->pairs) {
      if (pair.element != e || pair.scale == 1.0) continue;
      underflowed = underflowed || underflows_when_scaled(c.dtype, full.bits(e), pair.scale);
    }
    if (!underflowed) {
      out.harness_defect = fmt::format(
          "every scale of the truth map is a power of two, yet the expected tensor is not F: element {} of F holds "
          "{} but the truth map's rebuild gives {} (contract 8)",
          e, format_element(c.dtype, full.bits(e)), format_element(c.dtype, expected.bits(e)));
      out.reason = out.harness_defect;
      return out;
    }
  }
  out.reason = fmt::format("{}: a power-of-two scale wrote it below the smallest normal, with fewer bits "
                           "(gradual underflow)",
                           where);
  return out;
}

// What a correct rebuild returns from the shards the truth map wrote: F itself when no
// piece is scaled (data moves bit-exact), else the reference model's rebuild, whose
// rounding (contract 1.2) may not give F back for a scale that is not a power
// of two or a value written as a subnormal. Replicas scaled differently may then
// disagree, and no correct tensor exists.
void set_expected_from_truth(const Case& c, Inputs& in) {
  const Map& truth = c.truth_map();
  if (!has_scale(truth)) {
    in.expected = in.full;
    return;
  }
  auto rebuilt = oracles::reference_rebuild(truth, in.shards, c.dtype, c.scale_power);
  if (!rebuilt) {
    in.no_truth = rebuilt.error();
    return;
  }
  in.expected = std::move(rebuilt).value();
  in.vs_full = compare_with_full(c, *in.expected, *in.full);
}

bool needs_full(const Case& c, OracleKind oracle) {
  return !c.shards || c.ops.has(Op::extract) || c.ops.has(Op::reshard) || oracle == OracleKind::same_map;
}

}  // namespace

Result<Buffer> make_full(const Case& c, const Map& map, std::string_view which) {
  auto numel = case_numel(map, which);
  if (!numel) return numel.error();
  if (!c.full) return marker_buffer(c.dtype, numel.value());
  if (static_cast<Index>(c.full->size()) != numel.value()) {
    return make_error(ErrorKind::shape,
                      fmt::format("the case's full tensor has {} values but the {} map's "
                                  "logical shape holds {}",
                                  c.full->size(), which, numel.value()));
  }
  return to_buffer(c.dtype, *c.full);
}

namespace {

Buffer poisoned(DType dtype, Index numel) {
  Buffer out(dtype, numel);
  const std::uint64_t poison = poison_bits(dtype);
  for (Index i = 0; i < numel; ++i) out.set_bits(i, poison);
  return out;
}

// What a producer writing F through `map` itself leaves on disk (contract 9):
// DeepSpeed's unchecked extract per rank, poison at shard addresses no piece writes; a
// rank that extract cannot write at all (a view past its shard, say) holds only poison.
// Allocation stays bounded as for any untrusted map: a poison-only shard no larger than
// the unchecked extract itself would allocate, all shards together no more than a case
// may use for F. A rank past those bounds, or whose shard shape has no size, gets none.
ShardSet producer_shards(const Map& map, const Buffer& full, int scale_power) {
  std::vector<const RankEntry*> entries;
  for (const auto& entry : map.ranks) {
    if (entry.shard_shape) entries.push_back(&entry);
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const RankEntry* a, const RankEntry* b) { return a->rank < b->rank; });
  const Index per_rank = std::max(full.numel(), CheckLimits{}.max_walked_addresses);
  Index budget = kMaxCaseElements;
  ShardSet out;
  for (const RankEntry* entry : entries) {
    const auto numel = checked_numel(*entry->shard_shape);
    if (out.count(entry->rank) > 0 || !numel || *numel < 0 || *numel > std::min(per_rank, budget)) {
      continue;
    }
    budget -= *numel;
    auto shard = legacy_extract(map, full, entry->rank, scale_power);
    out.emplace(entry->rank, shard ? std::move(shard).value() : poisoned(full.dtype(), *numel));
  }
  return out;
}

// Contract 9: a refusal that needs no data, the case's verdict even where its shards
// cannot be written (the truth's own scale refused, an F too large to make): the map under
// test fails contract 3, or a conversion of the case's dtype refuses its scale (1.2: zero,
// subnormal or not finite in the arithmetic type, any scale on an integer dtype, a scaled
// piece with a power other than 1). ok() when the map under test passes both.
Status refusal_without_data(const Case& c) {
  const ReferenceVerdict verdict = reference_check(c.map);
  if (!verdict.valid()) {
    if (verdict.error) return *verdict.error;
    return make_error(*verdict.kind, verdict.reason);
  }
  return reference_scale_refusal(c.map, c.dtype, c.scale_power);
}

// The shards when the case supplies none: the truth map's (the reference model's extract
// of F), or, where it cannot write them, what the producer would have written and what
// a converter then owes.
Result<Inputs> shards_written_from_full(const Case& c, Inputs in) {
  const Map& truth = c.truth_map();
  // The truth shards come from the reference model, never from the extract under
  // test: a fault shared by extract and rebuild would otherwise round-trip unseen.
  auto shards = reference_extract_all(truth, *in.full, c.scale_power);
  if (shards) {
    in.shards = std::move(shards.value());
    in.truth_wrote_shards = true;
    set_expected_from_truth(c, in);
    return in;
  }
  if (c.truth) {
    // The truth cannot write the shards (its scale refused, say). Only when the map
    // under test passes what needs no data is the case unusable (contract 9); else its
    // refusal is the verdict, and an implementation is given what the producer would
    // have written through the truth map unchecked, and owes that refusal.
    if (refusal_without_data(c).ok()) {
      return reworded(shards.error(), "in the truth map, " + shards.error().sentence);
    }
    in.shards = producer_shards(truth, *in.full, c.scale_power);
    in.no_truth = shards.error();
    // They were written from F: F is what a converter that accepts anyway must return.
    in.expected = in.full;
    return in;
  }
  if (reference_check(c.map).valid()) {
    // A valid map that cannot write F. A scale no conversion of this dtype may apply
    // (contract 1.2) leaves no correct tensor, and strict owes its refusal whatever the
    // shards hold: they are what the producer wrote. An element of F the scale would
    // overflow or flush is data the map could not have written, so a case that reads
    // shards is unusable; an extract reads F alone, and refusing that element is its
    // verdict (contract 1.2 puts the refusal in conversion, and repro knows the dtype).
    const bool reads_shards = c.ops.has(Op::rebuild) || c.ops.has(Op::reshard);
    const bool scale_refused = !reference_scale_refusal(c.map, c.dtype, c.scale_power).ok();
    if (reads_shards && !scale_refused) {
      return reworded(shards.error(), "the map cannot write F, " + shards.error().sentence);
    }
    in.shards = producer_shards(c.map, *in.full, c.scale_power);
    in.no_truth = shards.error();
    // Contract 9: the shards were written from F, so F is what a converter that accepts
    // the scale anyway must return; its acceptance is judged apart (owed_refusal).
    if (scale_refused) in.expected = in.full;
    return in;
  }
  // Nothing is known about the data but the reported map: it wrote the shards.
  in.shards = producer_shards(c.map, *in.full, c.scale_power);
  in.expected = in.full;
  return in;
}

// The case's own shards: the expected tensor is the truth map's rebuild of them.
Result<Inputs> shards_given(const Case& c, Inputs in) {
  const Map& truth = c.truth_map();
  for (const auto& [rank, values] : *c.shards) in.shards.emplace(rank, to_buffer(c.dtype, values));
  if (c.full) {
    // Contract 8: the expected tensor is the truth map's rebuild of the shards, and F
    // only where that rebuild refuses (a case whose shards admit no correct tensor).
    auto rebuilt = reference_rebuild(truth, in.shards, c.dtype, c.scale_power);
    if (!rebuilt) {
      in.expected = in.full;
      return in;
    }
    in.expected = std::move(rebuilt).value();
    in.vs_full = compare_with_full(c, *in.expected, *in.full, /*shards_given=*/true);
    return in;
  }
  auto rebuilt = reference_rebuild(truth, in.shards, c.dtype, c.scale_power);
  if (rebuilt) {
    in.expected = std::move(rebuilt.value());
  } else if (auto agreed = c.truth ? std::nullopt : reference_agreed_rebuild(c.map, in.shards, c.dtype, c.scale_power)) {
    // An invalid reported map whose shards still leave no doubt about F (contract 9): that
    // F is what a correct converter could return, and accepting the map is judged apart.
    in.expected = std::move(agreed);
  } else {
    in.no_truth = rebuilt.error();
  }
  return in;
}

}  // namespace

Result<Inputs> prepare_truth(const Case& c) {
  Inputs in;
  const Map& truth = c.truth_map();
  if (needs_full(c, OracleKind::truth) || c.full) {
    auto full = make_full(c, truth, "truth");
    if (!full) {
      // An F that cannot be made: the case runs with no data where the map under test
      // is refused without any (contract 9), so strict refuses it with its kind.
      Status invalid = refusal_without_data(c);
      if (invalid.ok()) return full.error();
      in.full = Buffer(c.dtype, 0);
      if (c.shards) {
        for (const auto& [rank, values] : *c.shards) in.shards.emplace(rank, to_buffer(c.dtype, values));
      }
      in.no_truth = invalid.error();
      return in;
    }
    in.full = std::move(full.value());
  }
  if (!c.shards) return shards_written_from_full(c, std::move(in));
  return shards_given(c, std::move(in));
}

// Whether value * scale, exactly, lies below the dtype's smallest normal: scaling into
// that range keeps fewer bits (gradual underflow, even rounding up to the smallest
// normal), so a power-of-two scale may not give the value back. The smallest normal of
// each dtype is the model's own list, not the core's.
bool underflows_when_scaled(DType dtype, std::uint64_t bits, double scale) {
  const double value = std::fabs(bits_to_double(dtype, bits));
  if (value == 0 || std::isnan(value) || std::isinf(value)) return false;
  // value * scale, exactly: with value = mv * 2^ev and scale = ms * 2^es (frexp), the
  // product is mv * ms * 2^(ev + es), computed without forming it (a double product of
  // two float64 values may itself round across the smallest normal).
  int ev = 0, es = 0;
  const double mv = std::frexp(value, &ev);
  const double ms = std::frexp(std::fabs(scale), &es);
  int smallest_normal_exponent = -126;
  if (dtype == DType::float16) smallest_normal_exponent = -14;
  if (dtype == DType::float64) smallest_normal_exponent = -1022;
  return std::ldexp(mv * ms, ev + es - smallest_normal_exponent) < 1.0;
}

Result<std::uint64_t> truth_digest(const Case& c) {
  auto full = make_full(c, c.truth_map(), "truth");
  if (!full) return full.error();
  if (!has_scale(c.truth_map())) return digest(full.value());
  // A scaled map gives back what its rounding leaves of F (contract 1.2), and
  // that is the tensor a correct rebuild returns and the digest it must verify.
  Inputs in;
  in.full = std::move(full).value();
  auto shards = reference_extract_all(c.truth_map(), *in.full, c.scale_power);
  if (!shards) return shards.error();
  in.shards = std::move(shards).value();
  set_expected_from_truth(c, in);
  if (!in.expected) return *in.no_truth;
  return digest(*in.expected);
}

}  // namespace shardcheck::oracles
