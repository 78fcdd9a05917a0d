// Fuzz targets conversion, reshard and their canaries: the fuzzer's bytes drive the same
// generators as the properties (through FdpChoices), and the generated case goes
// through props::evaluate_case: the truth oracle, the reference model against the
// fast checks, and the backend differential (on a plan's execution, for reshard). Built
// once per row of fuzz/targets.txt that names this file:
//   SHARDCHECK_FUZZ_RESHARD: cases are pairs of maps over one shape through a transfer
//     plan (contract 11) instead of rebuild and extract.
//   SHARDCHECK_FUZZ_LEGACY: the pre-fix policy, under which the target must find silently
//     wrong conversions (its proof that it can fail).
//   SHARDCHECK_FUZZ_MERGE_UNEQUAL_STRIDES (with RESHARD): the planner merges rows whose
//     source distance changes (PlannerBugs), which the target must find likewise.
#include <cstddef>
#include <cstdint>

#include "fdp_choices.h"
#include "report.h"
#include "shardcheck/backend.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/properties.h"

namespace {

using namespace shardcheck;

#if defined(SHARDCHECK_FUZZ_LEGACY) && defined(SHARDCHECK_FUZZ_RESHARD)
#error "the legacy model has no planner: SHARDCHECK_FUZZ_LEGACY is a conversion canary only"
#endif
#if defined(SHARDCHECK_FUZZ_MERGE_UNEQUAL_STRIDES) && !defined(SHARDCHECK_FUZZ_RESHARD)
#error "SHARDCHECK_FUZZ_MERGE_UNEQUAL_STRIDES plants a planner bug, which only reshard cases reach"
#endif

#ifdef SHARDCHECK_FUZZ_RESHARD
constexpr bool kReshard = true;
#else
constexpr bool kReshard = false;
#endif
#ifdef SHARDCHECK_FUZZ_LEGACY
constexpr bool kLegacy = true;
#else
constexpr bool kLegacy = false;
#endif
#ifdef SHARDCHECK_FUZZ_MERGE_UNEQUAL_STRIDES
constexpr bool kPlannerBug = true;
#else
constexpr bool kPlannerBug = false;
#endif
// A canary is built to fail; the judges it skips are covered by the target it plants its
// bug in.
constexpr bool kCanary = kLegacy || kPlannerBug;

gen::CaseOptions case_options() {
  gen::CaseOptions options;
  // Small maps: every corruption in the catalogue shows on a few dozen elements, and
  // small cases keep the target fast and its findings readable.
  options.layout.max_elements = 96;
  options.layout.max_dims = 3;
  options.layout.max_extent = 12;
  options.layout.max_tp = 6;
  if (kReshard) options.op = Op::reshard;
  return options;
}

props::EvalOptions eval_options() {
  props::EvalOptions options;
  options.policy = kLegacy ? Policy::legacy : Policy::strict;
  options.planner_bugs.merge_unequal_strides = kPlannerBug;
  // The reference agreement does not depend on the policy or the planner; the strict
  // targets cover it.
  options.compare_reference = !kCanary;
  // The backend differential (docs/backends.md): the device code on OpenMP threads beside
  // the CPU backend, wherever this build has it: rebuild and extract here, a plan's
  // execution for reshard.
  if (!kCanary && device_omp_compiled()) options.backend = "device-omp";
  return options;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::InputScope scope;
  static const gen::CaseOptions options = case_options();
  static const props::EvalOptions eval = eval_options();
  fuzz::ByteProvider bytes(data, size);
  fuzz::FdpChoices choices(bytes);
  const Case c = gen::generate_case(choices, options);
  const props::Evaluation evaluation = props::evaluate_case(c, eval);
  fuzz::count_input(evaluation.category != Outcome::refused);
  if (evaluation.finding) fuzz::report_finding(*evaluation.finding, SHARDCHECK_FUZZ_TARGET_NAME, kLegacy);
  return 0;
}
