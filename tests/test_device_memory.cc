// Conversion where the tensors are (issue 27), and resharding (issue 47): buffers in a
// device's memory are converted or resharded by a backend that reaches it, results stay
// there, and the host never reads them. The
// device code on OpenMP marks host memory as its device's, so these tests run in every
// build that finds Thrust; on CUDA they run where a device is and are skipped, with the
// reason, elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "shardcheck/backend.h"
#include "shardcheck/constructors.h"
#include "shardcheck/convert.h"
#include "shardcheck/digest.h"
#include "shardcheck/reshard.h"

namespace shardcheck {
namespace {

// Each device backend of this build, by name: the test is skipped, with the reason, where
// it is absent.
class DeviceMemory : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "device-omp" || GetParam() == "device-omp-device-only") {
      if (!device_omp_compiled()) GTEST_SKIP() << "built without Thrust's headers: no device code on OpenMP";
      backend_ = GetParam() == "device-omp" ? make_device_omp_backend() : make_device_only_omp_backend();
    } else {
      if (!cuda_compiled()) GTEST_SKIP() << "built without the CUDA toolkit";
      backend_ = make_cuda_backend();
      if (!backend_) GTEST_SKIP() << "CUDA backend compiled, but no CUDA device is present";
    }
  }
  Backend& backend() { return *backend_; }

 private:
  std::unique_ptr<Backend> backend_;
};

