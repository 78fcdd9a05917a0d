// Backend differential checks: every available backend against the CPU reference
// module on generated cases and on the regression corpus. The device code runs on
// OpenMP threads in every build that finds Thrust (CI's included); the CUDA part needs a
// device: without one it is reported as skipped, never as passed; the CUDA code itself
// is still compiled when the toolkit is present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/digest.h"
#include "shardcheck/json.h"
#include "shardcheck/reshard.h"

#include "shardcheck/campaign.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/oracles/backends.h"
#include "shardcheck/properties.h"

namespace shardcheck {
namespace {

TEST(Backends, CpuIsAlwaysFirst) {
  auto backends = oracles::available_backends();
  ASSERT_FALSE(backends.empty());
  EXPECT_EQ(backends.front()->name(), "cpu");
}

// The executor must be able to fail: a backend that flips one bit is caught.
class FlippingBackend final : public Backend {
 public:
  std::string_view name() const override { return "flipping"; }
  void copy_block(DType dtype, const BlockCopy& copy) override {
    cpu_->copy_block(dtype, copy);
    if (copy.shape->empty() || (*copy.shape)[0] > 0)
      copy.to[copy.to_view->offset * element_size(dtype)] ^= std::byte{1};
  }
  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    return cpu_->compare_block(dtype, copy);
  }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

TEST(Backends, ExecutorReportsADifferentBackend) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  backends.push_back(std::make_unique<FlippingBackend>());
  campaign::Options options;
  options.generate.corrupt_probability = 0.0;
  int found = 0;
  for (Index i = 0; i < 200; ++i) {
    if (auto difference = oracles::compare_backends(campaign::generate_indexed_case(options, i), backends,
                                                    oracles::LaunchShape{1, 0})) {
      EXPECT_EQ(difference->signature.rfind("backend:flipping-vs-cpu:", 0), 0u) << difference->signature;
      ++found;
    }
  }
  EXPECT_GT(found, 100);
}

// The cases of `campaign --op reshard` (pairs of layouts, either side corrupted).
campaign::Options reshard_campaign(std::uint64_t seed) {
  campaign::Options options;
  options.seed = seed;
  options.generate.op = Op::reshard;
  return options;
}

// The differential runs reshard too (campaign --op reshard --backend): a backend that
// flips one bit of each block it copies is caught on the target shards (or on the digest
// a case verifies), with a signature that names the operation and the target rank.
TEST(Backends, ExecutorReportsADifferentBackendOnReshards) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  backends.push_back(std::make_unique<FlippingBackend>());
  campaign::Options options = reshard_campaign(3);
  options.generate.corrupt_probability = 0.0;
  int found = 0;
  std::set<std::string> kinds;
  for (Index i = 0; i < 200; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    ASSERT_EQ(c.ops, OpList{Op::reshard});
    if (auto difference = oracles::compare_backends(c, backends, oracles::LaunchShape{1, 0})) {
      const std::string& signature = difference->signature;
      EXPECT_TRUE(std::regex_match(signature, std::regex("backend:flipping-vs-cpu:reshard( r[0-9]+)?:"
                                                         "(verdict|kind|error|bits|shape)")))
          << signature;
      EXPECT_EQ(signature.find('\n'), std::string::npos);
      kinds.insert(signature.substr(signature.rfind(':') + 1));
      ++found;
    }
  }
  EXPECT_GT(found, 100);
  EXPECT_TRUE(kinds.contains("bits")) << found;
}

// backend_present answers as backend_named would, for every name this build knows and
// one it does not (for CUDA without touching the runtime in this process, so it is asked
// first), and a backend made by name calls itself by that name.
TEST(Backends, PresentIsWhatNamedWouldGive) {
  for (const std::string& name : oracles::backend_names()) {
    const bool present = oracles::backend_present(name);
    const std::unique_ptr<Backend> made = oracles::backend_named(name);
    EXPECT_EQ(present, made != nullptr) << name;
    if (made) {
      EXPECT_EQ(made->name(), name);
    }
  }
  EXPECT_FALSE(oracles::backend_present("no-such-backend"));
  EXPECT_EQ(oracles::backend_named("no-such-backend"), nullptr);
}

