// The JSON codec (contract 2): decoding DeepSpeed's format, refusing what cannot
// be represented with a located `format` error, and keeping everything else so the
// core checks see it.
//
// Long file: one test binary per tests/test_*.cc; these tests share the map and text
// builders of the codec, and a split would add a binary and a link.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "shardcheck/campaign.h"
#include "shardcheck/constructors.h"
#include "shardcheck/json.h"
#include "shardcheck/properties.h"
#include "support/spec_maps.h"

namespace shardcheck {
namespace {

constexpr const char* kSpecExample = R"({"logical_shape": [4, 6],
 "ranks": {
   "0": {"shard_shape": [4, 4],
         "pieces": [{"shape": [4, 4], "source": [0, [6, 1]], "dest": [0, [4, 1]], "locations": [0]}]},
   "1": {"shard_shape": [4, 2],
         "pieces": [{"shape": [4, 2], "source": [4, [6, 1]], "dest": [0, [2, 1]], "locations": [1]}]}}})";

Map spec_example_map() {
  Map map;
  map.logical_shape = {4, 6};
  map.ranks.push_back(RankEntry{0, Extents{4, 4}, {build::P({4, 4}, 0, {6, 1}, 0, {4, 1}, {0})}});
  map.ranks.push_back(RankEntry{1, Extents{4, 2}, {build::P({4, 2}, 4, {6, 1}, 0, {2, 1}, {1})}});
  return map;
}

Json parse_ok(const std::string& text) {
  auto json = parse_json(text);
  EXPECT_TRUE(json.ok()) << json.error().to_string();
  return json.ok() ? json.value() : Json();
}

Map decode_ok(const std::string& text) {
  auto map = decode_map(parse_ok(text));
  EXPECT_TRUE(map.ok()) << map.error().to_string();
  return map.ok() ? map.value() : Map{};
}

// Text read straight into maps (parse_map, parse_document, the tape) must answer as the
// text read into a Json value and decoded from it does, errors word for word.
void expect_same_reading(const std::string& text) {
  if (auto finding = props::check_text_readings(text)) ADD_FAILURE() << finding->message << "\n" << text.substr(0, 400);
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The first error anywhere on the way from text to maps, or nullopt if all decode.
std::optional<Error> first_error(const std::string& text) {
  auto json = parse_json(text);
  if (!json) return json.error();
  auto doc = decode_document(json.value());
  if (!doc) return doc.error();
  for (const NamedMap& named : doc.value()) {
    if (!named.map) return named.map.error();
  }
  return std::nullopt;
}

TEST(JsonDecode, SpecExampleDecodesAndReencodesToTheSameValue) {
  const Json json = parse_ok(kSpecExample);
  auto map = decode_map(json);
  ASSERT_TRUE(map.ok()) << map.error().to_string();
  EXPECT_EQ(map.value(), spec_example_map());
  // ordered_json compares key order too, so this pins DeepSpeed's field order.
  EXPECT_EQ(encode_map(map.value()), json);
  EXPECT_EQ(encode_map_text(map.value()), json.dump());
  EXPECT_EQ(encode_map_text(map.value()).find('\n'), std::string::npos);
}

TEST(JsonDecode, ArrayFormRanksDecodeLikeStringKeys) {
  const Map from_keys = decode_ok(kSpecExample);
  const Map from_array = decode_ok(R"({"logical_shape": [4, 6], "ranks": [
    {"rank": 0, "shard_shape": [4, 4],
     "pieces": [{"shape": [4, 4], "source": [0, [6, 1]], "dest": [0, [4, 1]], "locations": [0]}]},
    {"rank": 1, "shard_shape": [4, 2],
     "pieces": [{"shape": [4, 2], "source": [4, [6, 1]], "dest": [0, [2, 1]], "locations": [1]}]}]})");
  EXPECT_EQ(from_array, from_keys);
}

TEST(JsonDecode, LeadingZeroKeyNamesTheSameRank) {
  const Map map = decode_ok(R"({"logical_shape": [0], "ranks": {"007": {"shard_shape": [0], "pieces": []}}})");
  ASSERT_EQ(map.ranks.size(), 1u);
  EXPECT_EQ(map.ranks[0].rank, 7);
}

TEST(JsonDecode, NonContiguousRanksAndEmptyShards) {
  const Map map = decode_ok(R"({"logical_shape": [2], "ranks": {
    "3": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [3, 9]}]},
    "9": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [3, 9]}]},
    "12": {"shard_shape": [0, 4], "pieces": []},
    "20": {"pieces": []}}})");
  ASSERT_EQ(map.ranks.size(), 4u);
  EXPECT_EQ(map.ranks[0].rank, 3);
  EXPECT_EQ(map.ranks[1].rank, 9);
  EXPECT_EQ(map.ranks[1].pieces[0].locations, (std::vector<Rank>{3, 9}));
  EXPECT_EQ(map.ranks[2].shard_shape, (Extents{0, 4}));
  EXPECT_TRUE(map.ranks[2].pieces.empty());
  EXPECT_EQ(map.ranks[3].shard_shape, std::nullopt);
  EXPECT_EQ(map.find_rank(9), &map.ranks[1]);
}

// Contract 2: every rank entry has `pieces`; only the shard shape of a rank
// without pieces may be left out.
TEST(JsonDecode, PiecesIsRequiredShardShapeOnlyWithoutPieces) {
  for (const char* text : {R"({"logical_shape": [4], "ranks": {"2": {"shard_shape": [4]}}})",
                           R"({"logical_shape": [0], "ranks": {"2": {}}})",
                           R"({"logical_shape": [4], "ranks": [{"rank": 2, "shard_shape": [0]}]})"}) {
    SCOPED_TRACE(text);
    auto map = decode_map(parse_ok(text));
    ASSERT_FALSE(map.ok()) << "a rank without a pieces key was read";
    EXPECT_EQ(map.error().kind, ErrorKind::format);
    EXPECT_EQ(map.error().rank, 2);
    EXPECT_TRUE(map.error().path == "$.ranks.2.pieces" || map.error().path == "$.ranks[0].pieces") << map.error().path;
    EXPECT_EQ(map.error().message.rfind(map.error().path + ": ", 0), 0u) << map.error().message;
    EXPECT_NE(map.error().sentence.find("\"pieces\""), std::string::npos) << map.error().message;
  }
  const Map empty = decode_ok(R"({"logical_shape": [0], "ranks": {"2": {"pieces": []}}})");
  ASSERT_EQ(empty.ranks.size(), 1u);
  EXPECT_EQ(empty.ranks[0].shard_shape, std::nullopt);
  EXPECT_TRUE(empty.ranks[0].pieces.empty());
}

TEST(JsonDecode, RankAndPieceOrderAreKeptAsWritten) {
  const Map map = decode_ok(R"({"logical_shape": [4], "ranks": {
    "9": {"shard_shape": [4], "pieces": [
      {"shape": [2], "source": [2, [1]], "dest": [2, [1]], "locations": [9]},
      {"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [9]}]},
    "3": {"shard_shape": [0], "pieces": []}}})");
  ASSERT_EQ(map.ranks.size(), 2u);
  EXPECT_EQ(map.ranks[0].rank, 9);
  EXPECT_EQ(map.ranks[1].rank, 3);
  EXPECT_EQ(map.ranks[0].pieces[0].source.offset, 2);
  EXPECT_EQ(map.ranks[0].pieces[1].source.offset, 0);

  const Json sorted = encode_map(map);
  const Json given = encode_map(map, RankOrder::as_given);
  EXPECT_EQ(sorted["ranks"].begin().key(), "3");
  EXPECT_EQ(given["ranks"].begin().key(), "9");
  EXPECT_EQ(decode_map(given).value(), map);
  // Pieces keep their order in both modes.
  EXPECT_EQ(sorted["ranks"]["9"]["pieces"][0]["source"][0], 2);
}

TEST(JsonDecode, UnknownKeysAreIgnored) {
  const Map map = decode_ok(R"({"logical_shape": [1], "producer": "x", "ranks": {"0": {"shard_shape": [1],
    "note": [1, 2], "pieces": [{"shape": [], "source": [0, []], "dest": [0, []], "locations": [0], "dtype": "f32"}]}}})");
  ASSERT_EQ(map.ranks.size(), 1u);
  EXPECT_TRUE(map.ranks[0].pieces[0].shape.empty());
}

