// One error voice (error.h): every refusal, whichever path made it (strict checks and
// conversion, legacy conversion, the reference model, the JSON and case decoders, the
// constructors), follows the one message grammar, and the same fault found at the
// same place by the fast checks and by the reference model reads the same.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "shardcheck/case.h"
#include "shardcheck/checks.h"
#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/reference.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

// The grammar of error.h as a regular expression over Error::to_string().
const std::regex& grammar() {
  static const std::regex re = [] {
    const std::string kind = "(count|bounds|itself|twice|uncovered|different_data|holders|scale|shape|digest|format)";
    const std::string number = R"(-?\d+)";
    const std::string list = R"(\(-?\d*(,-?\d+)*\))";
    const std::string notation = R"(P)" + list + R"( src\()" + number + "," + list + R"(\) dst\()" + number + "," +
                                 list + R"(\) loc\{(-?\d+(,-?\d+)*)?\}( scale [^ )]+)?)";
    const std::string piece = R"(piece \d+ \()" + notation + R"(\))";
    const std::string address = R"((F|shard) address \d+)";
    const std::string path = R"(\$([^ "]|"([^"\\]|\\.)*")*)";
    const std::string location =
        "(rank " + number + "( " + piece + ")?( " + address + ")?|" + address + "|" + path + ")";
    // Lower-case start; a ": " only inside double quotes (the trailing period is checked apart).
    const std::string sentence = R"([a-z]([^:"\n]|:(?! )|"([^"\\\n]|\\.)*")*)";
    return std::regex("^" + kind + ": (" + location + ": )?(" + sentence + ")$");
  }();
  return re;
}

bool follows_grammar(const std::string& text) { return std::regex_match(text, grammar()) && text.back() != '.'; }

// The message must follow the grammar, and its location must be exactly what the
// Error's fields say.
void expect_voice(const Error& error, const std::string& where) {
  const std::string text = error.to_string();
  EXPECT_TRUE(follows_grammar(text)) << where << ": " << text;
  EXPECT_FALSE(error.sentence.empty()) << where << ": " << text;
  std::string location;
  if (!error.path.empty()) {
    location = error.path;
  } else {
    std::vector<std::string> parts;
    if (error.rank) parts.push_back(fmt::format("rank {}", *error.rank));
    if (error.piece) parts.push_back(fmt::format("piece {}", *error.piece));
    if (error.address) {
      parts.push_back(fmt::format("{} address {}", error.side == Side::full ? "F" : "shard", *error.address));
    }
    for (const std::string& part : parts) {
      EXPECT_NE(error.message.find(part), std::string::npos) << where << ": " << text << " lacks '" << part << "'";
    }
    EXPECT_TRUE(!error.address || error.side != Side::none) << where << ": " << text;
    if (!parts.empty()) location = parts.front();
  }
  const std::string expected_tail = location.empty() ? error.sentence : ": " + error.sentence;
  EXPECT_EQ(error.message.rfind(location, 0), 0u) << where << ": " << text;
  ASSERT_GE(error.message.size(), expected_tail.size()) << where << ": " << text;
  EXPECT_EQ(error.message.substr(error.message.size() - expected_tail.size()), expected_tail) << where << ": " << text;
}

bool same_place(const Error& a, const Error& b) {
  return a.kind == b.kind && a.rank == b.rank && a.piece == b.piece && a.side == b.side && a.address == b.address &&
         a.path == b.path;
}

struct Tally {
  std::map<ErrorKind, int> kinds;
  int errors = 0;
  int agreements = 0;  // strict and reference refused at the same place

  void saw(const Error& error, const std::string& where) {
    ++errors;
    ++kinds[error.kind];
    expect_voice(error, where);
  }
  template <class T>
  void saw(const Result<T>& result, const std::string& where) {
    if (!result.ok()) saw(result.error(), where);
  }
  // The same fault at the same place reads the same from either path.
  void compare(const Error& fast, const Error& reference, const std::string& where) {
    if (!same_place(fast, reference)) return;
    ++agreements;
    EXPECT_EQ(fast.to_string(), reference.to_string()) << where;
  }
};