// A backend differential that cannot make its backend where the case runs compares
// nothing: the case is a finding that says so, not a pass (a GPU campaign whose workers
// could not start CUDA once reported 2,351,910 cases and nothing wrong).
TEST(Backends, ABackendThatCannotBeMadeIsAFindingNotAPass) {
  campaign::Options options;
  options.generate.corrupt_probability = 0.0;
  props::EvalOptions eval;
  eval.backend = "no-such-backend";
  const props::Evaluation evaluation = props::evaluate_case(campaign::generate_indexed_case(options, 0), eval);
  ASSERT_TRUE(evaluation.finding.has_value());
  EXPECT_EQ(evaluation.finding->signature, "backend:no-such-backend-vs-cpu:unavailable");
}

// A campaign's OpenMP threads wait passively unless told otherwise: its workers fill the
// cores, and spinning threads starved them (--backend device-omp at 64 cases/s against
// 2,195 with passive waits, the other core busy). What its target inherits shows it.
TEST(Backends, CampaignsWaitPassivelyUnlessToldOtherwise) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("shardcheck-omp-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto policy_seen = [&](const std::string& env) {
    const std::filesystem::path seen = dir / "seen";
    std::filesystem::remove(seen);
    // A target that writes what it inherited and then fails to start (the campaign stops).
    const std::string target = "exec:echo \"$OMP_WAIT_POLICY\" > " + seen.string() + "; exit 3";
    const std::string command = env + " " + SHARDCHECK_BINARY + " campaign --cases 1 --target '" + target +
                                "' --out " + (dir / "out").string() + " >/dev/null 2>&1";
    EXPECT_NE(std::system(command.c_str()), 0);
    std::ifstream in(seen);
    std::string policy;
    std::getline(in, policy);
    return policy;
  };
  EXPECT_EQ(policy_seen("env -u OMP_WAIT_POLICY"), "passive");
  EXPECT_EQ(policy_seen("env OMP_WAIT_POLICY=active"), "active");
  std::filesystem::remove_all(dir);
}

std::vector<std::unique_ptr<Backend>> cpu_and(std::unique_ptr<Backend> other) {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  backends.push_back(std::move(other));
  return backends;
}

TEST(Backends, DeviceCodeOnOpenMpIsListedWhenBuilt) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  auto backends = oracles::available_backends();
  ASSERT_GE(backends.size(), 2u);
  EXPECT_EQ(backends[1]->name(), "device-omp");
  EXPECT_TRUE(backends[1]->runs_batches());
  EXPECT_NE(oracles::backend_named("device-omp"), nullptr);
  EXPECT_EQ(oracles::backend_named("no-such-backend"), nullptr);
}

// Generated cases, valid and corrupted, each on 2-4 threads with a tile its own bytes
// choose: verdict, whole error and output bits as the CPU backend's.
// The first `cases` cases of a campaign on `options`: the backends agree on each.
void expect_agreement_on_generated_cases(const std::vector<std::unique_ptr<Backend>>& backends,
                                         const campaign::Options& options, Index cases) {
  for (Index i = 0; i < cases; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    auto difference = oracles::compare_backends(c, backends);
    ASSERT_FALSE(difference) << difference->signature << "\n" << difference->message << "\n" << encode_case_text(c);
  }
}

TEST(Backends, DeviceCodeOnOpenMpAgreesWithCpuOnGeneratedCases) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  auto backends = cpu_and(make_device_omp_backend());
  for (std::uint64_t seed : {11u, 12u, 13u}) {
    campaign::Options options;
    options.seed = seed;
    if (seed == 13) options.generate.layout.max_elements = 1 << 14;  // rows longer than a tile
    expect_agreement_on_generated_cases(backends, options, 700);
  }
}

// The device code reaching device memory only, as CUDA does: the differential copies each
// case's data over and back, the path every CUDA case takes.
TEST(Backends, DeviceOnlyMemoryAgreesWithCpuOnGeneratedCases) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  campaign::Options options;
  options.seed = 14;
  expect_agreement_on_generated_cases(cpu_and(make_device_only_omp_backend()), options, 500);
}