TEST(JsonEnvelope, EachParameterDecodesIndependently) {
  auto doc = decode_document(parse_ok(R"({"version": 1, "params": {
    "h.0.attn.weight": {"logical_shape": [2], "ranks": {"0": {"shard_shape": [2],
      "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}},
    "h.0.mlp.weight": {"logical_shape": [2], "ranks": {"0": {"pieces": [{"shape": [2.5]}]}}}}})"));
  ASSERT_TRUE(doc.ok()) << doc.error().to_string();
  ASSERT_EQ(doc.value().size(), 2u);
  EXPECT_EQ(doc.value()[0].name, "h.0.attn.weight");
  ASSERT_TRUE(doc.value()[0].map.ok());
  EXPECT_EQ(doc.value()[0].map.value().logical_shape, (Extents{2}));
  EXPECT_EQ(doc.value()[1].name, "h.0.mlp.weight");
  ASSERT_FALSE(doc.value()[1].map.ok());
  const Error& error = doc.value()[1].map.error();
  EXPECT_EQ(error.kind, ErrorKind::format);
  EXPECT_EQ(error.path, R"($.params["h.0.mlp.weight"].ranks.0.pieces[0].shape[0])");
  EXPECT_EQ(error.rank, 0);
  EXPECT_EQ(error.piece, 0);
}

TEST(JsonEnvelope, SimpleParameterNamesUseDottedPaths) {
  auto doc = decode_document(parse_ok(R"({"version": 1, "params": {"wte": {"ranks": {}}}})"));
  ASSERT_TRUE(doc.ok());
  ASSERT_FALSE(doc.value()[0].map.ok());
  EXPECT_EQ(doc.value()[0].map.error().path, "$.params.wte.logical_shape");
}

TEST(JsonEnvelope, BareMapIsOneUnnamedEntry) {
  auto doc = decode_document(parse_ok(kSpecExample));
  ASSERT_TRUE(doc.ok());
  ASSERT_EQ(doc.value().size(), 1u);
  EXPECT_EQ(doc.value()[0].name, "");
  EXPECT_EQ(doc.value()[0].map.value(), spec_example_map());
}

TEST(JsonEnvelope, NewerOrUnknownVersionsAreRefused) {
  auto newer = decode_document(parse_ok(R"({"version": 2, "params": {}})"));
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.error().kind, ErrorKind::format);
  EXPECT_EQ(newer.error().path, "$.version");
  EXPECT_NE(newer.error().message.find("newer"), std::string::npos) << newer.error().message;

  for (const char* text : {R"({"version": 0, "params": {}})", R"({"version": "1", "params": {}})",
                           R"({"version": 1.0, "params": {}})", R"({"params": {}})"}) {
    auto doc = decode_document(parse_ok(text));
    ASSERT_FALSE(doc.ok()) << text;
    EXPECT_EQ(doc.error().path, "$.version") << text;
  }
  auto empty = decode_document(parse_ok(R"({"version": 1, "params": {}})"));
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty.value().empty());
}

TEST(JsonScale, OmittedAtOneKeptOtherwise) {
  Map map = spec_example_map();
  EXPECT_FALSE(encode_map(map)["ranks"]["0"]["pieces"][0].contains("scale"));
  for (double scale : {0.5, 2.0, 0.0, -1.0, 0.1, 1e-300, 1.0000000000000002}) {
    map.ranks[0].pieces[0].scale = scale;
    const Json json = encode_map(map);
    ASSERT_TRUE(json["ranks"]["0"]["pieces"][0].contains("scale")) << scale;
    auto back = decode_map(parse_ok(encode_map_text(map)));
    ASSERT_TRUE(back.ok()) << back.error().to_string();
    EXPECT_EQ(back.value().ranks[0].pieces[0].scale, scale);  // exact, not approximate
  }
  const Map integer_scale = decode_ok(R"({"logical_shape": [1], "ranks": {"0": {"shard_shape": [1],
    "pieces": [{"shape": [1], "source": [0, [1]], "dest": [0, [1]], "locations": [0], "scale": 4}]}}})");
  EXPECT_EQ(integer_scale.ranks[0].pieces[0].scale, 4.0);
}

struct Malformed {
  const char* name;
  std::string text;
  const char* path;  // exact expected path, or nullptr to require only a non-empty one
};

