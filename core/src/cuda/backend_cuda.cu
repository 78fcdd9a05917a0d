// The device backend on CUDA: the same device code as the OpenMP build
// (core/src/device/device_kernels.h, device_backend.h), compiled by nvcc for sm_90 plus
// PTX. The Backend interface hands host buffers, so a launch stages each buffer a batch
// touches once (not once per block), runs every work item of the batch in a few kernel
// launches, and copies the destinations back.
//
// Not yet executed on a GPU: no machine of this project's CI has one. scripts/gpu-check.sh
// runs the backend differential and the CUDA benchmark where one exists.
#include <cuda_runtime.h>

#include <map>
#include <stdexcept>

#include <thrust/device_vector.h>
#include <thrust/system/cuda/execution_policy.h>

#include "device/device_backend.h"

namespace shardcheck {

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(status));
}

// Device copies of host buffers, by host address; each spans what the batch reaches.
class Staging {
 public:
  ~Staging() {
    for (auto& [host, copy] : copies_) cudaFree(copy.device);
  }

  unsigned char* stage(const unsigned char* host, device::Index elements, std::uint32_t size, bool written) {
    Copy& copy = copies_[host];
    const auto bytes = static_cast<std::size_t>(elements) * size;
    copy.written |= written;
    if (copy.device != nullptr && copy.bytes >= bytes) return copy.device;
    if (copy.device != nullptr) cudaFree(copy.device);
    copy.bytes = bytes;
    check(cudaMalloc(&copy.device, bytes == 0 ? 1 : bytes), "cudaMalloc");
    check(cudaMemcpy(copy.device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
    return copy.device;
  }

  void copy_back() {
    for (auto& [host, copy] : copies_) {
      if (!copy.written) continue;
      check(cudaMemcpy(const_cast<unsigned char*>(host), copy.device, copy.bytes, cudaMemcpyDeviceToHost),
            "cudaMemcpy to the host");
    }
  }

 private:
  struct Copy {
    unsigned char* device = nullptr;
    std::size_t bytes = 0;
    bool written = false;
  };
  std::map<const unsigned char*, Copy> copies_;
};

struct CudaSystem {
  static constexpr const char* kName = "cuda";
  // One thread per item: short items keep a warp's threads on neighbouring elements.
  static constexpr device::Index kDefaultTile = 32;
  // The GPU's copies go through its caches: streaming stores (and their fences) are host code.
  static constexpr bool kStreams = false;

  template <class T>
  using vector = thrust::device_vector<T>;
  template <class T>
  static T* raw(vector<T>& v) {
    return thrust::raw_pointer_cast(v.data());
  }

  // Every buffer is staged at its largest reach first, then the runs are pointed at the
  // copies (a buffer read by one run and written by another is one copy).
  template <class Fn>
  static void launch(const device::HostBatch& batch, int, Fn&& fn) {
    Staging staging;
    std::map<const unsigned char*, std::pair<device::Index, bool>> reach;
    for (std::size_t i = 0; i < batch.runs.size(); ++i) {
      auto& from = reach[batch.runs[i].from];
      from.first = std::max(from.first, batch.from_reach[i]);
      auto& to = reach[batch.runs[i].to];
      to.first = std::max(to.first, batch.to_reach[i]);
      to.second = true;
    }
    std::map<const unsigned char*, unsigned char*> on_device;
    for (const auto& [host, r] : reach) on_device[host] = staging.stage(host, r.first, batch.element_size, r.second);
    std::vector<device::Run> runs = batch.runs;
    for (device::Run& run : runs) {
      run.from = on_device[run.from];
      run.to = on_device[run.to];
    }
    thrust::device_vector<device::Run> device_runs(runs.begin(), runs.end());
    thrust::device_vector<device::Axis> device_axes(batch.axes.begin(), batch.axes.end());
    device::Batch view = batch.view();
    view.runs = thrust::raw_pointer_cast(device_runs.data());
    view.axes = thrust::raw_pointer_cast(device_axes.data());
    fn(thrust::cuda::par, view);
    check(cudaDeviceSynchronize(), "a conversion kernel");
    staging.copy_back();
  }

  static std::uint64_t digest(const Buffer& full, device::Index tile, int) {
    Staging staging;
    const auto size = static_cast<std::uint32_t>(element_size(full.dtype()));
    const unsigned char* data =
        staging.stage(reinterpret_cast<const unsigned char*>(full.data()), full.numel(), size, false);
    const device::DigestTile kernel{data, full.numel(), tile, size};
    const device::Index items = (full.numel() + tile - 1) / tile;
    return thrust::transform_reduce(thrust::cuda::par, thrust::counting_iterator<device::Index>(0),
                                    thrust::counting_iterator<device::Index>(items), kernel, std::uint64_t{0},
                                    device::SumTerms{});
  }
};

}  // namespace

bool cuda_compiled() { return true; }

std::unique_ptr<Backend> make_cuda_backend() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return nullptr;
  return std::make_unique<device::DeviceBackend<CudaSystem>>();
}

}  // namespace shardcheck
