// The CUDA backend: the same block copy and comparison as the CPU backend, run on the
// device. Buffers live on the host (the Backend interface is host-side), so each call
// stages the spans a block touches; this backend exists for differential checking of
// device arithmetic (half/bfloat16 scaling, strided addressing), not for throughput.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "shardcheck/backend.h"
#include "shardcheck/scaling.h"

namespace shardcheck {
namespace {

// Blocks with more axes than this are delegated to the CPU backend.
constexpr int kMaxDeviceAxes = 8;

struct DeviceView {
  int ndim = 0;
  long long extents[kMaxDeviceAxes] = {};
  long long from_strides[kMaxDeviceAxes] = {};
  long long to_strides[kMaxDeviceAxes] = {};
  long long from_offset = 0;  // relative to the staged span
  long long to_offset = 0;
  long long numel = 0;
};

__device__ void addresses(const DeviceView& v, long long linear, long long* from,
                          long long* to) {
  long long f = v.from_offset, t = v.to_offset;
  for (int k = v.ndim - 1; k >= 0; --k) {
    long long i = linear % v.extents[k];
    linear /= v.extents[k];
    f += i * v.from_strides[k];
    t += i * v.to_strides[k];
  }
  *from = f;
  *to = t;
}

// The legacy model's arithmetic: in the element's own type, as torch 1.13 does on CPU.
template <class T>
__device__ T scaled(T value, double scale, int power, bool multiply);

template <>
__device__ float scaled<float>(float v, double scale, int power, bool multiply) {
  float s = 1.0f, base = static_cast<float>(scale);
  for (int i = 0; i < (power < 0 ? -power : power); ++i) s *= base;
  bool mul = (power >= 0) == multiply;
  return mul ? v * s : v / s;
}
template <>
__device__ double scaled<double>(double v, double scale, int power, bool multiply) {
  double s = 1.0;
  for (int i = 0; i < (power < 0 ? -power : power); ++i) s *= scale;
  bool mul = (power >= 0) == multiply;
  return mul ? v * s : v / s;
}
template <>
__device__ __half scaled<__half>(__half v, double scale, int power, bool multiply) {
  __half s = __float2half(1.0f), base = __double2half(scale);
  for (int i = 0; i < (power < 0 ? -power : power); ++i) s = __hmul(s, base);
  bool mul = (power >= 0) == multiply;
  return mul ? __hmul(v, s) : __hdiv(v, s);
}
template <>
__device__ __nv_bfloat16 scaled<__nv_bfloat16>(__nv_bfloat16 v, double scale, int power,
                                               bool multiply) {
  __nv_bfloat16 s = __float2bfloat16(1.0f), base = __double2bfloat16(scale);
  for (int i = 0; i < (power < 0 ? -power : power); ++i) s = __hmul(s, base);
  bool mul = (power >= 0) == multiply;
  return mul ? __hmul(v, s) : __hdiv(v, s);
}

// The contract 1.2 format of each floating element type (shardcheck/scaling.h).
template <class Value>
struct ContractFormat;
template <>
struct ContractFormat<float> {
  using type = scaling::Float32;
};
template <>
struct ContractFormat<double> {
  using type = scaling::Float64;
};
template <>
struct ContractFormat<__half> {
  using type = scaling::Float16;
};
template <>
struct ContractFormat<__nv_bfloat16> {
  using type = scaling::BFloat16;
};

// Scales one element. `contract`: section 1.2's arithmetic, the one the CPU paths use
// (shardcheck/scaling.h; the host rounded the scale to the arithmetic type, and conversion
// only scales with power 1). Otherwise the legacy model's arithmetic in the element type,
// NaNs left to it.
template <class Bits, class Value>
__device__ Bits move_element(Bits bits, bool scale_it, double scale, int power, bool multiply, bool contract) {
  if (!scale_it) return bits;
  if (contract) {
    using Format = typename ContractFormat<Value>::type;
    const bool up = multiply == (power > 0);
    return scaling::scale_element<Format>(bits, static_cast<typename Format::Math>(scale), up).bits;
  }
  Value value;
  memcpy(&value, &bits, sizeof(Bits));
  value = scaled<Value>(value, scale, power, multiply);
  memcpy(&bits, &value, sizeof(Bits));
  return bits;
}

template <class Bits, class Value>
__global__ void copy_kernel(DeviceView v, const Bits* from, Bits* to, bool scale_it, double scale,
                            int power, bool multiply, bool contract) {
  long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= v.numel) return;
  long long f, t;
  addresses(v, i, &f, &t);
  to[t] = move_element<Bits, Value>(from[f], scale_it, scale, power, multiply, contract);
}

template <class Bits, class Value>
__global__ void compare_kernel(DeviceView v, const Bits* from, const Bits* to, bool scale_it,
                               double scale, int power, bool multiply, bool contract,
                               unsigned long long* first_mismatch) {
  long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (i >= v.numel) return;
  long long f, t;
  addresses(v, i, &f, &t);
  if (move_element<Bits, Value>(from[f], scale_it, scale, power, multiply, contract) != to[t]) {
    atomicMin(first_mismatch, static_cast<unsigned long long>(i));
  }
}

struct DeviceMemory {
  void* ptr = nullptr;
  explicit DeviceMemory(std::size_t bytes) {
    if (cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceMemory() {
    if (ptr) cudaFree(ptr);
  }
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend() : cpu_(make_cpu_backend()) {}
  std::string_view name() const override { return "cuda"; }

  void copy_block(DType dtype, const BlockCopy& copy) override {
    if (!run(dtype, copy, /*compare=*/false, nullptr)) cpu_->copy_block(dtype, copy);
  }

  std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) override {
    std::optional<Index> mismatch;
    if (!run(dtype, copy, /*compare=*/true, &mismatch)) return cpu_->compare_block(dtype, copy);
    return mismatch;
  }

 private:
  // Returns false when the block is left to the CPU backend (too many axes, device error).
  bool run(DType dtype, const BlockCopy& copy, bool compare, std::optional<Index>* mismatch) {
    const Extents& shape = *copy.shape;
    if (shape.size() > static_cast<std::size_t>(kMaxDeviceAxes)) return false;
    DeviceView v;
    v.ndim = static_cast<int>(shape.size());
    v.numel = 1;
    Index from_span = 1, to_span = 1;
    for (int k = 0; k < v.ndim; ++k) {
      v.extents[k] = shape[k];
      v.from_strides[k] = copy.from_view.strides[k];
      v.to_strides[k] = copy.to_view.strides[k];
      v.numel *= shape[k];
      from_span += (shape[k] - 1) * copy.from_view.strides[k];
      to_span += (shape[k] - 1) * copy.to_view.strides[k];
    }
    if (v.numel == 0) return true;
    const std::size_t width = element_size(dtype);
    const std::byte* from_host = copy.from + copy.from_view.offset * width;
    std::byte* to_host = copy.to + copy.to_view.offset * width;
    DeviceMemory from_dev(from_span * width), to_dev(to_span * width),
        flag(sizeof(unsigned long long));
    if (!from_dev.ptr || !to_dev.ptr || !flag.ptr) return false;
    cudaMemcpy(from_dev.ptr, from_host, from_span * width, cudaMemcpyHostToDevice);
    // The destination span is staged too: a copy must leave the gaps between strided
    // addresses untouched, and a comparison reads it.
    cudaMemcpy(to_dev.ptr, to_host, to_span * width, cudaMemcpyHostToDevice);
    const unsigned long long none = ~0ull;
    cudaMemcpy(flag.ptr, &none, sizeof none, cudaMemcpyHostToDevice);
    const bool scale_it = copy.scale != 1.0 && is_floating(dtype);
    const bool contract = copy.arithmetic == Arithmetic::contract;
    const int threads = 256;
    const unsigned blocks = static_cast<unsigned>((v.numel + threads - 1) / threads);
    auto* first = static_cast<unsigned long long*>(flag.ptr);
    auto launch = [&](auto bits_tag, auto value_tag) {
      using Bits = decltype(bits_tag);
      using Value = decltype(value_tag);
      auto* f = static_cast<const Bits*>(from_dev.ptr);
      auto* t = static_cast<Bits*>(to_dev.ptr);
      if (compare) {
        compare_kernel<Bits, Value><<<blocks, threads>>>(v, f, t, scale_it, copy.scale,
                                                         copy.power, copy.multiply, contract, first);
      } else {
        copy_kernel<Bits, Value><<<blocks, threads>>>(v, f, t, scale_it, copy.scale, copy.power,
                                                      copy.multiply, contract);
      }
    };
    switch (dtype) {
      case DType::float32: launch(std::uint32_t{}, float{}); break;
      case DType::float64: launch(std::uint64_t{}, double{}); break;
      case DType::float16: launch(std::uint16_t{}, __half{}); break;
      case DType::bfloat16: launch(std::uint16_t{}, __nv_bfloat16{}); break;
      case DType::int16: launch(std::uint16_t{}, float{}); break;
      case DType::int32: launch(std::uint32_t{}, float{}); break;
      case DType::int64: launch(std::uint64_t{}, double{}); break;
      case DType::int8:
      case DType::uint8:
      case DType::boolean: launch(std::uint8_t{}, float{}); break;
    }
    if (cudaDeviceSynchronize() != cudaSuccess) return false;
    if (compare) {
      unsigned long long result = none;
      cudaMemcpy(&result, flag.ptr, sizeof result, cudaMemcpyDeviceToHost);
      *mismatch = result == none ? std::nullopt : std::optional<Index>(static_cast<Index>(result));
    } else {
      cudaMemcpy(to_host, to_dev.ptr, to_span * width, cudaMemcpyDeviceToHost);
    }
    return cudaGetLastError() == cudaSuccess;
  }

  std::unique_ptr<Backend> cpu_;
};

}  // namespace

bool cuda_compiled() { return true; }

std::unique_ptr<Backend> make_cuda_backend() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return nullptr;
  return std::make_unique<CudaBackend>();
}

}  // namespace shardcheck
