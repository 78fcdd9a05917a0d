// Benchmarks (Google Benchmark). Speed is judged as ratios within one run: strict
// rebuild against memcpy of the same bytes and against the reference model, and
// campaign cases per second on one core for small (<= 256) and larger (<= 4096) maps.
#include <benchmark/benchmark.h>

#include <cstring>

#include "shardcheck/campaign.h"
#include "shardcheck/checks.h"
#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/oracles/reference.h"
#include "shardcheck/properties.h"

namespace shardcheck {
namespace {

// A column-parallel layout (strided destinations) of rows x cols float32 over 4 ranks.
Map column_split(Index rows, Index cols) {
  std::vector<Index> sizes(4, cols / 4);
  return contiguous_split_map({rows, cols}, sizes, 1).value();
}

struct RebuildInputs {
  Map map;
  Buffer full;
  ShardSet shards;
};

RebuildInputs rebuild_inputs(Index rows, Index cols) {
  RebuildInputs in;
  in.map = column_split(rows, cols);
  in.full = marker_buffer(DType::float32, rows * cols);
  in.shards = extract_all(in.map, in.full).value();
  return in;
}

void BM_MemcpyBaseline(benchmark::State& state) {
  const Index n = state.range(0) * state.range(0);
  std::vector<std::byte> from(n * 4), to(n * 4);
  for (auto _ : state) {
    std::memcpy(to.data(), from.data(), from.size());
    benchmark::DoNotOptimize(to.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

void BM_StrictRebuild(benchmark::State& state) {
  const auto in = rebuild_inputs(state.range(0), state.range(0));
  for (auto _ : state) {
    auto out = rebuild(in.map, in.shards, DType::float32);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
}

void BM_ReferenceRebuild(benchmark::State& state) {
  const auto in = rebuild_inputs(state.range(0), state.range(0));
  for (auto _ : state) {
    auto out = oracles::reference_rebuild(in.map, in.shards, DType::float32);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
}

void BM_LegacyRebuild(benchmark::State& state) {
  const auto in = rebuild_inputs(state.range(0), state.range(0));
  for (auto _ : state) {
    auto out = legacy_rebuild(in.map, in.shards, DType::float32);
    benchmark::DoNotOptimize(out);
  }
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
}

// check_map on a real-sized map (50304 x 12288, 8 ranks): metadata proof, no data.
void BM_CheckMapLargeRowSplit(benchmark::State& state) {
  const Map map = contiguous_split_map({50304, 12288}, std::vector<Index>(8, 50304 / 8), 0).value();
  for (auto _ : state) benchmark::DoNotOptimize(check_map(map));
}

void BM_CheckMapLargeColumnSplit(benchmark::State& state) {
  const Map map = contiguous_split_map({12288, 50304}, std::vector<Index>(8, 50304 / 8), 1).value();
  for (auto _ : state) benchmark::DoNotOptimize(check_map(map));
}

// Whole campaign cases (generate, corrupt, truth extract, strict checks and
// conversion, judge), one core. range(0): max elements; range(1): also run the
// reference model on every case (property 3) or not.
void BM_CampaignCase(benchmark::State& state) {
  campaign::Options options;
  options.seed = 1;
  options.generate.layout.max_elements = state.range(0);
  options.eval.compare_reference = state.range(1) != 0;
  Index index = 0;
  for (auto _ : state) {
    const Case c = campaign::generate_indexed_case(options, index++);
    benchmark::DoNotOptimize(props::evaluate_case(c, options.eval));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_GenerateOnly(benchmark::State& state) {
  campaign::Options options;
  options.generate.layout.max_elements = state.range(0);
  Index index = 0;
  for (auto _ : state) benchmark::DoNotOptimize(campaign::generate_indexed_case(options, index++));
  state.SetItemsProcessed(state.iterations());
}

BENCHMARK(BM_MemcpyBaseline)->Arg(16)->Arg(64)->Arg(1024);
BENCHMARK(BM_StrictRebuild)->Arg(16)->Arg(64)->Arg(1024);
BENCHMARK(BM_ReferenceRebuild)->Arg(16)->Arg(64)->Arg(1024);
BENCHMARK(BM_LegacyRebuild)->Arg(16)->Arg(64)->Arg(1024);
BENCHMARK(BM_CheckMapLargeRowSplit);
BENCHMARK(BM_CheckMapLargeColumnSplit);
BENCHMARK(BM_GenerateOnly)->Arg(256)->Arg(4096);
BENCHMARK(BM_CampaignCase)->Args({256, 0})->Args({256, 1})->Args({4096, 0})->Args({4096, 1});

}  // namespace
}  // namespace shardcheck

BENCHMARK_MAIN();
