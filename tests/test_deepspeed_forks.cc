// The DeepSpeed adapter as a fork server (adapters/protocol_server.py, docs/protocol.md
// "Fork servers"): a map whose view torch accepts past its tensor's storage (its bounds
// check works in bytes and wraps) writes memory no tensor owns. Its case is a crash or a
// wrong tensor, never a pass; the cases after it are answered by the same process, and
// neither the crash nor what the write did to the heap reaches them.
//
// Needs DeepSpeed set up (bash scripts/deepspeed-target.sh; SHARDCHECK_DEEPSPEED_PATH set
// and torch importable by /usr/bin/python3); otherwise the test reports SKIPPED and why.
#include <gtest/gtest.h>

#include <string>

#include "shardcheck/case.h"
#include "shardcheck/constructors.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"
#include "deepspeed_setup.h"

#include "../oracles/src/target_exec.h"

namespace shardcheck {
namespace {

// A float16 scalar at element 2^63-1: 2^64-2 bytes, which wrap to the 2 bytes before the
// tensor's data (the allocator's own bookkeeping). Found by a campaign (seed 1), where the
// write made glibc abort the process later ("double free or corruption").
constexpr const char* kPastStorage = R"({
  "shardcheck_case": 1,
  "name": "replicated/source_last_address_max",
  "map": {"logical_shape": [], "ranks": {"2": {"shard_shape": [], "pieces": [
    {"shape": [], "source": [9223372036854775807, []], "dest": [0, []], "locations": [2], "scale": 0.5}]}}},
  "truth": {"logical_shape": [], "ranks": {"2": {"shard_shape": [], "pieces": [
    {"shape": [], "source": [0, []], "dest": [0, []], "locations": [2], "scale": 0.5}]}}},
  "dtype": "float16",
  "scale_power": 1,
  "op": "rebuild"
})";

Case valid_case() {
  Case c;
  c.name = "contiguous_split";
  c.map = contiguous_split_map({4, 6}, {4, 2}, 1).value();
  c.dtype = DType::float32;
  c.ops = {Op::rebuild, Op::extract};
  return c;
}

TEST(DeepSpeedForks, AViewPastItsStorageReachesNoOtherCase) {
  if (std::string why = deepspeed_unavailable(); !why.empty()) GTEST_SKIP() << why;
  oracles::TargetOptions options;
  options.timeout_seconds = 60;
  auto made = oracles::make_target("deepspeed", options);
  ASSERT_TRUE(made.target) << made.error;
  auto past = decode_case_text(kPastStorage);
  ASSERT_TRUE(past.ok()) << past.error().to_string();
  const Case valid = valid_case();
  // torch 1.13's as_strided reads past the storage (a wrong tensor or a crash, which the
  // fork server contains); torch 2's checks the view against it and raises.
  const bool checks_storage = adapter_torch_major() >= 2;
  for (int round = 0; round < 8; ++round) {
    auto before = oracles::run_case(valid, *made.target);
    ASSERT_TRUE(before.ok());
    EXPECT_EQ(before.value().verdict, Outcome::exact) << before.value().message;
    auto outcome = oracles::run_case(past.value(), *made.target);
    ASSERT_TRUE(outcome.ok());
    const oracles::CaseOutcome& o = outcome.value();
    if (checks_storage) {
      EXPECT_EQ(o.verdict, Outcome::refused) << o.message;
      EXPECT_NE(o.message.find("Storage size calculation overflowed"), std::string::npos) << o.message;
    } else {
      EXPECT_TRUE(o.verdict == Outcome::wrong || o.verdict == Outcome::target_fault) << o.message;
    }
    if (o.fault) {
      EXPECT_EQ(o.fault->kind, oracles::FaultKind::crash) << o.message;
    }
  }
  auto after = oracles::run_case(valid, *made.target);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after.value().verdict, Outcome::exact) << after.value().message;
  const auto* process = dynamic_cast<const oracles::ExecTarget*>(made.target.get());
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->starts(), 1);  // no new interpreter: crashes cost a fork
}

}  // namespace
}  // namespace shardcheck
