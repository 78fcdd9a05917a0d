// DeepSpeed 0.19.8's transfer planner (deepspeed/checkpoint/affine_transfer.py) as an
// implementation under test of contract 11, through adapters/deepspeed/serve.py: a plan it
// makes and executes exactly, a corrupt map it refuses with InvalidMapError, and a layout it
// declines (UnsupportedLayoutError) judged by what its documented fallback returns, exact
// or silently wrong, and counted apart (reshard-after-fallback).
//
// Needs DeepSpeed set up (bash scripts/deepspeed-target.sh; SHARDCHECK_DEEPSPEED_PATH set
// and torch importable by /usr/bin/python3); otherwise the tests report SKIPPED and why.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "shardcheck/case.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/properties.h"
#include "deepspeed_setup.h"
#include "support/fallback_findings.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

Case regression(const std::string& name) {
  std::ifstream in(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions" / name, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto c = decode_case_text(text.str());
  EXPECT_TRUE(c.ok()) << name << ": " << (c.ok() ? "" : c.error().to_string());
  return c.ok() ? std::move(c.value()) : Case{};
}

class DeepSpeedReshard : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = deepspeed_unavailable("affine_transfer.py"); !why.empty()) GTEST_SKIP() << why;
    oracles::TargetOptions options;
    options.timeout_seconds = 60;
    auto made = oracles::make_target("deepspeed", options);
    ASSERT_TRUE(made.target) << made.error;
    target_ = std::move(made.target);
    ASSERT_TRUE(target_->supports(Op::reshard)) << "the adapter's handshake does not list reshard";
  }

  int torch_major_ = adapter_torch_major();

  // The case's one reshard operation under DeepSpeed.
  oracles::OpOutcome reshard(const Case& c) {
    auto outcome = oracles::run_case(c, *target_);
    EXPECT_TRUE(outcome.ok()) << c.name;
    if (!outcome.ok() || outcome.value().ops.size() != 1) {
      ADD_FAILURE() << c.name << ": expected one operation";
      return {};
    }
    EXPECT_EQ(outcome.value().ops[0].op, Op::reshard);
    return outcome.value().ops[0];
  }

  std::unique_ptr<oracles::Target> target_;
};

TEST_F(DeepSpeedReshard, PlansAndExecutesAColumnSplitExactly) {
  const oracles::OpOutcome op = reshard(regression("reshard-mlp-up-tp2-to-tp4.json"));
  EXPECT_EQ(op.verdict, Outcome::exact) << op.message;
  EXPECT_FALSE(op.fallback) << "plan_transfer plans an unscaled row-major split itself";
}

TEST_F(DeepSpeedReshard, RefusesACorruptTargetMapWithInvalidMapError) {
  Case c = regression("reshard-mlp-up-tp2-to-tp4.json");
  ASSERT_TRUE(c.target_map);
  c.target_truth = c.target_map;
  // Rank 0's piece claims a replica on rank 1, which holds other rows.
  RankEntry& first = c.target_map->ranks.at(0);
  ASSERT_EQ(first.rank, 0);
  first.pieces.at(0).locations = RankList{0, 1};
  const oracles::OpOutcome op = reshard(c);
  EXPECT_EQ(op.verdict, Outcome::refused) << op.message;
  ASSERT_TRUE(op.refusal) << op.message;
  EXPECT_EQ(op.refusal->type, "InvalidMapError") << op.message;
  ASSERT_TRUE(op.error) << "the adapter names a kind for this InvalidMapError: " << op.message;
  EXPECT_EQ(op.error->kind, ErrorKind::holders) << op.message;
  EXPECT_FALSE(op.fallback) << "an invalid map is refused, never routed to the fallback";
}

TEST_F(DeepSpeedReshard, JudgesADeclinedScaledLayoutByItsFallback) {
  // Yuan's o_proj bias is pre-divided by tp: plan_transfer declines every scaled piece, and
  // rebuild then extract rescales it correctly (strict refuses scale, since a plan may not
  // rescale; the fallback's tensor is the right one, so it is exact, not wrong).
  const oracles::OpOutcome op = reshard(regression("reshard-yuan-o-proj-bias-tp2-to-tp4.json"));
  EXPECT_EQ(op.verdict, Outcome::exact) << op.message;
  ASSERT_TRUE(op.fallback) << op.message;
  EXPECT_EQ(op.fallback->type, "UnsupportedLayoutError");
  EXPECT_NE(op.fallback->message.find("scale"), std::string::npos) << op.fallback->message;
}

TEST_F(DeepSpeedReshard, CountsASilentlyWrongFallbackApart) {
  const Case c = regression("deepspeed-plan-target-scale-corrupt.json");
  const oracles::OpOutcome op = reshard(c);
  EXPECT_EQ(op.verdict, Outcome::wrong) << op.message;
  ASSERT_TRUE(op.fallback) << op.message;
  EXPECT_NE(op.message.find("after its documented fallback"), std::string::npos) << op.message;

  expect_silently_wrong_after_fallback(c, "deepspeed", Op::reshard);
}

// Every minimal case of a silent class replays as the defect under DeepSpeed, and meets
// its expectation (refused, or exact for a valid pair) under strict.
TEST_F(DeepSpeedReshard, SilentClassesReplay) {
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("deepspeed-plan-", 0) != 0) continue;
    ++cases;
    const Case c = regression(name);
    const oracles::OpOutcome op = reshard(c);
    // The fallback's unscale and rescale of float16 by 2^21 loses the bits on torch 1.13
    // only: torch 2 gives them back, so this class is torch 1.13's (docs/resharding.md).
    const bool torch1_only = name == "deepspeed-plan-valid-scaled-fallback-rounds.json";
    EXPECT_EQ(op.verdict, torch1_only && torch_major_ >= 2 ? Outcome::exact : Outcome::wrong)
        << name << " (torch " << torch_major_ << "): " << op.message;
    EXPECT_TRUE(op.fallback) << name;
    auto strict = oracles::run_case(c);
    ASSERT_TRUE(strict.ok()) << name;
    EXPECT_TRUE(strict.value().matches_expectation) << name << ": " << strict.value().expectation_message;
  }
  EXPECT_GE(cases, 7) << "corpus/regressions/deepspeed-plan-*.json";
}

// Issue 47: on every pair of DeepSpeed's constructors' layouts (scripts/
// deepspeed_plan_matrix.py, 12 x 12 on (24, 16)), shardcheck's plan has no more segments
// than DeepSpeed's plan_transfer, and the two refuse the same pairs.
TEST_F(DeepSpeedReshard, NoPlanHasMoreSegmentsThanDeepSpeeds) {
  const std::string command = "/usr/bin/python3 '" + std::string(SHARDCHECK_SOURCE_DIR) +
                              "/scripts/deepspeed_plan_matrix.py' '" + SHARDCHECK_BINARY + "' 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (std::size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  const int status = pclose(pipe);
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("144 pairs"), std::string::npos) << out;
  EXPECT_NE(out.find("more on 0"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardcheck
