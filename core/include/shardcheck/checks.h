// The map checks of contract 3, conditions 1-6 (condition 7 needs data and is
// enforced by rebuild).
//
// Complete for every stride: where a metadata-only proof is exact (disjoint
// address intervals after coalescing axes) it is used; otherwise addresses are
// walked. Errors are reported in spec order: the first broken condition (1..6), and
// within it the lowest rank id, then the lowest piece (in a content-defined order, so
// the choice does not depend on piece order; `Error::piece` is still the index as
// written), then the lowest address.
#pragma once

#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck {

// Test-only switches that disable one strict check each ("planted bugs"), one member
// per row of planted_bugs.def. The harness must catch every one of them; production
// code never sets them.
struct PlantedBugs {
#define SHARDCHECK_PLANTED_BUG(name, ...) bool name = false;
#include "shardcheck/planted_bugs.def"
#undef SHARDCHECK_PLANTED_BUG
  friend bool operator==(const PlantedBugs&, const PlantedBugs&) = default;
};

// Limits that keep untrusted maps from causing huge work or allocation when the
// exact proof has to walk addresses.
struct CheckLimits {
  Index max_walked_addresses = Index{1} << 22;  // runs; ~100 MiB of scratch at most
};

struct CheckOptions {
  PlantedBugs bugs;
  CheckLimits limits;
  // Decide conditions 4-6 on boxes when every piece is one (no run per row). Same
  // verdicts either way; off only to compare the two proofs.
  bool box_proof = true;
  // Threads for reading the pieces of a map of 2^15 pieces or more: 0 for OpenMP's
  // default, 1 for none. The verdict and the error do not depend on it.
  int threads = 0;
};

// Conditions 1-6 on the whole map; ok() when the map is valid.
Status check_map(const Map& map, const CheckOptions& options = {});

// Only condition 1 (structure) and the overflow checks: what every later stage,
// including the legacy model, relies on to address buffers safely.
Status check_structure(const Map& map);

}  // namespace shardcheck
