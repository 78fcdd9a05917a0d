// The case file codec: defaults, round trips, value forms, and malformed input.
#include <gtest/gtest.h>

#include <string>

#include "shardcheck/case.h"

namespace shardcheck {
namespace {

const char* kSplitMap = R"({"logical_shape": [4],
  "ranks": {"0": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]},
            "1": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [2, [1]], "dest": [0, [1]], "locations": [1]}]}}})";

std::string case_with(const std::string& extra) {
  return std::string(R"({"shardcheck_case": 1, "name": "t", "map": )") + kSplitMap + extra + "}";
}

Case decoded(const std::string& text) {
  auto c = decode_case_text(text);
  EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
  return c.ok() ? c.value() : Case{};
}

ErrorKind error_kind(const std::string& text) {
  auto c = decode_case_text(text);
  EXPECT_FALSE(c.ok()) << text;
  return c.ok() ? ErrorKind::count : c.error().kind;
}

TEST(CaseCodec, DefaultsWhenOptionalFieldsAreAbsent) {
  Case c = decoded(case_with(""));
  EXPECT_EQ(c.name, "t");
  EXPECT_EQ(c.dtype, DType::float32);
  EXPECT_EQ(c.scale_power, 1);
  EXPECT_EQ(c.ops, OpList{Op::rebuild});
  EXPECT_FALSE(c.truth.has_value());
  EXPECT_FALSE(c.full.has_value());
  EXPECT_FALSE(c.shards.has_value());
  EXPECT_FALSE(c.expect.has_value());
  EXPECT_FALSE(c.expect_error.has_value());
  EXPECT_TRUE(c.accept_errors.empty());
  EXPECT_FALSE(c.legacy_expect.has_value());
  EXPECT_FALSE(c.corruption.has_value());
  EXPECT_EQ(&c.truth_map(), &c.map);
  ASSERT_EQ(c.map.ranks.size(), 2u);
  EXPECT_EQ(c.map.ranks[1].pieces[0].source.offset, 2);
}

TEST(CaseCodec, UnknownFieldsAreIgnored) {
  Case plain = decoded(case_with(""));
  Case commented = decoded(case_with(R"(, "comment": "spec 6.1", "section": {"n": 6}, "x": [1])"));
  EXPECT_EQ(plain, commented);
}

TEST(CaseCodec, NumbersAndBitStringsGiveTheSameBits) {
  Case c = decoded(case_with(R"(, "full": [1.5, "0x3fc00000", -0.0, "0x7fc00001"])"));
  ASSERT_TRUE(c.full.has_value());
  ASSERT_EQ(c.full->size(), 4u);
  EXPECT_EQ((*c.full)[0], 0x3fc00000u);
  EXPECT_EQ((*c.full)[1], 0x3fc00000u);
  EXPECT_EQ((*c.full)[2], 0x80000000u);
  EXPECT_EQ((*c.full)[3], 0x7fc00001u);
}

TEST(CaseCodec, HalfWidthBitStrings) {
  Case c = decoded(case_with(R"(, "dtype": "bfloat16", "full": ["0x3f80", 1.0, "0xffff"])"));
  EXPECT_EQ(c.dtype, DType::bfloat16);
  ASSERT_TRUE(c.full.has_value());
  EXPECT_EQ((*c.full)[0], 0x3f80u);
  EXPECT_EQ((*c.full)[1], 0x3f80u);
  EXPECT_EQ((*c.full)[2], 0xffffu);
}

TEST(CaseCodec, IntegerDTypeValues) {
  Case c = decoded(case_with(R"(, "dtype": "int8", "full": [-128, 127, 3.0, "0xff"])"));
  ASSERT_TRUE(c.full.has_value());
  EXPECT_EQ((*c.full)[0], 0x80u);
  EXPECT_EQ((*c.full)[1], 0x7fu);
  EXPECT_EQ((*c.full)[2], 3u);
  EXPECT_EQ((*c.full)[3], 0xffu);
}

// The ends of int64's range decode from JSON numbers as they do from bits: nlohmann reads a
// positive integer as unsigned, and 2^63 - 1 still fits (2^63 does not).
TEST(CaseCodec, Int64RangeEndsDecodeFromNumbers) {
  Case c = decoded(case_with(R"(, "dtype": "int64", "full": [9223372036854775807, -9223372036854775808, 0])"));
  ASSERT_TRUE(c.full.has_value());
  ASSERT_EQ(c.full->size(), 3u);
  EXPECT_EQ((*c.full)[0], 0x7fffffffffffffffull);
  EXPECT_EQ((*c.full)[1], 0x8000000000000000ull);
  EXPECT_EQ((*c.full)[2], 0u);
  auto over = decode_case_text(case_with(R"(, "dtype": "int64", "full": [0, 9223372036854775808])"));
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().kind, ErrorKind::format);
  EXPECT_EQ(over.error().path, "$.full[1]");
}

