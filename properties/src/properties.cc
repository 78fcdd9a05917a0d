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

namespace {

std::string corruption_label(const Case& c) { return c.corruption ? c.corruption->kind : std::string("none"); }

std::string constructor_label(const Case& c) { return c.constructor.empty() ? std::string("unknown") : c.constructor; }

// "constructor/corruption": how most signatures end, so that a campaign tells the
// generators' places apart.
std::string case_label(const Case& c) { return constructor_label(c) + "/" + corruption_label(c); }

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

// A hash of the case (its name, which names the constructor and corruption, its data
// and its shape) that picks the cases a judgement is spread over, the same on every run.
std::uint64_t case_hash(const Case& c) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  auto mix = [&hash](std::uint64_t x) { hash = (hash ^ x) * 0x100000001b3ULL; };
  for (const unsigned char ch : c.name) mix(ch);
  if (c.full) {
    for (std::size_t i = 0; i < c.full->size() && i < 16; ++i) mix((*c.full)[i]);
  }
  for (const Index extent : c.map.logical_shape) mix(static_cast<std::uint64_t>(extent));
  return hash;
}

// Half the cases convert with the box proof and the wide row copies off: the run sweeps
// and the recorded slab copies are then judged on the same generated maps as the box
// proof and the row copies.
bool prove_on_boxes(const Case& c) { return (case_hash(c) >> 32 & 1) == 0; }

ConvertOptions convert_options(const Case& c, const EvalOptions& options) {
  ConvertOptions convert;
  convert.policy = options.policy;
  convert.scale_power = c.scale_power;
  convert.checks.bugs = options.bugs;
  convert.checks.box_proof = convert.wide_copies = prove_on_boxes(c);
  return convert;
}

}  // namespace

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

namespace {

// One instance per thread and target name: an exec target is a process, and a process
// answers one request at a time. A forked process (an isolated campaign's worker)
// inherits its parent thread's instances, whose processes are the parent's children,
// not its own: it lets go of them and starts its own.
struct ThreadTarget {
  std::unique_ptr<oracles::Target> target;
  std::string error;
  pid_t owner = -1;
};

ThreadTarget& thread_target(const EvalOptions& options) {
  thread_local std::map<std::string, ThreadTarget> targets;
  auto [it, fresh] = targets.try_emplace(options.target);
  if (!fresh && it->second.owner != getpid()) {
    if (it->second.target) it->second.target->detach();
    fresh = true;
  }
  if (fresh) {
    oracles::TargetOptions target_options;
    target_options.timeout_seconds = options.target_timeout_seconds;
    auto made = oracles::make_target(options.target, target_options);
    it->second.target = std::move(made.target);
    it->second.error = std::move(made.error);
    it->second.owner = getpid();
  }
  return it->second;
}

Result<oracles::CaseOutcome> run_on_target(const Case& c, const EvalOptions& options,
                                           std::optional<Finding>& start_failure) {
  if (options.target.empty()) {
    ReshardOptions reshard;
    reshard.bugs = options.planner_bugs;
    const auto policy = oracles::make_policy_target(convert_options(c, options), reshard);
    return oracles::run_case(c, *policy, options.oracle);
  }
  ThreadTarget& target = thread_target(options);
  if (!target.target) {
    oracles::CaseOutcome outcome;
    outcome.verdict = Outcome::target_fault;
    outcome.fault = oracles::TargetFault{oracles::FaultKind::crash, "start", target.error};
    outcome.message = target.error;
    outcome.target = options.target;
    start_failure = make_finding(JudgeId::target_crash, "start", target.error, c);
    return outcome;
  }
  return oracles::run_case(c, *target.target, options.oracle);
}

// What the judges of one case share: the case, the outcome of its conversion, and what
// is worth computing once (the reference model's verdict, the strict policy's outcome
// for another implementation, whether the map means what the truth map means).
class CaseJudgement {
 public:
  CaseJudgement(const Case& c, const EvalOptions& options) : c(c), options(options) {}

  const Case& c;
  const EvalOptions& options;
  Evaluation evaluation;
  // The conversion's outcome; none when the planted bugs make conversion memory-unsafe
  // (then only the map is judged).
  std::optional<Result<oracles::CaseOutcome>> converted;
  std::optional<Finding> start_failure;  // an implementation under test that did not start
  // Whether the map means what the truth map means, so that the case must convert
  // exactly (set by categorise, for a case that did not).
  bool must_convert_exactly = false;

