// Contract 5 against DeepSpeed 0.19.8's own constructors: for the same arguments,
// shardcheck's replicated_map, contiguous_split_map, sub_param_map, segmented_map,
// block_gather_map and expert_placement_map build the map DeepSpeed's affine.py and
// autoep_affine.py build, field by field and in the same order (tests/python/
// deepspeed_constructors.py runs theirs). The arguments are valid ones drawn at random:
// uneven and zero widths, empty tensors, replicated segments and experts, shuffled block
// lists. Where the two refuse differently is documented in docs/contract.md 5.
//
// Needs DeepSpeed set up (bash scripts/deepspeed-target.sh; SHARDCHECK_DEEPSPEED_PATH set
// and torch importable by /usr/bin/python3); otherwise the test reports SKIPPED and why.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "shardcheck/constructors.h"
#include "shardcheck/json.h"
#include "deepspeed_setup.h"

namespace shardcheck {
namespace {

namespace fs = std::filesystem;

class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  Index between(Index lo, Index hi) { return std::uniform_int_distribution<Index>(lo, hi)(rng_); }
  bool coin() { return between(0, 1) == 1; }

  Extents shape(Index min_dims, Index max_dims) {
    Extents out(static_cast<std::size_t>(between(min_dims, max_dims)));
    for (Index& e : out) e = between(0, 5);
    if (!out.empty() && between(0, 4) > 0) {
      for (Index& e : out) e = std::max<Index>(e, 1);  // mostly non-empty tensors
    }
    return out;
  }
  // `total` cut into `parts` widths, zeros included.
  std::vector<Index> split(Index total, Index parts) {
    std::vector<Index> cuts{0, total};
    for (Index i = 1; i < parts; ++i) cuts.push_back(between(0, total));
    std::sort(cuts.begin(), cuts.end());
    std::vector<Index> widths;
    for (std::size_t i = 1; i < cuts.size(); ++i) widths.push_back(cuts[i] - cuts[i - 1]);
    return widths;
  }
  template <class T>
  void shuffle(std::vector<T>& values) {
    std::shuffle(values.begin(), values.end(), rng_);
  }

