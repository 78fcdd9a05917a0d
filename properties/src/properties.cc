#include "shardcheck/properties.h"
#include "shardcheck/oracles/backends.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "properties_internal.h"
#include "shardcheck/digest.h"
#include "shardcheck/fnv1a.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/reference.h"

namespace shardcheck::props {

std::string op_label(Op op, bool after_fallback) {
  return std::string(op_name(op)) + (after_fallback ? "-after-fallback" : "");
}

std::string refusal_row(std::optional<ErrorKind> kind, const std::string& type) {
  // An exec target's "this case is beyond what I can express" (docs/protocol.md,
  // "Refusals"): one row of its own, whatever kind it gave.
  if (type == oracles::kUnsupportedType) return std::string(oracles::kUnsupportedType);
  std::string row(kind ? kind_name(*kind) : "unknown");
  // An implementation whose error type is the kind's own name (shardcheck's strict policy
  // over the protocol: the loopback share) shares the kind's row.
  return type.empty() || type == row ? row : fmt::format("{} ({})", row, type);
}

std::optional<ErrorKind> refusal_row_kind(const std::string& row) {
  return parse_kind(row.substr(0, row.find(" (")));
}

std::string corruption_label(const Case& c) { return c.corruption ? c.corruption->kind : std::string("none"); }

std::string constructor_label(const Case& c) { return c.constructor.empty() ? std::string("unknown") : c.constructor; }

// "constructor/corruption": how most signatures end, so that a campaign tells the
// generators' places apart.
std::string case_label(const Case& c) { return constructor_label(c) + "/" + corruption_label(c); }

namespace {

// The columns of planted_bugs.def.
enum class Alone { any_finding, truth_oracle, truth_oracle_digests, masked };
enum class Blind { in_blind, not_blind };
enum class Conversion { memory_safe, memory_unsafe };

#define SHARDCHECK_PLANTED_BUG(name, disables, alone, blind, conversion)                               \
  static_assert(Alone::alone != Alone::masked || Blind::blind == Blind::in_blind,                      \
                "planted_bugs.def: " #name " shows in no scenario (masked and not in_blind)");         \
  static_assert(Blind::blind == Blind::not_blind || Conversion::conversion == Conversion::memory_safe, \
                "planted_bugs.def: " #name " is memory_unsafe, so it cannot be in_blind");
#include "shardcheck/planted_bugs.def"
#undef SHARDCHECK_PLANTED_BUG

}  // namespace

// Conversion with some checks disabled (structure, bounds) may address memory outside
// the buffers; those planted bugs are judged on the map checks alone.
bool conversion_is_memory_safe(const PlantedBugs& bugs) {
  bool safe = true;
#define SHARDCHECK_PLANTED_BUG(name, disables, alone, blind, conversion) \
  if (Conversion::conversion == Conversion::memory_unsafe && bugs.name) safe = false;
#include "shardcheck/planted_bugs.def"
#undef SHARDCHECK_PLANTED_BUG
  return safe;
}

namespace {

// A hash of the case (its name, which names the constructor and corruption, its data
// and its shape) that picks the cases a judgement is spread over, the same on every run.
std::uint64_t case_hash(const Case& c) {
  Fnv1a hash;
  hash.add_bytes(c.name);
  if (c.full) {
    for (std::size_t i = 0; i < c.full->size() && i < 16; ++i) hash.add((*c.full)[i]);
  }
  for (const Index extent : c.map.logical_shape) hash.add(static_cast<std::uint64_t>(extent));
  return hash.value();
}

// Half the cases convert with the box proof and the wide row copies off: the run sweeps
// and the recorded slab copies are then judged on the same generated maps as the box
// proof and the row copies.
bool prove_on_boxes(const Case& c) { return (case_hash(c) >> 32 & 1) == 0; }

}  // namespace

ConvertOptions convert_options(const Case& c, const EvalOptions& options) {
  ConvertOptions convert;
  convert.policy = options.policy;
  convert.scale_power = c.scale_power;
  convert.checks.bugs = options.bugs;
  convert.checks.box_proof = convert.wide_copies = prove_on_boxes(c);
  return convert;
}

ReshardOptions reshard_options(const Case& c, const EvalOptions& options) {
  ReshardOptions reshard;
  reshard.bugs = options.planner_bugs;
  reshard.plan_on_boxes = (case_hash(c) >> 33 & 1) == 0;
  return reshard;
}


// An uncorrupted map, or a corruption that only rewrote the same layout: the shards the
// oracle converts are then exactly the ones it describes, as in property 1.
// Resharding (contract 11): the target side means what the true target map means, and
// every element's target scale is its source scale (lowest holder), so a plan must exist.
bool reshard_pair_equivalent(const Case& c) {
  if (!c.target_map) return false;
  // Section 1.2's refusals for the dtype, which the pairings (no empty pieces) do not show.
  for (const Map* map : {&c.map, &*c.target_map}) {
    if (!oracles::reference_scale_refusal(*map, c.dtype, c.scale_power).ok()) return false;
  }
  const auto mine = oracles::reference_pairing(*c.target_map);
  if (!mine) return false;
  if (c.target_truth) {
    // A damaged record is a corruption a reshard that verifies digests must refuse.
    if (c.target_map->content_digests != c.target_truth->content_digests) return false;
    const auto truth = oracles::reference_pairing(*c.target_truth);
    if (!truth || *truth != *mine) return false;
  }
  const auto source = oracles::reference_pairing(c.map);
  if (!source) return false;
  std::vector<double> held(static_cast<std::size_t>(source->numel), 0.0);
  std::vector<bool> seen(held.size(), false);
  for (const auto& pair : source->pairs) {  // sorted: the lowest rank of an element first
    const auto e = static_cast<std::size_t>(pair.element);
    if (!seen[e]) held[e] = pair.scale;
    seen[e] = true;
  }
  return std::all_of(mine->pairs.begin(), mine->pairs.end(), [&](const oracles::Pairing::Pair& pair) {
    return held[static_cast<std::size_t>(pair.element)] == pair.scale;
  });
}

bool equivalent_to_truth(const Case& c, bool map_valid) {
  if (!map_valid || c.undecoded_map || c.undecoded_target_map || c.shards || c.digest || c.expect || c.expect_error) return false;
  if (c.ops.has(Op::reshard) && !reshard_pair_equivalent(c)) return false;
  if (!c.truth) return true;
  if (c.map.content_digests != c.truth->content_digests) return false;
  // The pairing leaves out empty pieces, whose scales section 1.2 judges all the same.
  if (!oracles::reference_scale_refusal(c.map, c.dtype, c.scale_power).ok()) return false;
  const auto mine = oracles::reference_pairing(c.map);
  if (!mine) return false;
  const auto truth = oracles::reference_pairing(*c.truth);
  return truth && *mine == *truth;
}

namespace {

// Where an error points (contract 3's place of the first error), its wording aside.
auto location_of(const Error& e) { return std::tie(e.rank, e.piece, e.side, e.address, e.path); }

// Conditions 1-6 on one map, by the core checks (the box proof or the run sweeps) against
// the reference model. `what` names a map derived from the case's ("" for its own).
std::optional<Finding> agree_with_reference(const Case& c, const Map& map, const PlantedBugs& bugs,
                                            std::string_view what, std::optional<Status>* as_listed) {
  const oracles::ReferenceVerdict reference = oracles::reference_check(map);
  if (reference.too_large) return std::nullopt;  // beyond what the naive model walks
  const std::string where = fmt::format("{}/{}{}", constructor_label(c), corruption_label(c), what);
  // Both proofs of conditions 4-6 answer to the reference: the box proof ("fast")
  // decides nearly every generated map, so the run sweeps ("runs") would otherwise be
  // judged only on the few maps whose pieces are not boxes.
  for (const bool boxes : {true, false}) {
    CheckOptions check_options;
    check_options.bugs = bugs;
    check_options.box_proof = boxes;
    const Status fast = check_map(map, check_options);
    if (boxes && as_listed != nullptr) *as_listed = fast;
    const std::string_view proof = boxes ? "fast" : "runs";
    const std::string_view checks = boxes ? "the core checks" : "the core checks' run sweeps";
    if (fast.ok() && reference.kind) {
      return make_finding(JudgeId::reference_verdict,
                          fmt::format("{}-accepts:{}:{}", proof, kind_name(*reference.kind), where),
                          fmt::format("{} accept a map the reference model refuses ({}: {})", checks,
                                      kind_name(*reference.kind), reference.reason),
                          c);
    }
    if (!fast.ok() && !reference.kind) {
      return make_finding(
          JudgeId::reference_verdict, fmt::format("{}-refuses:{}:{}", proof, kind_name(fast.error().kind), where),
          fmt::format("{} refuse a map the reference model accepts: {}", checks, fast.error().to_string()), c);
    }
    if (!fast.ok() && reference.kind && fast.error().kind != *reference.kind) {
      // The conservative stride rule is the one documented place where the two may
      // legitimately see different first conditions.
      if (reference.refused_only_by_stride_rule && fast.error().kind == ErrorKind::itself) continue;
      return make_finding(JudgeId::reference_verdict,
                          fmt::format("kind{}:{}-vs-{}:{}", boxes ? "" : "-runs", kind_name(fast.error().kind),
                                      kind_name(*reference.kind), where),
                          fmt::format("{} refuse with {} but the reference model with {} ({})", checks,
                                      fast.error().to_string(), kind_name(*reference.kind), reference.reason),
                          c);
    }
    // Contract 3 names one place for the first error: the lowest rank, the first piece in
    // content order, the lowest address. The same kind somewhere else is a user sent to
    // the wrong piece.
    if (!fast.ok() && reference.error && fast.error().kind == reference.error->kind &&
        location_of(fast.error()) != location_of(*reference.error)) {
      return make_finding(JudgeId::reference_verdict,
                          fmt::format("where{}:{}:{}", boxes ? "" : "-runs", kind_name(fast.error().kind), where),
                          fmt::format("{} refuse at another place than the reference model: {} against {}", checks,
                                      fast.error().to_string(), reference.error->to_string()),
                          c);
    }
  }
  return std::nullopt;
}

// What a verdict says, in terms that must not depend on rank or piece order: the kind,
// rank and address, and the piece concerned by its content (its index moves).
std::string order_free_verdict(const Map& map, const Status& status) {
  if (status.ok()) return "valid";
  const Error& e = status.error();
  std::string piece = "-";
  if (e.rank && e.piece) {
    const RankEntry* entry = map.find_rank(*e.rank);
    if (entry != nullptr && *e.piece >= 0 && static_cast<std::size_t>(*e.piece) < entry->pieces.size()) {
      piece = describe(entry->pieces[static_cast<std::size_t>(*e.piece)]);
    }
  }
  return fmt::format("{} rank {} address {} piece {}", kind_name(e.kind), e.rank ? std::to_string(*e.rank) : "-",
                     e.address ? std::to_string(*e.address) : "-", piece);
}

// Lists `copy` once more in `entry` and grows its shard (flat) by the copy's element
// count; `to_new_addresses` moves the copy into the grown part. false when the sizes are
// beyond what a probe should build.
bool append_growing_shard(RankEntry& entry, Piece copy, bool to_new_addresses) {
  const auto shard = checked_numel(*entry.shard_shape);
  const auto extra = checked_numel(copy.shape);
  if (!shard || !extra || *shard < 0 || *extra <= 0 || *shard > (Index{1} << 40) || *extra > (Index{1} << 40)) {
    return false;
  }
  if (to_new_addresses) copy.dest = StridedView{*shard, row_major_strides(copy.shape)};
  entry.shard_shape = Extents{*shard + *extra};
  entry.pieces.push_back(std::move(copy));
  return true;
}

// The map with the first single-holder piece (or replica piece) of some rank copied once
// more, to new addresses past the end of that rank's shard.
std::optional<Map> with_piece_twice(const Map& map, bool replica) {
  Map doubled = map;
  for (RankEntry& entry : doubled.ranks) {
    if (!entry.shard_shape) continue;
    const auto chosen = std::find_if(entry.pieces.begin(), entry.pieces.end(), [replica](const Piece& p) {
      return (p.locations.size() >= 2) == replica && checked_numel(p.shape).value_or(0) > 0;
    });
    if (chosen == entry.pieces.end()) continue;
    if (!append_growing_shard(entry, *chosen, true)) return std::nullopt;
    return doubled;
  }
  return std::nullopt;
}

// Contract section 10 on a valid map: each rank's share of the digest of F, from the
// shards the reference model extracts, as the core's digest_shares and the reference
// model's naive count give it.
std::optional<Finding> agree_on_digest_shares(const Case& c, const Map& map, std::string_view what) {
  if (!oracles::reference_check(map).valid()) return std::nullopt;
  const Index numel = checked_numel(map.logical_shape).value_or(0);
  Buffer full = marker_buffer(c.dtype, numel);
  if (c.full && static_cast<Index>(c.full->size()) == numel) {
    for (Index i = 0; i < numel; ++i) full.set_bits(i, (*c.full)[static_cast<std::size_t>(i)]);
  }
  const auto shards = oracles::reference_extract_all(map, full, c.scale_power);
  if (!shards) return std::nullopt;  // a scale the power refuses
  const auto expected = oracles::reference_digest_shares(map, shards.value(), c.dtype, c.scale_power);
  const auto shares = digest_shares(map, shards.value(), c.scale_power);
  if (expected && shares && shares.value() == *expected) return std::nullopt;
  if (!expected && !shares) return std::nullopt;
  return make_finding(JudgeId::digest_shares, case_label(c) + std::string(what),
                      shares ? "digest_shares gives shares that are not the reference model's count"
                             : "digest_shares refuses a valid map: " + shares.error().to_string(),
                      c);
}

// Another element type of the same width, as a reader that compares sizes would mistake.
DType same_width_other(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return DType::int32;
    case DType::float64:
      return DType::int64;
    case DType::float16:
      return DType::bfloat16;
    case DType::bfloat16:
      return DType::int16;
    case DType::int8:
      return DType::uint8;
    case DType::int16:
      return DType::float16;
    case DType::int32:
      return DType::float32;
    case DType::int64:
      return DType::float64;
    case DType::uint8:
      return DType::boolean;
    case DType::boolean:
      return DType::int8;
  }
  return DType::float32;
}

std::optional<Finding> agree_on_retyped_shards(const Case& c, const PlantedBugs& bugs) {
  constexpr Index kMaxShard = Index{1} << 16;
  const DType other = same_width_other(c.dtype);
  ShardSet shards;
  for (const RankEntry& entry : c.map.ranks) {
    if (!entry.shard_shape) continue;
    const auto numel = checked_numel(*entry.shard_shape);
    if (!numel || *numel < 0 || *numel > kMaxShard) return std::nullopt;
    shards.emplace(entry.rank, Buffer(other, *numel));
  }
  const oracles::ReferenceVerdict verdict = oracles::reference_check(c.map);
  if (verdict.too_large || verdict.refused_only_by_stride_rule) return std::nullopt;
  const auto expected = oracles::reference_rebuild(c.map, shards, c.dtype, c.scale_power);
  ConvertOptions options;
  options.scale_power = c.scale_power;
  options.checks.bugs = bugs;
  const auto got = rebuild(c.map, shards, c.dtype, options);
  const std::string said = got.ok() ? "accepted" : std::string(kind_name(got.error().kind));
  const std::string wanted = expected.ok() ? "accepted" : std::string(kind_name(expected.error().kind));
  if (said == wanted) return std::nullopt;
  return make_finding(
      JudgeId::retyped_shards, fmt::format("{}:{}-vs-{}:{}", dtype_name(other), said, wanted, case_label(c)),
      fmt::format("rebuild from shards of {} for {} data: strict {}, the reference model {}", dtype_name(other),
                  dtype_name(c.dtype), got.ok() ? "accepts" : got.error().to_string(),
                  expected.ok() ? "accepts" : expected.error().to_string()),
      c);
}

// Contract section 3: the verdict, and the kind, rank, piece and address of the error,
// do not depend on the order in which ranks and pieces are listed. `as_listed`: the
// verdict on `map` when the caller has it.
std::optional<Finding> order_independent(const Case& c, const Map& map, const PlantedBugs& bugs, std::string_view what,
                                         const Status* as_listed) {
  CheckOptions check_options;
  check_options.bugs = bugs;
  const Status listed = as_listed != nullptr ? *as_listed : check_map(map, check_options);
  Map reversed = map;
  std::reverse(reversed.ranks.begin(), reversed.ranks.end());
  for (auto& entry : reversed.ranks) std::reverse(entry.pieces.begin(), entry.pieces.end());
  const Status other = check_map(reversed, check_options);
  const std::string told = order_free_verdict(map, listed);
  const std::string told_reversed = order_free_verdict(reversed, other);
  if (told == told_reversed) return std::nullopt;
  return make_finding(
      JudgeId::check_order,
      fmt::format("{}:{}{}", listed.ok() ? "valid" : kind_name(listed.error().kind), case_label(c), what),
      fmt::format("the core checks' verdict depends on rank or piece order: {} as listed, {} "
                  "with ranks and pieces reversed",
                  told, told_reversed),
      c);
}

// The map with a twin of one piece that differs only in scale (doubled), at the same
// shard addresses; the shard grows (flat) so that the element count still holds and
// condition 4 reports the address written twice, by one of two pieces that only the
// scale tells apart in content order.
std::optional<Map> with_scaled_twin(const Map& map) {
  Map twinned = map;
  for (RankEntry& entry : twinned.ranks) {
    if (!entry.shard_shape || entry.pieces.empty()) continue;
    Piece twin = entry.pieces.front();
    twin.scale *= 2.0;
    if (!append_growing_shard(entry, std::move(twin), false)) return std::nullopt;
    return twinned;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Finding> check_reference_agreement(const Case& c, const PlantedBugs& bugs) {
  std::optional<Status> as_listed;
  if (auto finding = agree_with_reference(c, c.map, bugs, "", &as_listed)) return finding;
  if (!as_listed) return std::nullopt;  // too large for the reference model
  if (auto finding = order_independent(c, c.map, bugs, "", &*as_listed)) return finding;
  // A rank listed twice is refused whatever else the map holds (a decoder of the object
  // form never makes one, so no map text carries it): one case in eight also lists its
  // lowest rank id again, at the end.
  if (!c.map.ranks.empty() && (case_hash(c) >> 40 & 7) == 0) {
    Map twice = c.map;
    const auto lowest = std::min_element(c.map.ranks.begin(), c.map.ranks.end(),
                                         [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; });
    twice.ranks.push_back(*lowest);
    if (auto finding = agree_with_reference(c, twice, bugs, "+rank-twice", nullptr)) return finding;
  }
  // One rank writing a block twice, to shard addresses of its own (a regrouping that
  // copies a piece). A single holder's block breaks condition 6 (twice); a replica's
  // keeps the map valid, and each rank's digest share must still count the block once.
  // No single corruption of the catalogue makes either: the copy needs room in the shard.
  if ((case_hash(c) >> 48 & 7) == 0) {
    const bool replica = (case_hash(c) >> 51 & 1) != 0;
    if (auto doubled = with_piece_twice(c.map, replica)) {
      if (auto finding =
              agree_with_reference(c, *doubled, bugs, replica ? "+replica-twice" : "+piece-twice", nullptr)) {
        return finding;
      }
      if (replica) {
        if (auto finding = agree_on_digest_shares(c, *doubled, "+replica-twice")) return finding;
      }
    }
  }
  // Two pieces that only their scale tells apart: which one an error names must not
  // depend on their order either.
  if ((case_hash(c) >> 52 & 7) == 0) {
    if (auto twinned = with_scaled_twin(c.map)) {
      if (auto finding = order_independent(c, *twinned, bugs, "+scaled-twin", nullptr)) return finding;
    }
  }
  // Shards of another element type of the same width are refused (shape) whatever their
  // bits (no case file can carry one): one case in eight also offers rebuild such shards,
  // and strict's verdict and kind must be the reference's.
  if ((case_hash(c) >> 44 & 7) == 0 && conversion_is_memory_safe(bugs)) {
    if (auto finding = agree_on_retyped_shards(c, bugs)) return finding;
  }
  return std::nullopt;
}

std::optional<Finding> check_constructor_roundtrip(const Case& c) {
  const Map& layout = c.truth_map();
  if (Status refused = check_map(layout); !refused.ok()) {
    return make_finding(JudgeId::constructor_roundtrip,
                        fmt::format("refused:{}:{}", kind_name(refused.error().kind), constructor_label(c)),
                        "a constructor map is refused: " + refused.error().to_string(), c);
  }
  auto numel = checked_numel(layout.logical_shape);
  if (!numel) return make_finding(JudgeId::constructor_roundtrip, "numel", "the constructor map's numel overflows", c);
  Buffer full = marker_buffer(c.dtype, *numel);
  if (c.full && static_cast<Index>(c.full->size()) == *numel) {
    for (Index i = 0; i < *numel; ++i) full.set_bits(i, (*c.full)[static_cast<std::size_t>(i)]);
  }
  ConvertOptions options;
  auto shards = extract_all(layout, full, options);
  if (!shards) {
    return make_finding(JudgeId::constructor_roundtrip,
                        fmt::format("extract:{}:{}", kind_name(shards.error().kind), constructor_label(c)),
                        "extracting a constructor map is refused: " + shards.error().to_string(), c);
  }
  // What a correct round trip gives is the reference model's: F itself for exact scales,
  // F as rounded by a scale that is not a power of two (contract section 1.2), and a
  // different_data refusal where replicas scaled differently no longer agree.
  auto truth_shards = oracles::reference_extract_all(layout, full);
  if (!truth_shards || !(shards.value() == truth_shards.value())) {
    return make_finding(JudgeId::constructor_roundtrip, "extract-differs:" + constructor_label(c),
                        "extract of a constructor map differs from the reference model's", c);
  }
  auto expected = oracles::reference_rebuild(layout, truth_shards.value(), c.dtype);
  auto rebuilt = rebuild(layout, shards.value(), c.dtype, options);
  if (!rebuilt) {
    if (!expected && expected.error().kind == rebuilt.error().kind) return std::nullopt;
    return make_finding(JudgeId::constructor_roundtrip,
                        fmt::format("rebuild:{}:{}", kind_name(rebuilt.error().kind), constructor_label(c)),
                        "rebuilding a constructor map is refused: " + rebuilt.error().to_string(), c);
  }
  if (!expected || !(rebuilt.value() == expected.value())) {
    return make_finding(JudgeId::constructor_roundtrip, "not-exact:" + constructor_label(c),
                        "a constructor map does not round-trip bit-exact", c);
  }
  return std::nullopt;
}

Map permute_order(const Map& map, gen::ChoiceSource& choices) {
  Map out = map;
  choices.shuffle(out.ranks);
  for (auto& entry : out.ranks) choices.shuffle(entry.pieces);
  return out;
}

namespace {

// What must not depend on order: the verdict, the refusal's kind/rank/address, and
// every output buffer. (Error::piece is the index as written and may move.)
std::string order_fingerprint(const oracles::CaseOutcome& outcome) {
  std::string out(outcome_name(outcome.verdict));
  if (outcome.error) {
    out += fmt::format(" {} r{} a{}", kind_name(outcome.error->kind), outcome.error->rank.value_or(-1),
                       outcome.error->address.value_or(-1));
  }
  for (const auto& op : outcome.ops) {
    out += fmt::format(" | {} {}", op_name(op.op), outcome_name(op.verdict));
    if (op.output) {
      for (Index i = 0; i < op.output->numel(); ++i) out += fmt::format(" {:x}", op.output->bits(i));
    }
  }
  return out;
}

}  // namespace

std::optional<Finding> check_order_independence(const Case& c, gen::ChoiceSource& choices) {
  ConvertOptions options;
  options.scale_power = c.scale_power;
  const auto original = oracles::run_case(c, options);
  Case permuted = c;
  permuted.map = permute_order(c.map, choices);
  const auto shuffled = oracles::run_case(permuted, options);
  if (original.ok() != shuffled.ok()) {
    return make_finding(JudgeId::outcome_order, "usable", "the case is usable in one order only", permuted);
  }
  if (!original.ok()) return std::nullopt;
  const std::string a = order_fingerprint(original.value());
  const std::string b = order_fingerprint(shuffled.value());
  if (a != b) {
    return make_finding(JudgeId::outcome_order,
                        fmt::format("{}:{}", outcome_name(original.value().verdict), case_label(c)),
                        fmt::format("the outcome depends on rank or piece order: '{}' vs '{}'",
                                    original.value().message, shuffled.value().message),
                        permuted);
  }
  return std::nullopt;
}

std::optional<Finding> check_json_roundtrip(const Case& c) {
  for (const Map* map : {&c.map, c.truth ? &*c.truth : nullptr}) {
    if (map == nullptr) continue;
    // Through text (what a case file and a checkpoint hold), and through a Json value
    // (what the Python module and the protocol hand over).
    const std::string encoded = encode_map_text(*map, RankOrder::as_given);
    auto decoded = parse_map(encoded);
    if (!decoded) {
      return make_finding(JudgeId::json_roundtrip, "decode:" + corruption_label(c),
                          "an encoded map does not decode: " + decoded.error().to_string(), c);
    }
    if (!(decoded.value() == *map)) {
      return make_finding(JudgeId::json_roundtrip, "differs:" + corruption_label(c),
                          "decode(encode(map)) differs from the map: " + encoded, c);
    }
    auto from_value = decode_map(encode_map(*map, RankOrder::as_given));
    if (!from_value) {
      return make_finding(JudgeId::json_roundtrip, "decode-value:" + corruption_label(c),
                          "a map encoded as a Json value does not decode: " + from_value.error().to_string(), c);
    }
    if (!(from_value.value() == *map)) {
      return make_finding(JudgeId::json_roundtrip, "differs-value:" + corruption_label(c),
                          "decode_map(encode_map(map)) differs from the map: " + encoded, c);
    }
  }
  return std::nullopt;
}

std::optional<Finding> check_verdict_order(const Case& c, const PlantedBugs& bugs) {
  CheckOptions check_options;
  check_options.bugs = bugs;
  const Status verdict = check_map(c.map, check_options);
  if (!verdict.ok() && verdict.error().message.empty()) {
    return make_finding(JudgeId::refusal_unexplained, kind_name(verdict.error().kind),
                        "a refusal without a message: " + verdict.error().to_string(), c);
  }
  return order_independent(c, c.map, bugs, "", &verdict);
}

namespace {

// What a reading answered, spelled out in full: each map's canonical text, or the error
// with every field it carries.
std::string reading(const Result<Map>& map) {
  if (map) return "map " + encode_map_text(map.value(), RankOrder::as_given);
  const Error& e = map.error();
  return fmt::format("error {} rank={} piece={} address={} path={} | {}", kind_name(e.kind), e.rank.value_or(-1),
                     e.piece.value_or(-1), e.address.value_or(-1), e.path, e.to_string());
}

std::string reading(const Result<std::vector<NamedMap>>& document) {
  if (!document) return reading(Result<Map>(document.error()));
  std::string out = "document";
  for (const NamedMap& named : document.value()) out += "\n" + named.name + ": " + reading(named.map);
  return out;
}

}  // namespace

std::optional<Finding> check_text_readings(std::string_view text, const Result<std::vector<NamedMap>>* document,
                                           bool as_map) {
  auto json = parse_json(text);
  std::optional<Result<std::vector<NamedMap>>> parsed;
  if (document == nullptr) document = &parsed.emplace(parse_document(text));
  const auto through_json = json ? decode_document(json.value()) : Result<std::vector<NamedMap>>(json.error());
  std::string direct = reading(*document);
  std::string via_json = reading(through_json);
  std::string_view what = "parse_document and decode_document(parse_json)";
  if (direct == via_json && as_map) {
    direct = reading(parse_map(text, "$.m"));
    via_json = reading(json ? decode_map(json.value(), "$.m") : Result<Map>(json.error()));
    what = "parse_map and decode_map(parse_json)";
  }
  if (direct == via_json) return std::nullopt;
  Case c;
  c.name = "json-text";
  c.constructor = "json";
  c.map_text = std::string(text);
  return make_finding(
      JudgeId::json_readings, "",
      fmt::format("{} answer differently: '{}' vs '{}'", what, direct.substr(0, 300), via_json.substr(0, 300)),
      std::move(c));
}

std::span<const PlantedScenario> planted_scenarios() {
  static const std::vector<PlantedScenario> scenarios = [] {
    std::vector<PlantedScenario> s;
    // Every layout check that keeps memory safe, and the writer record behind them: the
    // truth oracle alone must then see silently wrong tensors.
    PlantedScenario blind{
        "skip_all_layout_checks_and_writer_record", "every in_blind switch of planted_bugs.def", {}, true};
#define SHARDCHECK_PLANTED_BUG(name, disables, alone, in, conversion)                                           \
  if (Alone::alone != Alone::masked) {                                                                          \
    s.push_back(PlantedScenario{                                                                                \
        #name, disables, {}, Alone::alone != Alone::any_finding, Alone::alone == Alone::truth_oracle_digests}); \
    s.back().bugs.name = true;                                                                                  \
  }                                                                                                             \
  if (Blind::in == Blind::in_blind) blind.bugs.name = true;
#include "shardcheck/planted_bugs.def"
#undef SHARDCHECK_PLANTED_BUG
    s.push_back(blind);
    return s;
  }();
  return scenarios;
}

}  // namespace shardcheck::props