  // The outcome, when the case converted and could be run.
  const oracles::CaseOutcome* result() const { return converted && converted->ok() ? &converted->value() : nullptr; }

  const oracles::ReferenceVerdict& reference_verdict() {
    if (!reference_) reference_ = oracles::reference_check(c.map);
    return *reference_;
  }

  // Fully valid = conditions 1-6 by the reference model and, for a rebuild, condition 7
  // (replica data) by the clean strict policy on the very shards the oracle converted. An
  // extract reads no shard data, so 1-6 decide it alone.
  bool fully_valid(const oracles::OpOutcome& op) {
    if (op.digest_ignored) return false;
    // Rebuild: condition 7 too; reshard: the target map too (the operation's valid_layout).
    if (!reference_verdict().valid() || !op.valid_layout) return false;
    if (options.target.empty()) return true;
    // Another implementation's wrong tensor on a valid map is its own bug unless the
    // strict policy, on the same case, is wrong the same way (a different layout).
    return strict_verdict(op.op) == Outcome::wrong;
  }

  // What the strict policy does with the same case and operation (for an implementation
  // under test); nullopt when the case cannot run under strict.
  std::optional<Outcome> strict_verdict(Op op) {
    if (!strict_) {
      ConvertOptions clean;
      clean.scale_power = c.scale_power;
      strict_ = oracles::run_case(c, clean, options.oracle);
    }
    if (!strict_->ok()) return std::nullopt;
    for (const auto& same : strict_->value().ops) {
      if (same.op == op) return same.verdict;
    }
    return std::nullopt;
  }

  // The implementation that acted, as a signature names it: "legacy", "deepspeed",
  // "exec" (a command line is no name), or "strict".
  std::string implementation() const {
    if (options.target.empty()) return std::string(policy_name(options.policy));
    if (options.target.rfind("exec:", 0) == 0) return "exec";
    return options.target;
  }

 private:
  std::optional<oracles::ReferenceVerdict> reference_;
  std::optional<Result<oracles::CaseOutcome>> strict_;
};

// The campaign table's view of the case: its category, its refusal's kind, and each
// operation's category. Judges no finding.
void categorise(CaseJudgement& judged) {
  Evaluation& evaluation = judged.evaluation;
  const Case& c = judged.c;
  if (!judged.converted) {
    const bool valid = check_map(c.map, CheckOptions{judged.options.bugs, {}}).ok();
    evaluation.category = valid ? Outcome::exact : Outcome::refused;
    return;
  }
  if (!judged.converted->ok()) {
    evaluation.category = Outcome::refused;
    evaluation.refusal = judged.converted->error().kind;
    return;
  }
  const oracles::CaseOutcome& result = *judged.result();
  for (const auto& op : result.ops) {
    Outcome category = op.verdict;
    if (op.verdict == Outcome::wrong && judged.fully_valid(op)) category = Outcome::wrong_valid_layout;
    evaluation.ops.push_back({op.op, category, op.fallback.has_value()});
  }
  evaluation.category = result.verdict;
  if (result.verdict == Outcome::refused && result.error) evaluation.refusal = result.error->kind;
  // Only another implementation's refusal (an exec target's) has an error type of its own.
  if (result.verdict == Outcome::refused && result.refusal) evaluation.refusal_type = result.refusal->type;
  if (result.verdict == Outcome::wrong || result.verdict == Outcome::wrong_valid_layout) {
    const bool silently_wrong = std::any_of(evaluation.ops.begin(), evaluation.ops.end(),
                                            [](const auto& op) { return op.category == Outcome::wrong; });
    evaluation.category = silently_wrong ? Outcome::wrong : Outcome::wrong_valid_layout;
  }
  judged.must_convert_exactly = judged.options.oracle == oracles::OracleKind::truth && !result.no_correct_rebuild &&
                                result.verdict != Outcome::exact &&
                                equivalent_to_truth(c, judged.reference_verdict().valid());
  if (!judged.must_convert_exactly) return;
  // A map that means what the truth map means has no valid-but-different: every tensor
  // it gives other than F is wrong.
  for (std::size_t i = 0; i < result.ops.size(); ++i) {
    const Outcome verdict = result.ops[i].verdict;
    if (verdict == Outcome::exact || verdict == Outcome::target_fault || verdict == Outcome::refused) continue;
    evaluation.ops[i].category = Outcome::wrong;
    evaluation.category = Outcome::wrong;
  }
}

// The judges of a case, each one question of findings.def. A judge that needs the
// conversion's outcome asks nothing of a case that has none.
using CaseJudge = std::optional<Finding> (*)(CaseJudgement&);

// target-crash / target-timeout / target-garbage: crash, hang and garbage are findings
// whatever else was found, never a pass.
std::optional<Finding> judge_target_fault(CaseJudgement& judged) {
  if (judged.start_failure) return judged.start_failure;
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->verdict != Outcome::target_fault) return std::nullopt;
  const oracles::OpOutcome* shown = nullptr;
  for (const auto& op : result->ops) {
    if (op.fault && shown == nullptr) shown = &op;
  }
  const oracles::TargetFault& fault = *result->fault;
  JudgeId judge = JudgeId::target_crash;
  switch (fault.kind) {
    case oracles::FaultKind::crash:
      judge = JudgeId::target_crash;
      break;
    case oracles::FaultKind::timeout:
      judge = JudgeId::target_timeout;
      break;
    case oracles::FaultKind::garbage:
      judge = JudgeId::target_garbage;
      break;
  }
  return make_finding(judge,
                      fmt::format("{}:{}:{}", shown ? op_name(shown->op) : "start", fault.reason, case_label(judged.c)),
                      result->message, judged.c);
}

