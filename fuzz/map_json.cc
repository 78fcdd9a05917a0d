// Fuzz target map_json: untrusted bytes through the JSON codec and the map checks.
//
// Properties: reading the text straight into maps answers as reading it into a Json
// value first does, errors word for word (props::check_text_readings, which the JSON
// tests ask of their corpus too); for every map a document decodes to: re-encoding
// (through a Json value and through text) decodes to the same map
// (props::check_json_roundtrip); the check verdict does not depend on rank or piece
// order and a refusal carries a message (props::check_verdict_order); the fast checks
// agree with the reference model (props::check_reference_agreement) on maps of at most
// 4,096 elements and 256 pieces (larger ones skip it and stay out of the corpus). Each
// broken property is a finding. The target only drives: every property is the one the
// campaign and the tests ask.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "json_mutator.h"
#include "report.h"
#include "shardcheck/json.h"
#include "shardcheck/properties.h"

namespace {

using namespace shardcheck;

constexpr std::string_view kTarget = SHARDCHECK_FUZZ_TARGET_NAME;

Case case_of(const Map& map) {
  Case c;
  c.name = "fuzz-map_json";
  c.constructor = "json";
  c.map = map;
  return c;
}

// One exec stays small: the reference model walks every element of F and of each
// shard, so a map beyond these bounds is judged by the codec and the fast checks alone,
// and kept out of the corpus (libFuzzer's -1), which stays with maps the reference sees.
constexpr Index kReferenceElements = Index{1} << 12;
constexpr std::size_t kReferencePieces = 256;

bool reference_sized(const Map& map) {
  auto within = [](const Extents& shape) {
    const auto n = checked_numel(shape);
    return n && *n <= kReferenceElements;
  };
  if (!within(map.logical_shape)) return false;
  std::size_t pieces = 0;
  for (const RankEntry& entry : map.ranks) {
    pieces += entry.pieces.size();
    if (entry.shard_shape && !within(*entry.shard_shape)) return false;
  }
  return pieces <= kReferencePieces;
}

// Whether the reference model judged the map.
bool check_one(const Map& map) {
  const Case c = case_of(map);
  if (auto finding = props::check_json_roundtrip(c)) fuzz::report_finding(*finding, kTarget);
  if (auto finding = props::check_verdict_order(c)) fuzz::report_finding(*finding, kTarget);
  if (!reference_sized(map)) return false;
  if (auto finding = props::check_reference_agreement(c)) fuzz::report_finding(*finding, kTarget);
  return true;
}

#ifdef SHARDCHECK_LIBFUZZER
// Recent inputs that decoded to a map: the mutator starts from one of them when the
// input it is handed is not JSON, so byte-level damage does not drift the corpus away
// from well-formed maps.
std::vector<std::string>& usable_pool() {
  static std::vector<std::string> pool;
  return pool;
}
std::size_t g_pool_next = 0;

void remember_usable(std::string_view text) {
  constexpr std::size_t kPoolSize = 64;
  auto& pool = usable_pool();
  if (pool.size() < kPoolSize) {
    pool.emplace_back(text);
  } else {
    pool[g_pool_next++ % kPoolSize].assign(text);
  }
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::InputScope scope;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto document = parse_document(text);
  // The map reading (parse_map) runs the decoder the document reading runs, and comparing
  // it on every input cost a sixth of the execs (651 -> 541 exec/s): one input in eight,
  // chosen by its bytes, so that a finding reproduces.
  const bool as_map = std::hash<std::string_view>{}(text) % 8 == 0;
  if (auto finding = props::check_text_readings(text, &document, as_map)) fuzz::report_finding(*finding, kTarget);
  bool usable = false;
  if (document) {
    for (const NamedMap& named : document.value()) usable = usable || named.map.ok();
  }
  // Counted before the properties run, so a run that ends in a finding counts it.
  fuzz::count_input(usable);
  if (!usable) return 0;
#ifdef SHARDCHECK_LIBFUZZER
  remember_usable(text);
#endif
  bool judged = false;
  for (const NamedMap& named : document.value()) {
    if (named.map) judged = check_one(named.map.value()) || judged;
  }
  return judged ? 0 : -1;
}

#ifdef SHARDCHECK_LIBFUZZER
extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

// Mostly structural edits of a parsed document, so most inputs stay well-formed maps.
// An input that is not JSON is swapped, most of the time, for a recent well-formed
// one before the edit. One mutation in sixteen is libFuzzer's byte-level one, which
// keeps the tokenizer and the malformed-input paths covered.
extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  if (seed % 16 != 0) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto mutated = shardcheck::fuzz::mutate_json(text, seed);
    const auto& pool = usable_pool();
    if (!mutated && !pool.empty() && (seed >> 4) % 8 != 0) {
      mutated = shardcheck::fuzz::mutate_json(pool[(seed >> 7) % pool.size()], seed);
    }
    if (mutated && mutated->size() <= max_size) {
      std::copy(mutated->begin(), mutated->end(), data);
      return mutated->size();
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}
#endif
