// Legacy fidelity: shardcheck's `legacy` model of DeepSpeed before the fix (contract
// section 4.1) against DeepSpeed's released module (the `deepspeed` target), on the same
// generated cases and on every case of corpus/regressions/. They may disagree only where
// contract 4.2 says the release has part of the fix: its validate() refuses dense
// destination intervals that leave the shard or overlap, which the pre-fix code accepted.
// Every other disagreement is a defect of the model (or a change in DeepSpeed) and fails.
//
// Needs DeepSpeed set up (bash scripts/deepspeed-target.sh; SHARDCHECK_DEEPSPEED_PATH set
// and torch importable by /usr/bin/python3); otherwise the tests report SKIPPED and why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "shardcheck/campaign.h"
#include "shardcheck/case.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"
#include "deepspeed_setup.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;


std::unique_ptr<oracles::Target> deepspeed_target() {
  oracles::TargetOptions options;
  options.timeout_seconds = 60;
  auto made = oracles::make_target("deepspeed", options);
  EXPECT_TRUE(made.target) << made.error;
  return std::move(made.target);
}

// Whether any piece's view that `op` writes through (the source view when rebuilding F,
// the dest view when extracting a shard) touches one address twice.
bool writes_overlap(const Map& map, Op op) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      const StridedView& view = op == Op::rebuild ? piece.source : piece.dest;
      const auto n = checked_numel(piece.shape);
      if (!n || *n <= 1 || *n > 1 << 20) continue;
      if (std::any_of(piece.shape.begin(), piece.shape.end(), [](Index e) { return e < 0; })) continue;
      std::set<Index> seen;
      for (Index k = 0; k < *n; ++k) {
        if (!seen.insert(address_at(piece.shape, view, k)).second) return true;
      }
    }
  }
  return false;
}

// Whether some view of the map reaches an address whose byte offset does not fit in 64
// bits (or whose element address does not): torch's own bounds check overflows there.
bool byte_addresses_overflow(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (std::any_of(piece.shape.begin(), piece.shape.end(), [](Index e) { return e < 0; })) continue;
      for (const StridedView* view : {&piece.source, &piece.dest}) {
        if (view->strides.size() != piece.shape.size() || view->offset < 0) continue;
        const auto facts = span_facts(piece.shape, *view);
        if (!facts || facts->max_address > std::numeric_limits<Index>::max() / 8) return true;
      }
    }
  }
  return false;
}

bool has_scaled_piece(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0) return true;
    }
  }
  return false;
}

// Whether the two answers differ only in the bits of NaNs: both returned a tensor of the
// same size (F, or the same rank's shard) and the tensors agree element by element up to
// NaN bits.
bool differ_only_in_nan_bits(DType dtype, const oracles::OpOutcome& a, const oracles::OpOutcome& b) {
  if (a.op != b.op || a.rank != b.rank || !a.output || !b.output || a.output->numel() != b.output->numel()) return false;
  for (Index i = 0; i < a.output->numel(); ++i) {
    const std::uint64_t x = a.output->bits(i);
    const std::uint64_t y = b.output->bits(i);
    if (x != y && !(is_nan_bits(dtype, x) && is_nan_bits(dtype, y))) return false;
  }
  return true;
}