// Property 3 on the case's map and the maps derived from it.
std::optional<Finding> judge_reference_agreement(CaseJudgement& judged) {
  if (!judged.options.compare_reference) return std::nullopt;
  return check_reference_agreement(judged.c, judged.options.bugs);
}

// Property 6: the codec is judged on every map too.
std::optional<Finding> judge_json_roundtrip(CaseJudgement& judged) {
  if (!judged.options.compare_reference) return std::nullopt;
  return check_json_roundtrip(judged.c);
}

// unusable-case: the generators must only make cases that can be run.
std::optional<Finding> judge_unusable_case(CaseJudgement& judged) {
  if (!judged.converted || judged.converted->ok()) return std::nullopt;
  return make_finding(JudgeId::unusable_case, constructor_label(judged.c),
                      "the generated case cannot be run: " + judged.converted->error().to_string(), judged.c);
}

// false-refusal / valid-map-wrong: a map equivalent to the truth map must convert exactly.
std::optional<Finding> judge_equivalent_map(CaseJudgement& judged) {
  if (!judged.must_convert_exactly) return std::nullopt;
  for (const oracles::OpOutcome& op : judged.result()->ops) {
    // A target that crashed or hung said nothing about the map: that is its own finding.
    if (op.verdict == Outcome::exact || op.verdict == Outcome::target_fault) continue;
    // A target that says it cannot express the case (an `unsupported` refusal) has not
    // refused the map: it is tallied in its own row, never a false refusal.
    if (op.verdict == Outcome::refused && op.refusal && op.refusal->type == oracles::kUnsupportedType) continue;
    const bool refused = op.verdict == Outcome::refused;
    return make_finding(refused ? JudgeId::false_refusal : JudgeId::valid_map_wrong,
                        fmt::format("{}:{}", op_label(op.op, op.fallback.has_value()), case_label(judged.c)),
                        fmt::format("a map equivalent to the truth map must convert exactly: {}", op.message),
                        judged.c);
  }
  return std::nullopt;
}

// silently-wrong, or valid-but-different (a finding only with strict_layout): the first
// wrong operation, a silently wrong one first.
std::optional<Finding> judge_wrong_tensor(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || (result->verdict != Outcome::wrong && result->verdict != Outcome::wrong_valid_layout)) {
    return std::nullopt;
  }
  const oracles::OpOutcome* silently_wrong = nullptr;
  const oracles::OpOutcome* different = nullptr;
  for (std::size_t i = 0; i < result->ops.size(); ++i) {
    const oracles::OpOutcome& op = result->ops[i];
    if (op.verdict != Outcome::wrong) continue;
    const bool valid = judged.evaluation.ops[i].category == Outcome::wrong_valid_layout;
    const oracles::OpOutcome*& first = valid ? different : silently_wrong;
    if (!first) first = &op;
  }
  const oracles::OpOutcome* shown = silently_wrong ? silently_wrong : different;
  if (shown == nullptr || (!silently_wrong && !judged.options.strict_layout)) return std::nullopt;
  // An implementation's wrong tensor from a valid map that strict converts exactly: the
  // contract's outcome is that tensor, not a refusal.
  if (silently_wrong && !judged.options.target.empty() && judged.reference_verdict().valid() && shown->valid_layout &&
      judged.strict_verdict(shown->op) == Outcome::exact) {
    return make_finding(JudgeId::target_wrong,
                        fmt::format("{}:{}:{}", judged.implementation(), op_label(shown->op, shown->fallback.has_value()),
                                    case_label(judged.c)),
                        result->message, judged.c);
  }
  return make_finding(
      silently_wrong ? JudgeId::silently_wrong : JudgeId::valid_but_different,
      fmt::format("{}{}:{}", op_label(shown->op, shown->fallback.has_value()),
                  shown->digest_ignored ? "-ignoring-digest" : "", case_label(judged.c)),
      result->message, judged.c);
}

// refusal-misreported: a refusal must report what is there, the values a condition-7
// error names.
std::optional<Finding> judge_refusal_report(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr) return std::nullopt;
  for (const auto& op : result->ops) {
    if (op.misreported.empty()) continue;
    return make_finding(
        JudgeId::refusal_misreported,
        fmt::format("{}:{}:{}", op_name(op.op), op.error ? kind_name(op.error->kind) : "unknown", case_label(judged.c)),
        op.misreported, judged.c);
  }
  return std::nullopt;
}

// digest-shares: each rank's share of digest(F), on a case that verifies digests.
std::optional<Finding> judge_digest_shares(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->digest_shares_wrong.empty()) return std::nullopt;
  return make_finding(JudgeId::digest_shares, case_label(judged.c), result->digest_shares_wrong, judged.c);
}

// strict-accepts: strict promises a refusal for every map that breaks conditions 1-6 or
// section 1.2, whatever the data: a tensor returned for one is a bug even when it
// happens to be the right one (a scale on integers moved bit for bit, say).
std::optional<Finding> judge_strict_accepts(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->policy != Policy::strict || !judged.options.target.empty() || judged.c.map_text) {
    return std::nullopt;
  }
  const oracles::OpOutcome* accepted = nullptr;
  std::optional<Error> refusal;
  const auto exact = std::find_if(result->ops.begin(), result->ops.end(),
                                  [](const oracles::OpOutcome& op) { return op.verdict == Outcome::exact; });
  if (exact != result->ops.end()) {
    const oracles::ReferenceVerdict& verdict = judged.reference_verdict();
    if (!verdict.refused_only_by_stride_rule && !verdict.too_large) refusal = verdict.error;
    if (verdict.valid()) {
      const Case& c = judged.c;
      if (Status scale = oracles::reference_scale_refusal(c.map, c.dtype, c.scale_power); !scale.ok()) {
        refusal = scale.error();
      }
    }
    // Resharding reads the target map as well: its refusal is owed too.
    if (!refusal && exact->op == Op::reshard && judged.c.target_map) {
      const oracles::ReferenceVerdict target = oracles::reference_check(*judged.c.target_map);
      if (!target.refused_only_by_stride_rule && !target.too_large) refusal = target.error;
      if (target.valid()) {
        Status scale = oracles::reference_scale_refusal(*judged.c.target_map, judged.c.dtype, judged.c.scale_power);
        if (scale.ok()) scale = oracles::reference_reshard_scale_refusal(judged.c.map, *judged.c.target_map);
        if (!scale.ok()) refusal = scale.error();
      }
    }
    if (refusal) accepted = &*exact;
  }
  // An element the scale overflows or flushes (contract 1.2): a refusal owed on the data
  // at hand, which no check of the map sees.
  for (const auto& op : result->ops) {
    if (accepted == nullptr && op.owed_refusal && (op.verdict == Outcome::exact || op.verdict == Outcome::wrong)) {
      accepted = &op;
      refusal = op.owed_refusal;
    }
  }
  if (accepted == nullptr) return std::nullopt;
  return make_finding(JudgeId::strict_accepts,
                      fmt::format("{}:{}:{}", op_name(accepted->op), kind_name(refusal->kind), case_label(judged.c)),
                      fmt::format("strict conversion returned a tensor for a map the reference model refuses: {}",
                                  refusal->to_string()),
                      judged.c);
}