TEST(CaseCodec, ShardsAreKeyedByRank) {
  Case c = decoded(case_with(R"(, "shards": {"1": [3, 4], "0": [1, 2]})"));
  ASSERT_TRUE(c.shards.has_value());
  ASSERT_EQ(c.shards->size(), 2u);
  EXPECT_EQ(c.shards->at(0)[1], 0x40000000u);  // 2.0f
  EXPECT_EQ(c.shards->at(1)[0], 0x40400000u);  // 3.0f
}

TEST(CaseCodec, DigestFieldsRoundTrip) {
  Case c = decoded(case_with(R"(, "digest": "0x1CF7D5947C3FCD66", "digest_state": "param")"));
  EXPECT_EQ(c.digest, 0x1cf7d5947c3fcd66ull);
  EXPECT_EQ(c.digest_state, "param");
  const Json encoded = encode_case(c);
  EXPECT_EQ(encoded["digest"], "0x1cf7d5947c3fcd66");
  EXPECT_EQ(decoded(encode_case_text(c)), c);
  EXPECT_FALSE(decoded(case_with("")).digest.has_value());
  EXPECT_FALSE(encode_case(decoded(case_with(""))).contains("digest"));
  for (const char* bad : {R"(, "digest": 12)", R"(, "digest": "0x12")", R"(, "digest": "1cf7d5947c3fcd66")",
                          R"(, "digest_state": "")", R"(, "digest_state": 1)"}) {
    auto refused = decode_case_text(case_with(bad));
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.error().kind, ErrorKind::format) << bad;
    EXPECT_EQ(refused.error().path.rfind("$.digest", 0), 0u) << refused.error().to_string();
  }
}

TEST(CaseCodec, BadValuesAreFormatErrors) {
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "int8", "full": [128])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "int8", "full": [-129])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "int32", "full": [1.5])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "uint8", "full": [-1])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "int64", "full": [18446744073709551615])")),
            ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "bfloat16", "full": ["0x10000"])")),
            ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": ["0x1ffffffff"])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": ["0x"])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": ["0xzz"])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": ["12"])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": [true])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": [[1]])")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "full": {"0": 1})")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "shards": {"-1": [1]})")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "shards": {"01": [1]})")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "shards": [[1]])")), ErrorKind::format);
}

TEST(CaseCodec, BadFieldsAreFormatErrors) {
  EXPECT_EQ(error_kind(case_with(R"(, "dtype": "float128")")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "op": "scatter")")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "expect": "maybe")")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "expect_error": "oops")")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "accept_errors": "twice")")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "scale_power": 1.5)")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "scale_power": 4294967296)")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "legacy": {"expect": "fine"})")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "corruption": {"rank": "zero"})")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "truth": {"logical_shape": "x"})")), ErrorKind::format);
}

TEST(CaseCodec, VersionMustBeOne) {
  std::string body = std::string(R"("name": "t", "map": )") + kSplitMap;
  EXPECT_EQ(error_kind("{" + body + "}"), ErrorKind::format);
  EXPECT_EQ(error_kind(R"({"shardcheck_case": 2, )" + body + "}"), ErrorKind::format);
  EXPECT_EQ(error_kind(R"({"shardcheck_case": "1", )" + body + "}"), ErrorKind::format);
  EXPECT_EQ(error_kind(R"({"shardcheck_case": 1.0, )" + body + "}"), ErrorKind::format);
  EXPECT_TRUE(decode_case_text(R"({"shardcheck_case": 1, )" + body + "}").ok());
}

TEST(CaseCodec, MalformedDocumentsAreFormatErrors) {
  EXPECT_EQ(error_kind("[]"), ErrorKind::format);
  EXPECT_EQ(error_kind("{\"shardcheck_case\": 1,"), ErrorKind::format);
  EXPECT_EQ(error_kind(R"({"shardcheck_case": 1, "name": "no map"})"), ErrorKind::format);
  EXPECT_EQ(error_kind(R"({"shardcheck_case": 1, "name": 3, "map": )" + std::string(kSplitMap) +
                       "}"),
            ErrorKind::format);
}