// The launch shape changes nothing: one case under every tile and thread count.
TEST(Backends, DeviceCodeAnswersDoNotDependOnTheLaunchShape) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  auto backends = cpu_and(make_device_omp_backend());
  campaign::Options options;
  options.seed = 5;
  for (Index i = 0; i < 60; ++i) {
    const Case c = campaign::generate_indexed_case(options, i);
    for (int threads : {1, 2, 3}) {
      for (Index tile : {1, 2, 5, 4096}) {
        auto difference = oracles::compare_backends(c, backends, oracles::LaunchShape{threads, tile});
        ASSERT_FALSE(difference) << threads << " threads, tile " << tile << ": " << difference->signature << "\n"
                                 << difference->message;
      }
    }
  }
}

// Reshard cases, valid and corrupted: each plan executed on the CPU backend and on the
// device code (host memory, and device memory only as CUDA has it), every replica holder
// compared, digests verified where a case records one: verdict, whole error and every
// target shard's bits as the CPU backend's.
TEST(Backends, DeviceCodeOnOpenMpAgreesWithCpuOnGeneratedReshards) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  expect_agreement_on_generated_cases(cpu_and(make_device_omp_backend()), reshard_campaign(31), 700);
  expect_agreement_on_generated_cases(cpu_and(make_device_only_omp_backend()), reshard_campaign(32), 500);
}

// `campaign --op reshard --backend device-omp`: the campaign judges every case's plan on
// the device code beside the CPU backend, and finds no difference.
TEST(Backends, AReshardCampaignOnTheDeviceCodeFindsNoDifference) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  campaign::Options options = reshard_campaign(47);
  options.cases = 600;
  options.eval.backend = "device-omp";
  const campaign::Report report = campaign::run(options);
  EXPECT_EQ(report.cases, 600);
  EXPECT_EQ(report.by_op.at("reshard").cases, 600);
  EXPECT_TRUE(report.findings.empty()) << report.findings.front().signature;
  EXPECT_FALSE(report.failed());
}

// A plan that moves more than the caches hold streams its rows on the device code as on
// the CPU: TP 8 columns of 383 and 385 (rows no multiple of 16 bytes apart) to TP 4 rows.
TEST(Backends, DeviceCodeReshardsBeyondTheCachesAsTheCpu) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  const Map source = contiguous_split_map({1025, 3072}, {383, 385, 383, 385, 383, 385, 383, 385}, 1).value();
  const Map target = contiguous_split_map({1025, 3072}, {257, 256, 256, 256}, 0).value();
  const Buffer full = marker_buffer(DType::float32, 1025 * 3072);
  const ShardSet shards = extract_all(source, full).value();
  const ShardSet want = extract_all(target, full).value();
  const Plan made = plan(source, target).value();
  ASSERT_GT(made.statistics.elements_moved * 4, Index{8} << 20);
  auto omp = make_device_omp_backend();
  for (int threads : {1, 2}) {
    const auto got = execute(made, shards, DType::float32, omp.get(), Threading{threads, 0, 0});
    ASSERT_TRUE(got.ok()) << got.error().to_string();
    EXPECT_TRUE(got.value() == want) << threads << " threads";
  }
}

// A backend made of the two per-block calls alone that still takes whole batches: every
// batched entry is Backend's default (copy_blocks, copy_blocks_first_wins, compare_blocks,
// first_scale_fault, digest). No in-tree backend leaves them to the defaults, so without it a
// fault there (a reversed replica order, a lost block index) would pass every other test.
class PerBlockBackend final : public Backend {
 public:
  explicit PerBlockBackend(bool batches) : batches_(batches) {}
  std::string_view name() const override { return batches_ ? "per-block-batches" : "per-block"; }
  bool runs_batches() const override { return batches_; }
  void copy_block(DType dtype, const BlockCopy& copy) override { cpu_->copy_block(dtype, copy); }
  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    return cpu_->compare_block(dtype, copy);
  }

 private:
  bool batches_;
  std::unique_ptr<Backend> cpu_ = make_cpu_backend();
};

