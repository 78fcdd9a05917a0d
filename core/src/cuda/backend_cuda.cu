// The device backend on CUDA: the same device code as the OpenMP build
// (core/src/device/device_kernels.h, device_backend.h), compiled by nvcc for sm_90 plus
// PTX. Conversion runs where the tensors are: buffers in device memory (Backend::allocate,
// Backend::copy_to, or a caller's CUDA tensors through Python's DLPack), a few kernel
// launches per batch whatever the piece count, nothing staged through the host. Host
// buffers are refused (Backend::reaches); a caller with host data copies it over first.
//
// No CI machine has a GPU: scripts/gpu-check.sh runs the device tests, the backend
// differential and the CUDA benchmarks where one is (first run on an H200, 2026-12-04:
// every device test and a 90,665-case campaign agree with the CPU backend).
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <stdexcept>

#include <thrust/device_vector.h>
#include <thrust/system/cuda/execution_policy.h>

#include "device/device_backend.h"

namespace shardcheck {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

struct CudaSystem {
  static constexpr const char* kName = "cuda";
  // Elements per thread. Measured on an H200 (shardcheck_bench cuda-tileN, float32, TP 8):
  // a 16384x16384 column rebuild took 6.0 ms with 1 (each thread decodes its own address),
  // 3.6-4.0 ms with 4 and 6.9 ms with 32 (a warp's loads 32 elements apart).
  static constexpr device::Index kDefaultTile = 4;
  // The GPU's copies go through its caches: streaming stores (and their fences) are host code.
  static constexpr bool kStreams = false;

  template <class T>
  using vector = thrust::device_vector<T>;
  template <class T>
  static T* raw(vector<T>& v) {
    return thrust::raw_pointer_cast(v.data());
  }

  static constexpr bool kHostMemory = false;

  // The runs point into device memory already: only the batch's own tables go over.
  template <class Fn>
  static void launch(const device::HostBatch& batch, int, Fn&& fn) {
    thrust::device_vector<device::Run> device_runs(batch.runs.begin(), batch.runs.end());
    thrust::device_vector<detail::WalkAxis> device_axes(batch.axes.begin(), batch.axes.end());
    device::Batch view = batch.view();
    view.runs = thrust::raw_pointer_cast(device_runs.data());
    view.axes = thrust::raw_pointer_cast(device_axes.data());
    fn(thrust::cuda::par, view);
    check(cudaDeviceSynchronize(), "a conversion kernel");
  }

  static std::uint64_t digest(const Buffer& full, device::Index tile, int) {
    const device::DigestTile kernel{reinterpret_cast<const unsigned char*>(full.data()), full.numel(), tile,
                                    static_cast<std::uint32_t>(element_size(full.dtype()))};
    const device::Index items = (full.numel() + tile - 1) / tile;
    return thrust::transform_reduce(thrust::cuda::par, thrust::counting_iterator<device::Index>(0),
                                    thrust::counting_iterator<device::Index>(items), kernel, std::uint64_t{0},
                                    device::SumTerms{});
  }

  static std::pair<std::byte*, std::shared_ptr<void>> allocate(std::size_t bytes) {
    void* data = nullptr;
    check(cudaMalloc(&data, bytes == 0 ? 1 : bytes), "cudaMalloc");
    return {static_cast<std::byte*>(data), std::shared_ptr<void>(data, [](void* p) { cudaFree(p); })};
  }

  // Unified addressing tells host from device memory.
  static void copy(void* to, const void* from, std::size_t bytes) {
    check(cudaMemcpy(to, from, bytes, cudaMemcpyDefault), "cudaMemcpy");
  }

  static void zero(void* at, std::size_t bytes) { check(cudaMemset(at, 0, bytes), "cudaMemset"); }
};

}  // namespace

bool cuda_compiled() { return true; }

std::unique_ptr<Backend> make_cuda_backend() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return nullptr;
  return std::make_unique<device::DeviceBackend<CudaSystem>>();
}

}  // namespace shardcheck