// device-omp-device-only reaches its device memory only, as CUDA does: the CUDA backend's
// control flow on every build.
INSTANTIATE_TEST_SUITE_P(Backends, DeviceMemory, ::testing::Values("device-omp", "device-omp-device-only", "cuda"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

TEST_P(DeviceMemory, TheHostNeverReadsDeviceMemory) {
  Backend* b = &backend();
  const Buffer host = marker_buffer(DType::float32, 100);
  Buffer device = b->copy_to(host, Memory::device);
  EXPECT_EQ(device.memory(), Memory::device);
  EXPECT_EQ(device.numel(), 100);
  EXPECT_NE(device.data(), nullptr);
  EXPECT_THROW((void)device.bits(0), std::logic_error);
  EXPECT_THROW(device.set_bits(0, 1), std::logic_error);
  EXPECT_THROW((void)(device == host), std::logic_error);
  EXPECT_THROW(Buffer{device}, std::logic_error);
  // Through the backend, the same bits.
  for (Index i : {0, 37, 99}) EXPECT_EQ(b->element_bits(device, i), host.bits(i));
  EXPECT_THROW((void)b->element_bits(device, 100), std::out_of_range);
  Buffer moved = std::move(device);
  EXPECT_EQ(moved.memory(), Memory::device);
  EXPECT_EQ(device.memory(), Memory::host);  // NOLINT(bugprone-use-after-move): moved-from is empty host memory
  EXPECT_TRUE(b->copy_to(moved, Memory::host) == host);
  // Borrowed device memory (a caller's tensor) is read-only; owned memory is writable.
  const Buffer borrowed = Buffer::in_device_memory(DType::float32, 100, moved.data(), nullptr);
  EXPECT_TRUE(borrowed.borrowed());
  EXPECT_THROW((void)const_cast<Buffer&>(borrowed).data(), std::logic_error);
  EXPECT_FALSE(moved.borrowed());
}

TEST_P(DeviceMemory, ABackendThatDoesNotReachTheMemoryIsAnError) {
  Backend* b = &backend();
  auto cpu = make_cpu_backend();
  const Map map = contiguous_split_map({8, 6}, {3, 3}, 1).value();
  const Buffer full = marker_buffer(DType::float32, 48);
  const ShardSet shards = extract_all(map, full).value();
  const ShardSet on_device = copy_shards_to(*b, shards, Memory::device);
  const Buffer full_on_device = b->copy_to(full, Memory::device);
  ConvertOptions on_cpu;
  on_cpu.backend = cpu.get();
  EXPECT_THROW((void)rebuild(map, on_device, DType::float32, on_cpu), std::invalid_argument);
  EXPECT_THROW((void)extract(map, full_on_device, 0, on_cpu), std::invalid_argument);
  EXPECT_THROW((void)extract_all(map, full_on_device, on_cpu), std::invalid_argument);
  EXPECT_THROW((void)cpu->copy_to(full, Memory::device), std::invalid_argument);
  // A backend that reaches device memory only (CUDA's kind) refuses host inputs.
  if (!b->reaches(Memory::host)) {
    ConvertOptions on_device_only;
    on_device_only.backend = b;
    EXPECT_THROW((void)rebuild(map, shards, DType::float32, on_device_only), std::invalid_argument);
    EXPECT_THROW((void)extract(map, full, 0, on_device_only), std::invalid_argument);
  }
  // Shards in two memories, and the legacy model (host code) on device memory.
  ShardSet mixed = shards;
  mixed.insert_or_assign(1, b->copy_to(shards.at(1), Memory::device));
  ConvertOptions on_b;
  on_b.backend = b;
  EXPECT_THROW((void)rebuild(map, mixed, DType::float32, on_b), std::invalid_argument);
  on_b.policy = Policy::legacy;
  EXPECT_THROW((void)rebuild(map, on_device, DType::float32, on_b), std::invalid_argument);
  EXPECT_THROW((void)extract(map, full_on_device, 0, on_b), std::invalid_argument);
}

// Rebuild, extract, extract_all and a digest on device memory: results stay there and
// equal the CPU backend's, on layouts with replicas, strides and uneven splits.
TEST_P(DeviceMemory, ConversionStaysOnTheDeviceAndAgreesWithTheCpu) {
  const std::vector<Map> maps = {
      contiguous_split_map({64, 48}, {16, 16, 16}, 1).value(),
      contiguous_split_map({67, 40}, {20, 20, 27}, 0).value(),
      replicated_map({30, 7}, 3).value(),
  };
  Backend& backend = this->backend();
  for (std::size_t m = 0; m < maps.size(); ++m) {
    const std::string context = GetParam() + ", map " + std::to_string(m);
    const Index numel = checked_numel(maps[m].logical_shape).value();
    for (DType dtype : {DType::float32, DType::bfloat16, DType::int64}) {
      const Buffer full = marker_buffer(dtype, numel);
      const ShardSet shards = extract_all(maps[m], full).value();
      ConvertOptions options;
      options.backend = &backend;
      options.threads = 2;
      options.parallel_min_bytes = 0;
      options.expected_digest = digest(full);
      const Buffer full_on_device = backend.copy_to(full, Memory::device);
      const auto rebuilt = rebuild(maps[m], copy_shards_to(backend, shards, Memory::device), dtype, options);
      ASSERT_TRUE(rebuilt.ok()) << context << ": " << rebuilt.error().to_string();
      EXPECT_EQ(rebuilt.value().memory(), Memory::device) << context;
      EXPECT_TRUE(backend.copy_to(rebuilt.value(), Memory::host) == full) << context;
      const auto all = extract_all(maps[m], full_on_device, options);
      ASSERT_TRUE(all.ok()) << context;
      for (const auto& [rank, shard] : all.value()) {
        EXPECT_EQ(shard.memory(), Memory::device) << context;
        EXPECT_TRUE(backend.copy_to(shard, Memory::host) == shards.at(rank)) << context << ", rank " << rank;
        const auto one = extract(maps[m], full_on_device, rank, options);
        ASSERT_TRUE(one.ok()) << context;
        EXPECT_TRUE(backend.copy_to(one.value(), Memory::host) == shards.at(rank)) << context << ", rank " << rank;
      }
      EXPECT_EQ(backend.digest(full_on_device, Threading{2, 0, 0}), digest(full)) << context;
      // A replica that disagrees: the same refusal, values read through the backend.
      if (m == 2) {
        ShardSet bad = shards;
        bad.at(2).set_bits(5, bad.at(2).bits(5) ^ 1);
        ConvertOptions on_cpu;
        const auto want = rebuild(maps[m], bad, dtype, on_cpu);
        const auto got = rebuild(maps[m], copy_shards_to(backend, bad, Memory::device), dtype, options);
        ASSERT_FALSE(want.ok());
        ASSERT_FALSE(got.ok()) << context;
        EXPECT_EQ(got.error(), want.error()) << context;
      }
    }
  }
}

// Contract 1.2's refusal of an element that overflows or flushes, judged on the device:
// the piece's lowest result address, not the first element the walk meets. The piece
// stores F (32 elements) transposed: shard address 8i + j holds F's element i + 4j.
TEST_P(DeviceMemory, ScaleFaultsAreFoundAtTheLowestAddressOnTheDevice) {
  Map map;
  map.logical_shape = {32};
  Piece piece;
  piece.shape = {4, 8};
  piece.source = StridedView{0, {1, 4}};
  piece.dest = StridedView{0, {8, 1}};
  piece.locations = {0};
  piece.scale = 1e30;
  map.ranks.push_back(RankEntry{0, Extents{4, 8}, {piece}});
  const auto value = [](double v) { return bits_from_double(DType::float32, v).value(); };
  // Extract multiplies: F's elements 7 and 20 overflow, at shard addresses 25 and 5.
  Buffer full = marker_buffer(DType::float32, 32);
  full.set_bits(7, value(1e9));
  full.set_bits(20, value(-1e9));
  // Rebuild divides: shard addresses 1 and 8 flush, F's elements 4 and 1; the walk meets
  // shard address 1 first, the lowest element of F is 1.
  Buffer shard(DType::float32, 32);
  for (Index a = 0; a < 32; ++a) shard.set_bits(a, value(1e31 + static_cast<double>(a) * 1e29));
  shard.set_bits(1, value(1e-20));
  shard.set_bits(8, value(-1e-20));
  ShardSet shards;
  shards.emplace(0, shard);
  const auto want_extract = extract(map, full, 0);
  const auto want_rebuild = rebuild(map, shards, DType::float32);
  ASSERT_FALSE(want_extract.ok());
  ASSERT_FALSE(want_rebuild.ok());
  EXPECT_EQ(want_extract.error().kind, ErrorKind::scale);
  EXPECT_EQ(want_extract.error().address, 5);
  EXPECT_EQ(want_rebuild.error().kind, ErrorKind::scale);
  EXPECT_EQ(want_rebuild.error().address, 1);
  Backend& device = backend();
  for (Index tile : {1, 3, 0}) {
    ConvertOptions options;
    options.backend = &device;
    options.threads = 2;
    options.tile = tile;
    options.parallel_min_bytes = 0;
    const auto got_extract = extract(map, device.copy_to(full, Memory::device), 0, options);
    const auto got_rebuild = rebuild(map, copy_shards_to(device, shards, Memory::device), DType::float32, options);
    ASSERT_FALSE(got_extract.ok());
    ASSERT_FALSE(got_rebuild.ok());
    EXPECT_EQ(got_extract.error(), want_extract.error()) << "tile " << tile;
    EXPECT_EQ(got_rebuild.error(), want_rebuild.error()) << "tile " << tile;
  }
}

// Contract 11 where the shards are: a plan executed on device memory leaves the target
// shards there, bit for bit the CPU backend's, with every replica holder compared and the
// content digest verified on both sides (the shares read host copies). Column to row,
// replicas to a split and back, and uneven splits with empty ranks.
TEST_P(DeviceMemory, ReshardStaysOnTheDeviceAndAgreesWithTheCpu) {
  const std::vector<std::pair<Map, Map>> pairs = {
      {contiguous_split_map({64, 48}, std::vector<Index>(8, 6), 1).value(),
       contiguous_split_map({64, 48}, std::vector<Index>(4, 16), 0).value()},
      {replicated_map({30, 7}, 3).value(), contiguous_split_map({30, 7}, {10, 0, 20}, 0).value()},
      {contiguous_split_map({30, 7}, {3, 4}, 1).value(), replicated_map({30, 7}, 2).value()},
  };
  Backend& backend = this->backend();
  for (std::size_t p = 0; p < pairs.size(); ++p) {
    Map source = pairs[p].first;
    Map target = pairs[p].second;
    for (DType dtype : {DType::float32, DType::bfloat16, DType::int64}) {
      const std::string context = GetParam() + ", pair " + std::to_string(p) + ", " + std::string(dtype_name(dtype));
      const Buffer full = marker_buffer(dtype, checked_numel(source.logical_shape).value());
      source.content_digests["param"] = target.content_digests["param"] = digest(full);
      const ShardSet shards = extract_all(source, full).value();
      const ShardSet want = extract_all(target, full).value();
      ReshardOptions options;
      options.compare_replicas = true;
      options.digest_state = "param";
      options.backend = &backend;
      options.threading = Threading{2, 0, 0};
      const auto got = reshard(source, target, copy_shards_to(backend, shards, Memory::device), dtype, options);
      ASSERT_TRUE(got.ok()) << context << ": " << got.error().to_string();
      ASSERT_EQ(got.value().size(), want.size()) << context;
      for (const auto& [rank, shard] : got.value()) {
        EXPECT_EQ(shard.memory(), Memory::device) << context;
        EXPECT_TRUE(backend.copy_to(shard, Memory::host) == want.at(rank)) << context << ", rank " << rank;
      }
      // A digest the shards do not hold: the same refusal as on the CPU, source side first.
      options.expected_digest = digest(full) + 1;
      const auto refused = reshard(source, target, copy_shards_to(backend, shards, Memory::device), dtype, options);
      ReshardOptions on_cpu = options;
      on_cpu.backend = nullptr;
      const auto want_refused = reshard(source, target, shards, dtype, on_cpu);
      ASSERT_FALSE(want_refused.ok()) << context;
      ASSERT_FALSE(refused.ok()) << context;
      EXPECT_EQ(refused.error().kind, ErrorKind::digest) << context;
      EXPECT_EQ(refused.error(), want_refused.error()) << context;
    }
  }
}

// A replica that disagrees, found where the shards are: rank 1 holds F's halves swapped
// and its copy of F[1] (at its shard address 3) is damaged. The refusal is located at the
// copy read (rank 0, shard address 1) and names the other holder's rank, address and bits,
// read from device memory through the backend: the CPU backend's error, word for word.
TEST_P(DeviceMemory, AReplicaMismatchInDeviceMemoryNamesBothHolders) {
  auto piece = [](Index n, Index source_offset, Index dest_offset) {
    Piece p;
    p.shape = {n};
    p.source = StridedView{source_offset, {1}};
    p.dest = StridedView{dest_offset, {1}};
    p.locations = {0, 1};
    return p;
  };
  Map source;
  source.logical_shape = {4};
  source.ranks.push_back(RankEntry{0, Extents{4}, {piece(4, 0, 0)}});
  source.ranks.push_back(RankEntry{1, Extents{4}, {piece(2, 2, 0), piece(2, 0, 2)}});
  const Map target = contiguous_split_map({4}, {2, 2}, 0).value();
  const Buffer full = marker_buffer(DType::float32, 4);
  ShardSet shards = extract_all(source, full).value();
  shards.at(1).set_bits(3, shards.at(1).bits(3) ^ 1);
  ReshardOptions options;
  options.compare_replicas = true;
  const auto want = reshard(source, target, shards, DType::float32, options);
  ASSERT_FALSE(want.ok());
  EXPECT_EQ(want.error().kind, ErrorKind::different_data);
  EXPECT_EQ(want.error().rank, 0);
  EXPECT_EQ(want.error().address, 1);
  EXPECT_NE(want.error().sentence.find("rank 1 holds"), std::string::npos) << want.error().sentence;
  EXPECT_NE(want.error().sentence.find("at shard address 3"), std::string::npos) << want.error().sentence;
  Backend& backend = this->backend();
  options.backend = &backend;
  for (Index tile : {1, 3, 0}) {
    options.threading = Threading{2, 0, tile};
    const auto got = reshard(source, target, copy_shards_to(backend, shards, Memory::device), DType::float32, options);
    ASSERT_FALSE(got.ok()) << "tile " << tile;
    EXPECT_EQ(got.error(), want.error()) << "tile " << tile << ": " << got.error().to_string();
  }
}

}  // namespace
}  // namespace shardcheck