TEST(Backends, DefaultBatchedEntriesAgreeWithCpuOnGeneratedCases) {
  for (bool batches : {true, false}) {
    for (std::uint64_t seed : {21u, 22u}) {
      campaign::Options options;
      options.seed = seed;
      expect_agreement_on_generated_cases(cpu_and(std::make_unique<PerBlockBackend>(batches)), options, 600);
    }
    expect_agreement_on_generated_cases(cpu_and(std::make_unique<PerBlockBackend>(batches)), reshard_campaign(23), 400);
  }
}

// The first mismatch inside a replica's block is where the error points: rank 1's copy
// differs from rank 0's at element 4 only, so both backends name F's element 4.
TEST(Backends, DefaultBatchedEntriesNameTheMismatchInsideABlock) {
  const Map map = replicated_map({6}, 2).value();
  const Buffer full = marker_buffer(DType::float32, 6);
  ShardSet shards = extract_all(map, full).value();
  shards.at(1).set_bits(4, shards.at(1).bits(3));
  std::vector<std::unique_ptr<Backend>> backends = cpu_and(std::make_unique<PerBlockBackend>(true));
  for (const auto& backend : backends) {
    ConvertOptions options;
    options.backend = backend.get();
    auto out = rebuild(map, shards, DType::float32, options);
    ASSERT_FALSE(out) << backend->name();
    EXPECT_EQ(out.error().kind, ErrorKind::different_data) << backend->name();
    EXPECT_EQ(out.error().address, 4) << backend->name() << ": " << out.error().to_string();
  }
}

// Every case of corpus/regressions (the reported corruptions and their relatives).
void expect_agreement_on_the_regression_corpus(std::unique_ptr<Backend> backend) {
  namespace fs = std::filesystem;
  auto backends = cpu_and(std::move(backend));
  int replayed = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(SHARDCHECK_SOURCE_DIR) / "corpus" / "regressions")) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    auto c = decode_case_text(text.str());
    if (!c) continue;  // a case whose map text is the finding: no conversion to compare
    auto difference = oracles::compare_backends(c.value(), backends);
    EXPECT_FALSE(difference) << entry.path().filename() << ": " << difference->signature << "\n" << difference->message;
    ++replayed;
  }
  EXPECT_GE(replayed, 10);
}

TEST(Backends, DeviceCodeOnOpenMpAgreesWithCpuOnTheRegressionCorpus) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  expect_agreement_on_the_regression_corpus(make_device_omp_backend());
}

TEST(Backends, DefaultBatchedEntriesAgreeWithCpuOnTheRegressionCorpus) {
  expect_agreement_on_the_regression_corpus(std::make_unique<PerBlockBackend>(true));
}

TEST(Backends, CudaAgreesWithCpuOnTheRegressionCorpus) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without the CUDA toolkit";
  auto cuda = make_cuda_backend();
  if (!cuda) GTEST_SKIP() << "CUDA backend compiled, but no CUDA device is present";
  expect_agreement_on_the_regression_corpus(std::move(cuda));
}

// Replicas claim F through the writer record with an atomic minimum. Two ranks hold one
// 2^18-element piece each and disagree everywhere; two threads take one rank's work items
// each, in step. Whatever the schedule, every element's first writer is rank 0, so the
// refusal names rank 1 at element 0. A writer record updated without atomics lets rank 1
// win some elements, and the refusal then names rank 0 at one of them.
TEST(Backends, ReplicaWriterRecordIsDeterministicUnderThreads) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  constexpr Index kNumel = Index{1} << 18;
  constexpr Rank kRanks = 2;
  Map map;
  map.logical_shape = {kNumel};
  ShardSet shards;
  for (Rank r = 0; r < kRanks; ++r) {
    Piece piece;
    piece.shape = {kNumel};
    piece.source = StridedView{0, {1}};
    piece.dest = StridedView{0, {1}};
    for (Rank holder = 0; holder < kRanks; ++holder) piece.locations.push_back(holder);
    map.ranks.push_back(RankEntry{r, Extents{kNumel}, {piece}});
    Buffer shard(DType::int32, kNumel);
    for (Index e = 0; e < kNumel; ++e) shard.set_bits(e, static_cast<std::uint64_t>(e + 7 * r));
    shards.emplace(r, std::move(shard));
  }
  auto cpu = make_cpu_backend();
  auto omp = make_device_omp_backend();
  ConvertOptions on_cpu;
  on_cpu.backend = cpu.get();
  const auto want = rebuild(map, shards, DType::int32, on_cpu);
  ASSERT_FALSE(want.ok());
  for (int round = 0; round < 20; ++round) {
    for (Index tile : {Index{1}, Index{16}, Index{4096}}) {
      ConvertOptions on_device;
      on_device.backend = omp.get();
      on_device.threads = 2;
      on_device.tile = tile;
      on_device.parallel_min_bytes = 0;
      const auto got = rebuild(map, shards, DType::int32, on_device);
      ASSERT_FALSE(got.ok());
      ASSERT_EQ(got.error().to_string(), want.error().to_string()) << "round " << round << ", tile " << tile;
    }
  }
}