TEST(ErrorVoice, EveryRefusalOfACampaignFollowsTheGrammar) {
  gen::SeededChoices choices(20260601);
  gen::CaseOptions options;
  options.record_digest = true;  // rebuilds verify a content digest, so kind digest is seen too
  Tally tally;
  int data_cases = 0;
  for (int i = 0; i < 20000; ++i) {
    const Case c = gen::generate_case(choices, options);
    const std::string where = fmt::format("case {} {}", i, c.name);

    const Status fast = check_map(c.map);
    const oracles::ReferenceVerdict reference = oracles::reference_check(c.map);
    ASSERT_EQ(reference.kind.has_value(), reference.error.has_value()) << where;
    if (!fast.ok()) tally.saw(fast.error(), where + " check_map");
    if (reference.error) {
      tally.saw(*reference.error, where + " reference_check");
      EXPECT_EQ(reference.reason, reference.error->message) << where;
    }
    if (!fast.ok() && reference.error) tally.compare(fast.error(), *reference.error, where + " check");

    // Data the way the truth oracle makes it: the case's F (markers unless drawn or fitted
    // to the truth map's scales) through the map that wrote them.
    const Map& truth = c.truth_map();
    auto numel = checked_numel(truth.logical_shape);
    ASSERT_TRUE(numel.has_value()) << where;
    Buffer full = marker_buffer(c.dtype, *numel);
    if (c.full) {
      for (Index e = 0; e < *numel; ++e) full.set_bits(e, (*c.full)[static_cast<std::size_t>(e)]);
    }
    auto shards = extract_all(truth, full);
    ASSERT_TRUE(shards.ok()) << where << ": " << shards.error().to_string();
    ++data_cases;

    ConvertOptions strict;
    strict.scale_power = c.scale_power;
    strict.digest_state = c.digest_state;
    ConvertOptions legacy = strict;
    legacy.policy = Policy::legacy;
    const auto rebuilt = rebuild(c.map, shards.value(), c.dtype, strict);
    tally.saw(rebuilt, where + " strict rebuild");
    tally.saw(rebuild(c.map, shards.value(), c.dtype, legacy), where + " legacy rebuild");
    const auto naive = oracles::reference_rebuild(c.map, shards.value(), c.dtype, c.scale_power);
    tally.saw(naive, where + " reference rebuild");
    if (!rebuilt.ok() && !naive.ok()) tally.compare(rebuilt.error(), naive.error(), where + " rebuild");

    std::set<Rank> ranks;
    for (const Map* map : {&c.map, &truth}) {
      for (const RankEntry& entry : map->ranks) ranks.insert(entry.rank);
    }
    for (Rank rank : ranks) {
      const std::string at = fmt::format("{} extract rank {}", where, rank);
      tally.saw(extract(c.map, full, rank, strict), at + " strict");
      tally.saw(extract(c.map, full, rank, legacy), at + " legacy");
      // The reference model checks the whole map again for every rank: one is enough.
      if (rank == *ranks.begin()) {
        tally.saw(oracles::reference_extract(c.map, full, rank, c.scale_power), at + " reference");
      }
    }
    if (::testing::Test::HasFailure()) break;  // one broken case says enough
  }
  std::printf("%d refusals checked, %d at the same place from strict and reference\n", tally.errors, tally.agreements);
  EXPECT_EQ(data_cases, 20000);
  for (ErrorKind kind : kAllErrorKinds) {
    EXPECT_GT(tally.kinds[kind], 0) << "no refusal of kind " << kind_name(kind) << " was seen";
  }
  EXPECT_GT(tally.errors, 20000);
  // Enough agreements that "the same fault reads the same" was really tested.
  EXPECT_GT(tally.agreements, 5000);
}

