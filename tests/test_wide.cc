// The metadata proof for boxes (check_map) and the wide conversion behind it: same
// verdicts, same errors (kind, rank, piece, address, message) and same tensors as the
// run sweeps, the recorded conversion and the reference model, whatever the thread
// count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "shardcheck/campaign.h"
#include "shardcheck/checks.h"
#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/digest.h"
#include "shardcheck/oracles/reference.h"
#include "support/spec_maps.h"

namespace shardcheck {
namespace {

using build::M;
using build::P;
using build::R;

Status runs_only(const Map& map) {
  CheckOptions options;
  options.box_proof = false;
  return check_map(map, options);
}

// The box proof decides without address runs, so it accepts under a limit of none.
bool proven_by_boxes(const Map& map) {
  CheckOptions options;
  options.limits.max_walked_addresses = 0;
  return check_map(map, options).ok();
}

void expect_same_check(const Map& map) {
  const Status boxes = check_map(map);
  const Status runs = runs_only(map);
  ASSERT_EQ(boxes.ok(), runs.ok()) << describe(map);
  if (!boxes.ok()) {
    EXPECT_EQ(boxes.error(), runs.error()) << describe(map);
  }
  const auto reference = oracles::reference_check(map);
  if (reference.too_large) return;
  EXPECT_EQ(boxes.ok(), !reference.kind.has_value()) << describe(map);
  if (!boxes.ok() && reference.kind) {
    EXPECT_EQ(boxes.error().kind, *reference.kind) << describe(map);
  }
}

// ---- the box proof ------------------------------------------------------------------------

// F (4, 6): rows 0-1 to rank 0, rows 2-3 to rank 1 (boxes that touch along a row).
Map touching_rows() {
  return M({4, 6}, {R(0, Extents{2, 6}, {P({2, 6}, 0, {6, 1}, 0, {6, 1}, {0})}),
                    R(1, Extents{2, 6}, {P({2, 6}, 12, {6, 1}, 0, {6, 1}, {1})})});
}

// F (4, 6) as a 2 x 2 grid of 2 x 3 boxes, rank r holding box r: every box shares an
// edge with two others.
Map grid_2x2() {
  Map map = M({4, 6}, {});
  for (Rank r = 0; r < 4; ++r) {
    const Index src = (r / 2) * 12 + (r % 2) * 3;
    map.ranks.push_back(R(r, Extents{2, 3}, {P({2, 3}, src, {6, 1}, 0, {3, 1}, {r})}));
  }
  return map;
}

TEST(BoxProof, ValidBoxMapsAreProvenWithoutRuns) {
  const Map exact = M({4, 6}, {R(0, Extents{4, 6}, {P({4, 6}, 0, {6, 1}, 0, {6, 1}, {0})})});
  for (const Map& map : {touching_rows(), grid_2x2(), exact, replicated_map({4, 6}, 3).value(),
                         contiguous_split_map({4, 6}, {1, 0, 5}, 1).value(),
                         sub_param_map({2, 6}, {4, 2}, {{2, 2}, {1, 1}}, 1).value(),
                         segmented_map({8, 4}, {{4, false}, {4, true}}, 0, 2, {{2, 2}}).value()}) {
    expect_same_check(map);
    EXPECT_TRUE(check_map(map).ok()) << describe(map);
    EXPECT_TRUE(proven_by_boxes(map)) << describe(map);
    EXPECT_FALSE(runs_only(map).ok() && !proven_by_boxes(map));
  }
  // The run sweeps under the same limit cannot: the proof above is the boxes'.
  CheckOptions runs;
  runs.box_proof = false;
  runs.limits.max_walked_addresses = 0;
  EXPECT_EQ(check_map(grid_2x2(), runs).error().kind, ErrorKind::format);
}

TEST(BoxProof, ReplicasCutAtDifferentBoundariesAreProven) {
  // Contract 6-4's layout with consistent pieces: rank 0 one box, rank 1 two halves of it.
  const Map map = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}),
                          R(1, Extents{4}, {P({2}, 0, {1}, 0, {1}, {0, 1}), P({2}, 2, {1}, 2, {1}, {0, 1})})});
  expect_same_check(map);
  EXPECT_TRUE(proven_by_boxes(map));
}

