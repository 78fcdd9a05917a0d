// Element types and dtype-tagged buffers. Data moves as raw bits; only scaling
// does arithmetic, in the element type's own arithmetic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <memory>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

#include "shardcheck/scaling.h"
#include "shardcheck/types.h"

namespace shardcheck {

enum class DType { float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8, boolean };

inline constexpr DType kAllDTypes[] = {DType::float32, DType::float64, DType::float16,
                                       DType::bfloat16, DType::int8,    DType::int16,
                                       DType::int32,   DType::int64,   DType::uint8,
                                       DType::boolean};

std::string_view dtype_name(DType dtype);  // "float32", ..., "bool"
std::optional<DType> parse_dtype(std::string_view name);
std::size_t element_size(DType dtype);     // bytes
bool is_floating(DType dtype);

namespace detail {
// Large buffers (tensors) come from whole huge pages where the kernel offers them: a fresh
// 64 MiB F otherwise costs 16384 page faults, more than copying into it.
void* allocate_bytes(std::size_t bytes);
void deallocate_bytes(void* p, std::size_t bytes) noexcept;

// A vector whose resize leaves bytes uninitialised, so that a conversion proven to write
// every element does not first pay for zeroing them (Buffer::uninitialized).
template <class T>
struct DefaultInitAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <class U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(allocate_bytes(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { deallocate_bytes(p, n * sizeof(T)); }
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
}  // namespace detail

// Where a buffer's bytes live. The host reads and writes only host memory; a buffer in a
// device's memory is reached through a backend that reaches it (Backend::reaches), and
// conversion leaves its result where its inputs are. The device code on OpenMP treats
// host memory as its device's, so tests see any host access to "device" memory.
enum class Memory : std::uint8_t { host, device };
std::string_view memory_name(Memory memory);

// A flat buffer of `numel` elements of `dtype`, stored as raw little-endian bytes.
//
// A buffer either owns its bytes or borrows read-only memory the caller owns (an array
// handed in from Python), so that converting a large tensor does not first copy it.
// Conversions only read their input buffers; writing to a borrowed buffer throws.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DType dtype, Index numel);  // zero-filled
  // Contents unspecified: only for a writer that is proven to write every element.
  static Buffer uninitialized(DType dtype, Index numel);

  // `data` holds numel elements of `dtype`, aligned to the element size, and must
  // outlive the buffer. Copies of a borrowed buffer own a copy of the bytes.
  static Buffer borrow(DType dtype, Index numel, const std::byte* data);

  // Device memory at `data` (aligned to the element size), which the host never
  // dereferences: only a backend that reaches it (Backend::allocate, Backend::copy_to and
  // the caller's device tensors come here). `owner` keeps the memory alive and makes the
  // buffer writable; without one the buffer borrows it read-only. Host access (bits,
  // set_bits, ==, copies) throws std::logic_error.
  static Buffer in_device_memory(DType dtype, Index numel, std::byte* data, std::shared_ptr<void> owner);

  Buffer(const Buffer& other);
  Buffer& operator=(const Buffer& other);
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;

  DType dtype() const { return dtype_; }
  Index numel() const { return numel_; }
  bool borrowed() const { return borrowed_ != nullptr && !owner_; }
  Memory memory() const { return memory_; }
  // The first element's address, in the buffer's memory.
  std::byte* data();
  const std::byte* data() const { return borrowed_ != nullptr ? borrowed_ : bytes_.data(); }
  std::size_t size_bytes() const;

  // Raw bits of element i, zero-extended to 64 bits.
  std::uint64_t bits(Index i) const;
  void set_bits(Index i, std::uint64_t bits);

  // Same dtype and the same bytes, whoever owns them.
  friend bool operator==(const Buffer& a, const Buffer& b);

 private:
  void expect_host(const char* what) const;

  DType dtype_ = DType::float32;
  Index numel_ = 0;
  std::vector<std::byte, detail::DefaultInitAllocator<std::byte>> bytes_;
  const std::byte* borrowed_ = nullptr;  // memory the buffer does not hold in bytes_
  std::shared_ptr<void> owner_;          // device memory the buffer owns (shared by moves only)
  Memory memory_ = Memory::host;
};

// Converts a JSON-style number to the dtype's bit pattern (rounding to nearest for
// floats, range-checked for integers; std::nullopt when it does not fit).
std::optional<std::uint64_t> bits_from_double(DType dtype, double value);
std::optional<std::uint64_t> bits_from_integer(DType dtype, std::int64_t value);
// The element's value as a double (exact for every dtype but int64 beyond 2^53).
double bits_to_double(DType dtype, std::uint64_t bits);
// Human form of one element: "1.5 (0x3fc00000)".
std::string format_element(DType dtype, std::uint64_t bits);

// True when `bits` are a NaN of a floating dtype (any payload, either sign, quiet or
// signalling); false for every integer dtype.
bool is_nan_bits(DType dtype, std::uint64_t bits);

// Which arithmetic scales an element. `contract` is section 1.2's: float32 arithmetic for
// 16-bit types (float64 for float64), the scale rounded once to it, one rounding back to
// the element type, and a NaN's bits kept (include/shardcheck/scaling.h). `legacy_torch`
// is what DeepSpeed's torch (1.13, CPU) does and the legacy model keeps: the scale
// rounded to the element type and the arithmetic done there, NaNs left to it (it may
// quieten or canonicalise them).
enum class Arithmetic { contract, legacy_torch };

// scale^p applied to one element: multiply=true computes value * scale^p (extract),
// false computes value / scale^p (rebuild). Only meaningful for floating dtypes; an
// overflow or flush comes back as the infinity or zero it rounds to (conversion refuses
// those elements first, see scale_fault).
std::uint64_t apply_scale(DType dtype, std::uint64_t bits, double scale, int power, bool multiply,
                          Arithmetic arithmetic = Arithmetic::contract);

// Contract 1.2: the scale, rounded once to the dtype's arithmetic type, is a normal
// finite number there (not zero, subnormal or infinite). False for integer dtypes.
bool scale_fits_arithmetic(DType dtype, double scale);

// What contract 1.2 says of scaling one element by `scale` (power 1): none, or the
// finite value it turns infinite (overflow) or the nonzero value it turns zero (flush).
using scaling::ScaleFault;
ScaleFault scale_fault(DType dtype, std::uint64_t bits, double scale, bool multiply);

// Distinct, finite, moderate-magnitude marker bit pattern for element i (distinct as
// far as the dtype's width allows); power-of-two scaling of a marker is exact.
std::uint64_t marker_bits(DType dtype, Index i);
// A buffer of markers 0..numel-1; `salt` shifts the sequence.
Buffer marker_buffer(DType dtype, Index numel, Index salt = 0);

// The poison pattern the legacy model fills uninitialised memory with (deterministic).
std::uint64_t poison_bits(DType dtype);

}  // namespace shardcheck