// Decoding errors (maps, envelopes, case files) and constructor refusals speak the same
// grammar, with the JSON path as the location.
TEST(ErrorVoice, DecodersAndConstructorsFollowTheGrammar) {
  int seen = 0;
  auto decode = [&](const std::string& text, const std::string& where) {
    auto json = parse_json(text);
    if (!json.ok()) {
      expect_voice(json.error(), where);
      ++seen;
      return;
    }
    if (auto c = decode_case(json.value()); !c.ok() && json.value().contains("shardcheck_case")) {
      expect_voice(c.error(), where);
      ++seen;
    }
    auto doc = decode_document(json.value());
    if (!doc.ok()) {
      expect_voice(doc.error(), where);
      ++seen;
      return;
    }
    for (const NamedMap& named : doc.value()) {
      if (!named.map.ok()) {
        expect_voice(named.map.error(), where);
        ++seen;
      }
    }
  };
  for (const char* dir : {"corpus/map_json", "corpus/case_file", "corpus/regressions"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / dir)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      decode(text.str(), entry.path().string());
    }
  }
  for (const char* text : {
           "",
           "[1]",
           R"({"logical_shape": [4],, "ranks": {}})",
           R"({"logical_shape": [-4], "ranks": {}})",
           R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": [4]}}})",
           R"({"logical_shape": [4], "ranks": {" 1": {"pieces": []}}})",
           R"({"shardcheck_case": 1, "map": {"logical_shape": [1], "ranks": {}}, "dtype": "float8"})",
           R"({"shardcheck_case": 1, "map": {"logical_shape": [1], "ranks": {}}, "expect_error": "nope"})",
           R"({"shardcheck_case": 1, "map": {"logical_shape": [1], "ranks": {}}, "full": ["0xzz"]})",
       }) {
    decode(text, text);
  }
  for (const auto& refused :
       {replicated_map({2}, 0), contiguous_split_map({4, 6}, {8, -2}, 1), block_gather_map({2, 6}, {{0}, {1, 3}}, 2, 1),
        expert_placement_map({2, 3}, {{0}, {2}})}) {
    ASSERT_FALSE(refused.ok());
    expect_voice(refused.error(), "constructor");
    ++seen;
  }
  EXPECT_GT(seen, 20);
}

// The grammar test above must be able to fail: a few messages it refuses.
TEST(ErrorVoice, TheGrammarRefusesOtherVoices) {
  for (const char* text :
       {"count: Rank 1's pieces hold 3 elements.", "count: rank 1: the pieces hold 3 elements.",
        "count: rank 1: The pieces hold 3", "count: the pieces hold 3 (rank 1, piece 0).", "format: at $.x: expected",
        "twice: rank 0 piece 1: no notation here", "uncovered: address 3: no piece covers it", "bounds:rank 1: x"}) {
    EXPECT_FALSE(follows_grammar(text)) << text;
  }
  const Piece piece{{4}, {0, {1}}, {0, {1}}, {0}, 0.5};
  const Error located = fault::out_of_bounds(PieceAt{0, 1, &piece}, Side::full, 7, 4);
  EXPECT_EQ(located.to_string(),
            "bounds: rank 0 piece 1 (P(4) src(0,(1)) dst(0,(1)) loc{0} scale 0.5) F address 7: the source view "
            "reaches past the end of F, which has 4 elements");
  EXPECT_TRUE(follows_grammar(located.to_string()));
}

// error_kinds.def is the one list of kinds: every row parses back from its name, has a
// contract section and a meaning, and is a row of the tables of error kinds of the
// contract and the user guide (docs/guide/errors.md).
TEST(ErrorKinds, TheTableMatchesTheContract) {
  auto read = [](const std::string& name) {
    std::ifstream in(std::string(SHARDCHECK_SOURCE_DIR) + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string contract = read("docs/contract.md");
  const std::string readme = read("docs/guide/errors.md");
  ASSERT_FALSE(contract.empty() || readme.empty()) << "docs/contract.md or docs/guide/errors.md not found";
  std::set<std::string_view> names;
  for (ErrorKind kind : kAllErrorKinds) {
    const std::string_view name = kind_name(kind);
    EXPECT_TRUE(names.insert(name).second) << "two kinds named " << name;
    EXPECT_EQ(parse_kind(name), kind) << name;
    EXPECT_FALSE(kind_contract(kind).empty()) << name;
    EXPECT_FALSE(kind_meaning(kind).empty()) << name;
    EXPECT_NE(contract.find(fmt::format("| `{}` |", name)), std::string::npos)
        << "docs/contract.md's table of error kinds has no row for " << name;
    EXPECT_NE(readme.find(fmt::format("| `{}` |", name)), std::string::npos)
        << "docs/guide/errors.md's table of error kinds has no row for " << name;
  }
  EXPECT_FALSE(parse_kind("no_such_kind").has_value());
}

}  // namespace
}  // namespace shardcheck