TEST(BoxProof, OffByOneOverlapsAndGapsAreLeftToTheRuns) {
  // Rows 0-2 and 2-3: one row of F claimed twice (the dest sides are fine).
  Map rows = M({4, 6}, {R(0, Extents{3, 6}, {P({3, 6}, 0, {6, 1}, 0, {6, 1}, {0})}),
                        R(1, Extents{2, 6}, {P({2, 6}, 12, {6, 1}, 0, {6, 1}, {1})})});
  expect_same_check(rows);
  EXPECT_EQ(check_map(rows).error().kind, ErrorKind::twice);
  EXPECT_EQ(check_map(rows).error().address, 12);
  // Columns 0-3 and 3-5 of the 2 x 2 grid's top row: one column shared at the edge.
  Map cols = grid_2x2();
  cols.ranks[0].shard_shape = Extents{2, 4};
  cols.ranks[0].pieces[0] = P({2, 4}, 0, {6, 1}, 0, {4, 1}, {0});
  expect_same_check(cols);
  EXPECT_EQ(check_map(cols).error().kind, ErrorKind::twice);
  EXPECT_EQ(check_map(cols).error().address, 3);
  // A one-row gap between boxes that would touch.
  Map gap = M({4, 6}, {R(0, Extents{2, 6}, {P({2, 6}, 0, {6, 1}, 0, {6, 1}, {0})}),
                       R(1, Extents{1, 6}, {P({1, 6}, 18, {6, 1}, 0, {6, 1}, {1})})});
  expect_same_check(gap);
  EXPECT_EQ(check_map(gap).error().kind, ErrorKind::uncovered);
  EXPECT_EQ(check_map(gap).error().address, 12);
  // Two dest boxes of one rank overlapping by one row of the shard.
  Map dest = M({4, 6}, {R(0, Extents{4, 6}, {P({2, 6}, 0, {6, 1}, 0, {6, 1}, {0}), P({2, 6}, 12, {6, 1}, 6, {6, 1}, {0})})});
  expect_same_check(dest);
  EXPECT_EQ(check_map(dest).error().kind, ErrorKind::twice);
  EXPECT_EQ(check_map(dest).error().address, 6);
}

TEST(BoxProof, ZeroSizeBoxes) {
  Map map = touching_rows();
  map.ranks[0].pieces.push_back(P({0, 6}, 24, {6, 1}, 12, {6, 1}, {0}));  // one past the end
  expect_same_check(map);
  EXPECT_TRUE(proven_by_boxes(map));
  map.ranks[0].pieces.back().locations = {1};  // does not name its own rank
  expect_same_check(map);
  EXPECT_EQ(check_map(map).error().kind, ErrorKind::holders);
}

