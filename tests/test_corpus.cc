// Replays every case file in corpus/regressions: the strict policy must meet each
// file's expectation and never be silently wrong (except where a file documents a
// valid-but-different layout); the legacy model must reproduce the reported behaviour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions";

std::vector<std::string> corpus_files() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kCorpus, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<Case> load(const std::string& name) {
  std::ifstream in(kCorpus / name, std::ios::binary);
  if (!in) return make_error(ErrorKind::format, "cannot open " + name);
  std::ostringstream text;
  text << in.rdbuf();
  return decode_case_text(text.str());
}

TEST(Corpus, HasTheRegressionCases) {
  auto names = corpus_files();
  EXPECT_GE(names.size(), 10u) << "corpus directory " << kCorpus;
  // Every reproduction of contract 6 has at least one file.
  for (int n = 1; n <= 8; ++n) {
    std::string prefix = "spec6-" + std::to_string(n) + "-";
    bool found = std::any_of(names.begin(), names.end(),
                             [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
    EXPECT_TRUE(found) << "no corpus file for spec 6." << n;
  }
}

// The corpus is also the proof that the harness can fail: the legacy model must be
// caught silently wrong on the reported corruptions, strict on none of them.
TEST(Corpus, LegacyIsCaughtSilentlyWrong) {
  int legacy_wrong = 0;
  int strict_wrong = 0;
  for (const auto& name : corpus_files()) {
    auto c = load(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.error().to_string();
    if (name.rfind("spec6-", 0) != 0) continue;
    ConvertOptions legacy;
    legacy.policy = Policy::legacy;
    auto l = oracles::run_case(c.value(), legacy);
    auto s = oracles::run_case(c.value(), ConvertOptions{});
    ASSERT_TRUE(l.ok() && s.ok()) << name;
    legacy_wrong += l.value().verdict == Outcome::wrong;
    strict_wrong += s.value().verdict == Outcome::wrong;
  }
  EXPECT_GE(legacy_wrong, 7);
  EXPECT_EQ(strict_wrong, 0);
}

// Contract 10: every valid-but-different regression has a twin carrying the
// content digest its producer recorded (the digest of the F the truth map wrote, not an
// arbitrary wrong value), which strict must refuse with kind digest.
TEST(Corpus, EveryValidButDifferentCaseHasADigestTwin) {
  const auto names = corpus_files();
  std::vector<Case> cases;
  for (const auto& name : names) {
    auto c = load(name);
    ASSERT_TRUE(c.ok()) << name << ": " << c.error().to_string();
    cases.push_back(c.value());
  }
  int twins = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (c.expect != Outcome::wrong_valid_layout) continue;
    // A digest is verified by a rebuild (contract 10): an extract that is valid but
    // different (its rebuild refused, or not run) has no digest that could close it.
    auto plain = oracles::run_case(c, ConvertOptions{});
    ASSERT_TRUE(plain.ok()) << names[i];
    const auto& ops = plain.value().ops;
    if (std::none_of(ops.begin(), ops.end(), [](const oracles::OpOutcome& op) {
          return op.op == Op::rebuild && op.verdict == Outcome::wrong;
        })) {
      continue;
    }
    bool found = false;
    for (const Case& t : cases) {
      const bool same_data = t.map == c.map && t.truth == c.truth && t.dtype == c.dtype && t.full == c.full &&
                             t.shards == c.shards && t.scale_power == c.scale_power && t.ops == c.ops &&
                             t.target_map == c.target_map && t.target_truth == c.target_truth;
      if (!same_data || (!t.digest && !t.digest_state)) continue;
      if (t.expect != Outcome::refused || t.expect_error != ErrorKind::digest) continue;
      auto recorded = oracles::truth_digest(t);
      ASSERT_TRUE(recorded.ok());
      if (t.digest) {
        EXPECT_EQ(*t.digest, recorded.value()) << t.name << " records another tensor's digest";
      }
      auto outcome = oracles::run_case(t, ConvertOptions{});
      ASSERT_TRUE(outcome.ok()) << t.name;
      EXPECT_TRUE(outcome.value().matches_expectation) << t.name << ": " << outcome.value().expectation_message;
      found = true;
    }
    EXPECT_TRUE(found) << names[i] << " expects wrong_valid_layout but has no twin with a digest";
    twins += found;
  }
  EXPECT_GE(twins, 1);
}

TEST(TruthOracle, ARebuildThatIgnoresTheDigestIsWrongWhateverTheLayout) {
  auto loaded = load("valid-layout-swapped-destinations-digest.json");
  ASSERT_TRUE(loaded.ok());
  Case c = loaded.value();
  ConvertOptions legacy;  // DeepSpeed before the fix: no digests
  legacy.policy = Policy::legacy;
  auto ignored = oracles::run_case(c, legacy);
  ASSERT_TRUE(ignored.ok());
  EXPECT_EQ(ignored.value().verdict, Outcome::wrong);
  ASSERT_EQ(ignored.value().ops.size(), 1u);
  EXPECT_TRUE(ignored.value().ops[0].digest_ignored);
  // On the truth map itself, the tensor is exact but a wrong record must still be refused.
  c.map = *c.truth;
  c.digest = *c.digest ^ 1u;
  auto exact_but_wrong_record = oracles::run_case(c, legacy);
  ASSERT_TRUE(exact_but_wrong_record.ok());
  EXPECT_EQ(exact_but_wrong_record.value().verdict, Outcome::wrong);
  auto strict = oracles::run_case(c, ConvertOptions{});
  ASSERT_TRUE(strict.ok());
  EXPECT_EQ(strict.value().verdict, Outcome::refused);
  EXPECT_EQ(strict.value().error->kind, ErrorKind::digest);
}

// The truth oracle on hand-made variations of corpus cases.
Case must_load(const std::string& name) {
  auto c = load(name);
  EXPECT_TRUE(c.ok()) << name;
  return c.ok() ? c.value() : Case{};
}

TEST(TruthOracle, ExtractThroughSwappedDestinationsIsWrongOnAValidLayout) {
  Case c = must_load("valid-layout-swapped-destinations.json");
  c.ops = {Op::extract};
  auto outcome = oracles::run_case(c, ConvertOptions{});
  ASSERT_TRUE(outcome.ok());
  const auto& o = outcome.value();
  EXPECT_EQ(o.verdict, Outcome::wrong);
  EXPECT_TRUE(o.valid_layout);
  ASSERT_EQ(o.ops.size(), 1u);
  EXPECT_EQ(o.ops[0].op, Op::extract);
  EXPECT_EQ(o.ops[0].rank, Rank{0});
  ASSERT_TRUE(o.ops[0].difference.has_value());
  EXPECT_EQ(o.ops[0].difference->element, 0);
  EXPECT_EQ(o.ops[0].difference->count, 4);
  EXPECT_EQ(o.message.rfind("WRONG: extract rank 0 element 0 expected ", 0), 0u) << o.message;
}

TEST(TruthOracle, SameMapRoundTripMissesWhatTheTruthOracleSees) {
  Case c = must_load("valid-layout-swapped-destinations.json");
  auto same = oracles::run_case(c, ConvertOptions{}, oracles::OracleKind::same_map);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same.value().verdict, Outcome::exact);
  EXPECT_FALSE(same.value().matches_expectation);
  auto truth = oracles::run_case(c, ConvertOptions{}, oracles::OracleKind::truth);
  ASSERT_TRUE(truth.ok());
  EXPECT_EQ(truth.value().verdict, Outcome::wrong);
}

TEST(TruthOracle, BothOpsReportTheWorstVerdict) {
  Case c = must_load("valid-layout-swapped-destinations.json");
  c.ops = {Op::rebuild, Op::extract};
  auto outcome = oracles::run_case(c, ConvertOptions{});
  ASSERT_TRUE(outcome.ok());
  ASSERT_EQ(outcome.value().ops.size(), 2u);
  EXPECT_EQ(outcome.value().ops[0].op, Op::rebuild);
  EXPECT_EQ(outcome.value().ops[1].op, Op::extract);
  EXPECT_EQ(outcome.value().verdict, Outcome::wrong);

  Case refused = must_load("spec6-5-two-pieces-one-address.json");
  refused.ops = {Op::rebuild, Op::extract};
  auto r = oracles::run_case(refused, ConvertOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().verdict, Outcome::refused);
  ASSERT_TRUE(r.value().error.has_value());
  EXPECT_EQ(r.value().error->kind, ErrorKind::twice);
  EXPECT_EQ(r.value().message.rfind("refused twice: ", 0), 0u);
}

TEST(TruthOracle, ExpectationsUseOneOutcomeVocabulary) {
  // Swapped destinations: wrong on a map that passes every check, under either policy.
  Case c = must_load("valid-layout-swapped-destinations.json");
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto met = [&](const ConvertOptions& options) {
    auto outcome = oracles::run_case(c, options);
    EXPECT_TRUE(outcome.ok());
    return outcome.ok() && outcome.value().matches_expectation;
  };
  for (Outcome o : {Outcome::wrong, Outcome::wrong_valid_layout}) {
    c.expect = o;
    c.legacy_expect = o;
    EXPECT_TRUE(met(ConvertOptions{})) << outcome_name(o);
    EXPECT_TRUE(met(legacy)) << outcome_name(o);
  }
  for (Outcome o : {Outcome::refused, Outcome::exact}) {
    c.expect = o;
    c.legacy_expect = o;
    EXPECT_FALSE(met(ConvertOptions{})) << outcome_name(o);
    EXPECT_FALSE(met(legacy)) << outcome_name(o);
  }
  // Wrong on an invalid map is wrong, not wrong_valid_layout.
  Case invalid = must_load("spec6-7-dest-wraps-row.json");
  invalid.legacy_output.reset();
  invalid.legacy_expect = Outcome::wrong;
  auto outcome = oracles::run_case(invalid, legacy);
  ASSERT_TRUE(outcome.ok());
  EXPECT_TRUE(outcome.value().matches_expectation) << outcome.value().expectation_message;
  invalid.legacy_expect = Outcome::wrong_valid_layout;
  outcome = oracles::run_case(invalid, legacy);
  ASSERT_TRUE(outcome.ok());
  EXPECT_FALSE(outcome.value().matches_expectation);
  EXPECT_EQ(outcome.value().expectation_message, "legacy expected wrong_valid_layout, got wrong");
}

TEST(TruthOracle, ExtractForARankTheTruthLacksIsWrong) {
  Case c = must_load("valid-spec2-example.json");
  c.truth = c.map;
  // The map under test files rank 1's block under rank 5, a rank the truth lacks.
  c.map.ranks[1].rank = 5;
  c.map.ranks[1].pieces[0].locations = {5};
  c.ops = {Op::extract};
  auto outcome = oracles::run_case(c, ConvertOptions{});
  ASSERT_TRUE(outcome.ok()) << outcome.error().to_string();
  EXPECT_EQ(outcome.value().verdict, Outcome::wrong) << outcome.value().message;
  EXPECT_TRUE(outcome.value().valid_layout);
  EXPECT_EQ(outcome.value().ops[0].rank, Rank{5});
  EXPECT_NE(outcome.value().message.find("rank 5, which the truth map does not have"),
            std::string::npos)
      << outcome.value().message;
}

TEST(TruthOracle, LegacyOutputIsCompared) {
  Case c = must_load("spec6-2-source-overlaps-itself.json");
  ASSERT_TRUE(c.legacy_output.has_value());
  (*c.legacy_output)[1] = (*c.legacy_output)[0];  // claim 8 survived instead of 7
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto outcome = oracles::run_case(c, legacy);
  ASSERT_TRUE(outcome.ok());
  EXPECT_FALSE(outcome.value().matches_expectation);
  EXPECT_NE(outcome.value().expectation_message.find("element 1"), std::string::npos)
      << outcome.value().expectation_message;
}

TEST(TruthOracle, PlantedBugIsCaughtSilentlyWrong) {
  Case c = must_load("spec6-5-two-pieces-one-address.json");
  ConvertOptions planted;
  planted.checks.bugs.skip_dest_tiling = true;
  auto outcome = oracles::run_case(c, planted);
  ASSERT_TRUE(outcome.ok());
  // With the tiling check off, strict either still refuses through its read
  // tracking, or is caught returning a wrong tensor; it must never look exact.
  EXPECT_NE(outcome.value().verdict, Outcome::exact) << outcome.value().message;
  EXPECT_FALSE(outcome.value().valid_layout);
}

TEST(TruthOracle, UnusableCasesAreErrors) {
  Case c = must_load("valid-spec5-sub-param.json");
  c.full.reset();
  c.truth = must_load("spec6-5-two-pieces-one-address.json").map;  // what wrote the shards is itself refused
  auto refused_truth = oracles::run_case(c, ConvertOptions{});
  ASSERT_FALSE(refused_truth.ok());
  EXPECT_EQ(refused_truth.error().kind, ErrorKind::twice);
  EXPECT_EQ(refused_truth.error().sentence.rfind("in the truth map, ", 0), 0u) << refused_truth.error().message;

  Case counted = must_load("valid-spec5-sub-param.json");
  counted.full->pop_back();
  auto short_full = oracles::run_case(counted, ConvertOptions{});
  ASSERT_FALSE(short_full.ok());
  EXPECT_EQ(short_full.error().kind, ErrorKind::shape);
}

// Contract 9: a refusal that needs no data is a verdict although the truth cannot write
// the shards: the map under test fails contract 3 (here its own truth, so the truth fails
// too), and strict refuses it with its kind; legacy, given what the producer wrote through
// the truth unchecked, is judged against F.
TEST(TruthOracle, ARefusalThatNeedsNoDataIsAVerdictThoughTheTruthCannotWrite) {
  Case c = must_load("spec6-5-two-pieces-one-address.json");
  c.shards.reset();
  c.truth = c.map;
  auto strict = oracles::run_case(c, ConvertOptions{});
  ASSERT_TRUE(strict.ok()) << strict.error().to_string();
  EXPECT_EQ(strict.value().verdict, Outcome::refused) << strict.value().message;
  ASSERT_TRUE(strict.value().error.has_value());
  EXPECT_EQ(strict.value().error->kind, ErrorKind::twice);
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto unchecked = oracles::run_case(c, legacy);
  ASSERT_TRUE(unchecked.ok()) << unchecked.error().to_string();
  EXPECT_NE(unchecked.value().verdict, Outcome::refused) << unchecked.value().message;
}

// Contract 9: a reported map with neither truth nor shards runs on the shards
// the producer wrote with that very map (the unchecked legacy extract).
TEST(TruthOracle, AReportedMapAloneGetsAVerdictUnderEitherPolicy) {
  Case c = must_load("spec6-5-two-pieces-one-address.json");
  c.truth.reset();
  c.expect_error.reset();
  c.accept_errors.clear();
  auto strict = oracles::run_case(c, ConvertOptions{});
  ASSERT_TRUE(strict.ok()) << strict.error().to_string();
  EXPECT_EQ(strict.value().verdict, Outcome::refused);
  ASSERT_TRUE(strict.value().error.has_value());
  EXPECT_EQ(strict.value().error->kind, ErrorKind::twice);
  EXPECT_TRUE(strict.value().matches_expectation) << strict.value().expectation_message;

  // Extract wrote rank 0's two pieces over shard addresses 0,1 (the later one wins) and
  // left 2,3 as poison; legacy rebuild then copies F[2],F[3] into elements 0-3.
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto old = oracles::run_case(c, legacy);
  ASSERT_TRUE(old.ok()) << old.error().to_string();
  EXPECT_EQ(old.value().verdict, Outcome::wrong) << old.value().message;
  ASSERT_TRUE(old.value().ops[0].output.has_value());
  const Buffer& output = *old.value().ops[0].output;
  ASSERT_EQ(output.numel(), 4);
  EXPECT_EQ(output.bits(0), marker_bits(c.dtype, 2));
  EXPECT_EQ(output.bits(1), marker_bits(c.dtype, 3));
  EXPECT_EQ(output.bits(2), marker_bits(c.dtype, 2));
  EXPECT_EQ(output.bits(3), marker_bits(c.dtype, 3));
}

TEST(TruthOracle, ARankTheProducerCannotWriteHoldsPoison) {
  Case c = must_load("reported-unwritable-rank.json");
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto outcome = oracles::run_case(c, legacy);
  ASSERT_TRUE(outcome.ok()) << outcome.error().to_string();
  ASSERT_TRUE(outcome.value().ops[0].difference.has_value());
  EXPECT_EQ(outcome.value().ops[0].difference->element, 2);
  EXPECT_EQ(outcome.value().ops[0].difference->actual_bits, poison_bits(c.dtype));
}

TEST(TruthOracle, AReportedMapNoFFitsIsRefusedWithNoData) {
  Case c = must_load("reported-negative-logical-extent.json");
  for (Policy policy : {Policy::strict, Policy::legacy}) {
    ConvertOptions options;
    options.policy = policy;
    auto outcome = oracles::run_case(c, options);
    ASSERT_TRUE(outcome.ok()) << outcome.error().to_string();
    EXPECT_EQ(outcome.value().verdict, Outcome::refused) << outcome.value().message;
    ASSERT_EQ(outcome.value().ops.size(), 2u);
    for (const auto& op : outcome.value().ops) {
      ASSERT_TRUE(op.error.has_value());
      EXPECT_EQ(op.error->kind, ErrorKind::format);
    }
  }
  // `full` that does not fit an invalid reported map is the map's fault too...
  Case sized = must_load("reported-zero-scale.json");
  sized.full = std::vector<std::uint64_t>(5, 0);
  auto refused = oracles::run_case(sized, ConvertOptions{});
  ASSERT_TRUE(refused.ok()) << refused.error().to_string();
  EXPECT_EQ(refused.value().error->kind, ErrorKind::scale);
  // ...but the case's own fault when the map is valid.
  Case valid = must_load("valid-spec2-example.json");
  valid.truth.reset();
  valid.full = std::vector<std::uint64_t>(5, 0);
  auto unusable = oracles::run_case(valid, ConvertOptions{});
  ASSERT_FALSE(unusable.ok());
  EXPECT_EQ(unusable.error().kind, ErrorKind::shape);
}

TEST(TruthOracle, AnUndecodableMapIsRefusedFormatForEveryOp) {
  Case c = must_load("reported-string-extent.json");
  ASSERT_TRUE(c.undecoded_map.has_value());
  for (auto oracle : {oracles::OracleKind::truth, oracles::OracleKind::same_map}) {
    for (Policy policy : {Policy::strict, Policy::legacy}) {
      ConvertOptions options;
      options.policy = policy;
      auto outcome = oracles::run_case(c, options, oracle);
      ASSERT_TRUE(outcome.ok()) << outcome.error().to_string();
      const auto& o = outcome.value();
      EXPECT_EQ(o.verdict, Outcome::refused);
      EXPECT_FALSE(o.valid_layout);
      ASSERT_TRUE(o.error.has_value());
      EXPECT_EQ(o.error->kind, ErrorKind::format);
      EXPECT_EQ(o.error->path, "$.map.logical_shape[0]");
      EXPECT_EQ(o.ops.size(), oracle == oracles::OracleKind::truth ? 2u : 1u);
    }
  }
}

TEST(TruthOracle, OutcomeJsonCarriesTheVerdict) {
  Case c = must_load("spec6-7-dest-wraps-row.json");
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto outcome = oracles::run_case(c, legacy);
  ASSERT_TRUE(outcome.ok());
  Json json = oracles::outcome_to_json(c, outcome.value());
  EXPECT_EQ(json["name"], "spec6-7-dest-wraps-row");
  EXPECT_EQ(json["policy"], "legacy");
  EXPECT_EQ(json["verdict"], "wrong");
  EXPECT_EQ(json["valid_layout"], false);
  EXPECT_EQ(json["ops"][0]["difference"]["element"], 8);
  EXPECT_EQ(json["ops"][0]["difference"]["count"], 1);
}

class CorpusCase : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusCase, ParsesAndNamesItself) {
  auto c = load(GetParam());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  EXPECT_EQ(c.value().name + ".json", GetParam());
  EXPECT_TRUE(c.value().expect.has_value()) << "a regression case must state its expectation";
}