TEST(CaseCodec, MapErrorPathsNameTheCaseField) {
  auto c = decode_case_text(case_with(R"(, "truth": {"logical_shape": "x"})"));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().path.rfind("$.truth", 0), 0u) << c.error().path;
}

TEST(CaseCodec, AMapUnderTestThatDoesNotDecodeIsKeptAsGiven) {
  const std::string maps[] = {
      R"({"logical_shape": [4.0], "ranks": {}})",
      R"({"logical_shape": ["4"], "ranks": {}})",
      R"({"logical_shape": [4], "ranks": {"1": {"pieces": []}, "01": {"pieces": []}}})",
      R"("not a map")"};
  for (const std::string& map : maps) {
    const std::string text = R"({"shardcheck_case": 1, "name": "u", "map": )" + map + "}";
    Case c = decoded(text);
    ASSERT_TRUE(c.undecoded_map.has_value()) << map;
    EXPECT_EQ(*c.undecoded_map, Json::parse(map));
    EXPECT_EQ(c.map, Map{});
    Status error = undecoded_map_error(c);
    ASSERT_FALSE(error.ok()) << map;
    EXPECT_EQ(error.error().kind, ErrorKind::format);
    EXPECT_EQ(error.error().path.rfind("$.map", 0), 0u) << error.error().path;
    // Re-encoded exactly as given, and decoded back to the same case.
    Json json = encode_case(c);
    EXPECT_EQ(json["map"].dump(), Json::parse(map).dump());
    auto back = decode_case(json);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back.value(), c);
  }
  Case good = decoded(case_with(""));
  EXPECT_FALSE(good.undecoded_map.has_value());
  EXPECT_TRUE(undecoded_map_error(good).ok());
  // Set by hand to a map that does decode, it is still not a map under test.
  Case odd = good;
  odd.undecoded_map = encode_map(good.map);
  ASSERT_FALSE(undecoded_map_error(odd).ok());
  EXPECT_EQ(undecoded_map_error(odd).error().kind, ErrorKind::format);
}

TEST(CaseCodec, OnlyTheMapUnderTestMayFailToDecode) {
  // A truth map is what the case knows about the data: it must decode.
  EXPECT_EQ(error_kind(case_with(R"(, "truth": {"logical_shape": [4.0], "ranks": {}})")),
            ErrorKind::format);
  EXPECT_EQ(error_kind(R"({"shardcheck_case": 1, "name": "no map"})"), ErrorKind::format);
}

// A target truth says what the target shards hold, which means nothing without a target
// map (contract 11): such a case file is unusable, refused at $.target_truth.
TEST(CaseCodec, ATargetTruthWithoutATargetMapIsRefusedAtItsPath) {
  auto refused = decode_case_text(case_with(std::string(R"(, "target_truth": )") + kSplitMap));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::format);
  EXPECT_EQ(refused.error().path, "$.target_truth");
  EXPECT_NE(refused.error().sentence.find("target_map"), std::string::npos) << refused.error().sentence;
  Case both = decoded(case_with(std::string(R"(, "target_map": )") + kSplitMap + R"(, "target_truth": )" + kSplitMap));
  EXPECT_TRUE(both.target_map.has_value());
  EXPECT_TRUE(both.target_truth.has_value());
}

