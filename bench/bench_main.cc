// Benchmarks (Google Benchmark). Speed is judged as ratios within one run: strict
// rebuild against memcpy of the same bytes and against the reference model, rebuild with
// a content digest against rebuild without, and campaign cases per second on one core
// for small (<= 256) and larger (<= 4096) maps.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <cstring>

#include "shardcheck/campaign.h"
#include "shardcheck/checks.h"
#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/digest.h"
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

// ---- content digests (contract section 10) ----------------------------------------------
// Rebuild of 4096 x 4096 float32 at TP 8 (column split: strided destinations), with and
// without an expected digest, and the digest alone. Each reports `vs_memcpy`: its time per
// iteration over a memcpy of F's bytes timed in the same process just before (best of a
// few). Ratios use the thread's CPU time: on a shared machine wall time mostly measures the
// neighbours. The with-digest rebuild also reports `vs_no_digest` against the plain rebuild
// timed the same way; the target is at most 1.5.

constexpr Index kDigestSide = 4096;
constexpr int kDigestTp = 8;

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <class Fn>
double best_of(int reps, Fn&& fn) {
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    const double start = thread_seconds();
    fn();
    best = std::min(best, thread_seconds() - start);
  }
  return best;
}

struct DigestInputs {
  Map map;
  Buffer full;
  ShardSet shards;
  double memcpy_seconds = 0;
};

const DigestInputs& digest_inputs() {
  static const DigestInputs in = [] {
    DigestInputs d;
    d.map = contiguous_split_map({kDigestSide, kDigestSide}, std::vector<Index>(kDigestTp, kDigestSide / kDigestTp), 1)
                .value();
    d.full = marker_buffer(DType::float32, kDigestSide * kDigestSide);
    d.shards = extract_all(d.map, d.full).value();
    return d;
  }();
  return in;
}

double memcpy_seconds(const Buffer& full) {
  std::vector<std::byte> to(full.size_bytes());
  return best_of(5, [&] {
    std::memcpy(to.data(), full.data(), full.size_bytes());
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  });
}

// Runs the timed loop and reports its time per iteration against `baseline` seconds.
template <class Fn>
void timed_loop(benchmark::State& state, double baseline, const char* counter, Fn&& fn) {
  const double start = thread_seconds();
  for (auto _ : state) fn();
  const double per_iteration = (thread_seconds() - start) /
                               static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.counters[counter] = per_iteration / baseline;
}

void BM_DigestRebuildTp8(benchmark::State& state) {
  const DigestInputs& in = digest_inputs();
  const bool with_digest = state.range(0) != 0;
  ConvertOptions options;
  if (with_digest) options.expected_digest = digest(in.full);
  auto once = [&](const ConvertOptions& o) {
    auto out = rebuild(in.map, in.shards, DType::float32, o);
    if (!out) state.SkipWithError("rebuild refused");
    benchmark::DoNotOptimize(out);
  };
  const double plain = with_digest ? best_of(3, [&] { once(ConvertOptions{}); }) : 0.0;
  const double baseline = memcpy_seconds(in.full);
  const double start = thread_seconds();
  for (auto _ : state) once(options);
  const double per_iteration = (thread_seconds() - start) /
                               static_cast<double>(std::max<benchmark::IterationCount>(1, state.iterations()));
  state.counters["vs_memcpy"] = per_iteration / baseline;
  if (with_digest) state.counters["vs_no_digest"] = per_iteration / plain;
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
  state.SetLabel(with_digest ? "with digest" : "without digest");
}

void BM_DigestOfF(benchmark::State& state) {
  const DigestInputs& in = digest_inputs();
  timed_loop(state, memcpy_seconds(in.full), "vs_memcpy", [&] { benchmark::DoNotOptimize(digest(in.full)); });
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
}

void BM_DigestSharesTp8(benchmark::State& state) {
  const DigestInputs& in = digest_inputs();
  timed_loop(state, memcpy_seconds(in.full), "vs_memcpy",
             [&] { benchmark::DoNotOptimize(digest_shares(in.map, in.shards)); });
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
}

void BM_DigestMemcpyBaseline(benchmark::State& state) {
  const DigestInputs& in = digest_inputs();
  std::vector<std::byte> to(in.full.size_bytes());
  timed_loop(state, memcpy_seconds(in.full), "vs_memcpy", [&] {
    std::memcpy(to.data(), in.full.data(), in.full.size_bytes());
    benchmark::DoNotOptimize(to.data());
    benchmark::ClobberMemory();
  });
  state.SetBytesProcessed(state.iterations() * in.full.numel() * 4);
}

// Lower-case names so that --benchmark_filter=digest selects exactly these.
BENCHMARK(BM_DigestMemcpyBaseline)->Name("digest/memcpy_baseline_4096x4096_f32")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DigestRebuildTp8)->Name("digest/rebuild_4096x4096_f32_tp8_column")->ArgName("with_digest")->Arg(0)->Arg(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DigestOfF)->Name("digest/digest_of_f_4096x4096_f32")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DigestSharesTp8)->Name("digest/shares_4096x4096_f32_tp8_column")->Unit(benchmark::kMillisecond);

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