 private:
  std::mt19937_64 rng_;
};

Json extents_json(const Extents& e) { return Json(std::vector<Index>(e.begin(), e.end())); }

// One call: the arguments as DeepSpeed's script reads them, and shardcheck's answer.
struct Call {
  Json arguments;
  Result<Map> ours;
};

Call replicated(Draw& d) {
  const Extents shape = d.shape(0, 3);
  const int tp = static_cast<int>(d.between(1, 8));
  const double scales[] = {1.0, 1.0, 0.5, 2.0, -1.0, 0.25};
  const double scale = scales[d.between(0, 5)];
  return {{{"fn", "replicated"}, {"shape", extents_json(shape)}, {"tp", tp}, {"scale", scale}},
          replicated_map(shape, tp, scale)};
}

Call contiguous_split(Draw& d) {
  const Extents shape = d.shape(1, 3);
  const int dim = static_cast<int>(d.between(0, static_cast<Index>(shape.size()) - 1));
  const std::vector<Index> sizes = d.split(shape[static_cast<std::size_t>(dim)], d.between(1, 6));
  return {{{"fn", "contiguous_split"}, {"shape", extents_json(shape)}, {"sizes", sizes}, {"dim", dim}},
          contiguous_split_map(shape, sizes, dim)};
}

Call sub_param(Draw& d) {
  const Extents shape = d.shape(1, 3);
  const int dim = static_cast<int>(d.between(0, static_cast<Index>(shape.size()) - 1));
  const Index tp = d.between(1, 4);
  const std::vector<Index> sub_sizes = d.split(shape[static_cast<std::size_t>(dim)], d.between(1, 3));
  std::vector<std::vector<Index>> widths;
  for (Index size : sub_sizes) widths.push_back(d.split(size, tp));
  return {{{"fn", "sub_param"}, {"shape", extents_json(shape)}, {"sub_sizes", sub_sizes}, {"widths", widths},
           {"dim", dim}},
          sub_param_map(shape, sub_sizes, widths, dim)};
}

Call segmented(Draw& d) {
  const Extents shape = d.shape(1, 3);
  const int dim = static_cast<int>(d.between(0, static_cast<Index>(shape.size()) - 1));
  const int tp = static_cast<int>(d.between(1, 4));
  std::vector<Segment> segments;
  Json segments_json = Json::array();
  std::vector<std::vector<Index>> split_widths;
  for (Index size : d.split(shape[static_cast<std::size_t>(dim)], d.between(1, 4))) {
    const bool replicated = d.coin();
    segments.push_back({size, replicated});
    segments_json.push_back(Json::array({size, replicated}));
    if (!replicated) split_widths.push_back(d.split(size, tp));
  }
  return {{{"fn", "segmented"}, {"shape", extents_json(shape)}, {"segments", segments_json}, {"dim", dim},
           {"tp", tp}, {"split_widths", split_widths}},
          segmented_map(shape, segments, dim, tp, split_widths)};
}

Call block_gather(Draw& d) {
  Extents shape = d.shape(1, 3);
  const int dim = static_cast<int>(d.between(0, static_cast<Index>(shape.size()) - 1));
  const Index block_size = d.between(1, 3);
  const Index blocks = d.between(0, 8);
  shape[static_cast<std::size_t>(dim)] = blocks * block_size;
  std::vector<std::vector<Index>> ids(static_cast<std::size_t>(d.between(1, 4)));
  for (Index b = 0; b < blocks; ++b) ids[static_cast<std::size_t>(d.between(0, static_cast<Index>(ids.size()) - 1))].push_back(b);
  if (d.coin()) {
    for (auto& list : ids) d.shuffle(list);
  }
  return {{{"fn", "block_gather"}, {"shape", extents_json(shape)}, {"block_ids", ids}, {"block_size", block_size},
           {"dim", dim}},
          block_gather_map(shape, ids, block_size, dim)};
}

Call expert_placement(Draw& d) {
  Extents shape = d.shape(1, 3);
  shape[0] = d.between(1, 6);  // DeepSpeed needs at least one expert
  std::vector<std::vector<Index>> experts(static_cast<std::size_t>(d.between(1, 4)));
  const Index tp = static_cast<Index>(experts.size());
  for (Index e = 0; e < shape[0]; ++e) {
    const Index primary = d.between(0, tp - 1);
    for (Index r = 0; r < tp; ++r) {
      if (r == primary || d.between(0, 3) == 0) experts[static_cast<std::size_t>(r)].push_back(e);
    }
  }
  if (d.coin()) {
    for (auto& list : experts) d.shuffle(list);
  }
  return {{{"fn", "expert_placement"}, {"shape", extents_json(shape)}, {"experts", experts}},
          expert_placement_map(shape, experts)};
}

TEST(DeepSpeedConstructors, BuildTheSameMapAsDeepSpeedForTheSameArguments) {
  if (std::string why = deepspeed_unavailable("autoep_affine.py"); !why.empty()) GTEST_SKIP() << why;
  Draw draw(0x5eedd5c0);
  std::vector<Call> calls;
  using Maker = Call (*)(Draw&);
  const Maker makers[] = {replicated, contiguous_split, sub_param, segmented, block_gather, expert_placement};
  for (int i = 0; i < 300; ++i) {
    for (Maker make : makers) calls.push_back(make(draw));
  }
  const fs::path dir = fs::temp_directory_path() / fmt::format("shardcheck-ds-constructors-{}", ::getpid());
  fs::create_directories(dir);
  {
    std::ofstream in(dir / "calls.jsonl");
    for (const Call& call : calls) in << call.arguments.dump() << "\n";
  }
  const std::string command = fmt::format(
      "/usr/bin/python3 '{}/tests/python/deepspeed_constructors.py' '{}' < '{}' > '{}'", SHARDCHECK_SOURCE_DIR,
      std::getenv("SHARDCHECK_DEEPSPEED_PATH"), (dir / "calls.jsonl").string(), (dir / "maps.jsonl").string());
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  std::ifstream out(dir / "maps.jsonl");
  std::string line;
  std::size_t compared = 0, with_empty_piece = 0;
  for (const Call& call : calls) {
    ASSERT_TRUE(std::getline(out, line)) << "DeepSpeed answered " << compared << " of " << calls.size() << " calls";
    const Json theirs = Json::parse(line);
    SCOPED_TRACE(call.arguments.dump());
    ASSERT_FALSE(theirs.contains("raised")) << theirs["raised"].get<std::string>();
    ASSERT_TRUE(call.ours.ok()) << call.ours.error().to_string();
    EXPECT_EQ(encode_map(call.ours.value()), theirs) << "ours:   " << encode_map_text(call.ours.value())
                                                     << "\ntheirs: " << line;
    ++compared;
    for (const RankEntry& entry : call.ours.value().ranks) {
      with_empty_piece += std::any_of(entry.pieces.begin(), entry.pieces.end(),
                                      [](const Piece& p) { return checked_numel(p.shape).value_or(1) == 0; });
    }
  }
  EXPECT_EQ(compared, calls.size());
  // The arguments reach what set the two apart before: blocks of width 0.
  EXPECT_GT(with_empty_piece, calls.size() / 10);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardcheck
