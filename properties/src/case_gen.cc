#include "shardcheck/gen/case_gen.h"

#include <algorithm>
#include <cmath>

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

}  // namespace

std::string digest_state_for(int scale_power) {
  switch (scale_power) {
    case 1: return "param";
    case -1: return "exp_avg";
    case -2: return "exp_avg_sq";
    default: return "p" + std::to_string(scale_power);
  }
}

Case generate_case(ChoiceSource& c, const CaseOptions& options) {
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
  if (corrupted) {
    Corrupted bad = corrupt(layout.map, c);
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
  Index op = c.between(0, 9);
  out.op = op < 8 ? Op::rebuild : op == 8 ? Op::extract : Op::both;
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