// The two shortcuts of the full side: a slab holding one box (every slab of a block
// gather) and a slab whose boxes, sorted, tile the innermost axis (every slab of a grid).
// Each is right only when it checks what the sweep would; what breaks them goes to the
// sweeps, which report the same error as the runs.
TEST(BoxProof, SlabShortcutsDecideOnlyWhatTheSweepWould) {
  const std::vector<std::vector<Index>> rows{{0, 2}, {1, 3}};
  const Map gather = block_gather_map({4, 6}, rows, 1, 0).value();
  expect_same_check(gather);
  EXPECT_TRUE(proven_by_boxes(gather));
  // Row 3 one column short, alone in its slab; rank 1's shard (1, 11) is still tiled.
  const Map short_row = M({4, 6}, {gather.ranks[0],
                                   R(1, Extents{1, 11}, {P({1, 6}, 6, {6, 1}, 0, {11, 1}, {1}),
                                                         P({1, 5}, 18, {6, 1}, 6, {11, 1}, {1})})});
  expect_same_check(short_row);
  EXPECT_EQ(check_map(short_row).error().kind, ErrorKind::uncovered);
  EXPECT_EQ(check_map(short_row).error().address, 23);

  expect_same_check(grid_2x2());
  EXPECT_TRUE(proven_by_boxes(grid_2x2()));
  // A one-column gap inside the top slab: box 0 covers columns 0-1, box 1 starts at 3.
  Map gap = grid_2x2();
  gap.ranks[0].shard_shape = Extents{2, 2};
  gap.ranks[0].pieces[0] = P({2, 2}, 0, {6, 1}, 0, {2, 1}, {0});
  expect_same_check(gap);
  EXPECT_EQ(check_map(gap).error().kind, ErrorKind::uncovered);
  EXPECT_EQ(check_map(gap).error().address, 2);
  // The boxes tile the slab, but one names another rank than its own.
  Map foreign = grid_2x2();
  foreign.ranks[1].pieces[0].locations = {0};
  expect_same_check(foreign);
  EXPECT_EQ(check_map(foreign).error().kind, ErrorKind::holders);
}

TEST(BoxProof, HoldersAreCountedPerCell) {
  expect_same_check(build::repro3());
  expect_same_check(build::repro8());
  EXPECT_EQ(check_map(build::repro8()).error().kind, ErrorKind::holders);
  // A replica whose other holder covers only half of it.
  Map half = M({4}, {R(0, Extents{4}, {P({4}, 0, {1}, 0, {1}, {0, 1})}), R(1, Extents{2}, {P({2}, 0, {1}, 0, {1}, {0, 1})})});
  expect_same_check(half);
  EXPECT_EQ(check_map(half).error().kind, ErrorKind::holders);
  // The planted bug that forgets to count holders accepts the phantom replica.
  CheckOptions planted;
  planted.bugs.box_skips_holder_count = true;
  EXPECT_TRUE(check_map(build::repro8(), planted).ok());
}

TEST(BoxProof, NonBoxesAreLeftToTheRuns) {
  expect_same_check(build::repro7());  // a destination that wraps
  EXPECT_FALSE(proven_by_boxes(build::repro7()));
  // Rows r, r + 2 of F to rank r: valid, but the source is not a box.
  Map interleaved = M({4, 3}, {R(0, Extents{2, 3}, {P({2, 3}, 0, {6, 1}, 0, {3, 1}, {0})}),
                               R(1, Extents{2, 3}, {P({2, 3}, 3, {6, 1}, 0, {3, 1}, {1})})});
  expect_same_check(interleaved);
  EXPECT_TRUE(check_map(interleaved).ok());
  EXPECT_FALSE(proven_by_boxes(interleaved));
}

TEST(BoxProof, AgreesWithTheRunsOnGeneratedCases) {
  campaign::Options options;
  options.seed = 7;
  int proven = 0;
  for (Index i = 0; i < 6000; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    expect_same_check(c.map);
    if (proven_by_boxes(c.map)) ++proven;
    if (HasFailure()) {
      ADD_FAILURE() << "case " << i;
      return;
    }
  }
  EXPECT_GT(proven, 300);
}

// The comparison above is able to fail: with the box proof's holder count planted off,
// generated maps (a location added to a piece) are accepted where the runs refuse.
TEST(BoxProof, ThePlantedBoxBugIsSeen) {
  campaign::Options options;
  options.seed = 7;
  CheckOptions planted;
  planted.bugs.box_skips_holder_count = true;
  int differ = 0;
  for (Index i = 0; i < 6000; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    if (check_map(c.map, planted).ok() != runs_only(c.map).ok()) ++differ;
  }
  EXPECT_GT(differ, 0);
}

// ---- wide conversion ------------------------------------------------------------------

