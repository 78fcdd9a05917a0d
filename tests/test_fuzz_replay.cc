// The fuzzing plumbing that the replay runs cannot see: the choice adapter keeps the
// ChoiceSource contract, and the structure-aware mutator keeps most inputs maps.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fdp_choices.h"
#include "json_mutator.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/json.h"

namespace {

using namespace shardcheck;

TEST(FdpChoices, ExhaustedInputAnswersLo) {
  fuzz::ByteProvider bytes(nullptr, 0);
  fuzz::FdpChoices choices(bytes);
  EXPECT_EQ(choices.int_in(-7, 40), -7);
  EXPECT_EQ(choices.int_in(3, 3), 3);
  EXPECT_EQ(choices.between(5, 1), 5);  // hi < lo: lo, without asking
}

TEST(FdpChoices, RangesAreClosed) {
  std::set<Index> seen;
  for (int b = 0; b < 256; ++b) {
    const std::uint8_t byte = static_cast<std::uint8_t>(b);
    fuzz::ByteProvider bytes(&byte, 1);
    fuzz::FdpChoices choices(bytes);
    const Index v = choices.int_in(-3, 4);
    ASSERT_GE(v, -3);
    ASSERT_LE(v, 4);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 8u);  // both ends reachable: the range is closed
}

TEST(FdpChoices, ConsumesFromTheEndAndThenRunsDry) {
  const std::uint8_t data[] = {9, 2};
  fuzz::ByteProvider bytes(data, sizeof data);
  fuzz::FdpChoices choices(bytes);
  EXPECT_EQ(choices.int_in(0, 9), 2);
  EXPECT_EQ(choices.int_in(0, 9), 9);
  EXPECT_EQ(choices.int_in(1, 9), 1);
}

TEST(FdpChoices, SameBytesSameCase) {
  std::vector<std::uint8_t> data;
  for (int i = 0; i < 64; ++i) data.push_back(static_cast<std::uint8_t>(i * 37 + 11));
  auto make = [&] {
    fuzz::ByteProvider bytes(data.data(), data.size());
    fuzz::FdpChoices choices(bytes);
    return gen::generate_case(choices, gen::CaseOptions{});
  };
  const Case a = make();
  const Case b = make();
  EXPECT_EQ(a, b);
  EXPECT_FALSE(a.map.ranks.empty());
}

std::vector<std::string> valid_seeds() {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(SHARDCHECK_SOURCE_DIR "/corpus/map_json")) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto json = parse_json(text);
    if (!json) continue;
    auto document = decode_document(json.value());
    if (document && !document.value().empty() && document.value().front().map) out.push_back(text);
  }
  return out;
}

bool decodes_to_a_map(const std::string& text) {
  auto json = parse_json(text);
  if (!json) return false;
  auto document = decode_document(json.value());
  if (!document) return false;
  for (const auto& named : document.value()) {
    if (named.map) return true;
  }
  return false;
}

TEST(JsonMutator, RefusesNonJsonAndIsDeterministic) {
  EXPECT_FALSE(fuzz::mutate_json("{\"logical_shape\": [4", 1).has_value());
  const std::string text = R"({"logical_shape":[4],"ranks":{}})";
  EXPECT_EQ(fuzz::mutate_json(text, 42), fuzz::mutate_json(text, 42));
}

// The goal of the structure-aware mutator: at least 90% of mutated inputs still
// decode to a map, and nearly all of them differ from their parent.
TEST(JsonMutator, MostMutantsAreMapsAndNew) {
  const std::vector<std::string> seeds = valid_seeds();
  ASSERT_GE(seeds.size(), 5u);
  int total = 0, maps = 0, changed = 0;
  for (const std::string& seed : seeds) {
    std::string current = seed;
    for (std::uint64_t s = 1; s <= 300; ++s) {
      auto mutated = fuzz::mutate_json(current, s * 7919 + seed.size());
      ASSERT_TRUE(mutated.has_value());
      ++total;
      if (*mutated != current) ++changed;
      if (decodes_to_a_map(*mutated)) {
        ++maps;
        // Walk like a fuzzer: keep mutating the last well-formed input.
        current = *mutated;
      }
    }
  }
  const double map_share = static_cast<double>(maps) / total;
  const double changed_share = static_cast<double>(changed) / total;
  std::printf("mutants: %d, decoding to a map: %.1f%%, changed: %.1f%%\n", total, 100 * map_share,
              100 * changed_share);
  EXPECT_GE(map_share, 0.9);
  EXPECT_GE(changed_share, 0.9);
}

}  // namespace
