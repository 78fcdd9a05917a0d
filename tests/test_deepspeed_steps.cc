// DeepSpeed 0.19.8's checkpoint steps as implementations under test: the universal
// checkpoint restore (deepspeed-restore: load_hp_checkpoint_state, served as extract,
// adapters/deepspeed/restore.py) and the conversion (deepspeed-convert:
// ds_to_universal.merge_tp_slices, served as rebuild, adapters/deepspeed/convert.py).
// Each serves its one operation, converts a valid map exactly, shows the behaviour its
// corpus case records (the restore's silent fallback and its power for a state it does
// not name; the conversion's refusals of checkpoints it cannot convert), and, with a bug
// planted in its adapter (SHARDCHECK_DEEPSPEED_PLANTED_BUG=flip), is caught silently wrong
// by a short campaign whose findings replay.
//
// Needs DeepSpeed set up (bash scripts/deepspeed-target.sh; SHARDCHECK_DEEPSPEED_PATH set
// and torch importable by /usr/bin/python3); otherwise the tests report SKIPPED and why.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shardcheck/case.h"
#include "shardcheck/constructors.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"
#include "deepspeed_setup.h"
#include "support/fallback_findings.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Case regression(const std::string& name) {
  auto c = decode_case_text(read_text(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions" / name));
  EXPECT_TRUE(c.ok()) << name << ": " << (c.ok() ? "" : c.error().to_string());
  return c.ok() ? std::move(c.value()) : Case{};
}

// A [4, 6] parameter split 4 + 2 along its columns: valid, unscaled.
Case valid_case(Op op) {
  Case c;
  c.name = "contiguous_split";
  c.map = contiguous_split_map({4, 6}, {4, 2}, 1).value();
  c.dtype = DType::float32;
  c.ops = {op};
  return c;
}

// An environment variable the adapter reads, set while one of these lives: the adapter
// process inherits it when the target starts.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedVariable() { ::unsetenv(name_); }
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
};

std::unique_ptr<oracles::Target> start(const std::string& name) {
  oracles::TargetOptions options;
  options.timeout_seconds = 60;
  auto made = oracles::make_target(name, options);
  EXPECT_TRUE(made.target) << made.error;
  return std::move(made.target);
}

// The case's one operation under `target`.
oracles::OpOutcome run_one(const Case& c, oracles::Target& target) {
  auto outcome = oracles::run_case(c, target);
  EXPECT_TRUE(outcome.ok()) << c.name;
  if (!outcome.ok() || outcome.value().ops.size() != 1) {
    ADD_FAILURE() << c.name << ": expected one operation";
    return {};
  }
  return outcome.value().ops[0];
}