// Shards written through `truth` (DeepSpeed's unchecked extract, so that an invalid map
// still gets the shards a producer would have written); nullopt when even that refuses.
std::optional<ShardSet> shards_for(const Map& truth, DType dtype) {
  auto n = checked_numel(truth.logical_shape);
  if (!n || *n > (Index{1} << 20)) return std::nullopt;
  ConvertOptions legacy;
  legacy.policy = Policy::legacy;
  auto shards = extract_all(truth, marker_buffer(dtype, *n), legacy);
  if (!shards) return std::nullopt;
  return std::move(shards).value();
}

template <class T>
void expect_same(const Result<T>& a, const Result<T>& b, const std::string& context) {
  ASSERT_EQ(a.ok(), b.ok()) << context << (a.ok() ? b.error().message : a.error().message);
  if (a.ok()) {
    EXPECT_TRUE(a.value() == b.value()) << context;
  } else {
    EXPECT_EQ(a.error(), b.error()) << context;
  }
}

ConvertOptions threaded(int threads) {
  ConvertOptions options;
  options.threads = threads;
  options.parallel_min_bytes = 0;  // split even the smallest conversion
  return options;
}

ConvertOptions recorded() {
  ConvertOptions options;
  options.wide_copies = false;
  return options;
}

// Rebuild, and extract of every rank (all at once and one by one), through the wide path
// with 1, 2 and 8 threads, against the recorded path; rebuild also against the reference
// model.
void expect_conversions_agree(const Map& map, const ShardSet& shards, DType dtype, int scale_power,
                              const std::string& context) {
  ConvertOptions oracle = recorded();
  oracle.scale_power = scale_power;
  const auto want = rebuild(map, shards, dtype, oracle);
  for (int threads : {1, 2, 8}) {
    ConvertOptions options = threaded(threads);
    options.scale_power = scale_power;
    expect_same(rebuild(map, shards, dtype, options), want, context + " threads " + std::to_string(threads));
  }
  // The reference model judges the map and the data, not whether the supplied shards fit.
  const bool shards_fit = want.ok() || want.error().kind != ErrorKind::shape;
  const auto reference = oracles::reference_rebuild(map, shards, dtype, scale_power);
  if (shards_fit) {
    ASSERT_EQ(want.ok(), reference.ok()) << context;
    if (want.ok()) {
      EXPECT_TRUE(want.value() == reference.value()) << context;
    } else {
      EXPECT_EQ(want.error().kind, reference.error().kind) << context;
    }
  }
  if (!want.ok()) return;
  const auto extracted = extract_all(map, want.value(), oracle);
  for (int threads : {1, 2, 8}) {
    ConvertOptions options = threaded(threads);
    options.scale_power = scale_power;
    expect_same(extract_all(map, want.value(), options), extracted, context + " extract, threads " + std::to_string(threads));
  }
  // One rank at a time: the wide path takes only that rank's part of the proof.
  for (const auto& entry : map.ranks) {
    const auto one = extract(map, want.value(), entry.rank, oracle);
    ConvertOptions options = threaded(2);
    options.scale_power = scale_power;
    expect_same(extract(map, want.value(), entry.rank, options), one,
                context + " extract of rank " + std::to_string(entry.rank));
  }
}

TEST(WideConversion, AgreesWithTheRecordedPathOnGeneratedCases) {
  campaign::Options options;
  options.seed = 11;
  int exact = 0;
  for (Index i = 0; i < 600; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    auto shards = shards_for(c.truth ? *c.truth : c.map, c.dtype);
    if (!shards) continue;
    expect_conversions_agree(c.map, *shards, c.dtype, c.scale_power, "case " + std::to_string(i) + "\n" + describe(c.map));
    if (check_map(c.map).ok()) ++exact;
    if (HasFailure()) return;
  }
  EXPECT_GT(exact, 20);
}

