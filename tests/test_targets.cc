// Implementations under test: the built-in targets, and the exec: protocol end to end
// against tests/python/protocol_impl.py (a small implementation written for these tests)
// and its misbehaving variants: a crash, a hang and a garbage answer each become their
// own finding, and the next case still runs, on a fresh process.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <cstdlib>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "shardcheck/campaign.h"
#include "shardcheck/case.h"
#include "shardcheck/constructors.h"
#include "shardcheck/digest.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/properties.h"

#include "support/spec_maps.h"

#include "../oracles/src/target_exec.h"

namespace shardcheck {
namespace {

using oracles::FaultKind;


// The interpreter the protocol tests run: $SHARDCHECK_TEST_PYTHON, else Debian's python3
// (CI installs python3-numpy for it).
std::string python() {
  const char* chosen = std::getenv("SHARDCHECK_TEST_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
}

std::string unavailable() {
  if (std::system(fmt::format("{} -c 'import numpy' >/dev/null 2>&1", python()).c_str()) != 0) {
    return python() + " cannot import numpy (apt-get install python3-numpy, or set SHARDCHECK_TEST_PYTHON)";
  }
  return {};
}

std::string impl_spec(const std::string& flags = "") {
  return fmt::format("exec:{} {}/tests/python/protocol_impl.py {}", python(), SHARDCHECK_SOURCE_DIR, flags);
}

std::unique_ptr<oracles::Target> start(const std::string& spec, double timeout = 10) {
  oracles::TargetOptions options;
  options.timeout_seconds = timeout;
  auto made = oracles::make_target(spec, options);
  EXPECT_TRUE(made.target) << made.error;
  return std::move(made.target);
}

Case layout_case(Map map, DType dtype = DType::float32, OpList ops = {Op::rebuild}) {
  Case c;
  c.name = "layout";
  c.map = std::move(map);
  c.dtype = dtype;
  c.ops = ops;
  return c;
}

// A corrupted map with the shards its producer wrote through it (the unchecked extract
// of the legacy policy, as for a reported map): no truth map is needed.
Case reported_case(Map map) {
  Case c = layout_case(std::move(map));
  const Buffer full = marker_buffer(c.dtype, checked_numel(c.map.logical_shape).value());
  c.shards = std::map<Rank, std::vector<std::uint64_t>>{};
  for (const auto& entry : c.map.ranks) {
    auto shard = legacy_extract(c.map, full, entry.rank);
    EXPECT_TRUE(shard.ok());
    if (!shard.ok()) continue;
    for (Index i = 0; i < shard.value().numel(); ++i) (*c.shards)[entry.rank].push_back(shard.value().bits(i));
  }
  return c;
}

// Valid layouts of several kinds, converted exactly by any correct implementation.
std::vector<Case> exact_cases() {
  std::vector<Case> cases;
  cases.push_back(
      layout_case(contiguous_split_map({4, 6}, {4, 2}, 1).value(), DType::float32, {Op::rebuild, Op::extract}));
  cases.push_back(layout_case(sub_param_map({2, 6}, {4, 2}, {{2, 2}, {1, 1}}, 1).value(), DType::bfloat16));
  cases.push_back(layout_case(replicated_map({3, 2}, 3, 2.0).value(), DType::float16, {Op::rebuild, Op::extract}));
  cases.push_back(layout_case(contiguous_split_map({5}, {2, 0, 3}, 0).value(), DType::int64, {Op::extract}));
  return cases;
}

oracles::CaseOutcome run(const Case& c, oracles::Target& target) {
  auto outcome = oracles::run_case(c, target);
  EXPECT_TRUE(outcome.ok()) << (outcome.ok() ? "" : outcome.error().to_string());
  return outcome.ok() ? outcome.value() : oracles::CaseOutcome{};
}

TEST(Targets, BuiltinsByName) {
  auto strict = oracles::make_target("strict");
  ASSERT_TRUE(strict.target);
  EXPECT_EQ(strict.target->name(), "strict");
  EXPECT_TRUE(strict.target->judges_kinds());
  auto legacy = oracles::make_target("legacy");
  ASSERT_TRUE(legacy.target);
  EXPECT_TRUE(legacy.target->is_legacy_model());
  // The same case through the policy and through the policy's target: one outcome.
  Case c = layout_case(build::repro2());
  c.shards = std::map<Rank, std::vector<std::uint64_t>>{};
  for (auto [rank, values] : {std::pair<Rank, std::vector<double>>{0, {9, 8, 7, 6}}, {1, {1, 2, 3}}}) {
    for (double v : values) (*c.shards)[rank].push_back(*bits_from_double(DType::float32, v));
  }
  ConvertOptions options;
  options.policy = Policy::legacy;
  const auto direct = oracles::run_case(c, options);
  const auto through = oracles::run_case(c, *legacy.target);
  ASSERT_TRUE(direct.ok() && through.ok());
  EXPECT_EQ(direct.value().message, through.value().message);
  EXPECT_EQ(through.value().verdict, Outcome::wrong);
  EXPECT_EQ(oracles::run_case(c, *strict.target).value().verdict, Outcome::refused);
}

// The nightly (issue 49) reaches every mode: each named target, each operation, the
// digest share, the device backend, the legacy policy and the large layouts, one matrix
// row each of .github/workflows/nightly.yml (`- {mode: NAME, args: "ARGS", ...}`).
TEST(Targets, TheNightlyRunsEveryModeAndNamedTarget) {
  std::ifstream in(std::string(SHARDCHECK_SOURCE_DIR) + "/.github/workflows/nightly.yml");
  ASSERT_TRUE(in) << "nightly.yml not found";
  std::vector<std::string> args;
  const std::regex row(R"re(^\s*- \{mode: [a-z0-9-]+, args: "([^"]*)")re");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row)) args.push_back(" " + m[1].str() + " ");
  }
  auto has = [&](const std::string& wanted) {
    return std::any_of(args.begin(), args.end(), [&](const std::string& a) { return a.find(" " + wanted + " ") != std::string::npos; });
  };
  EXPECT_TRUE(std::find(args.begin(), args.end(), "  ") != args.end()) << "no row runs the default campaign";
  for (const auto& target : oracles::named_targets()) {
    const std::string name(target.name);
    if (name == "strict") continue;  // the default campaign's row
    if (name == "legacy") {
      EXPECT_TRUE(has("--policy legacy")) << "the legacy policy has no nightly row";
      continue;
    }
    EXPECT_TRUE(has("--target " + name)) << "the named target " << name << " has no nightly row";
  }
  for (const char* mode : {"--op reshard", "--op extract", "--op rebuild", "--digest", "--backend device-omp", "--large-share 1 --digest"}) {
    EXPECT_TRUE(has(mode)) << "no nightly row runs " << mode;
  }
}

TEST(Targets, BadNamesAreUsageErrors) {
  EXPECT_FALSE(oracles::make_target("lenient").target);
  EXPECT_NE(oracles::make_target("lenient").error.find("unknown target"), std::string::npos);
  EXPECT_FALSE(oracles::make_target("exec:").target);
  // A command that exits at once never answers the handshake.
  auto gone = oracles::make_target("exec:exit 7");
  EXPECT_FALSE(gone.target);
  EXPECT_NE(gone.error.find("exit-7"), std::string::npos) << gone.error;
  // One that answers the handshake with something else is not a target either.
  auto chatty = oracles::make_target("exec:echo hello; sleep 5");
  EXPECT_FALSE(chatty.target);
  EXPECT_NE(chatty.error.find("garbage"), std::string::npos) << chatty.error;
}

TEST(Targets, Base64RoundTripsAndRefusesJunk) {
  for (std::size_t n : {0u, 1u, 2u, 3u, 4u, 5u, 255u}) {
    std::vector<std::byte> bytes(n);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<std::byte>(i * 37 + 11);
    const std::string text = oracles::base64_encode(bytes.data(), bytes.size());
    EXPECT_EQ(text.size(), (n + 2) / 3 * 4);
    auto back = oracles::base64_decode(text);
    ASSERT_TRUE(back) << text;
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(oracles::base64_encode(reinterpret_cast<const std::byte*>("Man"), 3), "TWFu");
  EXPECT_EQ(oracles::base64_encode(reinterpret_cast<const std::byte*>("Ma"), 2), "TWE=");
  EXPECT_FALSE(oracles::base64_decode("TWF"));
  EXPECT_FALSE(oracles::base64_decode("TW=u"));
  EXPECT_FALSE(oracles::base64_decode("TWE=TWFu"));
  EXPECT_FALSE(oracles::base64_decode("TW!u"));
}

// DeepSpeed's refusals name their kind in its adapter (adapters/deepspeed/serve.py,
// REFUSAL_KINDS), which answers the protocol's `kind` field; asked here through Python.
TEST(Targets, DeepSpeedRefusalsMapToKinds) {
  if (std::system(fmt::format("{} -c 'import numpy, torch' >/dev/null 2>&1", python()).c_str()) != 0) {
    GTEST_SKIP() << python() << " cannot import torch and numpy, which the adapter needs (apt-get install python3-torch)";
  }
  const std::string script = fmt::format(
      "import sys; sys.path.insert(0, '{}/adapters/deepspeed'); import serve\n"
      "cases = [('ValueError', 'Rank 1 holds a shard of 4 elements but its pieces account for 2.'),\n"
      "         ('ValueError', 'Rank 0 writes shard address 0 twice, so one piece would'),\n"
      "         ('NotImplementedError', 'Converting an optimizer state through a scaled piece'),\n"
      "         ('KeyError', \"'shard_shape'\"), ('KeyError', '3'),\n"
      "         ('RuntimeError', 'unsupported operation: more than one element of the written-to tensor refers to "
      "a single memory location.'),\n"
      "         ('JSONDecodeError', 'Extra data: line 1 column 3'),\n"
      "         ('TypeError', 'unsupported operand'), ('RuntimeError', 'something else')]\n"
      "print(' '.join(str(serve.refusal_kind(t, m)) for t, m in cases))\n",
      SHARDCHECK_SOURCE_DIR);
  const std::string path = ::testing::TempDir() + "/refusal_kinds.py";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  std::FILE* pipe = popen(fmt::format("{} {} 2>&1", python(), path).c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  EXPECT_EQ(pclose(pipe), 0) << out;
  EXPECT_EQ(out, "count twice scale format shape itself format None None\n");
}

class ExecTarget : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_F(ExecTarget, ConvertsExactCasesAndRefusesCorruptions) {
  auto target = start(impl_spec());
  ASSERT_TRUE(target);
  for (const Case& c : exact_cases()) {
    const auto outcome = run(c, *target);
    EXPECT_EQ(outcome.verdict, Outcome::exact) << describe(c.map) << outcome.message;
    EXPECT_EQ(outcome.target, target->name());
  }
  // Reported corruptions are refused, with the kind the implementation names itself.
  const struct {
    Map map;
    ErrorKind kind;
  } refused[] = {{build::repro2(), ErrorKind::itself}, {build::repro5(), ErrorKind::twice},
                 {build::repro6(), ErrorKind::twice}, {build::repro8(), ErrorKind::holders}};
  for (const auto& r : refused) {
    const auto outcome = run(reported_case(r.map), *target);
    EXPECT_EQ(outcome.verdict, Outcome::refused) << describe(r.map) << outcome.message;
    ASSERT_TRUE(outcome.error) << outcome.message;
    EXPECT_EQ(outcome.error->kind, r.kind) << outcome.message;
    ASSERT_TRUE(outcome.refusal);
    EXPECT_EQ(outcome.refusal->type, "Refused");
  }
  // A check request.
  const Map valid = contiguous_split_map({4, 6}, {4, 2}, 1).value();
  EXPECT_TRUE(std::holds_alternative<oracles::Accepted>(target->check({&valid, nullptr})));
  const Map bad = build::repro7();
  auto checked = target->check({&bad, nullptr});
  ASSERT_TRUE(std::holds_alternative<oracles::TargetRefusal>(checked));
  EXPECT_EQ(std::get<oracles::TargetRefusal>(checked).kind, ErrorKind::twice);
}

// The protocol carries a rebuild's content digest; protocol_impl.py ignores it, so the
// truth oracle judges its answer by the digest itself: wrong exactly where a digest check
// would have refused, and the strict target refuses there with kind digest.
TEST_F(ExecTarget, IgnoredDigestIsWrongOnlyWhereItWouldHaveRefused) {
  auto target = start(impl_spec());
  ASSERT_TRUE(target);
  Case c = layout_case(contiguous_split_map({4, 6}, {4, 2}, 1).value());
  c.digest = oracles::truth_digest(c).value();
  const auto right = run(c, *target);
  EXPECT_EQ(right.verdict, Outcome::exact) << right.message;
  *c.digest ^= 1;
  const auto ignored = run(c, *target);
  EXPECT_EQ(ignored.verdict, Outcome::wrong) << ignored.message;
  ASSERT_EQ(ignored.ops.size(), 1u);
  EXPECT_TRUE(ignored.ops[0].digest_ignored) << ignored.message;
  auto strict = oracles::make_target("strict");
  const auto refused = run(c, *strict.target);
  EXPECT_EQ(refused.verdict, Outcome::refused);
  ASSERT_TRUE(refused.error);
  EXPECT_EQ(refused.error->kind, ErrorKind::digest);
}

// The contract refuses every map the reference model refuses, even where the tensor
// returned happens to be right: locations that repeat a rank are format. The campaign
// found protocol_impl.py accepting them; --lax-locations plants that bug back. An
// implementation under test that accepts is an accepts-invalid finding naming it
// (contract 9), not strict-accepts. Red when that judgement is removed.
TEST_F(ExecTarget, AcceptingAMapTheReferenceRefusesIsAFindingEvenWhenTheTensorIsRight) {
  Map map = contiguous_split_map({4, 6}, {4, 2}, 1).value();
  map.ranks[0].pieces[0].locations = {map.ranks[0].rank, map.ranks[0].rank};
  Case c = layout_case(map);
  c.constructor = "hand";
  c.corruption = CorruptionRecord{"locations_add", {}, {}, {}, {}, {}};
  props::EvalOptions options;
  options.target = impl_spec();
  const props::Evaluation refused = props::evaluate_case(c, options);
  EXPECT_FALSE(refused.finding) << refused.finding->signature << ": " << refused.finding->message;
  EXPECT_EQ(refused.category, Outcome::refused);
  options.target = impl_spec("--lax-locations");
  const props::Evaluation accepted = props::evaluate_case(c, options);
  ASSERT_TRUE(accepted.finding);
  EXPECT_EQ(accepted.finding->signature, "accepts-invalid:exec:rebuild:format:hand/locations_add")
      << accepted.finding->message;
}

// An answer that says a fallback made it (docs/protocol.md: DeepSpeed's restore cutting
// the legacy chunk) is judged like any other and counted apart in the operation's label;
// a `fallback` that is no object holding a message is garbage.
TEST_F(ExecTarget, AFallbacksAnswerIsJudgedAndCountedApart) {
  const Case c = layout_case(contiguous_split_map({4, 6}, {4, 2}, 1).value());
  auto target = start(impl_spec("--fallback"));
  ASSERT_TRUE(target);
  const auto outcome = run(c, *target);
  EXPECT_EQ(outcome.verdict, Outcome::exact) << outcome.message;
  ASSERT_FALSE(outcome.ops.empty());
  for (const auto& op : outcome.ops) {
    ASSERT_TRUE(op.fallback) << op.message;
    EXPECT_EQ(op.fallback->type, "OtherPath");
  }
  props::EvalOptions options;
  options.target = impl_spec("--fallback");
  const props::Evaluation evaluation = props::evaluate_case(c, options);
  EXPECT_FALSE(evaluation.finding) << evaluation.finding->signature;
  ASSERT_FALSE(evaluation.ops.empty());
  for (const auto& op : evaluation.ops) EXPECT_EQ(op.label(), std::string(op_name(op.op)) + "-after-fallback");
  // A refusal says it too: a corrupted map is refused after the fallback.
  const auto refused = run(reported_case(build::repro5()), *target);
  EXPECT_EQ(refused.verdict, Outcome::refused) << refused.message;
  ASSERT_FALSE(refused.ops.empty());
  EXPECT_TRUE(refused.ops[0].fallback) << refused.message;

  auto garbled = start(impl_spec("--bad-fallback"));
  ASSERT_TRUE(garbled);
  const auto bad = run(c, *garbled);
  EXPECT_EQ(bad.verdict, Outcome::target_fault) << bad.message;
  ASSERT_TRUE(bad.fault) << bad.message;
  EXPECT_EQ(bad.fault->reason, "bad-fallback") << bad.message;
}

// Each fault variant misbehaves on its second request; the first and third cases (the
// third on a fresh process) must be exact.
struct FaultScenario {
  const char* flag;
  FaultKind kind;
  const char* reason;
};

void PrintTo(const FaultScenario& s, std::ostream* os) { *os << s.flag << " 2"; }

class ExecFaults : public ::testing::TestWithParam<FaultScenario> {
 protected:
  void SetUp() override {
    if (std::string why = unavailable(); !why.empty()) GTEST_SKIP() << why;
  }
};

TEST_P(ExecFaults, BecomesAFindingAndTheNextCaseRuns) {
  const FaultScenario& s = GetParam();
  auto target = start(impl_spec(fmt::format("{} 2", s.flag)), 2.0);
  ASSERT_TRUE(target);
  const Case c = layout_case(contiguous_split_map({4, 6}, {4, 2}, 1).value());
  EXPECT_EQ(run(c, *target).verdict, Outcome::exact);
  const auto started = std::chrono::steady_clock::now();
  const auto faulty = run(c, *target);
  EXPECT_EQ(faulty.verdict, Outcome::target_fault) << faulty.message;
  ASSERT_TRUE(faulty.fault) << faulty.message;
  EXPECT_EQ(faulty.fault->kind, s.kind) << faulty.message;
  EXPECT_EQ(faulty.fault->reason, s.reason) << faulty.message;
  EXPECT_FALSE(faulty.matches_expectation && faulty.verdict != Outcome::target_fault);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(30));
  const auto after = run(c, *target);
  EXPECT_EQ(after.verdict, Outcome::exact) << after.message;

  // The same fault in a campaign's evaluation is a finding with its signature, never a pass.
  props::EvalOptions eval;
  eval.target = impl_spec(fmt::format("{} 1", s.flag));
  eval.target_timeout_seconds = 2.0;
  campaign::Options options;
  Case generated = campaign::generate_indexed_case(options, 0);
  const props::Evaluation evaluation = props::evaluate_case(generated, eval);
  EXPECT_EQ(evaluation.category, Outcome::target_fault);
  ASSERT_TRUE(evaluation.finding);
  EXPECT_EQ(evaluation.finding->signature.rfind(fmt::format("target-{}:", oracles::fault_name(s.kind)), 0), 0u)
      << evaluation.finding->signature;
}

INSTANTIATE_TEST_SUITE_P(Variants, ExecFaults,
                         ::testing::Values(FaultScenario{"--crash-on", FaultKind::crash, "exit-3"},
                                           FaultScenario{"--hang-on", FaultKind::timeout, "timeout"},
                                           FaultScenario{"--garbage-on", FaultKind::garbage, "not-json"},
                                           FaultScenario{"--fork-server --crash-on", FaultKind::crash, "exit-3"},
                                           FaultScenario{"--fork-server --hang-on", FaultKind::timeout, "timeout"}),
                         [](const auto& info) {
                           const bool forked = std::string_view(info.param.flag).starts_with("--fork-server");
                           return std::string(oracles::fault_name(info.param.kind)) + (forked ? "ForkServer" : "");
                         });

// A fork server's child that dies is reported in the protocol: the same crash fault as a
// process's death, after which a fresh child answers, in the same process
// (tests/python/protocol_impl.py counts each child's requests, so a child's second
// request crashes it).
TEST_F(ExecTarget, ForkServerReportsACrashAndServesOn) {
  auto target = start(impl_spec("--fork-server --crash-on 2"));
  ASSERT_TRUE(target);
  const Case c = layout_case(contiguous_split_map({4, 6}, {4, 2}, 1).value());
  // Lines longer than one read of the server's, after the crash and between children.
  const Case large = layout_case(contiguous_split_map({512, 64}, {256, 256}, 0).value(), DType::float64);
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(run(large, *target).verdict, Outcome::exact);
    const auto faulty = run(c, *target);
    ASSERT_TRUE(faulty.fault) << faulty.message;
    EXPECT_EQ(faulty.fault->kind, FaultKind::crash);
    EXPECT_EQ(faulty.fault->reason, "exit-3") << faulty.message;
    EXPECT_NE(faulty.message.find("it died during rebuild"), std::string::npos) << faulty.message;
  }
  EXPECT_EQ(run(c, *target).verdict, Outcome::exact);
  const auto* process = dynamic_cast<const oracles::ExecTarget*>(target.get());
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->starts(), 1);  // the same process throughout
}

// A campaign through the protocol: the small implementation is never silently wrong,
// and its refusals carry kinds. In worker processes (each starts its own target process;
// this thread's own target, if an earlier test left one, stays this process's) the
// tallies are the same as in worker threads.
TEST_F(ExecTarget, CampaignThroughTheProtocol) {
  campaign::Options options;
  options.seed = 7;
  options.cases = 300;
  options.jobs = 2;
  options.eval.target = impl_spec();
  const campaign::Report report = campaign::run(options);
  EXPECT_EQ(report.cases, 300);
  EXPECT_EQ(report.total.target_faults, 0);
  EXPECT_EQ(report.total.wrong, 0) << campaign::format_table(report);
  EXPECT_GT(report.total.exact, 0);
  EXPECT_GT(report.total.refused, 0);
  for (const auto& finding : report.findings) ADD_FAILURE() << finding.signature << ": " << finding.message;
  // This thread's own instance of the same target, started before the fork, which the
  // workers inherit. (Disabling the detach in properties.cc did not make this fail when
  // tried: the check is the equal tallies, not the guard.)
  props::EvalOptions here;
  here.target = options.eval.target;
  EXPECT_NE(props::evaluate_case(campaign::generate_indexed_case(options, 0), here).category, Outcome::target_fault);
  options.isolate = true;
  const campaign::Report isolated = campaign::run(options);
  EXPECT_EQ(isolated.total, report.total) << campaign::format_table(isolated);
  EXPECT_EQ(isolated.by_corruption, report.by_corruption);
  EXPECT_TRUE(isolated.findings.empty());
}

}  // namespace
}  // namespace shardcheck
