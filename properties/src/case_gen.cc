#include "shardcheck/gen/case_gen.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "shardcheck/gen/corruption.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/gen/values.h"

namespace shardcheck::gen {

namespace {
bool has_scale(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0) return true;
    }
  }
  return false;
}

int draw_scale_power(ChoiceSource& c, const CaseOptions& options, const Map& truth) {
  // The truth map must be able to write the shards, and a scaled map converts only a
  // parameter (p = 1); a corruption may still add a scale, which the map under test
  // must then refuse.
  if (!options.allow_scale_power || has_scale(truth)) return 1;
  Index power = c.between(0, 19);
  return power < 17 ? 1 : power < 19 ? -1 : -2;
}

// A corruption of `map` that `fits` the case, drawn again where it does not (three tries,
// then nothing: the map stays as it is). The first draw that fits is the only draw.
template <class Fits>
std::optional<Corrupted> corrupt_fitting(const Map& map, ChoiceSource& c, Fits fits) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    Corrupted bad = corrupt(map, c);
    if (fits(bad)) return bad;
  }
  return std::nullopt;
}

// A corruption of one side of a reshard pair, one that edits neither the map's text nor
// the shard data: the target side has no text of its own in a case file, and a plan reads
// one replica, so a damaged copy is what compare_replicas is for, not a layout fault.
std::optional<Corrupted> corrupt_side(const Map& map, ChoiceSource& c) {
  return corrupt_fitting(map, c, [](const Corrupted& bad) { return !bad.map_text && !bad.replica_flip; });
}

// Resharding (contract 11): a pair of layouts over one shape, the source side, the target
// side, both or neither corrupted. Case.map/truth are the source side, target_map and
// target_truth the target side; the record is the source side's, or the target side's
// with its field prefixed "target_map." (both sides: the source side's, and the name says both).
Case generate_reshard_case(ChoiceSource& c, const CaseOptions& options) {
  LayoutPair pair = generate_layout_pair(c, options.layout);
  Case out;
  out.ops = {Op::reshard};
  out.dtype = pair.source.dtype;
  double p = std::isnan(options.corrupt_probability) ? 0.0 : options.corrupt_probability;
  auto per_mille = static_cast<Index>(std::clamp(p, 0.0, 1.0) * 1000.0);
  const bool corrupted = c.between(0, 999) < per_mille;
  const Index side = corrupted ? c.between(0, 2) : -1;  // 0 source, 1 target, 2 both
  if (options.record_digest) {
    // The producer digested F when it wrote the source shards, and a target map made for
    // the same tensor carries the same record; corruptions then edit either side's.
    Case producer;
    producer.map = pair.source.map;
    producer.dtype = pair.source.dtype;
    if (auto recorded = oracles::truth_digest(producer)) {
      const std::string state = digest_state_for(1);
      pair.source.map.content_digests[state] = recorded.value();
      pair.target.map.content_digests[state] = recorded.value();
      out.digest_state = state;
    }
  }
  out.map = pair.source.map;
  out.target_map = pair.target.map;
  out.corruption = CorruptionRecord{std::string(kNoCorruption), {}, {}, {}, {}, {}};
  if (side == 1 || side == 2) {
    if (auto bad = corrupt_side(pair.target.map, c)) {
      out.target_map = std::move(bad->map);
      out.target_truth = pair.target.map;
      bad->record.field = "target_map." + bad->record.field;
      out.corruption = std::move(bad->record);
    }
  }
  if (side == 0 || side == 2) {
    if (auto bad = corrupt_side(pair.source.map, c)) {
      out.map = std::move(bad->map);
      out.truth = pair.source.map;
      out.corruption = std::move(bad->record);
    }
  }
  const bool scaled = has_scale(pair.source.map) || has_scale(pair.target.map);
  if (options.adversarial_data && !scaled) draw_adversarial_data(c, out);
  // Markers a drawn scale would flush or overflow are data no producer could write.
  settle_data(out, options.record_digest ? std::optional<std::string>(digest_state_for(1)) : std::nullopt);
  out.constructor = pair.source.constructor + "->" + pair.target.constructor;
  out.name = "reshard-" + pair.source.constructor + "-" + pair.target.constructor + "-" +
             (side == 0   ? "source-"
              : side == 1 ? "target-"
              : side == 2 ? "both-"
                          : "") +
             out.corruption->kind;
  return out;
}

}  // namespace