// A replicated map whose copies disagree in several places: the error names the first
// piece in visiting order that disagrees, at its lowest element, and the earlier piece
// that wrote that element, whatever the thread count.
TEST(WideConversion, FirstReplicaMismatchWhateverTheThreads) {
  const Map map = replicated_map({256, 1024}, 4).value();
  ShardSet shards = shards_for(map, DType::float32).value();
  shards[3].set_bits(7, 0x7fc00001);          // later rank, lower address
  shards[2].set_bits(200000, 0x3f800000);
  shards[2].set_bits(250000, 0x3f800000);
  expect_conversions_agree(map, shards, DType::float32, 1, "replicas");
  const auto got = rebuild(map, shards, DType::float32, threaded(8));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.error().kind, ErrorKind::different_data);
  EXPECT_EQ(got.error().rank, 2);
  EXPECT_EQ(got.error().address, 200000);
}

// Equality is bitwise: +0 and -0 differ, equal NaNs agree, NaN payloads are kept through
// scaling (a scaled and an unscaled copy of one NaN agree).
TEST(WideConversion, ReplicaEqualityIsBitwise) {
  for (double scale : {1.0, 2.0}) {
    const Map map = replicated_map({64, 64}, 3, scale).value();
    ShardSet shards = shards_for(map, DType::float32).value();
    for (auto& [rank, shard] : shards) shard.set_bits(10, 0x7fa00001);  // one signalling NaN everywhere
    expect_conversions_agree(map, shards, DType::float32, 1, "same NaN");
    ASSERT_TRUE(rebuild(map, shards, DType::float32, threaded(2)).ok());
    shards[1].set_bits(10, 0x7fa00002);
    expect_conversions_agree(map, shards, DType::float32, 1, "NaN payloads");
    EXPECT_EQ(rebuild(map, shards, DType::float32, threaded(2)).error().kind, ErrorKind::different_data);
    shards = shards_for(map, DType::float32).value();
    for (auto& [rank, shard] : shards) shard.set_bits(20, 0);
    shards[2].set_bits(20, 0x80000000);
    expect_conversions_agree(map, shards, DType::float32, 1, "signed zeros");
    EXPECT_EQ(rebuild(map, shards, DType::float32, threaded(2)).error().address, 20);
  }
  // bfloat16 replicas, scaled.
  const Map bf = replicated_map({32, 32}, 2, 0.5).value();
  ShardSet shards = shards_for(bf, DType::bfloat16).value();
  shards[1].set_bits(33, shards[1].bits(33) ^ 1);
  expect_conversions_agree(bf, shards, DType::bfloat16, 1, "bf16");
}

// Row r to rank r % ranks: one piece per row.
std::vector<std::vector<Index>> dealt_rows(Index rows, int ranks) {
  std::vector<std::vector<Index>> ids(static_cast<std::size_t>(ranks));
  for (Index r = 0; r < rows; ++r) ids[static_cast<std::size_t>(r % ranks)].push_back(r);
  return ids;
}

// Large enough to split rows across threads, in every in-tree layout and dtype width.
TEST(WideConversion, LayoutsAndDtypesWhateverTheThreads) {
  const std::vector<Map> maps = {
      contiguous_split_map({96, 130}, {30, 0, 50, 50}, 1).value(),
      contiguous_split_map({96, 130}, {40, 56}, 0).value(),
      sub_param_map({64, 96}, {64, 32}, {{32, 32}, {16, 16}}, 1).value(),
      segmented_map({96, 64}, {{32, false}, {32, true}, {32, false}}, 0, 2, {{16, 16}, {8, 24}}).value(),
      block_gather_map({64, 128}, {{0, 3, 4}, {1, 2, 5, 6, 7}}, 16, 1).value(),
      expert_placement_map({6, 8, 8}, {{0, 1, 2}, {2, 3}, {4, 5, 0}}).value(),
      // Extracts read these in bands of source rows, several bands per block.
      block_gather_map({512, 256}, {{0, 3, 4}, {1, 2, 5, 6, 7}}, 32, 1).value(),
      block_gather_map({300, 64}, dealt_rows(300, 3), 1, 0).value(),
  };
  for (std::size_t m = 0; m < maps.size(); ++m) {
    for (DType dtype : kAllDTypes) {
      auto shards = shards_for(maps[m], dtype);
      ASSERT_TRUE(shards.has_value());
      expect_conversions_agree(maps[m], *shards, dtype, 1, "map " + std::to_string(m));
    }
  }
  // Scaled pieces: the scale kernels, NaN bits kept.
  const Map scaled = replicated_map({40, 50}, 2, 4.0).value();
  for (DType dtype : {DType::float32, DType::float64, DType::float16, DType::bfloat16}) {
    auto shards = shards_for(scaled, dtype).value();
    shards[0].set_bits(3, dtype == DType::float32 ? 0xffa00003 : shards[0].bits(3));
    shards[1].set_bits(3, shards[0].bits(3));
    expect_conversions_agree(scaled, shards, dtype, 1, std::string("scaled ") + std::string(dtype_name(dtype)));
  }
}

