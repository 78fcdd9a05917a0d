// The model-layout corpus of resharding (contract 11): the layouts real models produce,
// built with the in-tree constructors at TP 1, 2, 4 and 8, and every change of TP degree
// among them as a regression case (corpus/regressions/reshard-<layout>-tp<A>-to-tp<B>.json)
// that must plan and execute bit-exact. The files are what this test builds: it fails when
// a file is missing or says something else, and SHARDCHECK_WRITE_RESHARD_CORPUS=1 (re)writes
// them.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "shardcheck/case.h"
#include "shardcheck/constructors.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/reshard.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

const fs::path kCorpus = fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions";
constexpr int kDegrees[] = {1, 2, 4, 8};

std::vector<Index> even(Index total, int tp) { return std::vector<Index>(static_cast<std::size_t>(tp), total / tp); }

// Megatron's uneven split: the first total % tp ranks get one more.
std::vector<Index> uneven(Index total, int tp) {
  std::vector<Index> out(static_cast<std::size_t>(tp), total / tp);
  for (Index r = 0; r < total % tp; ++r) ++out[static_cast<std::size_t>(r)];
  return out;
}

struct ModelLayout {
  std::string name;
  std::string doc;
  DType dtype;
  std::function<Map(int tp)> at;
  // Contract 11 refuses a plan between different scales: the expected refusal, if any.
  std::optional<ErrorKind> refused_between_degrees;
};

std::vector<ModelLayout> model_layouts() {
  std::vector<ModelLayout> out;
  out.push_back({"mlp-up", "MLP up projection (24, 8), column-parallel: split along the output dim 0", DType::float32,
                 [](int tp) {
                   return contiguous_split_map({24, 8}, even(24, tp), 0).value();
                 },
                 std::nullopt});
  out.push_back({"mlp-down", "MLP down projection (8, 24), row-parallel: split along the input dim 1", DType::float32,
                 [](int tp) {
                   return contiguous_split_map({8, 24}, even(24, tp), 1).value();
                 },
                 std::nullopt});
  out.push_back({"codegen-fused-qkv",
                 "CodeGen-style fused QKV (24, 4): q, k and v of 8 rows each, every rank holding its slice of each",
                 DType::float32,
                 [](int tp) {
                   return sub_param_map({24, 4}, {8, 8, 8}, {even(8, tp), even(8, tp), even(8, tp)}, 0).value();
                 },
                 std::nullopt});
  out.push_back({"gptbigcode-mqa",
                 "GPTBigCode multi-query attention (20, 4): 16 query rows split, the 4 rows of the single K/V head "
                 "replicated on every rank",
                 DType::float16,
                 [](int tp) {
                   return segmented_map({20, 4}, {{16, false}, {4, true}}, 0, tp, {even(16, tp)}).value();
                 },
                 std::nullopt});
  out.push_back({"yuan-value-heads",
                 "Yuan shared-QK attention, value heads (16, 4) in blocks of 2 rows gathered round-robin (block b "
                 "on rank b % tp)",
                 DType::bfloat16,
                 [](int tp) {
                   std::vector<std::vector<Index>> ids(static_cast<std::size_t>(tp));
                   for (Index b = 0; b < 8; ++b) ids[static_cast<std::size_t>(b % tp)].push_back(b);
                   return block_gather_map({16, 4}, ids, 2, 0).value();
                 },
                 std::nullopt});
  out.push_back({"yuan-o-proj-bias",
                 "Yuan o_proj bias (4,), replicated and pre-divided by tp (scale 1/tp): between degrees the scales "
                 "differ and a plan, which may not rescale, is refused (rebuild then extract instead)",
                 DType::float32, [](int tp) { return replicated_map({4}, tp, 1.0 / tp).value(); }, ErrorKind::scale});
  out.push_back({"llama-lm-head-vocab67",
                 "Llama tied embedding / vocabulary-parallel lm_head (67, 4): 67 rows split unevenly at every degree",
                 DType::float32,
                 [](int tp) {
                   return contiguous_split_map({67, 4}, uneven(67, tp), 0).value();
                 },
                 std::nullopt});
  out.push_back({"autoep-experts",
                 "AutoEP experts (8, 2, 3) with replicated experts and an empty rank where the degree allows",
                 DType::bfloat16,
                 [](int tp) {
                   std::vector<std::vector<Index>> lists;
                   if (tp == 1) lists = {{0, 1, 2, 3, 4, 5, 6, 7}};
                   if (tp == 2) lists = {{0, 1, 2, 3, 4}, {4, 5, 6, 7}};
                   if (tp == 4) lists = {{0, 1, 2, 7}, {3, 4, 5}, {6, 7}, {}};
                   if (tp == 8) lists = {{0}, {1}, {2}, {3}, {4, 5}, {6, 1}, {7}, {}};
                   return expert_placement_map({8, 2, 3}, lists).value();
                 },
                 std::nullopt});
  return out;
}

