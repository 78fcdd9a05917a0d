// The torch 2 targets, `dcp` (adapters/dcp/serve.py: PyTorch Distributed Checkpoint) and
// `megatron` (adapters/megatron/serve.py: Megatron-Core's dist_checkpointing and refit
// planner): each converts a valid map exactly, answers what it cannot express as
// `unsupported` (never a false refusal), and, with its planted bug on (one element of
// every returned tensor flipped), a short campaign finds a silently wrong tensor: proof
// that the harness sees what the adapter returns.
//
// Needs the torch 2 environment (bash scripts/torch2-env.sh, then export what it prints:
// SHARDCHECK_DCP_PYTHON, SHARDCHECK_MEGATRON_PYTHON); otherwise each test reports
// SKIPPED and why.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "shardcheck/campaign.h"
#include "shardcheck/case.h"
#include "shardcheck/constructors.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck {
namespace {

// Why the adapter `name` (dcp or megatron) cannot run here, or "" when it can: its
// $SHARDCHECK_<NAME>_PYTHON must import what the adapter imports.
std::string torch2_unavailable(const std::string& name, const std::string& imports) {
  std::string variable = "SHARDCHECK_" + name + "_PYTHON";
  for (char& ch : variable) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  const char* python = std::getenv(variable.c_str());
  if (python == nullptr || *python == '\0') {
    return fmt::format("{} is not set (run bash scripts/torch2-env.sh and export what it prints)", variable);
  }
  if (!std::filesystem::exists(python)) return fmt::format("{}={} does not exist", variable, python);
  const std::string probe = fmt::format("'{}' -c 'import {}' >/dev/null 2>&1", python, imports);
  if (std::system(probe.c_str()) != 0) {
    return fmt::format("{} cannot import {} (run bash scripts/torch2-env.sh)", python, imports);
  }
  return {};
}

std::string dcp_unavailable() { return torch2_unavailable("dcp", "torch.distributed.checkpoint, numpy"); }
std::string megatron_unavailable() {
  return torch2_unavailable("megatron", "megatron.core.dist_checkpointing, numpy");
}

// Sets an environment variable for the scope: the adapter's process inherits it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

Case split_case(Op op) {
  Case c;
  c.name = "contiguous_split";
  c.map = contiguous_split_map({4, 6}, {4, 2}, 1).value();
  c.dtype = DType::float32;
  c.ops = {op};
  return c;
}

void expect_exact(const std::string& target_name) {
  oracles::TargetOptions options;
  options.timeout_seconds = 120;
  auto made = oracles::make_target(target_name, options);
  ASSERT_TRUE(made.target) << made.error;
  for (Op op : {Op::rebuild, Op::extract}) {
    auto result = oracles::run_case(split_case(op), *made.target);
    ASSERT_TRUE(result.ok()) << result.error().to_string();
    EXPECT_EQ(result.value().verdict, Outcome::exact) << target_name << " " << op_name(op) << ": "
                                                      << result.value().message;
  }
}

// A short campaign; with the adapter's planted bug on (`plant` names its variable) it
// must find a wrong tensor, without it no false refusal may come from `unsupported`.
campaign::Report short_campaign(const std::string& target_name, Index cases) {
  campaign::Options options;
  options.seed = 5;
  options.cases = cases;
  options.jobs = 1;
  options.eval.target = target_name;
  options.eval.target_timeout_seconds = 120;
  return campaign::run(options);
}

void expect_planted_bug_found(const std::string& target_name, const char* plant) {
  ScopedEnv planted(plant, "1");
  const auto report = short_campaign(target_name, 60);
  EXPECT_GT(report.total.wrong, 0) << target_name << " with " << plant << "=1: no wrong tensor in 60 cases";
  bool wrong_finding = false;
  for (const auto& finding : report.findings) {
    wrong_finding |= finding.judge == props::JudgeId::silently_wrong || finding.judge == props::JudgeId::target_wrong;
  }
  EXPECT_TRUE(wrong_finding) << target_name << ": no silently-wrong finding";
}

void expect_unsupported_is_no_false_refusal(const std::string& target_name) {
  const auto report = short_campaign(target_name, 150);
  EXPECT_TRUE(report.by_refusal_kind.count(std::string(oracles::kUnsupportedType)))
      << target_name << ": no case was beyond what it can express (the generator makes scaled pieces)";
  for (const auto& finding : report.findings) {
    if (finding.judge != props::JudgeId::false_refusal) continue;
    EXPECT_EQ(finding.message.find("unsupported"), std::string::npos) << finding.signature << ": " << finding.message;
  }
}

TEST(DcpTarget, ConvertsAValidSplitExactly) {
  if (std::string why = dcp_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_exact("dcp");
}

TEST(DcpTarget, WhatItCannotExpressIsUnsupportedNotAFalseRefusal) {
  if (std::string why = dcp_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_unsupported_is_no_false_refusal("dcp");
}

TEST(DcpTarget, AShortCampaignFindsThePlantedBug) {
  if (std::string why = dcp_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_planted_bug_found("dcp", "SHARDCHECK_DCP_PLANT");
}

TEST(MegatronTarget, ConvertsAValidSplitExactly) {
  if (std::string why = megatron_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_exact("megatron");
}

TEST(MegatronTarget, WhatItCannotExpressIsUnsupportedNotAFalseRefusal) {
  if (std::string why = megatron_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_unsupported_is_no_false_refusal("megatron");
}

TEST(MegatronTarget, AShortCampaignFindsThePlantedBug) {
  if (std::string why = megatron_unavailable(); !why.empty()) GTEST_SKIP() << why;
  expect_planted_bug_found("megatron", "SHARDCHECK_MEGATRON_PLANT");
}

}  // namespace
}  // namespace shardcheck
