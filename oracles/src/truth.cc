#include "shardcheck/oracles/truth.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shardcheck/digest.h"
#include "shardcheck/listed.h"
#include "shardcheck/oracles/reference.h"
#include "truth_internal.h"

namespace shardcheck::oracles {

Buffer to_buffer(DType dtype, const std::vector<std::uint64_t>& values) {
  Buffer buffer(dtype, static_cast<Index>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    buffer.set_bits(static_cast<Index>(i), values[i]);
  }
  return buffer;
}

// A numel mismatch counts the missing or extra elements as differing, and points at
// the first element past the shorter buffer when the common part agrees.
std::optional<Difference> compare(const Buffer& expected, const Buffer& actual) {
  Index common = std::min(expected.numel(), actual.numel());
  Difference d;
  d.count = std::max(expected.numel(), actual.numel()) - common;
  d.element = common;
  bool found = false;
  d.nan_bits_only = expected.numel() == actual.numel();
  for (Index i = 0; i < common; ++i) {
    if (expected.bits(i) == actual.bits(i)) continue;
    if (!found) d.element = i;
    found = true;
    ++d.count;
    d.nan_bits_only = d.nan_bits_only && is_nan_bits(expected.dtype(), expected.bits(i)) &&
                      is_nan_bits(actual.dtype(), actual.bits(i));
  }
  if (d.count == 0) return std::nullopt;
  d.expected_bits = d.element < expected.numel() ? expected.bits(d.element) : 0;
  d.actual_bits = d.element < actual.numel() ? actual.bits(d.element) : 0;
  return d;
}

namespace {

std::string refused_message(const Error& error) { return "refused " + error.to_string(); }

void set_refused(OpOutcome& out, Error error) {
  out.verdict = Outcome::refused;
  out.message = refused_message(error);
  out.error = std::move(error);
}

void set_refused(OpOutcome& out, const TargetRefusal& refusal) {
  out.verdict = Outcome::refused;
  out.message = "refused " + refusal.to_string();
  if (refusal.error) {
    out.error = *refusal.error;
    return;
  }
  if (refusal.kind) out.error = fault::foreign_refusal(*refusal.kind, refusal.type, refusal.message);
  out.refusal = refusal;
}

void set_fault(OpOutcome& out, const TargetFault& fault) {
  out.verdict = Outcome::target_fault;
  out.message = fmt::format("FAULT: target {} ({}): {}", fault_name(fault.kind), fault.reason, fault.detail);
  out.fault = fault;
}

// What a fallback returned or refused is what its caller gets: judged the same, said apart.
// Called once the verdict's message is written.
void note_fallback(OpOutcome& out, const std::optional<Declined>& fallback) {
  if (!fallback) return;
  out.fallback = fallback;
  if (out.op == Op::reshard) {
    out.message += fmt::format(" (after its documented fallback: it declined to plan, {}: {})", fallback->type,
                               fallback->message);
  } else {
    out.message += fmt::format(" (after a fallback: it did not convert through the map, {}: {})", fallback->type,
                               fallback->message);
  }
}

// The tensor a target returned, with the fallback that made it if any (note_fallback once
// it is judged), or nullptr after recording its refusal or fault.
TensorAnswer* take_answer(OpOutcome& out, TargetResult<TensorAnswer>& answer) {
  if (auto* refusal = std::get_if<TargetRefusal>(&answer)) {
    set_refused(out, *refusal);
    note_fallback(out, refusal->fallback);
    return nullptr;
  }
  if (auto* fault = std::get_if<TargetFault>(&answer)) {
    set_fault(out, *fault);
    return nullptr;
  }
  return &std::get<TensorAnswer>(answer);
}

// The map under test for a target. A map shardcheck decodes goes as DeepSpeed writes it
// (encoded from the decoded map, rank and piece order as given), so that what every target
// reads is the format itself and not a spelling of it that only shardcheck's decoder
// accepts (ranks as a list, -0). A map it refuses goes as the case holds it (contract 9),
// its text or its JSON: an exec target reads it itself, a built-in policy refuses it.
TargetMap target_map(const Case& c) {
  TargetMap out;
  if (undecoded_source_map_error(c).ok()) {
    out.map = &c.map;
  } else if (c.map_text) {
    out.text = &*c.map_text;
  } else if (c.undecoded_map) {
    out.json = &*c.undecoded_map;
  }
  return out;
}

void set_compared(OpOutcome& out, const std::string& what, const Buffer& expected,
                  const Buffer& actual) {
  auto diff = compare(expected, actual);
  if (!diff) {
    out.verdict = Outcome::exact;
    out.message = "exact";
    return;
  }
  out.verdict = Outcome::wrong;
  out.difference = *diff;
  DType dtype = expected.dtype();
  if (expected.numel() != actual.numel()) {
    out.message = fmt::format("WRONG: {} returned {} elements where {} are expected", what,
                              actual.numel(), expected.numel());
    return;
  }
  out.message = fmt::format("WRONG: {} element {} expected {} got {}; {} of {} elements differ{}",
                            what, diff->element, format_element(dtype, diff->expected_bits),
                            format_element(dtype, diff->actual_bits), diff->count, expected.numel(),
                            diff->nan_bits_only ? ", all of them NaNs whose bits changed (contract 1.2 keeps a "
                                                  "NaN's payload, sign and signalling bit)"
                                                : "");
}


// Contract 10 from the outside: a rebuild asked to verify a digest may return only a
// tensor with that digest, a reshard only target shards that hold F with that digest.
// Why this answer breaks it (`answered` says what was returned, `actual` is its digest),
// or nothing. The record is the map's, in a reshard the source map's.
std::optional<std::string> digest_not_enforced(const Case& c, std::string_view answered, std::uint64_t actual) {
  if (!c.digest && !c.digest_state) return std::nullopt;
  const std::string_view recorder = c.target_map ? "the source map" : "the map";
  if (c.digest_state) {
    auto it = c.map.content_digests.find(*c.digest_state);
    if (it == c.map.content_digests.end()) {
      return fmt::format("{} although {} records no content digest for state \"{}\" as asked", answered, recorder,
                         *c.digest_state);
    }
    if (it->second != actual) {
      return fmt::format("{} with content digest {} although {} records {} for state \"{}\"", answered,
                         format_digest(actual), recorder, format_digest(it->second), *c.digest_state);
    }
  }
  if (c.digest && *c.digest != actual) {
    return fmt::format("{} with content digest {} although the expected digest is {}", answered,
                       format_digest(actual), format_digest(*c.digest));
  }
  return std::nullopt;
}

// An answer that ignored the digest it was asked to verify is silently wrong, whatever
// its bits (contract 10: exactly the answers a digest check refuses).
void mark_digest_ignored(OpOutcome& out, const std::string& why) {
  out.digest_ignored = true;
  constexpr std::string_view kWrong = "WRONG: ";
  const bool was_wrong = out.verdict == Outcome::wrong && out.message.starts_with(kWrong);
  out.message = was_wrong ? fmt::format("{}{}; {}", kWrong, why, out.message.substr(kWrong.size()))
                          : fmt::format("{}{}", kWrong, why);
  out.verdict = Outcome::wrong;
}

// A condition-7 refusal names two values of one element of F: the copy it read and the
// one written before. Both must be copies the shards really hold, unscaled as section 1.2
// says (the values a user compares when deciding which replica is damaged). Why not, or
// empty; only refusals in the core's own words are read.
std::string misreported_values(const Case& c, const Inputs& in, const Error& error) {
  constexpr std::string_view kHolds = "this replica holds ";
  if (error.kind != ErrorKind::different_data || error.side != Side::full || !error.address ||
      !error.sentence.starts_with(kHolds)) {
    return {};
  }
  const std::vector<std::uint64_t> copies =
      reference_copies(c.map, in.shards, c.dtype, c.scale_power, *error.address);
  if (copies.size() < 2) return {};
  auto names_a_copy = [&](std::string_view before, std::string_view after) {
    for (const std::uint64_t bits : copies) {
      if (error.sentence.find(fmt::format("{}{}{}", before, format_element(c.dtype, bits), after)) !=
          std::string::npos) {
        return true;
      }
    }
    return false;
  };
  if (names_a_copy(kHolds, " at shard address") && names_a_copy(" wrote ", " here")) return {};
  std::vector<std::string> shown;
  for (const std::uint64_t bits : copies) shown.push_back(format_element(c.dtype, bits));
  return fmt::format("the refusal reports values that are not the copies of element {} of F (unscaled: {}): {}",
                     *error.address, fmt::join(shown, ", "), error.sentence);
}

OpOutcome run_rebuild(const Case& c, const Inputs& in, Target& target) {
  OpOutcome out;
  out.op = Op::rebuild;
  auto answer = target.rebuild(target_map(c), in.shards, c.dtype, c.scale_power,
                               DigestRequest{c.digest, c.digest_state});
  TensorAnswer* result = take_answer(out, answer);
  if (result == nullptr) {
    // Condition 7 binds the contract's implementations; the legacy model compares a replica
    // with whatever F holds, as DeepSpeed does, poison included, and says so.
    if (out.error && !target.is_legacy_model()) out.misreported = misreported_values(c, in, *out.error);
    return out;
  }
  out.output = std::move(result->tensor);
  if (has_scale(c.map)) {
    // Contract 1.2 refuses elements a scale loses, which no check of the map can see.
    auto reference = reference_rebuild(c.map, in.shards, c.dtype, c.scale_power);
    if (!reference && reference.error().kind == ErrorKind::scale) out.owed_refusal = reference.error();
  }
  if (!in.expected) {
    out.verdict = Outcome::wrong;
    out.message = "WRONG: rebuild returned a tensor where no correct tensor exists: " +
                  (in.no_truth ? in.no_truth->to_string() : std::string("no ground truth"));
  } else {
    set_compared(out, "rebuild", *in.expected, *out.output);
  }
  if (auto why = digest_not_enforced(c, "rebuild accepted a tensor", digest(*out.output))) {
    mark_digest_ignored(out, *why);
  }
  note_fallback(out, result->fallback);
  return out;
}

bool has_shard(const Map& map, Rank rank) {
  const RankEntry* entry = map.find_rank(rank);
  return entry != nullptr && entry->shard_shape.has_value();
}

// The verdict on the shard `got` an extract of `rank` returned.
void judge_shard(OpOutcome& out, const Case& c, const Inputs& in, Rank rank, Buffer* got) {
  const Buffer& full = *in.full;
  const Map& truth = c.truth_map();
  if (!has_shard(truth, rank) && got->numel() == 0) {
    // An empty shard for a rank the truth map does not list holds no data: nothing differs.
    out.message = "exact";
    out.output = std::move(*got);
    return;
  }
  if (!has_shard(truth, rank)) {
    out.verdict = Outcome::wrong;
    out.message = fmt::format("WRONG: extract returned a shard for rank {}, which the truth map "
                              "does not have",
                              rank);
    return;
  }
  auto want = in.truth_wrote_shards && in.shards.contains(rank)
                  ? Result<Buffer>(in.shards.at(rank))
                  : reference_extract(truth, full, rank, c.scale_power);
  if (!want) {
    out.verdict = Outcome::wrong;
    out.message = fmt::format("WRONG: extract rank {} returned a shard where no correct shard "
                              "exists: {}",
                              rank, want.error().to_string());
    return;
  }
  set_compared(out, fmt::format("extract rank {}", rank), want.value(), *got);
  if (has_scale(c.map)) {
    auto reference = reference_extract(c.map, full, rank, c.scale_power);
    if (!reference && reference.error().kind == ErrorKind::scale) out.owed_refusal = reference.error();
  }
  out.output = std::move(*got);
}

OpOutcome extract_one(const Case& c, const Inputs& in, Rank rank, Target& target) {
  OpOutcome out;
  out.op = Op::extract;
  out.rank = rank;
  auto answer = target.extract(target_map(c), *in.full, rank, c.scale_power);
  TensorAnswer* got = take_answer(out, answer);
  if (got == nullptr) return out;
  judge_shard(out, c, in, rank, &got->tensor);
  note_fallback(out, got->fallback);
  return out;
}

OpOutcome run_extract(const Case& c, const Inputs& in, Target& target) {
  std::set<Rank> ranks;
  for (const Map* map : {&c.map, &c.truth_map()}) {
    for (const auto& entry : map->ranks) {
      if (entry.shard_shape) ranks.insert(entry.rank);
    }
  }
  // Contract 9: an extract applies the whole-map checks even with no rank to extract, so
  // an invalid map with none still owes a refusal: ask for the lowest rank id it could
  // name. A valid one has nothing to extract.
  if (ranks.empty() && !reference_check(c.map).valid()) ranks.insert(0);
  std::optional<OpOutcome> refused;
  std::optional<OpOutcome> fault;
  for (Rank rank : ranks) {
    OpOutcome out = extract_one(c, in, rank, target);
    if (out.verdict == Outcome::wrong) return out;
    if (out.verdict == Outcome::target_fault && !fault) fault = std::move(out);
    if (out.verdict == Outcome::refused && !refused) refused = std::move(out);
  }
  if (fault) return *fault;
  if (refused) return *refused;
  OpOutcome out;
  out.op = Op::extract;
  out.message = "exact";
  return out;
}

// The target shards a reshard returned, rank by rank, against the reference model's
// extract of F through the true target map.
void judge_resharded(OpOutcome& out, const Case& c, const Inputs& in, const ShardSet& got) {
  // F as the shards hold it: the F they were written from, else a correct rebuild of them.
  const Buffer* f = in.truth_wrote_shards && in.full ? &*in.full : in.expected ? &*in.expected : nullptr;
  if (f == nullptr) {
    out.verdict = Outcome::wrong;
    out.message = "WRONG: reshard returned shards where no correct tensor exists: " +
                  (in.no_truth ? in.no_truth->to_string() : std::string("no ground truth"));
    return;
  }
  const Map& truth = c.target_truth_map();
  std::set<Rank> ranks;
  for (const auto& entry : truth.ranks) {
    if (entry.shard_shape) ranks.insert(entry.rank);
  }
  for (const auto& [rank, shard] : got) {
    if (!ranks.contains(rank) && shard.numel() > 0) {
      out.verdict = Outcome::wrong;
      out.rank = rank;
      out.message =
          fmt::format("WRONG: reshard returned a shard for rank {}, which the true target map does not have", rank);
      return;
    }
  }
  for (Rank rank : ranks) {
    out.rank = rank;
    auto want = reference_extract(truth, *f, rank, c.scale_power);
    if (!want) {
      out.verdict = Outcome::wrong;
      out.message = fmt::format("WRONG: reshard returned target rank {}'s shard where no correct shard exists: {}",
                                rank, want.error().to_string());
      return;
    }
    const auto it = got.find(rank);
    // An empty shard holds no data: a plan that leaves it out has lost nothing.
    if (it == got.end() && want.value().numel() == 0) continue;
    if (it == got.end()) {
      out.verdict = Outcome::wrong;
      out.message = fmt::format("WRONG: reshard returned no shard for target rank {}", rank);
      return;
    }
    set_compared(out, fmt::format("reshard target rank {}", rank), want.value(), it->second);
    if (out.verdict == Outcome::wrong) return;
  }
  out.rank.reset();
  out.message = "exact";
  out.verdict = Outcome::exact;
}

// Contract 11: the target map's shards from the shards the truth map wrote, through a plan
// made from the pair under test (either side may be corrupted), compared rank by rank with
// the reference model's extract of F through the true target map.
OpOutcome run_reshard(const Case& c, const Inputs& in, Target& target) {
  OpOutcome out;
  out.op = Op::reshard;
  TargetMap to;
  to.map = &*c.target_map;
  auto answer = target.reshard(target_map(c), to, in.shards, c.dtype, c.scale_power,
                               DigestRequest{c.digest, c.digest_state});
  if (auto* refusal = std::get_if<TargetRefusal>(&answer)) {
    set_refused(out, *refusal);
    note_fallback(out, refusal->fallback);
    return out;
  }
  if (auto* fault = std::get_if<TargetFault>(&answer)) {
    set_fault(out, *fault);
    return out;
  }
  const Resharded& resharded = std::get<Resharded>(answer);
  judge_resharded(out, c, in, resharded.shards);
  // F as the returned shards hold it through the target map the reshard was given (a
  // target map that does not fit them has no such F: its shards are judged by their bits).
  if (c.digest || c.digest_state) {
    if (auto shares = reference_digest_shares(*c.target_map, resharded.shards, c.dtype, c.scale_power)) {
      std::uint64_t actual = 0;
      for (const auto& [rank, share] : *shares) actual += share;
      if (auto why = digest_not_enforced(c, "reshard returned target shards", actual)) {
        mark_digest_ignored(out, *why);
      } else if (c.digest_state) {
        // Both maps describe one tensor: a target-side record the shards contradict is
        // one the reshard ignored as well.
        const auto it = c.target_map->content_digests.find(*c.digest_state);
        if (it != c.target_map->content_digests.end() && it->second != actual) {
          mark_digest_ignored(out, fmt::format("reshard returned target shards with content digest {} although the "
                                               "target map records {} for state \"{}\"",
                                               format_digest(actual), format_digest(it->second), *c.digest_state));
        }
      }
    }
  }
  note_fallback(out, resharded.fallback);
  return out;
}

// Every op the oracle runs refuses with `error`: no conversion can read the map under test.
CaseOutcome refused_outright(const Case& c, const Error& error, OracleKind oracle) {
  CaseOutcome outcome;
  // The same-map round trip runs one rebuild whatever the case lists.
  const std::vector<Op> ops = oracle == OracleKind::same_map ? std::vector<Op>{Op::rebuild} : c.ops.list();
  for (Op op : ops) {
    OpOutcome out;
    out.op = op;
    set_refused(out, error);
    outcome.ops.push_back(std::move(out));
  }
  outcome.valid_layout = false;
  return outcome;
}

// Contract 10: each rank's share of the digest, as the core computes it from the
// shards of a case that verifies digests, against the reference model's count. Why they
// differ, or empty.
std::string shares_disagree(const Case& c, const Inputs& in) {
  const auto expected = reference_digest_shares(c.map, in.shards, c.dtype, c.scale_power);
  const auto shares = digest_shares(c.map, in.shards, c.scale_power);
  if (!expected) {
    if (!shares) return {};
    return "digest_shares computed shares where a rebuild must refuse";
  }
  if (!shares) return "digest_shares refused a map and shards a rebuild accepts: " + shares.error().to_string();
  if (shares.value() == *expected) return {};
  for (const auto& [rank, share] : *expected) {
    const auto it = shares.value().find(rank);
    if (it == shares.value().end()) return fmt::format("digest_shares gives rank {} no share", rank);
    if (it->second != share) {
      return fmt::format("rank {}'s digest share is {} but its elements sum to {}", rank, format_digest(it->second),
                         format_digest(share));
    }
  }
  return "digest_shares gives a share to a rank without a shard";
}

Result<CaseOutcome> run_truth(const Case& c, Target& target) {
  auto inputs = prepare_truth(c);
  if (!inputs) return inputs.error();
  const Inputs& in = inputs.value();
  CaseOutcome outcome;
  for (Op op : c.ops.list()) {
    if (!target.supports(op)) {
      outcome.unsupported.push_back(op);
      continue;
    }
    switch (op) {
      case Op::rebuild:
        outcome.ops.push_back(run_rebuild(c, in, target));
        break;
      case Op::extract:
        outcome.ops.push_back(run_extract(c, in, target));
        break;
      case Op::reshard:
        outcome.ops.push_back(run_reshard(c, in, target));
        break;
    }
  }
  set_valid_layout(outcome, c, &in.shards);
  if (!in.expected) outcome.no_correct_rebuild = in.no_truth;
  outcome.expected_vs_full = in.vs_full;
  if (c.digest || c.digest_state) outcome.digest_shares_wrong = shares_disagree(c, in);
  return outcome;
}

// Every rank's shard through the target, as extract_all does for a policy.
Result<ShardSet> target_extract_all(const Case& c, const Buffer& full, Target& target, OpOutcome& op) {
  std::set<Rank> ranks;
  for (const auto& entry : c.map.ranks) {
    if (entry.shard_shape) ranks.insert(entry.rank);
  }
  ShardSet shards;
  for (Rank rank : ranks) {
    auto answer = target.extract(target_map(c), full, rank, c.scale_power);
    // The round trip judges the rebuild of these shards, not how they were cut: a
    // fallback's shard counts as any.
    TensorAnswer* shard = take_answer(op, answer);
    if (shard == nullptr) return make_error(ErrorKind::format, op.message);
    shards.emplace(rank, std::move(shard->tensor));
  }
  return shards;
}

Result<CaseOutcome> run_same_map(const Case& c, Target& target) {
  CaseOutcome outcome;
  OpOutcome op;
  op.op = Op::rebuild;
  auto full = make_full(c, c.map, "tested");
  if (!full) {
    // A shape no conversion could accept is the map's fault, not the case's.
    if (Status error = check_structure(c.map); !error.ok()) return refused_outright(c, error.error(), OracleKind::same_map);
    return full.error();
  }
  auto shards = target_extract_all(c, full.value(), target, op);
  Inputs in;
  if (shards) {
    in.shards = std::move(shards.value());
    in.expected = full.value();
    op = run_rebuild(c, in, target);
  }
  outcome.ops.push_back(std::move(op));
  set_valid_layout(outcome, c, shards ? &in.shards : nullptr);
  return outcome;
}

}  // namespace

Result<CaseOutcome> run_case(const Case& c, Target& target, OracleKind oracle) {
  Result<CaseOutcome> outcome = CaseOutcome{};
  bool undecoded = false;
  bool not_asked = false;
  if (Status error = undecoded_map_error(c); !error.ok()) {
    undecoded = true;
    // A built-in policy reads the map with shardcheck's decoder, which refuses it with
    // kind format (contract 9); an implementation that reads maps itself is asked too.
    std::optional<Case> data;
    // An undecoded target map is refused by shardcheck's decoder alone: the protocol hands
    // an implementation a reshard's target map decoded.
    if (target.reads_map_itself() && oracle == OracleKind::truth && !c.undecoded_target_map) {
      data = as_read_by_the_implementation(c);
    }
    outcome = data ? run_truth(*data, target) : Result<CaseOutcome>(refused_outright(c, error.error(), oracle));
    not_asked = !data && target.reads_map_itself();
  } else if (oracle == OracleKind::same_map) {
    outcome = run_same_map(c, target);
  } else {
    outcome = run_truth(c, target);
  }
  if (!outcome) return outcome;
  CaseOutcome& result = outcome.value();
  result.policy = target.is_legacy_model() ? Policy::legacy : Policy::strict;
  result.target = target.name();
  if (undecoded) {  // a map that does not decode is refused format
    result.valid_layout = false;
    for (OpOutcome& op : result.ops) op.valid_layout = false;
  }
  result.accepted_invalid = std::any_of(result.ops.begin(), result.ops.end(), [](const OpOutcome& op) {
    const bool returned = op.verdict == Outcome::exact || op.verdict == Outcome::wrong;  // a tensor came back
    return returned && !op.valid_layout;
  });
  summarize(result);
  if (not_asked) {
    // The verdict is shardcheck's decoder's, not the implementation's: say so.
    result.message = fmt::format("{} (shardcheck's decoder; {} was not asked, as no data can be written for a map "
                                 "that reads as no map)",
                                 result.message, target.name());
  }
  judge(c, target, result);
  return outcome;
}

Result<CaseOutcome> run_case(const Case& c, const ConvertOptions& options, OracleKind oracle) {
  auto target = make_policy_target(options);
  return run_case(c, *target, oracle);
}

std::string oracle_choices(std::string_view last_separator) {
  return listed(kOracleNames, [](const OracleName& row) { return row.name; }, last_separator);
}

}  // namespace shardcheck::oracles