// Contract 9: a reshard's target map is under test too. One that does not decode is the
// case's refusal (format, at its path under $.target_map), kept as given and written back
// so; a target truth that does not decode makes the case unusable, as a truth does.
TEST(CaseCodec, ATargetMapThatDoesNotDecodeIsRefusedNotUnusable) {
  const std::string shapeless = R"({"logical_shape": [4], "ranks": {"0": {"shard_shape": [4],
      "pieces": [{"source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}})";
  Case c = decoded(case_with(std::string(R"(, "op": "reshard", "target_map": )") + shapeless));
  ASSERT_TRUE(c.undecoded_target_map.has_value());
  const Status refused = undecoded_map_error(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::format);
  EXPECT_EQ(refused.error().path, "$.target_map.ranks.0.pieces[0].shape");
  EXPECT_TRUE(undecoded_source_map_error(c).ok());
  EXPECT_EQ(encode_case(c).at("target_map"), Json::parse(shapeless));
  EXPECT_EQ(decoded(encode_case(c).dump()), c);

  auto unusable = decode_case_text(case_with(std::string(R"(, "op": "reshard", "target_map": )") + kSplitMap +
                                             R"(, "target_truth": )" + shapeless));
  ASSERT_FALSE(unusable.ok());
  EXPECT_EQ(unusable.error().path, "$.target_truth.ranks.0.pieces[0].shape");
}

// An inline map that JSON cannot hold is the map's refusal only when the case gives no
// map_text: beside one, the file says two things about the map under test and is
// unusable (the error of the whole text), never silently read with map_text replaced.
TEST(CaseCodec, AnUnreadableInlineMapBesideAMapTextMakesTheCaseUnusable) {
  const std::string twice = R"({"logical_shape": [4], "logical_shape": [4], "ranks": {}})";
  const std::string text = R"({"shardcheck_case": 1, "name": "t", "map": )" + twice + R"(, "map_text": )" +
                           Json(std::string(kSplitMap)).dump() + "}";
  auto refused = decode_case_text(text);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::format);
  EXPECT_EQ(refused.error().path, "$.map.logical_shape");
  EXPECT_EQ(refused.error().to_string(), parse_json(text).error().to_string());
  // Without map_text the same inline map is the case's map under test, kept as its text.
  Case alone = decoded(R"({"shardcheck_case": 1, "name": "t", "map": )" + twice + "}");
  EXPECT_EQ(alone.map_text, twice);
  EXPECT_TRUE(alone.map_text_inline);
}

Case full_case() {
  Case c = decoded(case_with(""));
  // Rank order as given must survive: put rank 1 first.
  std::swap(c.map.ranks[0], c.map.ranks[1]);
  c.name = "everything";
  c.truth = c.map;
  c.truth->ranks[0].pieces[0].locations = {1};
  c.map.ranks[0].pieces[0].scale = 2.0;
  c.dtype = DType::float16;
  c.full = std::vector<std::uint64_t>{0x3c00, 0x8000, 0x7e01, 0xffff};
  c.shards = std::map<Rank, std::vector<std::uint64_t>>{{0, {0x1, 0x2}}, {7, {0x3}}};
  c.scale_power = -2;
  c.ops = {Op::rebuild, Op::extract};
  c.expect = Outcome::refused;
  c.expect_error = ErrorKind::twice;
  c.accept_errors = {ErrorKind::uncovered, ErrorKind::holders};
  c.legacy_expect = Outcome::wrong;
  c.legacy_output = std::vector<std::uint64_t>{0x0, 0x7c00, 0xfc00, 0x1};
  c.constructor = "contiguous_split_map((4,),[2,2],0)";
  c.corruption = CorruptionRecord{"dest_offset", 1, 0, "dest_offset", "2", "0"};
  return c;
}

TEST(CaseCodec, RoundTripKeepsEveryField) {
  Case c = full_case();
  auto back = decode_case(encode_case(c));
  ASSERT_TRUE(back.ok()) << back.error().to_string();
  EXPECT_EQ(back.value(), c);
  EXPECT_EQ(back.value().map.ranks[0].rank, 1);
  auto text_back = decode_case_text(encode_case_text(c));
  ASSERT_TRUE(text_back.ok()) << text_back.error().to_string();
  EXPECT_EQ(text_back.value(), c);
}

TEST(CaseCodec, RoundTripOfAMinimalCase) {
  Case c = decoded(case_with(""));
  auto back = decode_case(encode_case(c));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value(), c);
  c.expect = Outcome::wrong_valid_layout;
  c.corruption = CorruptionRecord{"none", std::nullopt, std::nullopt, "", "", ""};
  c.legacy_output = std::vector<std::uint64_t>{};
  back = decode_case(encode_case(c));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back.value(), c);
}

TEST(CaseCodec, EncodingWritesBitsAsPaddedHex) {
  Case c = full_case();
  Json json = encode_case(c);
  EXPECT_EQ(json["shardcheck_case"], 1);
  EXPECT_EQ(json["full"][0], "0x3c00");
  EXPECT_EQ(json["shards"]["7"][0], "0x0003");
  EXPECT_EQ(json["dtype"], "float16");
  EXPECT_EQ(json["op"], "both");
  EXPECT_EQ(json["expect_error"], "twice");
  EXPECT_EQ(json["legacy"]["expect"], "wrong");
  EXPECT_EQ(json["map"]["ranks"].begin().key(), "1");
  std::string text = encode_case_text(c);
  EXPECT_NE(text.find("\n  \"name\": \"everything\""), std::string::npos) << text;
}