class DeepSpeedSteps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = deepspeed_unavailable("universal_checkpoint.py"); !why.empty()) GTEST_SKIP() << why;
    if (std::string why = deepspeed_unavailable("ds_to_universal.py"); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(DeepSpeedSteps, EachServesItsOneOperation) {
  auto restore = start("deepspeed-restore");
  ASSERT_TRUE(restore);
  EXPECT_TRUE(restore->supports(Op::extract));
  EXPECT_FALSE(restore->supports(Op::rebuild));
  EXPECT_FALSE(restore->supports(Op::reshard));
  auto convert = start("deepspeed-convert");
  ASSERT_TRUE(convert);
  EXPECT_TRUE(convert->supports(Op::rebuild));
  EXPECT_FALSE(convert->supports(Op::extract));
  EXPECT_FALSE(convert->supports(Op::reshard));
  // An operation a target does not serve is not run: neither a pass nor a refusal.
  auto outcome = oracles::run_case(valid_case(Op::rebuild), *restore);
  ASSERT_TRUE(outcome.ok());
  EXPECT_TRUE(outcome.value().ops.empty());
  ASSERT_EQ(outcome.value().unsupported.size(), 1u);
  EXPECT_EQ(outcome.value().unsupported[0], Op::rebuild);
}

TEST_F(DeepSpeedSteps, ValidMapsConvertExactlyForEveryStateName) {
  for (const char* state : {"known", "unknown"}) {
    ScopedVariable chosen("SHARDCHECK_DEEPSPEED_STATE", state);
    auto restore = start("deepspeed-restore");
    auto convert = start("deepspeed-convert");
    ASSERT_TRUE(restore && convert);
    for (int power : {1, -1, -2}) {
      Case extract = valid_case(Op::extract);
      extract.scale_power = power;
      const oracles::OpOutcome restored = run_one(extract, *restore);
      EXPECT_EQ(restored.verdict, Outcome::exact) << state << " state, power " << power << ": " << restored.message;
      // Through the map, with a power that changes nothing on an unscaled map: no fallback.
      EXPECT_FALSE(restored.fallback) << state << " state, power " << power << ": " << restored.message;
      if (power != 1 && std::string(state) == "unknown") continue;  // checkpoints it refuses: below
      Case rebuild = valid_case(Op::rebuild);
      rebuild.scale_power = power;
      const oracles::OpOutcome converted = run_one(rebuild, *convert);
      EXPECT_EQ(converted.verdict, Outcome::exact) << state << " state, power " << power << ": " << converted.message;
    }
  }
}

TEST_F(DeepSpeedSteps, TheRestoreFallsBackSilentlyForARankTheMapDoesNotList) {
  auto restore = start("deepspeed-restore");
  ASSERT_TRUE(restore);
  const Case c = regression("deepspeed-restore-fallback-rank-not-in-map.json");
  const oracles::OpOutcome op = run_one(c, *restore);
  EXPECT_EQ(op.verdict, Outcome::wrong) << op.message;
  EXPECT_EQ(op.rank, 1) << op.message;
  // The adapter says the step did not go through the map, so the campaign counts it apart.
  ASSERT_TRUE(op.fallback) << op.message;
  EXPECT_EQ(op.fallback->type, "LegacyCategoryPath");
  EXPECT_NE(op.fallback->message.find("does not list rank 1"), std::string::npos) << op.fallback->message;
  EXPECT_NE(op.message.find("after a fallback"), std::string::npos) << op.message;

  expect_silently_wrong_after_fallback(c, "deepspeed-restore", Op::extract);
}

TEST_F(DeepSpeedSteps, TheRestoreScalesAStateItDoesNotNameAsTheParameter) {
  const Case c = regression("deepspeed-restore-unknown-state-scale.json");
  {
    ScopedVariable chosen("SHARDCHECK_DEEPSPEED_STATE", "unknown");  // Muon's momentum_buffer
    auto restore = start("deepspeed-restore");
    ASSERT_TRUE(restore);
    const oracles::OpOutcome op = run_one(c, *restore);
    EXPECT_EQ(op.verdict, Outcome::wrong) << op.message;
    // SCALE_POWER_BY_STATE's default power stood in for the state's own: a fallback.
    ASSERT_TRUE(op.fallback) << op.message;
    EXPECT_EQ(op.fallback->type, "DefaultScalePower");
    EXPECT_NE(op.fallback->message.find("momentum_buffer"), std::string::npos) << op.fallback->message;
  }
  ScopedVariable chosen("SHARDCHECK_DEEPSPEED_STATE", "known");  // Adam's exp_avg
  auto restore = start("deepspeed-restore");
  ASSERT_TRUE(restore);
  const oracles::OpOutcome op = run_one(c, *restore);
  EXPECT_EQ(op.verdict, Outcome::refused) << op.message;
  ASSERT_TRUE(op.refusal) << op.message;
  EXPECT_EQ(op.refusal->type, "NotImplementedError") << op.message;
  EXPECT_FALSE(op.fallback) << op.message;
}

TEST_F(DeepSpeedSteps, TheConversionRefusesCheckpointsItCannotConvert) {
  // Each map is valid (the case expects exact); 0.19.8's merge refuses the checkpoint.
  struct Expected {
    const char* file;
    const char* state;
    const char* type;
  };
  for (const Expected& e : {Expected{"deepspeed-convert-muon-momentum.json", "unknown", "StopIteration"},
                            Expected{"deepspeed-convert-scaled-adam.json", "known", "NotImplementedError"},
                            Expected{"deepspeed-convert-map-without-rank-0.json", "known", "KeyError"}}) {
    ScopedVariable chosen("SHARDCHECK_DEEPSPEED_STATE", e.state);
    auto convert = start("deepspeed-convert");
    ASSERT_TRUE(convert);
    const Case c = regression(e.file);
    EXPECT_EQ(c.expect, Outcome::exact) << e.file;
    const oracles::OpOutcome op = run_one(c, *convert);
    EXPECT_EQ(op.verdict, Outcome::refused) << e.file << ": " << op.message;
    ASSERT_TRUE(op.refusal) << e.file << ": " << op.message;
    EXPECT_EQ(op.refusal->type, e.type) << e.file << ": " << op.message;
    EXPECT_FALSE(op.refusal->message.empty()) << e.file;
  }
}

// --- the planted bug -----------------------------------------------------------------

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (const char ch : text) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return out + "'";
}

