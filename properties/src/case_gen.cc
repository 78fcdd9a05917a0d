#include "shardcheck/gen/case_gen.h"

#include <algorithm>
#include <cmath>

#include "shardcheck/gen/corruption.h"

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
}  // namespace

Case generate_case(ChoiceSource& c, const CaseOptions& options) {
  Layout layout = generate_layout(c, options.layout);
  Case out;
  out.dtype = layout.dtype;
  // Per-mille resolution is plenty, and it keeps the question an integer range.
  double p = std::isnan(options.corrupt_probability) ? 0.0 : options.corrupt_probability;
  auto per_mille = static_cast<Index>(std::clamp(p, 0.0, 1.0) * 1000.0);
  // The lo answer corrupts: an exhausted fuzzer input still exercises a corruption.
  bool corrupted = c.between(0, 999) < per_mille;
  if (corrupted) {
    Corrupted bad = corrupt(layout.map, c);
    out.map = std::move(bad.map);
    out.truth = std::move(layout.map);
    out.corruption = std::move(bad.record);
  } else {
    out.map = std::move(layout.map);
    out.corruption = CorruptionRecord{std::string(kNoCorruption), {}, {}, {}, {}, {}};
  }
  Index op = c.between(0, 9);
  out.op = op < 8 ? Op::rebuild : op == 8 ? Op::extract : Op::both;
  // The truth map must be able to write the shards, and a scaled map converts only a
  // parameter (p = 1); a corruption may still add a scale, which the map under test
  // must then refuse.
  if (options.allow_scale_power && !has_scale(out.truth_map())) {
    Index power = c.between(0, 19);
    out.scale_power = power < 17 ? 1 : power < 19 ? -1 : -2;
  }
  out.name.reserve(6 + layout.constructor.size() + out.corruption->kind.size());
  out.name.append("gen-").append(layout.constructor).append("-").append(out.corruption->kind);
  out.constructor = std::move(layout.constructor);
  return out;
}

}  // namespace shardcheck::gen