std::string nested(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// A valid piece with one field replaced, to aim at one location at a time.
std::string with_piece(const std::string& fields) {
  return R"({"logical_shape": [4], "ranks": {"1": {"shard_shape": [4], "pieces": [{)" + fields + "}]}}}";
}
const std::string kShape = R"("shape": [4])";
const std::string kSource = R"("source": [0, [1]])";
const std::string kDest = R"("dest": [0, [1]])";
const std::string kLoc = R"("locations": [1])";
std::string piece_without(const std::string& replaced, const std::string& by) {
  std::string out;
  for (const std::string* field : {&kShape, &kSource, &kDest, &kLoc}) {
    const std::string& text = (*field == replaced) ? by : *field;
    if (text.empty()) continue;
    if (!out.empty()) out += ", ";
    out += text;
  }
  return with_piece(out);
}

// Long function: a table, one malformed input and the path its error names per row.
std::vector<Malformed> malformed_inputs() {
  return {
      {"empty input", "", "$"},
      {"whitespace only", "  \n ", "$"},
      {"truncated", R"({"logical_shape": [4], "ranks": {"0": )", "$"},
      {"syntax error", R"({"logical_shape": [4],, "ranks": {}})", "$"},
      {"trailing garbage", R"({"logical_shape": [], "ranks": {}} x)", "$"},
      {"NaN token", R"({"logical_shape": [NaN], "ranks": {}})", "$"},
      {"Infinity token", R"({"logical_shape": [Infinity], "ranks": {}})", "$"},
      {"number overflowing a double", R"({"logical_shape": [1e400], "ranks": {}})", "$"},
      {"nesting depth 100000", nested(100000), "$"},
      {"unterminated string", R"({"logical_shape": [1], "ranks": {"0)", "$"},
      {"invalid utf-8", "{\"logical_shape\": [1], \"ranks\": {\"\xff\": {}}}", "$"},
      {"duplicate literal key", R"({"logical_shape": [1], "ranks": {"1": {}, "1": {}}})", "$.ranks.1"},
      {"duplicate key deep in arrays",
       R"({"logical_shape": [4], "ranks": [{"rank": 0, "pieces": []}, {"rank": 1, "pieces": [{"a": [1, 2], "a": 2}]}]})",
       "$.ranks[1].pieces[0].a"},
      {"top level array", "[1, 2]", "$"},
      {"top level number", "3", "$"},
      {"object that is neither map nor envelope", R"({"shape": [4]})", "$"},
      {"logical_shape missing with ranks", R"({"version": 1, "params": {"w": {"ranks": {}}}})",
       "$.params.w.logical_shape"},
      {"logical_shape not an array", R"({"logical_shape": 4, "ranks": {}})", "$.logical_shape"},
      {"logical_shape element a string", R"({"logical_shape": ["4"], "ranks": {}})", "$.logical_shape[0]"},
      {"logical_shape element true", R"({"logical_shape": [4, true], "ranks": {}})", "$.logical_shape[1]"},
      {"logical_shape element null", R"({"logical_shape": [null], "ranks": {}})", "$.logical_shape[0]"},
      {"float extent", R"({"logical_shape": [2.5], "ranks": {}})", "$.logical_shape[0]"},
      {"integral float extent", R"({"logical_shape": [4.0], "ranks": {}})", "$.logical_shape[0]"},
      {"1e30 extent", R"({"logical_shape": [1e30], "ranks": {}})", "$.logical_shape[0]"},
      {"2^63 extent", R"({"logical_shape": [9223372036854775808], "ranks": {}})", "$.logical_shape[0]"},
      {"2^64-1 extent", R"({"logical_shape": [18446744073709551615], "ranks": {}})", "$.logical_shape[0]"},
      {"ranks missing", R"({"logical_shape": [4]})", "$.ranks"},
      {"ranks a string", R"({"logical_shape": [4], "ranks": "0"})", "$.ranks"},
      {"rank key not a number", R"({"logical_shape": [4], "ranks": {"r0": {}}})", "$.ranks.r0"},
      {"rank key empty", R"({"logical_shape": [4], "ranks": {"": {}}})", R"($.ranks[""])"},
      {"rank key negative", R"({"logical_shape": [4], "ranks": {"-1": {}}})", "$.ranks.-1"},
      {"rank key with sign", R"({"logical_shape": [4], "ranks": {"+1": {}}})", R"($.ranks["+1"])"},
      {"rank key with space", R"({"logical_shape": [4], "ranks": {" 1": {}}})", R"($.ranks[" 1"])"},
      {"rank key over 64 bits", R"({"logical_shape": [4], "ranks": {"99999999999999999999": {}}})",
       "$.ranks.99999999999999999999"},
      {"duplicate rank 1 and 01", R"({"logical_shape": [4], "ranks": {"1": {"pieces": []}, "01": {"pieces": []}}})",
       "$.ranks.01"},
      {"rank entry not an object", R"({"logical_shape": [4], "ranks": {"0": [1]}})", "$.ranks.0"},
      {"array rank missing rank field", R"({"logical_shape": [4], "ranks": [{"shard_shape": [4]}]})",
       "$.ranks[0].rank"},
      {"array rank negative", R"({"logical_shape": [4], "ranks": [{"rank": -1}]})", "$.ranks[0].rank"},
      {"array rank a string", R"({"logical_shape": [4], "ranks": [{"rank": "0"}]})", "$.ranks[0].rank"},
      {"array rank duplicate",
       R"({"logical_shape": [4], "ranks": [{"rank": 2, "pieces": []}, {"rank": 2, "pieces": []}]})", "$.ranks[1]"},
      {"array rank element a number", R"({"logical_shape": [4], "ranks": [0]})", "$.ranks[0]"},
      {"shard_shape not an array", R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": {}}}})",
       "$.ranks.0.shard_shape"},
      {"shard_shape null", R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": null}}})", "$.ranks.0.shard_shape"},
      {"pieces an object", R"({"logical_shape": [4], "ranks": {"0": {"pieces": {}}}})", "$.ranks.0.pieces"},
      {"pieces missing", R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": [4]}}})", "$.ranks.0.pieces"},
      {"pieces missing on an empty rank", R"({"logical_shape": [0], "ranks": {"0": {}}})", "$.ranks.0.pieces"},
      {"pieces missing in array form", R"({"logical_shape": [4], "ranks": [{"rank": 3, "shard_shape": [4]}]})",
       "$.ranks[0].pieces"},
      {"piece not an object", R"({"logical_shape": [4], "ranks": {"0": {"pieces": [[4]]}}})", "$.ranks.0.pieces[0]"},
      {"shape missing", piece_without(kShape, ""), "$.ranks.1.pieces[0].shape"},
      {"source missing", piece_without(kSource, ""), "$.ranks.1.pieces[0].source"},
      {"dest missing", piece_without(kDest, ""), "$.ranks.1.pieces[0].dest"},
      {"locations missing", piece_without(kLoc, ""), "$.ranks.1.pieces[0].locations"},
      {"source with 3 elements", piece_without(kSource, R"("source": [0, [1], 0])"), "$.ranks.1.pieces[0].source"},
      {"source with 1 element", piece_without(kSource, R"("source": [0])"), "$.ranks.1.pieces[0].source"},
      {"source an object", piece_without(kSource, R"("source": {"offset": 0})"), "$.ranks.1.pieces[0].source"},
      {"source strides not an array", piece_without(kSource, R"("source": [0, 1])"), "$.ranks.1.pieces[0].source[1]"},
      {"source float stride", piece_without(kSource, R"("source": [0, [1, 2, 2.5]])"),
       "$.ranks.1.pieces[0].source[1][2]"},
      {"dest offset a string", piece_without(kDest, R"("dest": ["0", [1]])"), "$.ranks.1.pieces[0].dest[0]"},
      {"dest offset 1e30", piece_without(kDest, R"("dest": [1e30, [1]])"), "$.ranks.1.pieces[0].dest[0]"},
      {"locations a number", piece_without(kLoc, R"("locations": 1)"), "$.ranks.1.pieces[0].locations"},
      {"locations element bool", piece_without(kLoc, R"("locations": [false])"), "$.ranks.1.pieces[0].locations[0]"},
      {"shape element float", piece_without(kShape, R"("shape": [4e0])"), "$.ranks.1.pieces[0].shape[0]"},
      {"scale a string", with_piece(kShape + "," + kSource + "," + kDest + "," + kLoc + R"(, "scale": "2")"),
       "$.ranks.1.pieces[0].scale"},
      {"scale null", with_piece(kShape + "," + kSource + "," + kDest + "," + kLoc + R"(, "scale": null)"),
       "$.ranks.1.pieces[0].scale"},
      {"scale a bool", with_piece(kShape + "," + kSource + "," + kDest + "," + kLoc + R"(, "scale": true)"),
       "$.ranks.1.pieces[0].scale"},
      {"params not an object", R"({"version": 1, "params": [1]})", "$.params"},
      {"params missing", R"({"version": 1})", "$.params"},
      {"param map not an object", R"({"version": 1, "params": {"w": 3}})", "$.params.w"},
  };
}

TEST(JsonMalformed, EveryInputGivesALocatedFormatError) {
  const auto cases = malformed_inputs();
  ASSERT_GE(cases.size(), 30u);
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.name);
    auto error = first_error(c.text);
    ASSERT_TRUE(error.has_value()) << "accepted: " << c.text.substr(0, 200);
    EXPECT_EQ(error->kind, ErrorKind::format);
    EXPECT_FALSE(error->path.empty());
    if (c.path) {
      EXPECT_EQ(error->path, c.path) << error->message;
    }
    // The message names the location so a user can find it in the file.
    EXPECT_NE(error->message.find(error->path), std::string::npos) << error->message;
    EXPECT_LT(error->message.size(), 400u) << error->message;
    if (std::getenv("SHARDCHECK_SHOW_MESSAGES")) std::printf("%-40s %s\n", c.name, error->message.c_str());
  }
}

TEST(JsonMalformed, ErrorsNameRankPieceAndWhatWasExpected) {
  auto error = first_error(piece_without(kSource, R"("source": [0, [1, 2, 2.5]])"));
  ASSERT_TRUE(error);
  EXPECT_EQ(error->rank, 1);
  EXPECT_EQ(error->piece, 0);
  EXPECT_NE(error->message.find("integer"), std::string::npos) << error->message;
  EXPECT_NE(error->message.find("2.5"), std::string::npos) << error->message;

  auto duplicate = first_error(R"({"logical_shape": [4], "ranks": {"1": {"pieces": []}, "01": {"pieces": []}}})");
  ASSERT_TRUE(duplicate);
  EXPECT_EQ(duplicate->rank, 1);
  EXPECT_NE(duplicate->message.find(R"("1")"), std::string::npos) << duplicate->message;
  EXPECT_NE(duplicate->message.find(R"("01")"), std::string::npos) << duplicate->message;
  auto listed_twice = first_error(
      R"({"logical_shape": [4], "ranks": [{"rank": 2, "pieces": []}, {"rank": 3, "pieces": []}, {"rank": 2, "pieces": []}]})");
  ASSERT_TRUE(listed_twice);
  EXPECT_NE(listed_twice->message.find("as entry [0] and as entry [2]"), std::string::npos) << listed_twice->message;

  auto syntax = first_error(R"({"logical_shape": [4],, "ranks": {}})");
  ASSERT_TRUE(syntax);
  EXPECT_NE(syntax->message.find("byte 23"), std::string::npos) << syntax->message;
}