struct Ran {
  int exit_code = -1;
  std::string out;
};

Ran shardcheck(const std::string& args, const fs::path& scratch) {
  const fs::path captured = scratch / "output.txt";
  const int status =
      std::system((quoted(SHARDCHECK_BINARY) + " " + args + " > " + quoted(captured.string()) + " 2>&1").c_str());
  return Ran{WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text(captured)};
}

class PlantedBug : public DeepSpeedSteps, public ::testing::WithParamInterface<const char*> {
 protected:
  void SetUp() override {
    DeepSpeedSteps::SetUp();
    if (IsSkipped()) return;
    dir_ = fs::temp_directory_path() / fmt::format("shardcheck-planted-{}-{}", GetParam(), static_cast<long>(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty() && !HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

TEST_P(PlantedBug, IsCaughtSilentlyWrongAndReplays) {
  const std::string target = GetParam();
  const Op op = target == "deepspeed-restore" ? Op::extract : Op::rebuild;
  {
    // Without the plant the valid case is exact (above); with it, wrong.
    ScopedVariable plant("SHARDCHECK_DEEPSPEED_PLANTED_BUG", "flip");
    auto planted = start(target);
    ASSERT_TRUE(planted);
    const oracles::OpOutcome one = run_one(valid_case(op), *planted);
    EXPECT_EQ(one.verdict, Outcome::wrong) << one.message;
  }
  ScopedVariable plant("SHARDCHECK_DEEPSPEED_PLANTED_BUG", "flip");
  const fs::path out = dir_ / "campaign";
  // A restore runs the extracts alone, one case in five: more cases for as many.
  const int cases = op == Op::extract ? 1200 : 400;
  // Findings as found: a reduction starts the target again for each finding (400 cases
  // then took 63 s instead of 3); the reduced findings of a target are replayed in
  // test_finding_replay.cc.
  const Ran ran = shardcheck(fmt::format("campaign --target {} --seed 3 --cases {} --jobs 2 --quiet "
                                         "--reduce-evaluations 0 --out {}",
                                         target, cases, quoted(out.string())),
                             dir_);
  ASSERT_EQ(ran.exit_code, 1) << ran.out;
  // Wrong tensors from uncorrupted maps: only the plant makes those (a map that means what
  // the truth map means, converted by the real code, is exact but for NaN payloads).
  std::vector<fs::path> planted;
  for (const auto& entry : fs::directory_iterator(out / "findings")) {
    if (entry.path().extension() != ".json") continue;
    const auto finding = nlohmann::json::parse(read_text(entry.path()));
    const std::string signature = finding.at("signature");
    const std::string judge = finding.at("judge");
    if (signature.ends_with("/none") && (judge == "target_wrong" || judge == "valid_map_wrong")) {
      planted.push_back(entry.path());
    }
  }
  ASSERT_GE(planted.size(), 3u) << ran.out;
  for (std::size_t i = 0; i < planted.size() && i < 3; ++i) {
    const Ran replay = shardcheck(fmt::format("repro {}", quoted(planted[i].string())), dir_);
    EXPECT_EQ(replay.exit_code, 1) << planted[i] << "\n" << replay.out;
    EXPECT_NE(replay.out.find("WRONG"), std::string::npos) << replay.out;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, PlantedBug, ::testing::Values("deepspeed-restore", "deepspeed-convert"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param) == "deepspeed-restore" ? "Restore" : "Convert";
                         });

}  // namespace
}  // namespace shardcheck
