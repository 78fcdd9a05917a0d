// The campaign's loopback target: `shardcheck serve-protocol` behind the exec: codec must
// answer every generated case exactly as the in-process strict policy does (verdict,
// kind, and every tensor bit for bit), digests and large layouts included.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "shardcheck/campaign.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck {
namespace {

std::string loopback_spec() { return std::string("exec:exec ") + SHARDCHECK_BINARY + " serve-protocol"; }

void expect_same(const Case& c, oracles::Target& loopback) {
  ConvertOptions strict;
  strict.scale_power = c.scale_power;
  const auto direct = oracles::run_case(c, strict);
  const auto through = oracles::run_case(c, loopback);
  ASSERT_EQ(direct.ok(), through.ok()) << c.name;
  if (!direct.ok()) return;
  const auto& a = direct.value();
  const auto& b = through.value();
  EXPECT_EQ(a.verdict, b.verdict) << c.name << ": " << b.message;
  ASSERT_EQ(a.ops.size(), b.ops.size()) << c.name;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    EXPECT_EQ(a.ops[i].verdict, b.ops[i].verdict) << c.name;
    EXPECT_EQ(a.ops[i].error.has_value(), b.ops[i].error.has_value()) << c.name;
    if (a.ops[i].error && b.ops[i].error) {
      EXPECT_EQ(a.ops[i].error->kind, b.ops[i].error->kind) << c.name;
    }
    ASSERT_EQ(a.ops[i].output.has_value(), b.ops[i].output.has_value()) << c.name;
    if (a.ops[i].output) {
      // Same dtype and the same bytes (Buffer's ==; an empty buffer has no data pointer).
      EXPECT_TRUE(*a.ops[i].output == *b.ops[i].output) << c.name;
    }
  }
}

TEST(Loopback, AnswersEveryGeneratedCaseAsTheStrictPolicyDoes) {
  auto made = oracles::make_target(loopback_spec());
  ASSERT_TRUE(made.target) << made.error;
  gen::CaseOptions options;
  options.record_digest = true;
  gen::SeededChoices c(2024);
  for (int i = 0; i < 400; ++i) expect_same(gen::generate_case(c, options), *made.target);
}

TEST(Loopback, LargeLayoutsCrossTheCodecToo) {
  auto made = oracles::make_target(loopback_spec());
  ASSERT_TRUE(made.target) << made.error;
  gen::CaseOptions options;
  options.layout.large = true;
  gen::SeededChoices c(7);
  for (int i = 0; i < 3; ++i) {
    const Case k = gen::generate_case(c, options);
    EXPECT_GE(checked_numel(k.truth_map().logical_shape).value_or(0) * static_cast<Index>(element_size(k.dtype)),
              Index{4} << 20)
        << k.name;
    expect_same(k, *made.target);
  }
}

TEST(Loopback, ACampaignSendsItsShareOfCasesThroughIt) {
  campaign::Options options;
  options.cases = 3000;
  options.jobs = 1;
  options.isolate = false;
  options.loopback_target = loopback_spec();
  for (Index i = 0; i < *options.cases; ++i) {
    if (campaign::variant_of(options, i).loopback) {
      EXPECT_EQ(campaign::eval_options_of(options, i).target, loopback_spec());
    } else {
      EXPECT_TRUE(campaign::eval_options_of(options, i).target.empty());
    }
  }
  Index loopback = 0, digests = 0;
  for (Index i = 0; i < *options.cases; ++i) {
    loopback += campaign::variant_of(options, i).loopback;
    digests += campaign::variant_of(options, i).digest;
  }
  EXPECT_GT(loopback, 3000 / 64 / 2);
  EXPECT_LT(loopback, 3000 / 64 * 2);
  EXPECT_GT(digests, 3000 / 8 / 2);
  const auto report = campaign::run(options);
  EXPECT_EQ(report.cases, 3000);
  EXPECT_TRUE(report.findings.empty()) << report.findings.front().signature;
  EXPECT_TRUE(report.ledger_error.empty()) << report.ledger_error;
  // A user's target takes no share: neither the loopback nor digests it may ignore.
  options.eval.target = "legacy-as-exec-placeholder";
  for (Index i = 0; i < 200; ++i) {
    EXPECT_FALSE(campaign::variant_of(options, i).loopback);
    EXPECT_FALSE(campaign::variant_of(options, i).digest);
  }
}

}  // namespace
}  // namespace shardcheck