TEST(JsonParse, NestingLimitIsExactlyTheDocumentedDepth) {
  EXPECT_TRUE(parse_json(nested(256)).ok());
  EXPECT_FALSE(parse_json(nested(257)).ok());
  // Brackets inside strings (escaped quotes included) do not count.
  const std::string in_string = "[\"\\\"" + std::string(1000, '[') + "\"]";
  EXPECT_TRUE(parse_json(in_string).ok()) << parse_json(in_string).error().to_string();
}

TEST(JsonParse, InputOverTheLimitIsRefusedNamingIt) {
  const std::string text = "[1, 2]";  // 6 bytes
  for (std::uint64_t limit : {std::uint64_t{6}, std::uint64_t{5}}) {
    const auto json = parse_json(text, limit);
    const auto map = parse_map(text, "$", limit);
    const auto document = parse_document(text, limit);
    const auto one = parse_one_map(text, "$.map_text", limit);
    if (limit == 6) {
      EXPECT_TRUE(json.ok()) << json.error().to_string();
      continue;  // the others read it, and refuse what it holds
    }
    for (const Error* error : {&json.error(), &map.error(), &document.error(), &one.error()}) {
      EXPECT_EQ(error->to_string(),
                "format: $: the input is 6 bytes, more than the limit of 5 bytes (by default an eighth of this "
                "machine's memory; --max-input-bytes on the command line or max_input_bytes= in Python raises it)");
    }
  }
  EXPECT_TRUE(check_input_size(kMaxInputBytesCeiling, kMaxInputBytesCeiling).ok());
  // A limit above the tape's ceiling is the ceiling: no text can be addressed past it.
  EXPECT_FALSE(check_input_size(kMaxInputBytesCeiling + 1, kMaxInputBytesCeiling).ok());
}

TEST(JsonParse, TheDefaultLimitIsAnEighthOfPhysicalMemory) {
  const auto physical = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const std::uint64_t expected = std::clamp(physical / 8, std::uint64_t{64} << 20, kMaxInputBytesCeiling);
  EXPECT_EQ(default_max_input_bytes(), expected);
  EXPECT_EQ(max_input_bytes(), expected);
  EXPECT_GE(default_max_input_bytes(), std::uint64_t{64} << 20);
  // The process-wide setting is what a reader applies when not given a limit.
  set_max_input_bytes(5);
  EXPECT_EQ(max_input_bytes(), 5u);
  EXPECT_FALSE(parse_json("[1, 2]").ok());
  set_max_input_bytes(std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(max_input_bytes(), kMaxInputBytesCeiling);
  set_max_input_bytes(default_max_input_bytes());
  EXPECT_TRUE(parse_json("[1, 2]").ok());
}

// A map of many one-row pieces, as large expert-parallel layouts are: rows dealt out to
// `ranks` ranks in turn.
Map row_gather_map(Index rows, int ranks) {
  std::vector<std::vector<Index>> ids(static_cast<std::size_t>(ranks));
  for (Index row = 0; row < rows; ++row) ids[static_cast<std::size_t>(row % ranks)].push_back(row);
  auto map = block_gather_map({rows, 8}, ids, 1, 0);
  EXPECT_TRUE(map.ok()) << map.error().to_string();
  return map.ok() ? map.value() : Map{};
}

TEST(JsonParse, ALargeMapReadsAsItsPiecesAreTakenOffTheTape) {
  const Map map = row_gather_map(20000, 8);
  const std::string text = encode_map_text(map);
  const auto read = parse_map(text);
  ASSERT_TRUE(read.ok()) << read.error().to_string();
  EXPECT_EQ(read.value(), map);
  expect_same_reading(text);
  // Read in an envelope, with progress: reported every 65,536 pieces and at the end, the
  // bytes never going back.
  const Map big = row_gather_map(150000, 3);
  const std::string envelope = "{\"version\": 1, \"params\": {\"a\": " + encode_map_text(big) + ", \"b\": " + text + "}}";
  std::vector<std::pair<std::size_t, std::size_t>> reports;
  const auto document = read_document(envelope, max_input_bytes(), [&](std::size_t bytes, std::size_t pieces) {
    reports.emplace_back(bytes, pieces);
  });
  ASSERT_TRUE(document.ok()) << document.error().to_string();
  EXPECT_TRUE(document.value().envelope);
  ASSERT_EQ(document.value().params.size(), 2u);
  EXPECT_EQ(document.value().params[0].map.value(), big);
  EXPECT_EQ(document.value().params[1].map.value(), map);
  ASSERT_EQ(reports.size(), 3u);  // 65,536 and 131,072 pieces, then all 170,000
  EXPECT_EQ(reports[0].second, 65536u);
  EXPECT_LT(reports[0].first, reports[1].first);
  EXPECT_EQ(reports.back(), std::make_pair(envelope.size(), std::size_t{170000}));
  const auto bare = read_document(text, max_input_bytes(), {});
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare.value().envelope);
}

