// Whole generated Cases: a layout, usually corrupted, with an op and a scale power.
#pragma once

#include "shardcheck/case.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/gen/layout.h"

namespace shardcheck::gen {

struct CaseOptions {
  LayoutOptions layout;
  double corrupt_probability = 0.9;  // clamped to [0, 1]
  bool allow_scale_power = true;     // otherwise always p = 1; scaled layouts always get p = 1
};

// Case.map is the corrupted map and Case.truth the layout that wrote the shards. An
// uncorrupted case leaves truth empty (truth_map() is then the map itself, which saves
// a copy in the campaign's hot loop) and records corruption kind "none". Data fields
// (full, shards) are left empty: the oracle fills them with markers.
// Name: "gen-<constructor>-<corruption kind>".
Case generate_case(ChoiceSource& choices, const CaseOptions& options);

}  // namespace shardcheck::gen