TEST(Outcome, OneNameTableForEveryField) {
  const std::pair<Outcome, std::string_view> names[] = {
      {Outcome::refused, "refused"},
      {Outcome::exact, "exact"},
      {Outcome::wrong, "wrong"},
      {Outcome::wrong_valid_layout, "wrong_valid_layout"}};
  for (const auto& [outcome, name] : names) {
    EXPECT_EQ(outcome_name(outcome), name);
    EXPECT_EQ(parse_outcome(name), outcome) << name;
  }
  EXPECT_FALSE(parse_outcome("silently wrong").has_value());
  EXPECT_FALSE(parse_outcome("valid_but_different").has_value());
  EXPECT_FALSE(parse_outcome("").has_value());
}

// target_fault is a verdict the harness reports (an implementation that crashed or
// answered garbage), never one a case file may expect: "target_fault" is not read.
TEST(Outcome, TargetFaultIsNamedButNeverExpected) {
  EXPECT_EQ(outcome_name(Outcome::target_fault), "target_fault");
  EXPECT_FALSE(parse_outcome("target_fault").has_value());
  for (const char* extra : {R"(, "expect": "target_fault")", R"(, "legacy": {"expect": "target_fault"})"}) {
    auto refused = decode_case_text(case_with(extra));
    ASSERT_FALSE(refused.ok()) << extra;
    EXPECT_EQ(refused.error().kind, ErrorKind::format);
    EXPECT_EQ(refused.error().path, std::string(extra).find("legacy") != std::string::npos ? "$.legacy.expect"
                                                                                            : "$.expect");
  }
}

TEST(CaseCodec, ExpectAndLegacyExpectShareTheOutcomeVocabulary) {
  for (std::string_view name : {"refused", "exact", "wrong", "wrong_valid_layout"}) {
    const std::string quoted = "\"" + std::string(name) + "\"";
    Case c = decoded(case_with(", \"expect\": " + quoted + ", \"legacy\": {\"expect\": " + quoted + "}"));
    ASSERT_TRUE(c.expect.has_value()) << name;
    ASSERT_TRUE(c.legacy_expect.has_value()) << name;
    EXPECT_EQ(outcome_name(*c.expect), name);
    EXPECT_EQ(outcome_name(*c.legacy_expect), name);
    Json json = encode_case(c);
    EXPECT_EQ(json["expect"], std::string(name));
    EXPECT_EQ(json["legacy"]["expect"], std::string(name));
  }
  EXPECT_EQ(error_kind(case_with(R"(, "expect": "valid_but_different")")), ErrorKind::format);
  EXPECT_EQ(error_kind(case_with(R"(, "legacy": {"expect": "silently wrong"})")), ErrorKind::format);
}

TEST(CaseCodec, OpNames) {
  EXPECT_EQ(op_name(Op::rebuild), "rebuild");
  EXPECT_EQ(op_name(Op::extract), "extract");
  EXPECT_EQ(op_name(Op::reshard), "reshard");
  for (Op op : kAllOps) EXPECT_EQ(parse_op(op_name(op)), op);
  EXPECT_EQ(parse_op("both"), std::nullopt);  // a spelling of the case file's "op", not an operation
}

// "op" is one name, a list, or the older spelling "both"; a list is kept in the table's
// order and written back as a list.
TEST(CaseCodec, OpsAreAList) {
  auto ops_of = [](const std::string& op) {
    auto c = decode_case_text(case_with(R"(, "op": )" + op));
    EXPECT_TRUE(c.ok()) << op << ": " << c.error().to_string();
    return c.ok() ? c.value().ops : OpList{};
  };
  EXPECT_EQ(ops_of(R"("both")"), (OpList{Op::rebuild, Op::extract}));
  EXPECT_EQ(ops_of(R"(["extract", "rebuild"])"), (OpList{Op::rebuild, Op::extract}));
  EXPECT_EQ(ops_of(R"("extract")"), OpList{Op::extract});
  Case c;
  c.ops = {Op::extract, Op::rebuild};
  EXPECT_EQ(encode_case(c)["op"], "both");  // the older spelling, which older readers know
  c.ops = {Op::reshard, Op::extract};
  EXPECT_EQ(encode_case(c)["op"], Json::array({"extract", "reshard"}));
  c.ops = {Op::extract};
  EXPECT_EQ(encode_case(c)["op"], "extract");
  auto refused = decode_case_text(case_with(R"(, "op": "reshard")"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("target_map"), std::string::npos);
  auto twice = decode_case_text(case_with(R"(, "op": ["rebuild", "rebuild"])"));
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().path, "$.op[1]");
}

}  // namespace
}  // namespace shardcheck