// A gather of rows becomes one plan of many rows where one-row pieces continue each
// other (same buffers, scale and row, offsets one step on). Runs here: single rows that
// continue a 3-row block, a row that continues it in F but not in its shard, a scaled
// row, rows going backwards in F, rows of another length. Every conversion agrees with
// the recorded path and the reference model, scaled or not, fused digest included.
TEST(WideConversion, RowsThatContinueEachOtherAreCopiedAsOne) {
  const Index w = 16;
  // F is 12 x 16; rank 0 holds rows 0-2 (one block), 3 (continuing it on both sides), 4
  // (continuing it in F only: its shard row jumps), 5 (scaled), 6; rank 1 holds rows 11,
  // 10, 9 (backwards), 7 (its columns split) and 8.
  auto row = [&](Index f_row, Index shard_row, double scale = 1.0) {
    return P({1, w}, f_row * w, {w, 1}, shard_row * w, {w, 1}, {static_cast<Rank>(f_row < 7 ? 0 : 1)}, scale);
  };
  for (double scale : {1.0, 2.0}) {
    Piece block = P({3, w}, 0, {w, 1}, 0, {w, 1}, {0});
    std::vector<Piece> rank0 = {block, row(3, 3), row(4, 6), row(5, 5, scale), row(6, 4)};
    std::vector<Piece> rank1 = {row(11, 0), row(10, 1), row(9, 2),
                                P({1, 8}, 7 * w, {w, 1}, 3 * w, {w, 1}, {1}),
                                P({1, 8}, 7 * w + 8, {w, 1}, 3 * w + 8, {w, 1}, {1}), row(8, 4)};
    const Map map = M({12, w}, {R(0, Extents{7, w}, rank0), R(1, Extents{5, w}, rank1)});
    ASSERT_TRUE(check_map(map).ok()) << check_map(map).error().to_string();
    for (DType dtype : {DType::float32, DType::bfloat16, DType::int8}) {
      if (scale != 1.0 && !is_floating(dtype)) continue;
      auto shards = shards_for(map, dtype);
      ASSERT_TRUE(shards.has_value());
      expect_conversions_agree(map, *shards, dtype, 1, "scale " + std::to_string(scale));
      ConvertOptions with_digest = threaded(1);
      with_digest.expected_digest = digest(rebuild(map, *shards, dtype, recorded()).value());
      EXPECT_TRUE(rebuild(map, *shards, dtype, with_digest).ok());
    }
  }
}

TEST(WideConversion, DigestWhateverTheThreads) {
  const Map map = contiguous_split_map({128, 128}, {64, 64}, 1).value();
  const ShardSet shards = shards_for(map, DType::float32).value();
  const std::uint64_t good = digest(marker_buffer(DType::float32, 128 * 128));
  for (int threads : {1, 2, 8}) {
    ConvertOptions options = threaded(threads);
    options.expected_digest = good;
    EXPECT_TRUE(rebuild(map, shards, DType::float32, options).ok());
    options.expected_digest = good + 1;
    const auto refused = rebuild(map, shards, DType::float32, options);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.error().kind, ErrorKind::digest);
  }
}

}  // namespace
}  // namespace shardcheck
