// The device backend on Thrust's OpenMP system: the device code of device_kernels.h on
// host memory and real threads. Built wherever Thrust's headers are found (the CUDA
// toolkit's CCCL, or Debian's libthrust-dev), so every CI run executes the device code.
#include <omp.h>

#include <cstring>
#include <memory>
#include <utility>

#include <thrust/system/omp/execution_policy.h>

#include "device_backend.h"

namespace shardcheck {

namespace {

// Sets the OpenMP thread count of the calling thread for one launch (0: leaves it).
class ThreadsFor {
 public:
  explicit ThreadsFor(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ThreadsFor() { omp_set_num_threads(saved_); }
  ThreadsFor(const ThreadsFor&) = delete;
  ThreadsFor& operator=(const ThreadsFor&) = delete;

 private:
  int saved_;
};

// `kReachesHost`: false makes a system that reaches its "device" memory only, as CUDA's
// does, so that CPU tests run the CUDA backend's control flow (host inputs refused, data
// copied over and back) on the same device code.
template <bool kReachesHost>
struct OmpSystem {
  static constexpr const char* kName = kReachesHost ? "device-omp" : "device-omp-device-only";
  // Long enough that an item's bookkeeping (a binary search and a row decode) is small
  // beside its copy, short enough that a shard's rows spread over the threads.
  static constexpr device::Index kDefaultTile = 1 << 13;
  // Batches far larger than the caches stream their rows (streaming.h), as the CPU's do.
  static constexpr bool kStreams = true;

  template <class T>
  using vector = std::vector<T>;
  template <class T>
  static T* raw(vector<T>& v) {
    return v.data();
  }

  // Host memory is the device's memory here: the runs point at the caller's buffers.
  template <class Fn>
  static void launch(const device::HostBatch& batch, int threads, Fn&& fn) {
    ThreadsFor scope(threads);
    fn(thrust::omp::par, batch.view());
  }

  // "Device" memory is host memory here, allocated apart and marked as a device's, so that
  // the tests of device-resident conversion see any access the host makes to it.
  static constexpr bool kHostMemory = kReachesHost;
  // A host buffer's own storage (the tensor allocator, which keeps a few freed tensors'
  // pages for the next), held by the owner.
  static std::pair<std::byte*, std::shared_ptr<void>> allocate(std::size_t bytes) {
    auto storage = std::make_shared<Buffer>(Buffer::uninitialized(DType::uint8, static_cast<device::Index>(bytes)));
    std::byte* data = storage->data();
    return {data, std::move(storage)};
  }
  static void copy(void* to, const void* from, std::size_t bytes) { std::memcpy(to, from, bytes); }
  static void zero(void* at, std::size_t bytes) { std::memset(at, 0, bytes); }

  static std::uint64_t digest(const Buffer& full, device::Index tile, int threads) {
    ThreadsFor scope(threads);
    const device::DigestTile kernel{reinterpret_cast<const unsigned char*>(full.data()), full.numel(), tile,
                                    static_cast<std::uint32_t>(element_size(full.dtype()))};
    const device::Index items = (full.numel() + tile - 1) / tile;
    return thrust::transform_reduce(thrust::omp::par, thrust::counting_iterator<device::Index>(0),
                                    thrust::counting_iterator<device::Index>(items), kernel, std::uint64_t{0},
                                    device::SumTerms{});
  }
};

}  // namespace

std::unique_ptr<Backend> make_device_omp_backend() {
  return std::make_unique<device::DeviceBackend<OmpSystem<true>>>();
}

std::unique_ptr<Backend> make_device_only_omp_backend() {
  return std::make_unique<device::DeviceBackend<OmpSystem<false>>>();
}

}  // namespace shardcheck