// Why legacy and DeepSpeed may disagree on one operation, or "" when they may not.
//  - contract 4.2: the release refuses dense destination intervals that leave
//    the shard or overlap, where the pre-fix code did not look;
//  - a write through a view that overlaps itself keeps whichever value the copy kernel
//    writes last. The model writes in row-major order (contract 4.1); torch's CPU
//    kernel orders the axes by stride first, and an in-place scale (extract) multiplies
//    an element once per time the view reaches it. Both are wrong; the bits differ;
//  - torch's bounds check on a view works in bytes and wraps when a view's addresses do
//    not fit in 64 bits as bytes (torch 1.13, Debian's): DeepSpeed then reads wrapped
//    memory (silently wrong, sometimes by luck exact) or its process dies, where the model
//    refuses as torch means to. Either is a finding of any campaign against DeepSpeed;
//  - a map shardcheck's decoder refuses (a float or quoted number, a repeated key): the
//    model reads it as the built-in policies do, DeepSpeed with from_dict (contract 9);
//  - a NaN through torch's bfloat16 scaling comes out as 0x7fc0 from its scalar loop and
//    as 0xffff from its vectorised loop, and which loop runs depends on the view's layout
//    and the CPU; the model writes the quiet NaN with its sign (contract 4.1).
std::string explanation(const Case& c, const oracles::OpOutcome& legacy, const oracles::OpOutcome& deepspeed) {
  // DeepSpeed reads the map's JSON or text itself (contract 9): from_dict's int() takes a
  // float or quoted extent, Python's json a repeated key. The model reads maps with
  // shardcheck's decoder, as the built-in policies do, and refuses them format.
  if (legacy.verdict == Outcome::refused && legacy.error && legacy.error->kind == ErrorKind::format &&
      !undecoded_map_error(c).ok()) {
    return "DeepSpeed reads a map shardcheck's decoder refuses";
  }
  if (c.dtype == DType::bfloat16 && has_scaled_piece(c.map) && differ_only_in_nan_bits(c.dtype, legacy, deepspeed)) {
    return "bfloat16 NaN bits from torch's scaling loop";
  }
  // DeepSpeed's process died: torch's wrapped bounds check lets a view of a generated case
  // write outside its storage, which corrupts the process's heap, and that case or a later
  // one aborts in malloc (munmap_chunk, malloc_consolidate). A crash is no verdict to
  // model, and every campaign against DeepSpeed reports it as a target-crash finding.
  if (deepspeed.verdict == Outcome::target_fault) return "DeepSpeed's process died";
  // The model refuses the ranks whose views wrap, as torch means to; an extract that it
  // still finds wrong on another rank (NaN bits, say) is wrong rather than refused, while
  // DeepSpeed's answer for the wrapping rank is whatever the wrapped memory held.
  if (legacy.verdict != Outcome::exact && deepspeed.verdict != Outcome::refused && byte_addresses_overflow(c.map)) {
    return "torch's bounds check wraps past 64-bit byte addresses";
  }
  if (deepspeed.verdict == Outcome::refused && legacy.verdict != Outcome::refused && deepspeed.refusal) {
    const auto& r = *deepspeed.refusal;
    if (r.type == "ValueError" && (r.message.find("outside the shard") != std::string::npos ||
                                   r.message.find("twice, so one piece") != std::string::npos)) {
      return "contract 4.2: dense destination check";
    }
  }
  if (legacy.verdict == Outcome::wrong && deepspeed.verdict == Outcome::wrong && writes_overlap(c.map, legacy.op)) {
    return "self-overlapping write: order of the copy kernel";
  }
  return {};
}

std::string op_fingerprint(const oracles::OpOutcome& op) {
  std::string out = fmt::format("{} {}", op_name(op.op), outcome_name(op.verdict));
  if (op.rank) out += fmt::format(" rank {}", *op.rank);
  if (op.output) {
    for (Index i = 0; i < op.output->numel(); ++i) out += fmt::format(" {:x}", op.output->bits(i));
  }
  if (op.difference) {
    out += fmt::format(" diff@{} {:x} n{}", op.difference->element, op.difference->actual_bits, op.difference->count);
  }
  return out;
}

struct Disagreement {
  std::string name;
  std::string legacy;
  std::string deepspeed;
};

struct Tally {
  std::vector<Disagreement> unexplained;
  std::map<std::string, int> explained;  // by explanation
};