// Batches beyond the caches take the host's streaming stores, fenced per group of items,
// and a rebuild deals its blocks in stretches of rows: bits, digest and refusal as the
// CPU's. Uneven column widths put rows at addresses no multiple of 16 bytes apart and
// deal uneven stretches; 1,537 rows (29 x 53) leave nothing to deal but single rows.
TEST(Backends, DeviceCodeAgreesWithCpuOnBatchesBeyondTheCaches) {
  if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
  auto cpu = make_cpu_backend();
  auto omp = make_device_omp_backend();
  const std::vector<Map> maps = {
      contiguous_split_map({1536, 1500}, {500, 333, 667}, 1).value(),
      contiguous_split_map({1537, 1500}, {500, 333, 667}, 1).value(),
      contiguous_split_map({1536, 1500}, {700, 836}, 0).value(),
  };
  for (std::size_t m = 0; m < maps.size(); ++m) {
    const Index numel = checked_numel(maps[m].logical_shape).value();
    const Buffer full = marker_buffer(DType::float32, numel);
    ConvertOptions on_cpu;
    on_cpu.backend = cpu.get();
    const ShardSet shards = extract_all(maps[m], full, on_cpu).value();
    for (int threads : {1, 2}) {
      const std::string context = "map " + std::to_string(m) + ", threads " + std::to_string(threads);
      ConvertOptions on_device;
      on_device.backend = omp.get();
      on_device.threads = threads;
      const auto extracted = extract_all(maps[m], full, on_device);
      ASSERT_TRUE(extracted.ok()) << context;
      EXPECT_TRUE(extracted.value() == shards) << context;
      const auto rebuilt = rebuild(maps[m], shards, DType::float32, on_device);
      ASSERT_TRUE(rebuilt.ok()) << context;
      EXPECT_TRUE(rebuilt.value() == full) << context;
      on_device.expected_digest = digest(full);
      EXPECT_TRUE(rebuild(maps[m], shards, DType::float32, on_device).ok()) << context;
      on_device.expected_digest = digest(full) + 1;
      const auto refused = rebuild(maps[m], shards, DType::float32, on_device);
      ASSERT_FALSE(refused.ok()) << context;
      EXPECT_EQ(refused.error().kind, ErrorKind::digest) << context;
    }
  }
}

TEST(Backends, CudaAgreesWithCpuOnGeneratedCases) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without the CUDA toolkit";
  auto cuda = make_cuda_backend();
  if (!cuda) GTEST_SKIP() << "CUDA backend compiled, but no CUDA device is present";
  campaign::Options options;
  options.seed = 11;
  expect_agreement_on_generated_cases(cpu_and(std::move(cuda)), options, 3000);
}

// Resharding on CUDA: plans executed in device memory (scripts/gpu-check.sh runs it).
TEST(Backends, CudaAgreesWithCpuOnGeneratedReshards) {
  if (!cuda_compiled()) GTEST_SKIP() << "built without the CUDA toolkit";
  auto cuda = make_cuda_backend();
  if (!cuda) GTEST_SKIP() << "CUDA backend compiled, but no CUDA device is present";
  expect_agreement_on_generated_cases(cpu_and(std::move(cuda)), reshard_campaign(11), 2000);
}

}  // namespace
}  // namespace shardcheck