// A checkpoint's envelope checked whole (shardcheck check): text inside one parameter's
// map that JSON cannot hold is that parameter's refusal, and the others are still read;
// only a fault in the envelope itself leaves no parameter to judge. A bare map's such text
// is its refusal too. (Found by an
// independent model of the contract: one bad map hid every other in its envelope.)
TEST(JsonParse, ReadingAnEnvelopeOneParameterCannotHideTheOthers) {
  const std::string good = encode_map_text(row_gather_map(4, 2));
  const std::string twice = R"({"logical_shape": [1], "logical_shape": [1], "ranks": {}})";
  const std::string huge = R"({"logical_shape": [1e400], "ranks": {}})";
  const std::string broken = R"({"logical_shape": [1,,2], "ranks": {}})";
  const std::string head = R"({"version": 1, "params": {"a": )" + good + R"(, "b": )" + twice + R"(, "c": )" + huge +
                           R"(, "d": )" + broken + R"(, "e\u0041": )" + good;
  const std::string text = head + "}}";
  ASSERT_FALSE(parse_json(text).ok());  // as a whole, JSON cannot hold it
  const auto document = read_document(text, max_input_bytes(), {});
  ASSERT_TRUE(document.ok()) << document.error().to_string();
  EXPECT_TRUE(document.value().envelope);
  const auto& params = document.value().params;
  ASSERT_EQ(params.size(), 5u);
  EXPECT_EQ(params[0].name, "a");
  ASSERT_TRUE(params[0].map.ok());
  EXPECT_EQ(params[0].map.value(), row_gather_map(4, 2));
  EXPECT_EQ(params[4].name, "eA");
  EXPECT_TRUE(params[4].map.ok());
  for (std::size_t i = 1; i <= 3; ++i) {
    ASSERT_FALSE(params[i].map.ok()) << params[i].name;
    EXPECT_EQ(params[i].map.error().kind, ErrorKind::format);
  }
  EXPECT_EQ(params[1].map.error().path, "$.params.b.logical_shape");
  EXPECT_NE(params[1].map.error().sentence.find("appears twice"), std::string::npos);
  EXPECT_EQ(params[2].map.error().path, "$.params.c");
  // A byte offset counts in the whole text, as parse_json counts it in the map alone.
  const auto& broken_error = params[3].map.error();
  EXPECT_EQ(broken_error.path, "$.params.d");
  const std::string alone = parse_json(broken).error().sentence;
  const std::size_t byte_alone = std::stoul(alone.substr(alone.find("at byte ") + 8));
  const std::size_t expected = byte_alone + text.find(broken);
  EXPECT_NE(broken_error.sentence.find(fmt::format("at byte {} ", expected)), std::string::npos)
      << broken_error.sentence << " (expected byte " << expected << ")";
  // The envelope's own faults still refuse the document: a newer version (named, rather
  // than the parameter's fault), a parameter named twice, "params" twice, a bare map.
  const auto newer = read_document(R"({"version": 2, "params": {"c": )" + huge + "}}", max_input_bytes(), {});
  ASSERT_FALSE(newer.ok());
  EXPECT_EQ(newer.error().path, "$.version");
  for (const std::string& whole :
       {R"({"version": 1, "params": {"a": )" + good + R"(, "a": )" + good + "}}",
        R"({"version": 1, "params": {"c": )" + huge + R"(}, "params": {}})", R"({"version": 1, "version": 1, "params": {"c": )" + huge + "}}",
        head + "}"}) {
    const auto refused = read_document(whole, max_input_bytes(), {});
    ASSERT_FALSE(refused.ok()) << whole;
    EXPECT_EQ(refused.error().to_string(), parse_json(whole).error().to_string()) << whole;
  }
  // A bare map whose text JSON cannot hold is one unnamed entry holding its refusal.
  for (const std::string& bare : {twice, huge, broken}) {
    const auto one = read_document(bare, max_input_bytes(), {});
    ASSERT_TRUE(one.ok()) << bare;
    EXPECT_FALSE(one.value().envelope);
    ASSERT_EQ(one.value().params.size(), 1u);
    ASSERT_FALSE(one.value().params[0].map.ok());
    EXPECT_EQ(one.value().params[0].map.error().to_string(), parse_json(bare).error().to_string());
  }
  // Read as decode_document reads: an object with "logical_shape" is a map, "params" or not.
  const std::string map_with_params = R"({"logical_shape": [1e400], "ranks": {}, "params": {"a": )" + good + "}}";
  const auto as_map = read_document(map_with_params, max_input_bytes(), {});
  ASSERT_TRUE(as_map.ok());
  EXPECT_FALSE(as_map.value().envelope);
  ASSERT_EQ(as_map.value().params.size(), 1u);
  EXPECT_FALSE(as_map.value().params[0].map.ok());
  // Text over the limit is refused whole, whatever it holds.
  for (const std::string& over : {twice, text}) {
    const auto refused = read_document(over, over.size() - 1, {});
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().to_string(), parse_json(over, over.size() - 1).error().to_string());
  }
  // parse_document still answers as decode_document(parse_json(text)) does.
  EXPECT_FALSE(parse_document(text).ok());
  EXPECT_FALSE(parse_document(twice).ok());
}

TEST(JsonParse, TakingPiecesAnswersAsTheExactReaderDoes) {
  // Each is read by the reader that takes pieces as they close until something is not
  // as it expects, then again exactly: the answer, errors word for word, is the same.
  const std::string two = encode_map_text(row_gather_map(4, 2));
  const std::string bad_piece = R"({"shape": [1, 8], "source": [0, [8, 1]], "dest": [-1, [8, 1]], "locations": [0]})";
  for (const std::string& text : std::vector<std::string>{
           two,
           // A bad logical shape after the ranks is reported before any piece error.
           R"({"ranks": {"0": {"shard_shape": [1, 8], "pieces": [)" + bad_piece + R"(]}}, "logical_shape": [1.5]})",
           R"({"logical_shape": [1, 8], "ranks": {"0": {"shard_shape": [1, 8], "pieces": [)" + bad_piece + "]}}}",
           // Not an object, a repeated key, a piece list under an unknown key, escapes.
           std::string(R"({"logical_shape": [1, 8], "ranks": {"0": {"shard_shape": [1, 8], "pieces": [7]}}})"),
           R"({"logical_shape": [1, 8], "ranks": {"0": {"shard_shape": [1, 8], "pieces": [{"shape": [1], "shape": [1]}]}}})",
           R"({"logical_shape": [1, 8], "x": {"pieces": [{"a": 1}]}, "ranks": {"0": {"pieces": []}}})",
           R"({"logical_shape": [1, 8], "ranks": {"0": {"shard_shape": [1, 8], "pieces": [{"sh\u0061pe": [1, 8]}]}}})",
           R"({"logical_shape": [1, 8], "ranks": [{"rank": 0, "pieces": [{"shape": [1, 8], "source": [0, [8, 1]],
               "dest": [0, [8, 1]], "locations": [0], "scale": 0.5, "pieces": [{"b": 2}]}], "shard_shape": [1, 8]}]})",
           // Text that ends inside the pieces, and text after the document.
           two.substr(0, two.size() / 2),
           two + " x",
       }) {
    expect_same_reading(text);
  }
  // A pieces list under an unknown key inside a piece is taken too, at a token that a
  // later rank's list may reuse once that piece is dropped: the later list must not
  // inherit its pieces. Padding moves the later list across the token.
  const std::string piece = R"({"shape": [1, 8], "source": [0, [8, 1]], "dest": [0, [8, 1]], "locations": [0]})";
  const std::string nested = piece.substr(0, piece.size() - 1) + R"(, "pieces": [)" + piece + "]}";
  for (int pad = 0; pad < 40; ++pad) {
    std::string padding;
    for (int i = 0; i < pad; ++i) padding += i > 0 ? ", 0" : "0";
    const std::string text = R"({"logical_shape": [2, 8], "ranks": {"0": {"shard_shape": [1, 8], "pieces": [)" + nested +
                             R"(]}, "1": {"x": [)" + padding + R"(], "shard_shape": [1, 8], "pieces": []}}})";
    const auto map = parse_map(text);
    ASSERT_TRUE(map.ok()) << map.error().to_string();
    EXPECT_EQ(map.value().ranks.at(1).pieces.size(), 0u) << "padding " << pad;
    expect_same_reading(text);
  }
}

TEST(JsonDecode, RepresentableButInvalidValuesAreKept) {
  const Map map = decode_ok(R"({"logical_shape": [-4, 9223372036854775807], "ranks": {"0": {"shard_shape": [-1],
    "pieces": [{"shape": [-2, 3], "source": [-5, [-1, 0]], "dest": [9223372036854775807, [1]],
                "locations": [], "scale": 0},
               {"shape": [1], "source": [-9223372036854775808, [1]], "dest": [0, [1, 2, 3]],
                "locations": [5, 0, -3], "scale": -1}]}}})");
  ASSERT_EQ(map.ranks.size(), 1u);
  const Piece& a = map.ranks[0].pieces[0];
  EXPECT_EQ(map.logical_shape, (Extents{-4, std::numeric_limits<Index>::max()}));
  EXPECT_EQ(map.ranks[0].shard_shape, (Extents{-1}));
  EXPECT_EQ(a.shape, (Extents{-2, 3}));
  EXPECT_EQ(a.source.offset, -5);
  EXPECT_EQ(a.source.strides, (Strides{-1, 0}));
  EXPECT_TRUE(a.locations.empty());
  EXPECT_EQ(a.scale, 0.0);
  const Piece& b = map.ranks[0].pieces[1];
  EXPECT_EQ(b.source.offset, std::numeric_limits<Index>::min());
  EXPECT_EQ(b.dest.strides.size(), 3u);
  EXPECT_EQ(b.locations, (std::vector<Rank>{5, 0, -3}));
  EXPECT_EQ(b.scale, -1.0);
}

std::vector<Map> hand_built_maps() {
  std::vector<Map> maps;
  maps.push_back(spec_example_map());
  maps.push_back(Map{{}, {}});  // 0-d, no ranks
  Map odd;
  odd.logical_shape = {8};
  odd.ranks.push_back(RankEntry{0, Extents{4}, {build::P({4}, -1, {1}, 0, {1}, {})}});  // negative offset, no holders
  odd.ranks.push_back(RankEntry{3, std::nullopt, {build::P({2, 2}, 4, {1}, 0, {2, 1, 7}, {3, 0}, 0.25)}});
  odd.ranks.push_back(RankEntry{9, Extents{0, 4}, {}});
  maps.push_back(odd);
  Map replicated;
  replicated.logical_shape = {4};
  for (Rank r : {0, 1}) {
    replicated.ranks.push_back(RankEntry{r, Extents{4}, {build::P({4}, 0, {1}, 0, {1}, {0, 1}, 2.0)}});
  }
  maps.push_back(replicated);
  return maps;
}

TEST(JsonRoundTrip, HandBuiltMapsIncludingInvalidOnes) {
  for (const Map& map : hand_built_maps()) {
    SCOPED_TRACE(describe(map));
    auto via_value = decode_map(encode_map(map));
    ASSERT_TRUE(via_value.ok()) << via_value.error().to_string();
    EXPECT_EQ(via_value.value(), map);
    auto via_text = decode_map(parse_ok(encode_map_text(map)));
    ASSERT_TRUE(via_text.ok()) << via_text.error().to_string();
    EXPECT_EQ(via_text.value(), map);
  }
}

TEST(JsonEncode, ShardShapeOmittedOnlyWhenAbsent) {
  const Json json = encode_map(hand_built_maps()[2]);
  EXPECT_TRUE(json["ranks"]["0"].contains("shard_shape"));
  EXPECT_FALSE(json["ranks"]["3"].contains("shard_shape"));
  EXPECT_EQ(json["ranks"]["9"]["shard_shape"], Json::parse("[0, 4]"));
  EXPECT_EQ(json["ranks"]["9"]["pieces"], Json::array());
}

TEST(JsonEncode, UnrepresentableRankIdsAreNotDroppedSilently) {
  Map twice;
  twice.logical_shape = {4};
  twice.ranks.push_back(RankEntry{1, Extents{4}, {}});
  twice.ranks.push_back(RankEntry{1, Extents{2}, {}});
  const Json json = encode_map(twice);
  ASSERT_TRUE(json["ranks"].is_array());
  EXPECT_EQ(json["ranks"].size(), 2u);
  auto back = decode_map(json);
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.error().kind, ErrorKind::format);
  EXPECT_EQ(back.error().path, "$.ranks[1]");

  Map negative;
  negative.ranks.push_back(RankEntry{-2, std::nullopt, {}});
  auto refused = decode_map(encode_map(negative));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().path, "$.ranks[0].rank");
}

TEST(JsonText, ReadingCorpusTextAndItsDamageAnswersAsReadingItsJsonValue) {
  namespace fs = std::filesystem;
  std::size_t files = 0;
  for (const char* dir : {"map_json", "regressions", "case_file"}) {
    for (const auto& entry : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / dir)) {
      const std::string text = read_text(entry.path());
      ++files;
      expect_same_reading(text);
      // Cuts of the text, and bytes of it turned into each of the structural characters:
      // syntax errors all over, wrong kinds of values, repeated keys. Every 37th cut and
      // 61st byte, from a place that moves with each file, so that the files together reach
      // every kind of place (the corpus grows each round; every 11th and 19th took 70 s
      // under the sanitizers).
      for (std::size_t cut = files % 37; cut < text.size(); cut += 37) expect_same_reading(text.substr(0, cut));
      for (std::size_t at = files % 61; at < text.size(); at += 61) {
        for (const char byte : std::string_view("{}[]\",:0-.e\\")) {
          std::string damaged = text;
          damaged[at] = byte;
          expect_same_reading(damaged);
        }
      }
    }
  }
  EXPECT_GE(files, 40u);
}

TEST(JsonText, ReadingHandWrittenTextAnswersAsReadingItsJsonValue) {
  for (const char* text : {R"({"a":1,"b":{"c":1,"c":2},"a":3})", R"([{"x":1},{"y":[{"x":1,"x":2}]}])",
                           R"({"logical_shape":[1e400]})", R"({"logical_shape":[18446744073709551616]})",
                           "\xef\xbb\xbf"
                           R"({"logical_shape":[2],"ranks":{}})",
                           R"({"version":1,"params":{"a":{"logical_shape":[2],"ranks":{}},"b":[]}})"}) {
    expect_same_reading(text);
  }
}

// Every kind of value where each kind of value is expected.
TEST(JsonText, EveryKindOfValueInEveryPlaceReadsAsItsJsonValue) {
  const std::string places[] = {
      R"({"logical_shape":@,"ranks":{}})",
      R"({"logical_shape":[@],"ranks":{}})",
      R"({"logical_shape":[2],"ranks":@})",
      R"({"logical_shape":[2],"ranks":{"0":@}})",
      R"({"logical_shape":[2],"ranks":[{"rank":@,"pieces":[]}]})",
      R"({"logical_shape":[2],"ranks":{"0":{"shard_shape":[2],"pieces":[{"shape":[2],"source":[0,[1]],"dest":[@,[1]],"locations":[0],"scale":@}]}}})",
      R"({"logical_shape":[2],"ranks":{},"content_digests":{"param":@}})",
      R"({"version":@,"params":{}})",
      R"({"version":1,"params":{"w":@}})"};
  for (const std::string& place : places) {
    for (const char* value : {"5",
                              "-5",
                              "0",
                              "-0",
                              "1.5",
                              "-2.0",
                              "-0.0",
                              "1e300",
                              "1E5",
                              "0.1e+2",
                              "2e-1",
                              "1e-400",
                              "1e400",
                              "01",
                              "-",
                              "1.",
                              ".5",
                              "9223372036854775807",
                              "9223372036854775808",
                              "-9223372036854775808",
                              "-9223372036854775809",
                              "18446744073709551615",
                              "18446744073709551616",
                              "true",
                              "tru",
                              "null",
                              "\"s\"",
                              "\"\\u0041\"",
                              "\"\xc3\xa9\"",
                              "\"\xff\"",
                              "[1,2]",
                              "[1,]",
                              "[]",
                              "{}",
                              "{\"a\":1}",
                              "\xef\xbb\xbf"
                              "1"}) {
      std::string text = place;
      for (auto at = text.find('@'); at != std::string::npos; at = text.find('@')) text.replace(at, 1, value);
      expect_same_reading(text);
    }
  }
  // Nesting at the limit and past it, closed and not.
  for (const std::size_t depth : {255, 256, 257}) {
    expect_same_reading(std::string(depth, '[') + std::string(depth, ']'));
    expect_same_reading(std::string(depth, '[') + "1" + std::string(depth, ']'));
    expect_same_reading(std::string(depth, '['));
  }
  // An object large enough that repeated keys are looked up by hash.
  std::string wide = "{";
  for (int i = 0; i < 40; ++i) wide += fmt::format("\"k{}\":{},", i, i);
  expect_same_reading(wide + "\"k3\":0}");
  expect_same_reading(wide + "\"k40\":0}");
}