// accepts-invalid: an implementation under test (DeepSpeed, an exec target) returned the
// right tensor through a map the contract refuses (contract 9: reported apart
// from the data verdict, which is exact; a wrong tensor is silently-wrong instead).
std::optional<Finding> judge_accepts_invalid(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || !result->accepted_invalid || result->verdict != Outcome::exact) return std::nullopt;
  // The legacy model accepts invalid maps by design (it models DeepSpeed before the fix,
  // which checked counts alone): what a legacy campaign is for is its wrong tensors.
  if (judged.options.target.empty()) return std::nullopt;
  const oracles::ReferenceVerdict& verdict = judged.reference_verdict();
  std::optional<ErrorKind> kind = verdict.kind;
  if (Status undecoded = undecoded_map_error(judged.c); !undecoded.ok()) kind = ErrorKind::format;
  if (!kind) {
    const Case& c = judged.c;
    Status scale = oracles::reference_scale_refusal(c.map, c.dtype, c.scale_power);
    kind = scale.ok() ? ErrorKind::different_data : scale.error().kind;
  }
  const auto accepted = std::find_if(result->ops.begin(), result->ops.end(),
                                     [](const oracles::OpOutcome& op) { return op.verdict == Outcome::exact; });
  return make_finding(JudgeId::accepts_invalid,
                      fmt::format("{}:{}:{}:{}", judged.implementation(),
                                  op_label(accepted->op, accepted->fallback.has_value()), kind_name(*kind),
                                  case_label(judged.c)),
                      fmt::format("{} returned the right tensor through a map the contract refuses ({})",
                                  judged.implementation(), kind_name(*kind)),
                      judged.c);
}

// harness:expected-not-f: with power-of-two truth scales the truth oracle's expected
// tensor must be F but where scaling wrote below the smallest normal (contract 8).
std::optional<Finding> judge_expected_tensor(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || result->expected_vs_full.harness_defect.empty()) return std::nullopt;
  return make_finding(JudgeId::expected_not_full, case_label(judged.c), result->expected_vs_full.harness_defect,
                      judged.c);
}

// expectation: a case that states what strict must do (a damaged replica in the supplied
// shards, a map text to refuse) is judged by that statement too.
std::optional<Finding> judge_case_expectation(CaseJudgement& judged) {
  const oracles::CaseOutcome* result = judged.result();
  if (result == nullptr || judged.options.policy != Policy::strict ||
      judged.options.oracle != oracles::OracleKind::truth || result->matches_expectation) {
    return std::nullopt;
  }
  return make_finding(JudgeId::expectation, fmt::format("{}:{}", outcome_name(result->verdict), case_label(judged.c)),
                      result->expectation_message + ": " + result->message, judged.c);
}