// Runs `c` under both, operation by operation, and records every disagreement.
void compare(const Case& c, oracles::Target& legacy, oracles::Target& deepspeed, Tally& tally) {
  // The legacy model has no planner (DeepSpeed before the fix had none): a reshard case
  // has nothing to compare. DeepSpeed's planner is judged in test_deepspeed_reshard.cc.
  if (c.ops.has(Op::reshard)) return;
  auto l = oracles::run_case(c, legacy);
  auto d = oracles::run_case(c, deepspeed);
  ASSERT_EQ(l.ok(), d.ok()) << c.name;
  if (!l.ok()) return;
  const auto& lops = l.value().ops;
  const auto& dops = d.value().ops;
  ASSERT_EQ(lops.size(), dops.size()) << c.name;
  for (std::size_t i = 0; i < lops.size(); ++i) {
    if (op_fingerprint(lops[i]) == op_fingerprint(dops[i])) continue;
    if (std::string why = explanation(c, lops[i], dops[i]); !why.empty()) {
      ++tally.explained[why];
      continue;
    }
    tally.unexplained.push_back({c.name, lops[i].message + "  [" + op_fingerprint(lops[i]) + "]",
                                 dops[i].message + "  [" + op_fingerprint(dops[i]) + "]"});
  }
}

std::string report(const Tally& tally, std::size_t limit = 20) {
  std::string text;
  for (const auto& [why, count] : tally.explained) text += fmt::format("\n  explained ({}): {}", why, count);
  for (std::size_t i = 0; i < tally.unexplained.size() && i < limit; ++i) {
    const auto& found = tally.unexplained[i];
    text += fmt::format("\n{}\n  legacy:    {}\n  deepspeed: {}", found.name, found.legacy, found.deepspeed);
  }
  return text;
}

std::uint64_t env_number(const char* name, std::uint64_t fallback) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? std::strtoull(text, nullptr, 10) : fallback;
}

class LegacyFidelity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string why = deepspeed_unavailable(); !why.empty()) GTEST_SKIP() << why;
    deepspeed_ = deepspeed_target();
    ASSERT_TRUE(deepspeed_);
    ConvertOptions options;
    options.policy = Policy::legacy;
    legacy_ = oracles::make_policy_target(options);
  }
  std::unique_ptr<oracles::Target> deepspeed_;
  std::unique_ptr<oracles::Target> legacy_;
};

TEST_F(LegacyFidelity, CorpusRegressions) {
  Tally tally;
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    auto c = decode_case_text(text.str());
    ASSERT_TRUE(c.ok()) << entry.path();
    c.value().name = entry.path().filename().string();
    compare(c.value(), *legacy_, *deepspeed_, tally);
    ++cases;
  }
  std::printf("corpus: %d cases%s\n", cases, report(tally, 0).c_str());
  EXPECT_TRUE(tally.unexplained.empty()) << tally.unexplained.size() << " unexplained disagreements:" << report(tally);
}

TEST_F(LegacyFidelity, GeneratedCases) {
  // SHARDCHECK_FIDELITY_SEED and SHARDCHECK_FIDELITY_CASES widen the search (a nightly
  // run, or after a DeepSpeed release); the defaults keep CI within a minute.
  campaign::Options options;
  options.seed = env_number("SHARDCHECK_FIDELITY_SEED", 20240919);
  const auto count = static_cast<Index>(env_number("SHARDCHECK_FIDELITY_CASES", 3000));
  Tally tally;
  for (Index i = 0; i < count; ++i) {
    Case c = campaign::generate_indexed_case(options, i);
    c.name = fmt::format("case {} ({}/{})", i, c.constructor, c.corruption ? c.corruption->kind : "none");
    compare(c, *legacy_, *deepspeed_, tally);
    if (::testing::Test::HasFatalFailure()) return;
  }
  std::printf("generated: %lld cases%s\n", static_cast<long long>(count), report(tally, 0).c_str());
  EXPECT_TRUE(tally.unexplained.empty()) << tally.unexplained.size() << " unexplained disagreements:"
                                         << report(tally);
}

}  // namespace
}  // namespace shardcheck