struct CorpusEntry {
  std::string file;
  std::string comment;
  Case c;
};

std::vector<CorpusEntry> entries() {
  std::vector<CorpusEntry> out;
  for (const ModelLayout& layout : model_layouts()) {
    for (int from : kDegrees) {
      for (int to : kDegrees) {
        if (from == to) continue;
        CorpusEntry e;
        e.c.name = fmt::format("reshard-{}-tp{}-to-tp{}", layout.name, from, to);
        e.file = e.c.name + ".json";
        e.c.map = layout.at(from);
        e.c.target_map = layout.at(to);
        e.c.dtype = layout.dtype;
        e.c.ops = {Op::reshard};
        const bool refused = layout.refused_between_degrees.has_value();
        e.c.expect = refused ? Outcome::refused : Outcome::exact;
        e.c.expect_error = layout.refused_between_degrees;
        e.comment = fmt::format("Contract 11, model-layout corpus: {}; TP {} to TP {}. {}", layout.doc, from, to,
                                refused ? "Refused as the contract asks." : "Must plan and execute bit-exact.");
        out.push_back(std::move(e));
      }
    }
  }
  return out;
}

// Top-level keys one per line, maps on one line each: short files a person can read.
std::string file_text(const CorpusEntry& e) {
  Json json = encode_case(e.c);
  std::string text = "{\n";
  text += fmt::format("  \"shardcheck_case\": {},\n", json["shardcheck_case"].dump());
  text += fmt::format("  \"name\": {},\n", json["name"].dump());
  text += fmt::format("  \"comment\": {},\n", Json(e.comment).dump());
  std::vector<std::string> lines;
  for (const auto& [key, value] : json.items()) {
    if (key == "shardcheck_case" || key == "name") continue;
    lines.push_back(fmt::format("  \"{}\": {}", key, value.dump()));
  }
  for (std::size_t i = 0; i < lines.size(); ++i) text += lines[i] + (i + 1 < lines.size() ? ",\n" : "\n");
  return text + "}\n";
}

std::optional<std::string> read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ReshardCorpus, FilesAreTheModelLayoutsAtEveryTpChange) {
  const bool write = std::getenv("SHARDCHECK_WRITE_RESHARD_CORPUS") != nullptr;
  const auto all = entries();
  EXPECT_EQ(all.size(), 8u * 12u);
  for (const CorpusEntry& e : all) {
    const fs::path path = kCorpus / e.file;
    if (write) {
      std::ofstream(path, std::ios::binary) << file_text(e);
      continue;
    }
    const auto text = read(path);
    ASSERT_TRUE(text.has_value()) << "missing " << path << " (SHARDCHECK_WRITE_RESHARD_CORPUS=1 writes it)";
    auto decoded = decode_case_text(*text);
    ASSERT_TRUE(decoded.ok()) << e.file << ": " << decoded.error().to_string();
    EXPECT_EQ(decoded.value(), e.c) << e.file << " differs from the layout this test builds";
  }
}

// Every TP change plans and executes bit-exact under the truth oracle, with rank and
// piece order of either map reversed as well.
TEST(ReshardCorpus, EveryTpChangePlansAndExecutesBitExact) {
  for (const CorpusEntry& e : entries()) {
    auto outcome = oracles::run_case(e.c);
    ASSERT_TRUE(outcome.ok()) << e.file << ": " << outcome.error().to_string();
    EXPECT_TRUE(outcome.value().matches_expectation) << e.file << ": " << outcome.value().expectation_message << "\n"
                                                     << outcome.value().message;
    EXPECT_NE(outcome.value().verdict, Outcome::wrong) << e.file;
    Case reversed = e.c;
    for (Map* map : {&reversed.map, &*reversed.target_map}) {
      std::reverse(map->ranks.begin(), map->ranks.end());
      for (auto& entry : map->ranks) std::reverse(entry.pieces.begin(), entry.pieces.end());
    }
    auto again = oracles::run_case(reversed);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(again.value().verdict, outcome.value().verdict) << e.file;
    if (e.c.expect == Outcome::exact) {
      EXPECT_TRUE(same_copies(plan(reversed.map, *reversed.target_map).value(), plan(e.c.map, *e.c.target_map).value()))
          << e.file;
    }
  }
}

}  // namespace
}  // namespace shardcheck