// Contract 2 (a repeated key is a located `format` error) at every position of an object
// large enough that its keys are looked up by hash: the 17th key, the one at which the
// reader switches from a linear search to hashing, is remembered too.
TEST(JsonParse, ARepeatedKeyIsRefusedWhereverItFirstAppearedInALargeObject) {
  std::string wide = "{";
  for (int i = 0; i < 40; ++i) wide += fmt::format("\"k{}\":{},", i, i);
  for (int repeated = 0; repeated < 40; ++repeated) {
    SCOPED_TRACE(repeated);
    const auto json = parse_json(wide + fmt::format("\"k{}\":0}}", repeated));
    ASSERT_FALSE(json.ok());
    EXPECT_EQ(json.error().kind, ErrorKind::format);
    EXPECT_EQ(json.error().path, fmt::format("$.k{}", repeated));
    EXPECT_NE(json.error().sentence.find("appears twice"), std::string::npos) << json.error().sentence;
  }
  // A map whose 17th key repeats: refused, as any map with a repeated key is.
  std::string map = "{";
  for (int i = 0; i < 16; ++i) map += fmt::format("\"x{}\": {}, ", i, i);
  map += R"("logical_shape": [1], "logical_shape": [2], "ranks": {"0": {"shard_shape": [1],
    "pieces": [{"shape": [1], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})";
  const auto read = parse_map(map);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().kind, ErrorKind::format);
  EXPECT_EQ(read.error().path, "$.logical_shape");
  expect_same_reading(map);
}

// The maps of a thousand campaign cases, corrupted and not: the text the encoder writes is
// already in the form Json writes (dumping it again changes nothing), and reading it back
// gives the map.
TEST(JsonText, GeneratedMapsWriteAndReadBack) {
  campaign::Options options;
  options.seed = 11;
  for (Index index = 0; index < 1000; ++index) {
    const Case c = campaign::generate_indexed_case(options, index);
    for (const Map* map : {&c.map, c.truth ? &*c.truth : nullptr}) {
      if (map == nullptr) continue;
      for (const RankOrder order : {RankOrder::sorted, RankOrder::as_given}) {
        const std::string text = encode_map_text(*map, order);
        ASSERT_EQ(encode_map(*map, order).dump(), text);
        expect_same_reading(text);
      }
      auto back = parse_map(encode_map_text(*map, RankOrder::as_given));
      ASSERT_TRUE(back.ok()) << index << " " << back.error().to_string();
      EXPECT_EQ(back.value(), *map) << index;
    }
    if (c.map_text) expect_same_reading(*c.map_text);
  }
}

// Random numbers that stress the codec: small ones, the int64 extremes, anything.
rc::Gen<Index> any_index() {
  return rc::gen::oneOf(rc::gen::inRange<Index>(-3, 10),
                        rc::gen::element(std::numeric_limits<Index>::min(), std::numeric_limits<Index>::max(),
                                         Index{1} << 53, -(Index{1} << 53) - 1),
                        rc::gen::arbitrary<Index>());
}

// Only valid inside a property: the length is drawn when the generator is made.
rc::Gen<std::vector<Index>> small_vector() {
  return rc::gen::container<std::vector<Index>>(*rc::gen::inRange<std::size_t>(0, 4), any_index());
}

rc::Gen<double> any_scale() {
  return rc::gen::oneOf(rc::gen::element(1.0, 1.0, 0.0, -1.0, 0.5, 2.0, -0.0),
                        rc::gen::suchThat(rc::gen::arbitrary<double>(), [](double d) { return std::isfinite(d); }));
}

Map random_map(bool sorted_ranks) {
  Map map;
  map.logical_shape = *small_vector();
  const auto id =
      rc::gen::oneOf(rc::gen::inRange<Rank>(0, 16), rc::gen::inRange<Rank>(0, std::numeric_limits<Rank>::max()));
  auto ids = *rc::gen::resize(6, rc::gen::unique<std::vector<Rank>>(id));
  if (sorted_ranks) std::sort(ids.begin(), ids.end());
  for (Rank id : ids) {
    RankEntry entry;
    entry.rank = id;
    if (*rc::gen::inRange(0, 4) != 0) entry.shard_shape = *small_vector();
    const int pieces = *rc::gen::inRange(0, 4);
    for (int i = 0; i < pieces; ++i) {
      Piece p;
      p.shape = *small_vector();
      p.source = StridedView{*any_index(), *small_vector()};
      p.dest = StridedView{*any_index(), *small_vector()};
      p.locations = *small_vector();
      p.scale = *any_scale();
      entry.pieces.push_back(std::move(p));
    }
    map.ranks.push_back(std::move(entry));
  }
  return map;
}

RC_GTEST_PROP(JsonProperty, SortedMapsRoundTripThroughText, ()) {
  const Map map = random_map(true);
  auto json = parse_json(encode_map_text(map));
  RC_ASSERT(json.ok());
  auto back = decode_map(json.value());
  RC_ASSERT(back.ok());
  RC_ASSERT(back.value() == map);
  RC_ASSERT(encode_map(back.value()) == json.value());
}

RC_GTEST_PROP(JsonProperty, AnyRankOrderRoundTripsAsGiven, ()) {
  const Map map = random_map(false);
  auto json = parse_json(encode_map_text(map, RankOrder::as_given));
  RC_ASSERT(json.ok());
  auto back = decode_map(json.value());
  RC_ASSERT(back.ok());
  RC_ASSERT(back.value() == map);
  // Sorted output decodes to the same ranks, in id order.
  auto sorted = decode_map(encode_map(map));
  RC_ASSERT(sorted.ok());
  RC_ASSERT(canonical(sorted.value()) == canonical(map));
  RC_ASSERT(std::is_sorted(sorted.value().ranks.begin(), sorted.value().ranks.end(),
                           [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; }));
}

// Byte-level damage to real encoder output: whatever survives must either decode or
// come back as a located format error; nothing may crash or throw.
RC_GTEST_PROP(JsonProperty, DamagedTextDecodesOrGivesALocatedFormatError, ()) {
  std::string text = encode_map_text(random_map(true));
  const int edits = *rc::gen::inRange(1, 4);
  for (int i = 0; i < edits && !text.empty(); ++i) {
    const auto at = *rc::gen::inRange<std::size_t>(0, text.size());
    const char byte = *rc::gen::oneOf(rc::gen::element('[', ']', '{', '}', '"', ',', ':', '-', '.', 'e', '1', '\\'),
                                      rc::gen::arbitrary<char>());
    switch (*rc::gen::inRange(0, 3)) {
      case 0:
        text[at] = byte;
        break;
      case 1:
        text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), byte);
        break;
      default:
        text.erase(at, 1);
        break;
    }
  }
  if (auto error = first_error(text)) {
    RC_ASSERT(error->kind == ErrorKind::format);
    RC_ASSERT(!error->path.empty());
    RC_ASSERT(error->message.find(error->path) != std::string::npos);
    RC_ASSERT(Json(error->message).dump().size() > 0);  // valid UTF-8, or dump would throw
  }
}

// The checkpoint of a finished 30-case campaign (seed 7, one job).
campaign::Checkpoint thirty_case_checkpoint() {
  campaign::Options options;
  options.seed = 7;
  options.cases = 30;
  options.jobs = 1;
  campaign::Checkpoint written;
  written.report = campaign::run(options);
  written.done = {{0, 30}};
  return written;
}

