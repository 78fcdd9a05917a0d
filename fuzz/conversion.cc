// Fuzz targets conversion and conversion_legacy: the fuzzer's bytes drive the same
// generators as the properties (through FdpChoices), and the generated case goes
// through props::evaluate_case: the truth oracle, the reference model against the
// fast checks, and (strict) the backend differential. Built twice; SHARDCHECK_FUZZ_LEGACY selects the pre-fix policy, under
// which the target must find silently wrong conversions (its proof that it can fail).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fdp_choices.h"
#include "report.h"
#include "shardcheck/backend.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/properties.h"

namespace {

using namespace shardcheck;

#ifdef SHARDCHECK_FUZZ_LEGACY
constexpr bool kLegacy = true;
constexpr std::string_view kTarget = "conversion_legacy";
#else
constexpr bool kLegacy = false;
constexpr std::string_view kTarget = "conversion";
#endif

gen::CaseOptions case_options() {
  gen::CaseOptions options;
  // Small maps: every corruption in the catalogue shows on a few dozen elements, and
  // small cases keep the target fast and its findings readable.
  options.layout.max_elements = 96;
  options.layout.max_dims = 3;
  options.layout.max_extent = 12;
  options.layout.max_tp = 6;
  return options;
}

props::EvalOptions eval_options() {
  props::EvalOptions options;
  options.policy = kLegacy ? Policy::legacy : Policy::strict;
  // The reference agreement does not depend on the policy; the strict target covers it.
  options.compare_reference = !kLegacy;
  // The backend differential (docs/backends.md): the device code on OpenMP threads beside
  // the CPU backend, wherever this build has it; the strict target covers it too.
  if (!kLegacy && device_omp_compiled()) options.backend = "device-omp";
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
  if (evaluation.finding) fuzz::report_finding(*evaluation.finding, kTarget, kLegacy);
  return 0;
}
