// The harness's own power: its oracles must not lean on the code they judge, and its
// generators must ask the questions a converter gets wrong. Each test names the change
// whose revert turns it red.
#include <algorithm>
#include <memory>
#include <variant>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "shardcheck/case.h"
#include "shardcheck/dtype.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/digest.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"
#include "shardcheck/gen/values.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/properties.h"

namespace shardcheck {
namespace {

using oracles::reference_scale;

// --- the independent rounding model (contract 1.2) -------------------------

// Hand-computed: each expectation is worked out in the comment beside it, not taken
// from any converter. Catches a reference model that scales through core's apply_scale
// or Eigen again and so inherits their faults (revert reference_scale to apply_scale and
// break dtype.cc's rounding: these still hold only for a correct apply_scale).
TEST(ReferenceRounding, HandComputedValues) {
  // float16 (1 + 2^-10) * 3 = 3 + 1.5 * 2^-9: a tie between 0x4201 and 0x4202; even wins.
  EXPECT_EQ(reference_scale(DType::float16, 0x3c01, 3.0, 1, true), 0x4202u);
  // float16 largest finite * 3 overflows to infinity.
  EXPECT_EQ(reference_scale(DType::float16, 0x7bff, 3.0, 1, true), 0x7c00u);
  // float32 smallest subnormal * RN(0.1) is below half the smallest subnormal: zero,
  // keeping the sign.
  EXPECT_EQ(reference_scale(DType::float32, 0x00000001, 0.1, 1, true), 0x00000000u);
  EXPECT_EQ(reference_scale(DType::float32, 0x80000001, 0.1, 1, true), 0x80000000u);
  // float32 2^-149 / RN(0.1) = 9.99999985 * 2^-149, which rounds to 10 subnormal quanta.
  EXPECT_EQ(reference_scale(DType::float32, 0x00000001, 0.1, 1, false), 0x0000000au);
  // -0 * 3 is -0; -0 * -1 is +0.
  EXPECT_EQ(reference_scale(DType::float16, 0x8000, 3.0, 1, true), 0x8000u);
  EXPECT_EQ(reference_scale(DType::bfloat16, 0x8000, -1.0, 1, true), 0x0000u);
  // bfloat16 1.0 / 3: 1/3 = 1.0101...b * 2^-2; 7 fraction bits 0101010, the rest
  // 1010... is above half: round up to 0101011 -> 0x3eab.
  EXPECT_EQ(reference_scale(DType::bfloat16, 0x3f80, 3.0, 1, false), 0x3eabu);
  // A NaN keeps its bits, payload and sign, signalling or quiet.
  EXPECT_EQ(reference_scale(DType::bfloat16, 0x7fc1, 0.5, 1, true), 0x7fc1u);
  EXPECT_EQ(reference_scale(DType::float32, 0x7f800001, 3.0, 1, false), 0x7f800001u);
  EXPECT_EQ(reference_scale(DType::float64, 0xfff0000000000001ULL, 0.1, 1, true), 0xfff0000000000001ULL);
  // Integers are never scaled.
  EXPECT_EQ(reference_scale(DType::int32, 7, 3.0, 1, true), 7u);
}

// Two independent models of one contract must agree on every value, the special ones
// included: the core's scaling (Eigen's half/bfloat16, native float) and the reference
// model's bit-level rounding. A difference is a fault in one of them.
TEST(ReferenceRounding, AgreesWithTheCoreOnSpecialAndRandomValues) {
  const double scales[] = {3.0, 0.1, 2.0, 0.5, -1.0, 1.0 / 3.0, 1e-3, 7.0};
  std::uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int compared = 0;
  for (DType dtype : {DType::float64, DType::float32, DType::float16, DType::bfloat16}) {
    std::vector<std::uint64_t> values = gen::special_values(dtype);
    const std::uint64_t mask = element_size(dtype) == 8 ? ~0ULL : (1ULL << (8 * element_size(dtype))) - 1;
    for (int i = 0; i < 4000; ++i) values.push_back(next() & mask);
    for (double scale : scales) {
      for (bool multiply : {true, false}) {
        for (std::uint64_t bits : values) {
          const std::uint64_t mine = reference_scale(dtype, bits, scale, 1, multiply);
          const std::uint64_t core = apply_scale(dtype, bits, scale, 1, multiply);
          ASSERT_EQ(mine, core) << dtype_name(dtype) << " " << format_element(dtype, bits)
                                << (multiply ? " * " : " / ") << scale;
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 100000);
}

// --- a map equivalent to the truth map must convert exactly ------------------------

Piece whole(Index n, std::vector<Rank> locations, double scale) {
  return Piece{{n}, {0, {1}}, {0, {1}}, std::move(locations), scale};
}

Case nan_case(Map map) {
  Case c;
  c.map = std::move(map);
  c.dtype = DType::float32;
  c.full = std::vector<std::uint64_t>{0x7f800001 /* signalling NaN */, 0x3f800000};
  c.constructor = "hand";
  c.corruption = CorruptionRecord{"none", {}, {}, {}, {}, {}};
  return c;
}

props::EvalOptions legacy_options() {
  props::EvalOptions options;
  options.policy = Policy::legacy;
  options.compare_reference = false;
  return options;
}

// The legacy model quietens a signalling NaN when it unscales (contract 4.1):
// on an uncorrupted, valid map that is a wrong tensor, and the harness must say so
// rather than file it as valid-but-different. Red when the equivalence rule of
// props::evaluate_case is removed (the case then ends wrong_valid_layout, no finding).
TEST(EquivalentMaps, WrongTensorOnAnUncorruptedMapIsAFinding) {
  Map map;
  map.logical_shape = {2};
  map.ranks.push_back(RankEntry{0, Extents{2}, {whole(2, {0}, 2.0)}});
  const Case c = nan_case(map);
  const props::Evaluation strict = props::evaluate_case(c);
  EXPECT_FALSE(strict.finding) << strict.finding->signature << ": " << strict.finding->message;
  EXPECT_EQ(strict.category, Outcome::exact);
  const props::Evaluation legacy = props::evaluate_case(c, legacy_options());
  ASSERT_TRUE(legacy.finding);
  EXPECT_EQ(legacy.finding->signature, "valid-map-wrong:rebuild:hand/none");
  EXPECT_EQ(legacy.category, Outcome::wrong);
}

// A scaled and an unscaled replica of one NaN agree (contract 1.2); the legacy
// model unscales the first arithmetically and then refuses its own replicas. A refusal
// of a valid, uncorrupted map is a finding. Red when the equivalence rule is removed.
TEST(EquivalentMaps, RefusalOfAnUncorruptedMapIsAFinding) {
  Map map;
  map.logical_shape = {2};
  map.ranks.push_back(RankEntry{0, Extents{2}, {whole(2, {0, 1}, 2.0)}});
  map.ranks.push_back(RankEntry{1, Extents{2}, {whole(2, {0, 1}, 1.0)}});
  const Case c = nan_case(map);
  EXPECT_FALSE(props::evaluate_case(c).finding);
  const props::Evaluation legacy = props::evaluate_case(c, legacy_options());
  ASSERT_TRUE(legacy.finding);
  EXPECT_EQ(legacy.finding->signature, "false-refusal:rebuild:hand/none");
}

// The pairing decides equivalence, not the JSON: a piece split in two is the same map.
TEST(EquivalentMaps, PairingIgnoresHowTheLayoutIsWritten) {
  Map one;
  one.logical_shape = {4};
  one.ranks.push_back(RankEntry{0, Extents{4}, {whole(4, {0}, 1.0)}});
  Map split = one;
  split.ranks[0].pieces = {Piece{{2}, {0, {1}}, {0, {1}}, {0}, 1.0}, Piece{{2}, {2, {1}}, {2, {1}}, {0}, 1.0}};
  ASSERT_TRUE(oracles::reference_pairing(one));
  EXPECT_EQ(oracles::reference_pairing(one), oracles::reference_pairing(split));
  Map swapped = split;
  std::swap(swapped.ranks[0].pieces[0].dest.offset, swapped.ranks[0].pieces[1].dest.offset);
  EXPECT_NE(oracles::reference_pairing(one), oracles::reference_pairing(swapped));
  Map scaled = one;
  scaled.ranks[0].pieces[0].scale = 2.0;
  EXPECT_NE(oracles::reference_pairing(one), oracles::reference_pairing(scaled));
}

// --- adversarial data --------------------------------------------------------------

// The generated cases carry special values and inexact scales. Red when
// CaseOptions::adversarial_data defaults to false or draw_adversarial_data stops
// drawing special values or rescaling.
TEST(AdversarialData, GeneratedCasesCarrySpecialValuesAndInexactScales) {
  gen::CaseOptions options;
  int with_data = 0, negative_zero = 0, nan_payload = 0, infinity = 0, subnormal = 0, inexact = 0;
  for (std::uint64_t seed = 0; seed < 3000; ++seed) {
    gen::SeededChoices choices(seed);
    const Case c = gen::generate_case(choices, options);
    if (!c.full) continue;
    ++with_data;
    if (c.dtype == DType::float32) {
      for (std::uint64_t bits : *c.full) {
        negative_zero += bits == 0x80000000u;
        nan_payload += (bits & 0x7fffffffu) > 0x7fc00000u;
        infinity += (bits & 0x7fffffffu) == 0x7f800000u;
        subnormal += (bits & 0x7f800000u) == 0 && (bits & 0x7fffffu) != 0;
      }
    }
    for (const auto& entry : c.truth_map().ranks) {
      for (const auto& piece : entry.pieces) inexact += piece.scale == 3.0 || piece.scale == 0.1;
    }
  }
  EXPECT_GT(with_data, 500);
  EXPECT_GT(negative_zero, 0);
  EXPECT_GT(nan_payload, 0);
  EXPECT_GT(infinity, 0);
  EXPECT_GT(subnormal, 0);
  EXPECT_GT(inexact, 0);
}

}  // namespace
}  // namespace shardcheck

namespace shardcheck {
namespace {

// --- what strict must refuse: damaged replica data, damaged map text ---------------

props::EvalOptions strict_options() { return {}; }

// Generated cases of the data and text rows, run through evaluate_case: each states
// what strict must do and strict does it. Red when case_gen stops setting the
// expectation (the replica flip and the text would then be accepted as exact or end as
// false refusals), or when strict accepts a damaged replica or text.
TEST(DataAndTextRows, StrictRefusesWhatTheyDamage) {
  std::map<std::string, int> refused_as_expected;
  for (std::uint64_t seed = 0; seed < 4000; ++seed) {
    gen::SeededChoices choices(seed);
    gen::CaseOptions options;
    options.corrupt_probability = 1.0;
    const Case c = gen::generate_case(choices, options);
    const std::string kind = c.corruption ? c.corruption->kind : "none";
    if (kind != "replica_copy_flip" && kind.rfind("text_", 0) != 0) continue;
    const props::Evaluation e = props::evaluate_case(c, strict_options());
    ASSERT_FALSE(e.finding) << e.finding->signature << ": " << e.finding->message;
    if (kind == "text_negative_zero" && c.corruption->new_value == "-0") {
      EXPECT_FALSE(c.expect.has_value()) << "-0 is the integer 0: a neutral edit";
      continue;
    }
    ASSERT_TRUE(c.expect_error.has_value()) << kind;
    EXPECT_EQ(e.category, Outcome::refused) << kind;
    ASSERT_TRUE(e.refusal.has_value()) << kind;
    EXPECT_EQ(*e.refusal, kind == "replica_copy_flip" ? ErrorKind::different_data : ErrorKind::format) << kind;
    ++refused_as_expected[kind];
  }
  for (const char* kind : {"replica_copy_flip", "text_fraction", "text_quoted_number", "text_huge_number",
                           "text_duplicate_key", "text_truncated", "text_lenient_syntax"}) {
    EXPECT_GT(refused_as_expected[kind], 0) << kind;
  }
}

// Each JSON superset text_lenient_syntax writes (a comma before ] or }, a comment /* */
// or //, a string in single quotes, NaN or Infinity for a number, a leading +) is refused
// format by the map reader, in every form the row writes. Red when the reader grows
// lenient (nlohmann's comments or trailing commas switched on, a plain reader that skips
// what it does not know) or when the row stops writing one of them.
TEST(DataAndTextRows, EveryLenientSyntaxIsRefusedFormat) {
  std::map<std::string, int> refused;
  auto variant_of = [](const std::string& v) -> std::string {
    for (const char* prefix : {"trailing comma before ]", "trailing comma before }", "comment \"/*", "comment \"//",
                               "single-quoted", "+", "NaN", "Infinity", "-Infinity"}) {
      if (v.starts_with(prefix)) return prefix;
    }
    return "unknown: " + v;
  };
  for (std::uint64_t seed = 0; seed < 600; ++seed) {
    gen::SeededChoices choices(seed);
    const gen::Layout layout = gen::generate_layout(choices, gen::LayoutOptions{});
    const gen::Corrupted bad = gen::corrupt_with(layout.map, "text_lenient_syntax", choices);
    ASSERT_EQ(bad.record.kind, "text_lenient_syntax");
    ASSERT_TRUE(bad.map_text.has_value());
    EXPECT_FALSE(bad.text_neutral);
    const std::string variant = variant_of(bad.record.new_value);
    ASSERT_FALSE(variant.starts_with("unknown")) << variant;
    auto decoded = decode_map_text(*bad.map_text);
    ASSERT_FALSE(decoded) << variant << " read as a map: " << *bad.map_text;
    EXPECT_EQ(decoded.error().kind, ErrorKind::format) << variant << ": " << decoded.error().to_string();
    ++refused[variant];
  }
  for (const char* variant : {"trailing comma before ]", "trailing comma before }", "comment \"/*", "comment \"//",
                              "single-quoted", "+", "NaN", "Infinity"}) {
    EXPECT_GT(refused[variant], 0) << variant;
  }
}

// A strict converter that accepted the damaged replica would be caught: the same case
// run with the planted bug that skips the replica comparison is a finding.
TEST(DataAndTextRows, AcceptingADamagedReplicaIsAFinding) {
  int found = 0;
  for (std::uint64_t seed = 0; seed < 4000 && found == 0; ++seed) {
    gen::SeededChoices choices(seed);
    gen::CaseOptions options;
    options.corrupt_probability = 1.0;
    const Case c = gen::generate_case(choices, options);
    if (!c.corruption || c.corruption->kind != "replica_copy_flip") continue;
    props::EvalOptions planted;
    planted.bugs.skip_replica_compare = true;
    const props::Evaluation e = props::evaluate_case(c, planted);
    ASSERT_TRUE(e.finding) << encode_case_text(c);
    ++found;
  }
  EXPECT_EQ(found, 1);
}

// The text a case file carries is what conversion reads: a cut document is refused
// format, a neutral text converts.
TEST(DataAndTextRows, CaseFilesCarryTheMapText) {
  Case c;
  c.map_text = R"({"logical_shape":[2],"ranks":{"0":{"shard_shape":[2],"pieces":[{"shape":[2],"source":[-0,[1]],"dest":[0,[1]],"locations":[0]}]}}})";
  auto decoded = decode_case_text(encode_case_text(c));
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_EQ(decoded.value().map_text, c.map_text);
  EXPECT_TRUE(undecoded_map_error(decoded.value()).ok());
  EXPECT_EQ(decoded.value().map.logical_shape, Extents{2});
  Case cut = c;
  cut.map_text = c.map_text->substr(0, 40);
  auto cut_decoded = decode_case_text(encode_case_text(cut));
  ASSERT_TRUE(cut_decoded);
  ASSERT_FALSE(undecoded_map_error(cut_decoded.value()).ok());
  EXPECT_EQ(undecoded_map_error(cut_decoded.value()).error().kind, ErrorKind::format);
  // A one-parameter envelope is a map text too; version 0, or two parameters, are not.
  const std::string map_json = *c.map_text;
  auto enveloped = decode_map_text(R"({"version":1,"params":{"w":)" + map_json + "}}");
  ASSERT_TRUE(enveloped) << enveloped.error().to_string();
  EXPECT_EQ(enveloped.value(), decoded.value().map);
  for (const std::string& bad : {R"({"version":0,"params":{"w":)" + map_json + "}}",
                                 R"({"version":1,"params":{"w":)" + map_json + R"(,"v":)" + map_json + "}}"}) {
    auto refused = decode_map_text(bad);
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.error().kind, ErrorKind::format);
  }
}

// The text rows edit every form a reader meets and the numbers with a least value: over
// generated cases some edit is made in the array form and in an envelope, and some
// writes a rank id -1, a version 0 or a digest cut short. Red when text_edit stops
// drawing forms or those variants.
TEST(DataAndTextRows, EditsReachEveryFormAndEveryLeastValue) {
  std::map<std::string, int> seen;
  for (std::uint64_t seed = 0; seed < 6000; ++seed) {
    gen::SeededChoices choices(seed);
    gen::CaseOptions options;
    options.corrupt_probability = 1.0;
    options.record_digest = seed % 2 == 0;
    const Case c = gen::generate_case(choices, options);
    if (!c.map_text) continue;
    if (c.map_text->find("\"version\"") != std::string::npos) ++seen["envelope"];
    if (c.map_text->find("\"ranks\":[") != std::string::npos) ++seen["array"];
    const CorruptionRecord& r = *c.corruption;
    if (r.new_value == "-1") ++seen["rank -1"];
    if (r.field == "map_text/version" && r.new_value == "0") ++seen["version 0"];
    if (r.field.rfind("map_text/content_digests/", 0) == 0) ++seen["short digest"];
  }
  for (const char* what : {"envelope", "array", "rank -1", "version 0", "short digest"}) {
    EXPECT_GT(seen[what], 0) << what;
  }
}

// --- judgements of what strict reports, not only whether it refuses -------------------

// Strict as it is, but a condition-7 refusal names a value no copy holds in place of the
// one this replica holds: the bug of a report computed with the wrong scaling.
class MisreportingStrict final : public oracles::Target {
 public:
  const std::string& name() const override { return name_; }
  oracles::TargetResult<oracles::Accepted> check(const oracles::TargetMap& map) override { return strict_->check(map); }
  oracles::TargetResult<oracles::TensorAnswer> rebuild(const oracles::TargetMap& map, const ShardSet& shards, DType dtype,
                                        int scale_power, const oracles::DigestRequest& digest) override {
    auto answer = strict_->rebuild(map, shards, dtype, scale_power, digest);
    if (auto* refusal = std::get_if<oracles::TargetRefusal>(&answer); refusal && refusal->error) {
      std::string& sentence = refusal->error->sentence;
      const auto from = sentence.find("holds ") + 6, to = sentence.find(" at shard address");
      if (from != std::string::npos && to != std::string::npos && to > from) {
        sentence.replace(from, to - from, format_element(dtype, 0x40490fdb /* 3.14159274 */));
      }
    }
    return answer;
  }
  oracles::TargetResult<oracles::TensorAnswer> extract(const oracles::TargetMap& map, const Buffer& full, Rank rank,
                                        int scale_power) override {
    return strict_->extract(map, full, rank, scale_power);
  }

 private:
  std::string name_ = "misreporting-strict";
  std::unique_ptr<oracles::Target> strict_ = oracles::make_policy_target(ConvertOptions{});
};

// Two replicas of F = {1, 2}, one stored scaled by 2 (it holds {2, 4}).
Case damaged_replica_case() {
  Case c;
  c.map.logical_shape = {2};
  c.map.ranks.push_back(RankEntry{0, Extents{2}, {whole(2, {0, 1}, 1.0)}});
  c.map.ranks.push_back(RankEntry{1, Extents{2}, {whole(2, {0, 1}, 2.0)}});
  c.dtype = DType::float32;
  c.full = std::vector<std::uint64_t>{0x3f800000, 0x40000000};
  c.shards = std::map<Rank, std::vector<std::uint64_t>>{{0, {0x3f800000, 0x40000000}}, {1, {0x40000000, 0x40800000}}};
  c.constructor = "hand";
  c.corruption = CorruptionRecord{"none", {}, {}, {}, {}, {}};
  return c;
}

// The copies of an element of F, unscaled, are what a condition-7 refusal may name: the
// reference counts them itself.
TEST(RefusalReports, ReferenceCopiesAreTheUnscaledReplicas) {
  const Case c = damaged_replica_case();
  ShardSet shards;
  for (const auto& [rank, bits] : *c.shards) {
    Buffer b(c.dtype, 2);
    for (Index i = 0; i < 2; ++i) b.set_bits(i, bits[static_cast<std::size_t>(i)]);
    shards.emplace(rank, std::move(b));
  }
  auto copies = oracles::reference_copies(c.map, shards, c.dtype, 1, 0);
  std::sort(copies.begin(), copies.end());
  EXPECT_EQ(copies, (std::vector<std::uint64_t>{0x3f800000, 0x3f800000}));  // 1, and 2 / 2
  copies = oracles::reference_copies(c.map, shards, c.dtype, 1, 1);
  std::sort(copies.begin(), copies.end());
  EXPECT_EQ(copies, (std::vector<std::uint64_t>{0x40000000, 0x40000000}));  // 2, and 4 / 2
}

// A refusal that names a value no copy holds is a finding, though refusing was right.
// Red when the truth oracle stops reading the values (misreported_values) or
// evaluate_case stops turning them into a finding.
TEST(RefusalReports, ADifferentDataRefusalNamingAValueNoCopyHoldsIsAFinding) {
  Case c = damaged_replica_case();
  (*c.shards)[1][1] = 0x40800001;  // rank 1's copy of element 1 is no longer 2 * 2
  auto strict = oracles::make_policy_target(ConvertOptions{});
  auto honest = oracles::run_case(c, *strict, oracles::OracleKind::truth);
  ASSERT_TRUE(honest);
  EXPECT_EQ(honest.value().verdict, Outcome::refused) << honest.value().message;
  ASSERT_EQ(honest.value().ops.size(), 1u);
  EXPECT_EQ(honest.value().ops[0].misreported, "") << honest.value().message;
  MisreportingStrict liar;
  auto misreported = oracles::run_case(c, liar, oracles::OracleKind::truth);
  ASSERT_TRUE(misreported);
  EXPECT_EQ(misreported.value().verdict, Outcome::refused);
  EXPECT_NE(misreported.value().ops[0].misreported, "") << misreported.value().message;
  EXPECT_FALSE(props::evaluate_case(c).finding);
}

// The reference's count of contract 10's shares, by hand: a replicated element
// is counted once, by the lowest rank of its locations, even when that rank holds it
// twice. Red when reference_digest_shares counts by another rank or counts twice.
TEST(DigestShares, ReferenceCountsEachElementOnceByItsLowestHolder) {
  Map map;
  map.logical_shape = {2};
  Piece second = whole(2, {0, 1}, 1.0);
  second.dest.offset = 2;
  map.ranks.push_back(RankEntry{0, Extents{4}, {whole(2, {0, 1}, 1.0), second}});
  map.ranks.push_back(RankEntry{1, Extents{2}, {whole(2, {0, 1}, 1.0)}});
  ASSERT_TRUE(oracles::reference_check(map).valid()) << oracles::reference_check(map).reason;
  Buffer full(DType::float32, 2);
  full.set_bits(0, 0x3f800000);
  full.set_bits(1, 0x40000000);
  ShardSet shards;
  shards.emplace(0, Buffer(DType::float32, 4));
  shards.emplace(1, Buffer(DType::float32, 2));
  for (Index i = 0; i < 4; ++i) shards.at(0).set_bits(i, full.bits(i % 2));
  for (Index i = 0; i < 2; ++i) shards.at(1).set_bits(i, full.bits(i));
  const auto shares = oracles::reference_digest_shares(map, shards, DType::float32);
  ASSERT_TRUE(shares.has_value());
  EXPECT_EQ(*shares, (std::map<Rank, std::uint64_t>{{0, digest_term(0, 0x3f800000) + digest_term(1, 0x40000000)}, {1, 0}}));
  EXPECT_EQ(shares->at(0), digest(full));
  const auto core = digest_shares(map, shards);
  ASSERT_TRUE(core) << core.error().to_string();
  EXPECT_EQ(core.value(), *shares);
}

// Generated digest cases: the truth oracle finds the core's shares equal to the
// reference's count, and the reference's shares add up to the digest of its own rebuild.
TEST(DigestShares, GeneratedDigestCasesAgreeWithTheReferenceCount) {
  int judged = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    gen::SeededChoices choices(seed);
    gen::CaseOptions options;
    options.record_digest = true;
    const Case c = gen::generate_case(choices, options);
    auto outcome = oracles::run_case(c, ConvertOptions{}, oracles::OracleKind::truth);
    ASSERT_TRUE(outcome) << outcome.error().to_string();
    EXPECT_EQ(outcome.value().digest_shares_wrong, "") << encode_case_text(c);
    if (!oracles::reference_check(c.map).valid()) continue;
    const Index numel = checked_numel(c.map.logical_shape).value();
    Buffer full = marker_buffer(c.dtype, numel);
    if (c.full) {
      for (Index i = 0; i < numel; ++i) full.set_bits(i, (*c.full)[static_cast<std::size_t>(i)]);
    }
    auto extracted = oracles::reference_extract_all(c.map, full, c.scale_power);
    if (!extracted) continue;
    const auto shares = oracles::reference_digest_shares(c.map, extracted.value(), c.dtype, c.scale_power);
    ASSERT_TRUE(shares.has_value());
    std::uint64_t sum = 0;
    for (const auto& [rank, share] : *shares) sum += share;
    auto rebuilt = oracles::reference_rebuild(c.map, extracted.value(), c.dtype, c.scale_power);
    if (!rebuilt) continue;  // replicas scaled apart: no tensor to compare with
    EXPECT_EQ(sum, digest(rebuilt.value())) << encode_case_text(c);
    ++judged;
  }
  EXPECT_GT(judged, 20);
}

// An implementation that reads maps itself (DeepSpeed's from_dict) is asked about a map
// shardcheck's decoder refuses when int() reads it (contract 9): the truth oracle hands
// it shards as that reading gives them. It records the shard sizes it was given.
class ReadsItsOwnMap final : public oracles::Target {
 public:
  const std::string& name() const override { return name_; }
  bool reads_map_itself() const override { return true; }
  oracles::TargetResult<oracles::Accepted> check(const oracles::TargetMap&) override { return oracles::Accepted{}; }
  oracles::TargetResult<oracles::TensorAnswer> rebuild(const oracles::TargetMap&, const ShardSet& shards, DType, int,
                                        const oracles::DigestRequest&) override {
    given.clear();
    for (const auto& [rank, shard] : shards) given[rank] = shard.numel();
    return oracles::TargetRefusal{ErrorKind::format, "ValueError", "refused", {}, {}};
  }
  oracles::TargetResult<oracles::TensorAnswer> extract(const oracles::TargetMap&, const Buffer&, Rank, int) override {
    return oracles::TargetRefusal{ErrorKind::format, "ValueError", "refused", {}, {}};
  }
  std::map<Rank, Index> given;

 private:
  std::string name_ = "reads-its-own-map";
};

// Python's int() of a string: surrounding whitespace, leading zeros (past 18 digits too),
// a sign, and single underscores between digits; not a doubled or leading underscore, and
// not a value past 64 bits, which no field holds.
TEST(ReadAsTheImplementation, NumericStringsAreReadAsPythonsIntReadsThem) {
  const auto shards_given = [](const std::string& shard_extent) -> std::optional<std::map<Rank, Index>> {
    const std::string map = R"({"logical_shape": [4], "ranks": {
        "0": {"shard_shape": [)" + shard_extent + R"(], "pieces": [{"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]},
        "1": {"shard_shape": [2], "pieces": [{"shape": [2], "source": [2, [1]], "dest": [0, [1]], "locations": [1]}]}}})";
    auto c = decode_case_text(R"({"shardcheck_case": 1, "name": "t", "map": )" + map + "}");
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().to_string());
    if (!c.ok()) return std::nullopt;
    EXPECT_FALSE(undecoded_map_error(c.value()).ok()) << shard_extent;
    ReadsItsOwnMap target;
    auto outcome = oracles::run_case(c.value(), target);
    EXPECT_TRUE(outcome.ok());
    if (target.given.empty()) return std::nullopt;  // never asked: int() gives no map
    return target.given;
  };
  const std::map<Rank, Index> two_and_two{{0, 2}, {1, 2}};
  for (const char* extent : {R"("2")", R"(" 2")", R"("\t+2\n")", R"("0000000000000000002")", R"("000_2")",
                             R"("0_0_0_0_0_0_0_0_0_0_2")"}) {
    EXPECT_EQ(shards_given(extent), two_and_two) << extent;
  }
  for (const char* extent : {R"("2_")", R"("_2")", R"("0__2")", R"("2.0")", R"("9223372036854775808")",
                             R"("-")", R"("")"}) {
    EXPECT_EQ(shards_given(extent), std::nullopt) << extent;
  }
}

}  // namespace
}  // namespace shardcheck