// The campaign's checkpoint reader answers every bad input with an error sentence, like
// every other reader: a truncated file, garbage, a missing key, a wrong type or a number
// out of range is "malformed checkpoint: ...", never an exception.
TEST(CheckpointReader, RefusesTruncatedAndGarbageCheckpoints) {
  const campaign::Checkpoint written = thirty_case_checkpoint();
  const Json json = campaign::checkpoint_to_json(written);
  const auto read_back = campaign::checkpoint_from_json(json);
  ASSERT_TRUE(read_back.ok()) << read_back.error().to_string();

  int refused = 0;
  auto expect_refused = [&](const Json& bad, const std::string& what) {
    std::optional<Result<campaign::Checkpoint>> read;
    EXPECT_NO_THROW(read = campaign::checkpoint_from_json(bad)) << what;
    ASSERT_TRUE(read.has_value()) << what;
    ASSERT_FALSE(read->ok()) << what;
    EXPECT_EQ(read->error().kind, ErrorKind::format) << what;
    EXPECT_EQ(read->error().sentence.rfind("malformed checkpoint: ", 0), 0u) << what << ": " << read->error().sentence;
    ++refused;
  };
  // Truncated: every prefix of the text that still parses as JSON (a number, say) is not
  // a checkpoint; the others are refused by the JSON parser first.
  const std::string text = json.dump();
  for (std::size_t n = 0; n < text.size(); n += 7) {
    auto parsed = parse_json(text.substr(0, n));
    if (parsed.ok()) expect_refused(parsed.value(), "the first " + std::to_string(n) + " characters");
  }
  for (const char* garbage : {"null", "[]", "0", "\"checkpoint\"", "{}", R"({"shardcheck_checkpoint": 2})"}) {
    auto parsed = parse_json(garbage);
    ASSERT_TRUE(parsed.ok()) << garbage;
    expect_refused(parsed.value(), garbage);
  }
  // Each key missing, and each key holding a value of the wrong type or range.
  for (const auto& [key, value] : json.items()) {
    Json missing = json;
    missing.erase(key);
    // Optional keys: a checkpoint may name no target or backend, and one written before
    // the default campaign's shares or reductions existed resumes without them.
    const bool optional = key == "target" || key == "target_timeout" || key == "backend" || key == "share_backend" ||
                          key.ends_with("_share") || key == "reduce_evaluations";
    if (!optional) expect_refused(missing, "without " + key);
    for (const Json& wrong : {Json("x"), Json(-1), Json::array({1, 2, 3}), Json(1e300)}) {
      if (wrong == value) continue;
      Json bad = json;
      bad[key] = wrong;
      std::optional<Result<campaign::Checkpoint>> read;
      EXPECT_NO_THROW(read = campaign::checkpoint_from_json(bad)) << key << " = " << wrong.dump();
      if (read && !read->ok()) {
        EXPECT_EQ(read->error().sentence.rfind("malformed checkpoint: ", 0), 0u) << key << ": " << read->error().sentence;
      }
    }
  }
  EXPECT_GT(refused, 20);
}


// A value of an option's type other than `value`, so that a round trip that dropped the
// option (or read back its default) shows.
bool other_than(bool value) { return !value; }
int other_than(int value) { return value + 3; }
Index other_than(Index value) { return value + 3; }
std::uint64_t other_than(std::uint64_t value) { return value + 3; }
double other_than(double value) { return value + 0.5; }
std::string other_than(const std::string& value) { return value + "other"; }
Policy other_than(Policy value) { return value == Policy::strict ? Policy::legacy : Policy::strict; }
oracles::OracleKind other_than(oracles::OracleKind value) {
  return value == oracles::OracleKind::truth ? oracles::OracleKind::same_map : oracles::OracleKind::truth;
}
std::optional<Op> other_than(const std::optional<Op>& value) {
  return value == Op::extract ? Op::rebuild : Op::extract;
}
template <class T>
std::optional<T> other_than(const std::optional<T>& value) {
  return value ? other_than(*value) : T{5};
}

// The defaults the rows of campaign_options.def state are the defaults campaign::Options
// has (a nested row repeats its struct's default; the command line relies on both).
TEST(CampaignOptions, RowDefaultsAreTheOptionsDefaults) {
  const campaign::Options defaults;
  using namespace campaign::option_traits;
  int rows = 0;
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  EXPECT_EQ(defaults.field, type(default_value)) << #key;                                   \
  ++rows;
#include "shardcheck/campaign_options.def"
  EXPECT_EQ(rows, static_cast<int>(std::size(campaign::kOptionRows)));
}

// Every checkpointed row of campaign_options.def, given a value other than its default,
// is written and read back equal.
TEST(CheckpointReader, EveryOptionRowRoundTrips) {
  using namespace campaign::option_traits;
  campaign::Checkpoint written;
  campaign::Options& options = written.report.options;
  int checkpointed = 0;
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  if ((traits) & (kCheckpointed | kCheckpointedByHand)) {                                   \
    options.field = other_than(type(default_value));                                        \
    ++checkpointed;                                                                         \
  }
#include "shardcheck/campaign_options.def"
  ASSERT_GT(checkpointed, 20);
  const Json json = campaign::checkpoint_to_json(written);
  const auto read = campaign::checkpoint_from_json(json);
  ASSERT_TRUE(read.ok()) << read.error().to_string() << "\n" << json.dump();
  const campaign::Options& back = read.value().report.options;
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  if ((traits) & (kCheckpointed | kCheckpointedByHand)) {                                   \
    EXPECT_EQ(back.field, options.field) << #key;                                           \
    EXPECT_NE(back.field, type(default_value)) << #key;                                     \
  }
#include "shardcheck/campaign_options.def"
  // Written and read again: the same text.
  EXPECT_EQ(campaign::checkpoint_to_json(read.value()).dump(), json.dump());
}

// A bad value is refused with the field at fault named, in the sentence (what `campaign
// --resume` prints) and as the error's JSON path.
TEST(CheckpointReader, NamesTheFieldAtFault) {
  const campaign::Checkpoint written = thirty_case_checkpoint();
  ASSERT_FALSE(written.report.by_constructor.empty());
  const Json json = campaign::checkpoint_to_json(written);
  ASSERT_TRUE(campaign::checkpoint_from_json(json).ok());

  struct Bad {
    std::string key;  // a top-level key, or "" for `edit` alone
    Json value;
    std::string path;  // the path the error must name
  };
  const std::string constructor = written.report.by_constructor.begin()->first;
  const std::vector<Bad> cases = {
      {"seed", Json(-1), "seed"},  // read as 2^64-1 by a careless get<std::uint64_t>
      {"seed", Json("7"), "seed"},
      {"requested_cases", Json(true), "requested_cases"},
      {"time_seconds", Json("60"), "time_seconds"},
      {"jobs", Json("x"), "jobs"},
      {"policy", Json("lenient"), "policy"},
      {"oracle", Json("psychic"), "oracle"},
      {"digest_share", Json(-1), "digest_share"},
      {"reduce_evaluations", Json(1.5), "reduce_evaluations"},
      {"target_timeout", Json(0), "target_timeout"},
      {"shard_index", Json(1), "shard_index"},  // of 1 shard
      {"op", Json("both"), "op"},  // a case file's spelling, not one operation
      {"case_memory_limit", Json::array({1}), "case_memory_limit"},
      {"complete", Json(1), "complete"},
      {"done", Json::array({Json::array({0, -30})}), "done[0][1]"},
  };
  for (const Bad& bad : cases) {
    Json edited = json;
    edited[bad.key] = bad.value;
    const auto read = campaign::checkpoint_from_json(edited);
    ASSERT_FALSE(read.ok()) << bad.key << " = " << bad.value.dump();
    EXPECT_EQ(read.error().kind, ErrorKind::format);
    EXPECT_EQ(read.error().path, "$." + bad.path) << read.error().to_string();
    EXPECT_EQ(read.error().sentence.rfind("malformed checkpoint: " + bad.path + " ", 0), 0u) << read.error().sentence;
  }
  // Inside the tallies and the findings too.
  Json tally = json;
  tally["by_constructor"][constructor][2] = "x";
  auto read = campaign::checkpoint_from_json(tally);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().path, "$.by_constructor." + constructor + "[2]") << read.error().to_string();
  Json missing = json;
  missing.erase("seed");
  read = campaign::checkpoint_from_json(missing);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().sentence, "malformed checkpoint: seed is missing");
  if (!json["findings"].empty()) {
    Json finding = json;
    finding["findings"][0]["numel"] = -2;
    read = campaign::checkpoint_from_json(finding);
    ASSERT_FALSE(read.ok());
    EXPECT_EQ(read.error().path, "$.findings[0].numel") << read.error().to_string();
  }
}

}  // namespace
}  // namespace shardcheck