// The JSON path, in the grammar of Error::path ("$.ranks.1.pieces[0].source"), of the
// value a JSON pointer ("/ranks/1/pieces/0/source") names in `text`; empty when the
// pointer leaves the document or a key would need quoting (generated maps have none).
// Written apart from the decoder's own path building, which it judges.
std::optional<std::string> json_path_of(std::string_view text, std::string_view pointer) {
  const Json document = Json::parse(text, nullptr, false);  // a repeated key: the last one
  if (document.is_discarded()) return std::nullopt;
  const Json* at = &document;
  std::string path = "$";
  while (!pointer.empty() && pointer.front() == '/') {
    pointer.remove_prefix(1);
    const std::string token(pointer.substr(0, pointer.find('/')));
    pointer.remove_prefix(token.size());
    if (at->is_array()) {
      std::size_t index = 0;
      const auto [end, bad] = std::from_chars(token.data(), token.data() + token.size(), index);
      if (bad != std::errc() || end != token.data() + token.size() || index >= at->size()) return std::nullopt;
      path += fmt::format("[{}]", index);
      at = &(*at)[index];
      continue;
    }
    const bool plain = !token.empty() && std::all_of(token.begin(), token.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
    if (!plain || !at->is_object() || !at->contains(token)) return std::nullopt;
    path += "." + token;
    at = &(*at)[token];
  }
  return path;
}

// json-text-misread: a neutral edit of the text must read as the map it means, and a
// repeated key is refused at the key (a text that does not decode is otherwise judged by
// its expected refusal).
std::optional<Finding> judge_map_text(CaseJudgement& judged) {
  const Case& c = judged.c;
  if (judged.result() == nullptr || !c.map_text) return std::nullopt;
  auto read = decode_map_text(*c.map_text);
  if (!read && c.corruption && c.corruption->kind == "text_duplicate_key") {
    constexpr std::string_view kTextField = "map_text";
    const std::string_view field = c.corruption->field;
    if (!field.starts_with(kTextField)) return std::nullopt;
    const auto expected = json_path_of(*c.map_text, field.substr(kTextField.size()));
    if (!expected || read.error().path == *expected) return std::nullopt;
    return make_finding(JudgeId::map_text_misread, case_label(c),
                        fmt::format("the repeated key {} is refused at another place: {}", *expected,
                                    read.error().to_string()),
                        c);
  }
  if (!read || read.value() == c.map) return std::nullopt;
  return make_finding(JudgeId::map_text_misread, case_label(c),
                      "the map text decodes to another map than the one it means", c);
}

// The backend differential (cryptofuzz's executor): the CPU backend and the named one on
// the same case; one backend pair per evaluating thread, made on first use.
std::optional<Finding> judge_backends(CaseJudgement& judged) {
  const std::string& name = judged.options.backend;
  if (name.empty() || judged.c.map_text) return std::nullopt;
  thread_local std::string made_for;
  thread_local std::vector<std::unique_ptr<Backend>> backends;
  if (made_for != name) {
    backends.clear();
    backends.push_back(make_cpu_backend());
    if (auto other = oracles::backend_named(name)) backends.push_back(std::move(other));
    made_for = name;
  }
  // A backend the campaign found present but this worker cannot make (a device runtime
  // that failed here) would compare nothing: say so rather than pass the case.
  if (backends.size() < 2) {
    return make_finding(JudgeId::backend_differs, name + "-vs-cpu:unavailable",
                        "backend " + name + " could not be made where this case ran", judged.c);
  }
  auto difference = oracles::compare_backends(judged.c, backends);
  if (!difference) return std::nullopt;
  // The signature is "backend:" + the executor's own "<name>-vs-cpu:<op>:<what>".
  std::string_view detail = difference->signature;
  detail.remove_prefix(std::min(detail.size(), std::string_view("backend:").size()));
  return make_finding(JudgeId::backend_differs, detail, difference->message, judged.c);
}

// In order of precedence: the first judge that finds something names the case's finding.
struct NamedJudge {
  const char* name;  // the part a profile of evaluate_case names (EvalOptions::part_starts)
  CaseJudge judge;
};

constexpr std::array<NamedJudge, 14> kCaseJudges = {{
    {"judge:target-fault", judge_target_fault},
    {"judge:expected-tensor", judge_expected_tensor},
    {"judge:reference-agreement", judge_reference_agreement},
    {"judge:json-roundtrip", judge_json_roundtrip},
    {"judge:unusable-case", judge_unusable_case},
    {"judge:equivalent-map", judge_equivalent_map},
    {"judge:wrong-tensor", judge_wrong_tensor},
    {"judge:refusal-report", judge_refusal_report},
    {"judge:digest-shares", judge_digest_shares},
    {"judge:backends", judge_backends},
    {"judge:strict-accepts", judge_strict_accepts},
    {"judge:accepts-invalid", judge_accepts_invalid},
    {"judge:case-expectation", judge_case_expectation},
    {"judge:map-text", judge_map_text},
}};

}  // namespace

Evaluation evaluate_case(const Case& c, const EvalOptions& options) {
  auto part = [&](const char* name) {
    if (options.part_starts) options.part_starts(name);
  };
  CaseJudgement judged(c, options);
  // Conversion with some checks disabled may address memory outside the buffers: then
  // only the map is judged.
  part("oracle");
  if (conversion_is_memory_safe(options.bugs)) judged.converted = run_on_target(c, options, judged.start_failure);
  categorise(judged);
  for (const NamedJudge& named : kCaseJudges) {
    part(named.name);
    if (auto finding = named.judge(judged)) {
      judged.evaluation.finding = std::move(finding);
      break;
    }
  }
  part("");
  return std::move(judged.evaluation);
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
