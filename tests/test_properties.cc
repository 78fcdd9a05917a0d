// The property suite: each property is a plain function in
// properties/properties.h; this file only drives them from RapidCheck (with shrinking,
// RC_PARAMS reproduces a failure) and from seeded bulk loops (the bulk of CI's cases).
// A failure prints the counterexample as a ready case file for corpus/regressions/.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "shardcheck/backend.h"
#include "shardcheck/campaign.h"
#include "shardcheck/checks.h"
#include "shardcheck/convert.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/gen/rapidcheck_choices.h"
#include "shardcheck/properties.h"

namespace shardcheck {
namespace {

using props::EvalOptions;
using props::Finding;

// Bulk cases per seeded property; CI can scale with SHARDCHECK_PROPERTY_CASES.
Index bulk_cases(Index fallback) {
  if (const char* text = std::getenv("SHARDCHECK_PROPERTY_CASES")) {
    const long long value = std::atoll(text);
    if (value > 0) return value;
  }
  return fallback;
}

std::string report(const Finding& finding) {
  return finding.signature + "\n" + finding.message + "\ncase file:\n" + encode_case_text(finding.reproducer);
}

void tag(const Case& c) { RC_TAG(c.constructor, c.corruption ? c.corruption->kind : std::string("none")); }

Case rc_case(Index max_elements = 256) {
  gen::RapidCheckChoices choices;
  gen::CaseOptions options;
  options.layout.max_elements = max_elements;
  return gen::generate_case(choices, options);
}

Case rc_layout_case() {
  gen::RapidCheckChoices choices;
  gen::CaseOptions options;
  options.corrupt_probability = 0.0;
  return gen::generate_case(choices, options);
}

// --- RapidCheck properties (shrinking; tagged by constructor and corruption) -------

RC_GTEST_PROP(Property1, ConstructorMapsAreValidAndRoundTripBitExact, ()) {
  const Case c = rc_layout_case();
  RC_CLASSIFY(true, c.constructor);
  RC_CLASSIFY(true, std::string(dtype_name(c.dtype)));
  if (auto finding = props::check_constructor_roundtrip(c)) RC_FAIL(report(*finding));
}

RC_GTEST_PROP(Property2, CorruptedMapsAreRefusedOrExactUnderTheTruthOracle, ()) {
  const Case c = rc_case();
  tag(c);
  EvalOptions options;
  options.compare_reference = false;  // property 3 on its own below
  const auto evaluation = props::evaluate_case(c, options);
  RC_CLASSIFY(true, std::string(outcome_name(evaluation.category)));
  if (evaluation.finding) RC_FAIL(report(*evaluation.finding));
}

RC_GTEST_PROP(Property3, FastChecksAgreeWithTheReferenceModel, ()) {
  const Case c = rc_case();
  tag(c);
  if (auto finding = props::check_reference_agreement(c)) RC_FAIL(report(*finding));
}

// Property 3 compares where the two refuse, not only the kind (contract 3: the lowest
// rank, the first piece in content order, the lowest address). Rank 0's first piece in
// content order, listed first, leaves its shard; the planted names_last_piece names the
// rank's last piece instead, with the same kind and address, and property 3 says so.
TEST(Property3Judge, TheSameKindAtAnotherPieceIsAFinding) {
  Case c;
  c.name = "misplaced";
  c.constructor = "hand";
  c.corruption = CorruptionRecord{"none", {}, {}, {}, {}, {}};
  c.map.logical_shape = {4};
  Piece outside;  // F elements 0-1 into shard addresses 3-4 of 4
  outside.shape = {2};
  outside.source = StridedView{0, {1}};
  outside.dest = StridedView{3, {1}};
  outside.locations = {0};
  Piece inside = outside;
  inside.source.offset = 2;
  inside.dest.offset = 0;
  c.map.ranks.push_back(RankEntry{0, Extents{4}, {outside, inside}});
  const Status refused = check_map(c.map);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().kind, ErrorKind::bounds);
  EXPECT_EQ(refused.error().piece, 0);
  EXPECT_FALSE(props::check_reference_agreement(c).has_value());
  PlantedBugs bugs;
  bugs.names_last_piece = true;
  CheckOptions planted;
  planted.bugs = bugs;
  const Status misplaced = check_map(c.map, planted);
  ASSERT_FALSE(misplaced.ok());
  EXPECT_EQ(misplaced.error().kind, ErrorKind::bounds);
  EXPECT_EQ(misplaced.error().piece, 1);
  EXPECT_EQ(misplaced.error().address, refused.error().address);
  const auto finding = props::check_reference_agreement(c, bugs);
  ASSERT_TRUE(finding.has_value());
  EXPECT_NE(finding->signature.find("where:bounds:hand/none"), std::string::npos) << finding->signature;
  EXPECT_NE(finding->message.find(misplaced.error().to_string() + " against " + refused.error().to_string()),
            std::string::npos)
      << finding->message;
}

RC_GTEST_PROP(Property4, OutcomesDoNotDependOnRankOrPieceOrder, ()) {
  const Case c = rc_case();
  tag(c);
  gen::RapidCheckChoices choices;
  if (auto finding = props::check_order_independence(c, choices)) RC_FAIL(report(*finding));
}

// The fast paths give the very verdicts of the exact ones: check_map's box proof those of
// its run sweeps (the same error: kind, rank, piece, address, message), and the wide
// conversion, on 1 or 8 threads, the recorded conversion's tensor or error. Shards are
// written through the truth map by DeepSpeed's unchecked extract.
RC_GTEST_PROP(Property3, BoxProofAndWideConversionAgreeWithTheExactPaths, ()) {
  const Case c = rc_case();
  tag(c);
  CheckOptions runs;
  runs.box_proof = false;
  const Status boxes = check_map(c.map);
  const Status swept = check_map(c.map, runs);
  RC_ASSERT(boxes.ok() == swept.ok());
  if (!boxes.ok()) RC_ASSERT(boxes.error() == swept.error());
  const Map& truth = c.truth ? *c.truth : c.map;
  auto numel = checked_numel(truth.logical_shape);
  RC_PRE(numel.has_value() && *numel <= (Index{1} << 16));
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto shards = extract_all(truth, marker_buffer(c.dtype, *numel), legacy);
  RC_PRE(shards.ok());
  ConvertOptions recorded;
  recorded.wide_copies = false;
  recorded.scale_power = c.scale_power;
  const auto want = rebuild(c.map, shards.value(), c.dtype, recorded);
  for (int threads : {1, 8}) {
    ConvertOptions wide;
    wide.scale_power = c.scale_power;
    wide.threads = threads;
    wide.parallel_min_bytes = 0;
    const auto got = rebuild(c.map, shards.value(), c.dtype, wide);
    RC_ASSERT(got.ok() == want.ok());
    if (got.ok()) {
      RC_ASSERT(got.value() == want.value());
    } else {
      RC_ASSERT(got.error() == want.error());
    }
  }
}

RC_GTEST_PROP(Property6, JsonRoundTripsEveryGeneratedAndCorruptedMap, ()) {
  const Case c = rc_case();
  tag(c);
  if (auto finding = props::check_json_roundtrip(c)) RC_FAIL(report(*finding));
}

// --- Seeded bulk runs: the same property functions over many cases -----------------

campaign::Options bulk_options(std::uint64_t seed, Index cases, Index max_elements = 256) {
  campaign::Options options;
  options.seed = seed;
  options.cases = cases;
  options.jobs = 1;
  options.generate.layout.max_elements = max_elements;
  return options;
}

std::string describe_findings(const campaign::Report& report) {
  std::string out;
  for (const auto& finding : report.findings) {
    out += "\n" + finding.signature + " (" + std::to_string(finding.occurrences) + " cases)\n" + finding.message +
           "\ncase file:\n" + encode_case_text(finding.reproducer);
  }
  return out;
}

// Properties 2 and 3 over the seeded campaign generator, small and larger maps.
TEST(StrictCampaign, NothingSilentlyWrongAndTheReferenceAgrees) {
  const auto report = campaign::run(bulk_options(1, bulk_cases(40000)));
  EXPECT_EQ(report.total.wrong, 0);
  EXPECT_TRUE(report.findings.empty()) << describe_findings(report);
  // The run must have exercised every outcome but "wrong": a suite whose cases are all
  // refused (or all exact) proves nothing.
  EXPECT_GT(report.total.refused, report.cases / 10);
  EXPECT_GT(report.total.exact, report.cases / 10);
  std::printf("strict: %lld cases, %lld refused, %lld exact, %lld valid-but-different\n",
              static_cast<long long>(report.cases), static_cast<long long>(report.total.refused),
              static_cast<long long>(report.total.exact), static_cast<long long>(report.total.valid_but_different));
}

TEST(StrictCampaign, LargerMapsToo) {
  const auto report = campaign::run(bulk_options(2, bulk_cases(40000) / 8, 4096));
  EXPECT_EQ(report.total.wrong, 0);
  EXPECT_TRUE(report.findings.empty()) << describe_findings(report);
}

TEST(StrictCampaign, SameMapOracleFindsNothingEither) {
  auto options = bulk_options(3, bulk_cases(40000) / 4);
  options.eval.oracle = oracles::OracleKind::same_map;
  const auto report = campaign::run(options);
  EXPECT_EQ(report.total.wrong, 0);
  EXPECT_TRUE(report.findings.empty()) << describe_findings(report);
}

// Property 4 and 6 in bulk.
TEST(SeededProperties, OrderIndependenceAndJsonRoundTrip) {
  const Index cases = bulk_cases(40000) / 4;
  for (Index i = 0; i < cases; ++i) {
    gen::SeededChoices choices(campaign::case_seed(4, i));
    const Case c = gen::generate_case(choices, {});
    if (auto finding = props::check_order_independence(c, choices)) FAIL() << report(*finding);
    if (auto finding = props::check_json_roundtrip(c)) FAIL() << report(*finding);
  }
}

TEST(SeededProperties, ConstructorRoundTrip) {
  gen::CaseOptions options;
  options.corrupt_probability = 0.0;
  const Index cases = bulk_cases(40000) / 4;
  for (Index i = 0; i < cases; ++i) {
    gen::SeededChoices choices(campaign::case_seed(5, i));
    const Case c = gen::generate_case(choices, options);
    if (auto finding = props::check_constructor_roundtrip(c)) FAIL() << report(*finding);
  }
}

// --- Content digests (contract 10) -------------------------------------------

// Recorded and verified digests turn every valid-but-different rebuild into a refusal of
// kind digest; extract keeps the class (no digest of F can judge a shard). Without them
// the class shows in rebuild, so the first expectation can fail.
TEST(DigestCampaign, ClosesValidButDifferentForRebuildOnly) {
  auto off = bulk_options(9, bulk_cases(40000) / 2);
  auto on = off;
  on.generate.record_digest = true;
  const auto without = campaign::run(off);
  const auto with = campaign::run(on);
  ASSERT_TRUE(without.by_op.count("rebuild") && with.by_op.count("rebuild") && with.by_op.count("extract"));
  EXPECT_GT(without.by_op.at("rebuild").valid_but_different, 0);
  EXPECT_EQ(with.by_op.at("rebuild").valid_but_different, 0);
  EXPECT_GT(with.by_op.at("extract").valid_but_different, 0);
  EXPECT_EQ(with.total.wrong, 0);
  EXPECT_TRUE(with.findings.empty()) << describe_findings(with);
  ASSERT_TRUE(with.by_refusal_kind.count("digest"));
  EXPECT_GT(with.by_refusal_kind.at("digest").cases, 0);
  std::printf("digests: rebuild valid-but-different %lld without, %lld with; %lld refused digest\n",
              static_cast<long long>(without.by_op.at("rebuild").valid_but_different),
              static_cast<long long>(with.by_op.at("rebuild").valid_but_different),
              static_cast<long long>(with.by_refusal_kind.at("digest").cases));
}

TEST(DigestCampaign, OrderIndependenceAndJsonRoundTripWithRecords) {
  gen::CaseOptions options;
  options.record_digest = true;
  const Index cases = bulk_cases(40000) / 8;
  Index recorded = 0;
  for (Index i = 0; i < cases; ++i) {
    gen::SeededChoices choices(campaign::case_seed(10, i));
    const Case c = gen::generate_case(choices, options);
    recorded += !c.map.content_digests.empty();
    if (auto finding = props::check_order_independence(c, choices)) FAIL() << report(*finding);
    if (auto finding = props::check_json_roundtrip(c)) FAIL() << report(*finding);
  }
  EXPECT_GT(recorded, cases / 2);
}

// --- Property 5: the harness can fail ----------------------------------------------

// Under the legacy model the same generators must find silently wrong conversions
// within a bounded number of cases.
TEST(HarnessPower, LegacyPolicyIsCaughtSilentlyWrong) {
  auto options = bulk_options(6, 5000);
  options.eval.policy = Policy::legacy;
  options.reduce_evaluations = 0;  // as in PlantedBug.IsCaught
  const auto report = campaign::run(options);
  EXPECT_GT(report.total.wrong, 0) << "the legacy model was never caught in 5000 cases";
  bool silently_wrong_signature = false;
  for (const auto& finding : report.findings) {
    if (finding.signature.rfind("silently-wrong", 0) == 0) silently_wrong_signature = true;
  }
  EXPECT_TRUE(silently_wrong_signature);
  std::printf("legacy: %lld of %lld cases silently wrong\n", static_cast<long long>(report.total.wrong),
              static_cast<long long>(report.cases));
}

// Every planted bug (a strict check switched off) must produce a finding.
class PlantedBug : public testing::TestWithParam<props::PlantedScenario> {};

TEST_P(PlantedBug, IsCaught) {
  auto options = bulk_options(7, 5000);
  // Whether a finding is made, not how small its case gets: reducing every signature's
  // case (tested in test_reduce.cc) took most of this test's minute under the sanitizers.
  options.reduce_evaluations = 0;
  options.eval.bugs = GetParam().bugs;
  options.eval.compare_reference = !GetParam().truth_oracle_only;
  options.generate.record_digest = GetParam().record_digest;
  const auto report = campaign::run(options);
  EXPECT_FALSE(report.findings.empty()) << "planted bug " << GetParam().name << " went unnoticed";
  if (GetParam().truth_oracle_only) {
    EXPECT_GT(report.total.wrong, 0) << GetParam().name << " produced no silently wrong tensor";
  }
  if (!report.findings.empty()) {
    std::printf("%s caught: %s (%lld cases)\n", std::string(GetParam().name).c_str(),
                report.findings.front().signature.c_str(), static_cast<long long>(report.findings.front().occurrences));
  }
}

}  // namespace
}  // namespace shardcheck