std::string digest_state_for(int scale_power) {
  switch (scale_power) {
    case 1: return "param";
    case -1: return "exp_avg";
    case -2: return "exp_avg_sq";
    default: return fmt::format("p{}", scale_power);
  }
}

Case generate_case(ChoiceSource& c, const CaseOptions& options) {
  if (options.op == Op::reshard) return generate_reshard_case(c, options);
  Layout layout = generate_layout(c, options.layout);
  Case out;
  out.dtype = layout.dtype;
  // Per-mille resolution is plenty, and it keeps the question an integer range.
  double p = std::isnan(options.corrupt_probability) ? 0.0 : options.corrupt_probability;
  auto per_mille = static_cast<Index>(std::clamp(p, 0.0, 1.0) * 1000.0);
  // The lo answer corrupts: an exhausted fuzzer input still exercises a corruption.
  bool corrupted = c.between(0, 999) < per_mille;
  std::optional<int> power;
  std::optional<std::string> wanted_state;
  if (options.record_digest) {
    // The record names the state, so the power is drawn before the corruption here.
    power = draw_scale_power(c, options, layout.map);
    Case producer;
    producer.map = layout.map;
    producer.dtype = layout.dtype;
    wanted_state = digest_state_for(*power);
    if (auto recorded = oracles::truth_digest(producer)) {
      layout.map.content_digests[*wanted_state] = recorded.value();
      out.digest_state = wanted_state;
    }
  }
  std::optional<ReplicaFlip> flip;
  // A damaged replica shows to a rebuild alone (damage_replica asks for one): a campaign of
  // extracts alone takes another corruption (or, after three, none).
  std::optional<Corrupted> drawn;
  if (corrupted) {
    drawn = corrupt_fitting(layout.map, c, [&](const Corrupted& bad) {
      return !(options.op == Op::extract && bad.replica_flip);
    });
  }
  if (drawn) {
    Corrupted& bad = *drawn;
    out.map = std::move(bad.map);
    out.truth = std::move(layout.map);
    out.corruption = std::move(bad.record);
    flip = bad.replica_flip;
    if (bad.map_text) {
      out.map_text = std::move(bad.map_text);
      if (!bad.text_neutral) {
        out.expect = Outcome::refused;
        out.expect_error = ErrorKind::format;
      }
    }
  } else {
    out.map = std::move(layout.map);
    out.corruption = CorruptionRecord{std::string(kNoCorruption), {}, {}, {}, {}, {}};
  }
  if (options.op) {
    out.ops = OpList{*options.op};
  } else {
    const OpWeights& w = kOpWeights;
    const Index op = c.between(0, w.rebuild + w.extract + w.both - 1);
    out.ops = op < w.rebuild                ? OpList{Op::rebuild}
              : op < w.rebuild + w.extract ? OpList{Op::extract}
                                           : OpList{Op::rebuild, Op::extract};
  }
  out.scale_power = power ? *power : draw_scale_power(c, options, out.truth_map());
  // Drawn last, so that every earlier draw (and what a fuzzer input decodes to) stays
  // as it was; the low answer keeps the markers.
  if (options.adversarial_data) draw_adversarial_data(c, out);
  settle_data(out, wanted_state);
  if (flip) damage_replica(out, *flip);
  out.name.reserve(6 + layout.constructor.size() + out.corruption->kind.size());
  out.name.append("gen-").append(layout.constructor).append("-").append(out.corruption->kind);
  out.constructor = std::move(layout.constructor);
  return out;
}

}  // namespace shardcheck::gen