TEST_P(CorpusCase, StrictMeetsExpectation) {
  auto c = load(GetParam());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  auto outcome = oracles::run_case(c.value(), ConvertOptions{});
  ASSERT_TRUE(outcome.ok()) << outcome.error().to_string();
  const auto& o = outcome.value();
  EXPECT_TRUE(o.matches_expectation) << o.expectation_message << "\n" << o.message;
  if (c.value().expect != Outcome::wrong_valid_layout) {
    EXPECT_NE(o.verdict, Outcome::wrong) << "strict is silently wrong: " << o.message;
  }
}

TEST_P(CorpusCase, StrictIsIndependentOfRankOrder) {
  auto c = load(GetParam());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  Case reversed = c.value();
  std::reverse(reversed.map.ranks.begin(), reversed.map.ranks.end());
  for (auto& entry : reversed.map.ranks) std::reverse(entry.pieces.begin(), entry.pieces.end());
  auto a = oracles::run_case(c.value(), ConvertOptions{});
  auto b = oracles::run_case(reversed, ConvertOptions{});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value().verdict, b.value().verdict);
  if (a.value().error && b.value().error) {
    EXPECT_EQ(a.value().error->kind, b.value().error->kind);
  }
}

TEST_P(CorpusCase, LegacyReproducesTheReport) {
  auto c = load(GetParam());
  ASSERT_TRUE(c.ok()) << c.error().to_string();
  if (!c.value().legacy_expect && !c.value().legacy_output) GTEST_SKIP() << "no legacy block";
  ConvertOptions options;
  options.policy = Policy::legacy;
  auto outcome = oracles::run_case(c.value(), options);
  ASSERT_TRUE(outcome.ok()) << outcome.error().to_string();
  EXPECT_TRUE(outcome.value().matches_expectation)
      << outcome.value().expectation_message << "\n" << outcome.value().message;
}

std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.size() - 5);  // drop ".json"
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Regressions, CorpusCase, ::testing::ValuesIn(corpus_files()), test_name);

}  // namespace
}  // namespace shardcheck