namespace shardcheck::props {
// What gtest prints for a scenario (the test list, a failure): its name, not its bytes.
void PrintTo(const PlantedScenario& scenario, std::ostream* out) { *out << scenario.name; }
}  // namespace shardcheck::props

namespace shardcheck {
namespace {

INSTANTIATE_TEST_SUITE_P(Scenarios, PlantedBug,
                         testing::ValuesIn(props::planted_scenarios().begin(), props::planted_scenarios().end()),
                         [](const auto& info) { return std::string(info.param.name); });

// Determinism: the same seed gives the same table for any number of jobs, and shards add up.
TEST(CampaignEngine, DeterministicAcrossJobsAndShards) {
  auto one = bulk_options(8, 3000);
  auto many = one;
  many.jobs = 3;
  const auto a = campaign::run(one);
  const auto b = campaign::run(many);
  EXPECT_EQ(a.total, b.total);
  EXPECT_EQ(a.by_corruption, b.by_corruption);
  EXPECT_EQ(a.by_constructor, b.by_constructor);
  campaign::Tally shards;
  for (int i = 0; i < 3; ++i) {
    auto part = one;
    part.shard_index = i;
    part.shard_count = 3;
    shards.merge(campaign::run(part).total);
  }
  EXPECT_EQ(shards, a.total);
}

}  // namespace
}  // namespace shardcheck
