#include "shardcheck/dtype.h"

#include <array>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <Eigen/Core>

#if __has_include(<sys/mman.h>)
#include <sys/mman.h>
#endif
#include <fmt/format.h>

namespace shardcheck {

namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
  bool floating;
};

constexpr std::array<DTypeInfo, 10> kInfo{{
    {DType::float32, "float32", 4, true},
    {DType::float64, "float64", 8, true},
    {DType::float16, "float16", 2, true},
    {DType::bfloat16, "bfloat16", 2, true},
    {DType::int8, "int8", 1, false},
    {DType::int16, "int16", 2, false},
    {DType::int32, "int32", 4, false},
    {DType::int64, "int64", 8, false},
    {DType::uint8, "uint8", 1, false},
    {DType::boolean, "bool", 1, false},
}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kInfo) {
    if (entry.dtype == dtype) return entry;
  }
  return kInfo[0];
}

std::uint64_t width_mask(DType dtype) {
  const std::size_t bits = element_size(dtype) * 8;
  return bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
}

std::int64_t sign_extend(DType dtype, std::uint64_t bits) {
  const std::size_t width = element_size(dtype) * 8;
  if (width >= 64) return static_cast<std::int64_t>(bits);
  const std::uint64_t sign = std::uint64_t{1} << (width - 1);
  bits &= width_mask(dtype);
  return static_cast<std::int64_t>((bits ^ sign) - sign);
}

// Rounds a double to float toward zero and sets the last bit when inexact ("round to
// odd"). Float has at least two more bits than half and bfloat16, so rounding this
// result to nearest once more gives the correctly rounded half/bfloat16 value; going
// through a plain float rounding could round twice in the same direction.
float round_to_odd_float(double value) {
  // Beyond float's range truncation gives FLT_MAX, whose last bit is already odd.
  if (std::isfinite(value) && std::fabs(value) > static_cast<double>(FLT_MAX)) {
    return std::signbit(value) ? -FLT_MAX : FLT_MAX;
  }
  float rounded = static_cast<float>(value);
  if (static_cast<double>(rounded) == value || std::isnan(value)) return rounded;
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value)) {
    rounded = std::nextafter(rounded, 0.0f);
  }
  auto bits = std::bit_cast<std::uint32_t>(rounded) | 1u;
  return std::bit_cast<float>(bits);
}

// Same idea for integers too wide for a double: keep 53 significant bits and make the
// discarded ones sticky in the last kept bit.
double round_to_odd_double(std::int64_t value) {
  const bool negative = value < 0;
  std::uint64_t magnitude =
      negative ? std::uint64_t{0} - static_cast<std::uint64_t>(value) : static_cast<std::uint64_t>(value);
  if (magnitude < (std::uint64_t{1} << 53)) {
    return negative ? -static_cast<double>(magnitude) : static_cast<double>(magnitude);
  }
  const int shift = 64 - std::countl_zero(magnitude) - 53;
  std::uint64_t kept = magnitude >> shift;
  if ((magnitude & ((std::uint64_t{1} << shift) - 1)) != 0) kept |= 1;
  const double out = std::ldexp(static_cast<double>(kept), shift);
  return negative ? -out : out;
}

template <class T>
std::uint64_t to_bits(T value) {
  if constexpr (sizeof(T) == 2) return std::bit_cast<std::uint16_t>(value);
  if constexpr (sizeof(T) == 4) return std::bit_cast<std::uint32_t>(value);
  if constexpr (sizeof(T) == 8) return std::bit_cast<std::uint64_t>(value);
}

template <class T>
T from_bits(std::uint64_t bits) {
  if constexpr (sizeof(T) == 2) return std::bit_cast<T>(static_cast<std::uint16_t>(bits));
  if constexpr (sizeof(T) == 4) return std::bit_cast<T>(static_cast<std::uint32_t>(bits));
  if constexpr (sizeof(T) == 8) return std::bit_cast<T>(bits);
}

// Half and bfloat16 from a double, rounded to nearest even exactly once.
template <class T>
std::optional<std::uint64_t> narrow_float_bits(double value) {
  if (std::isfinite(value) && std::fabs(value) > static_cast<double>(FLT_MAX)) return std::nullopt;
  const T out(round_to_odd_float(value));
  if (std::isfinite(value) && !Eigen::numext::isfinite(out)) return std::nullopt;
  return to_bits(out);
}

// Double to float, rounded to nearest even, without the undefined out-of-range cast.
float to_float(double value) {
  if (std::isfinite(value) && std::fabs(value) > static_cast<double>(FLT_MAX)) {
    // Halfway between FLT_MAX and 2^128: from there on round-to-nearest gives infinity.
    const double halfway = std::ldexp(2.0 - std::ldexp(1.0, -24), 127);
    const float magnitude = std::fabs(value) >= halfway ? std::numeric_limits<float>::infinity() : FLT_MAX;
    return std::signbit(value) ? -magnitude : magnitude;
  }
  return static_cast<float>(value);
}

std::optional<std::uint64_t> float32_bits(double value) {
  const float out = to_float(value);
  if (std::isfinite(value) && std::isinf(out)) return std::nullopt;
  return to_bits(out);
}

template <class T>
double as_double(T value) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<double>(value);
  else return static_cast<double>(static_cast<float>(value));
}

// |power| factors multiplied in `Math`. Once the power is 0, infinite, NaN or of
// magnitude 1, further factors can only flip its sign (exactly), so a huge power costs
// no more than a small one.
template <class Math>
Math power_of(Math factor, int power) {
  const long steps = power > 0 ? static_cast<long>(power) : -static_cast<long>(power);
  Math power_value = factor;
  for (long k = 1; k < steps; ++k) {
    power_value = power_value * factor;
    const double now = as_double(power_value);
    if (std::isnan(now) || std::isinf(now) || now == 0.0 || std::fabs(now) == 1.0) {
      const long remaining = steps - 1 - k;
      if (!std::isnan(now) && std::signbit(as_double(factor)) && remaining % 2 == 1) {
        power_value = -power_value;
      }
      break;
    }
  }
  return power_value;
}

// torch 1.13's CPU arithmetic, which DeepSpeed's conversion runs in (the legacy model):
// the scale rounded to the element type T, the product or quotient computed in T.
template <class T>
T legacy_scale_in_type(T value, double scale, int power, bool multiply) {
  if (power == 0) return value;
  const bool up = multiply == (power > 0);
  T factor;
  if constexpr (std::is_same_v<T, double>) {
    factor = scale;
  } else if constexpr (std::is_same_v<T, float>) {
    factor = to_float(scale);
  } else {
    factor = T(round_to_odd_float(scale));
  }
  const T power_value = power_of(factor, power);
  return up ? value * power_value : value / power_value;
}

// Contract 1.2 (shardcheck/scaling.h). A scale that the arithmetic type cannot hold is
// refused before any element is scaled; here it only needs some defined value.
template <class Format>
typename Format::Math contract_factor(double scale) {
  typename Format::Math factor{};
  if (scaling::arithmetic_factor(scale, factor)) return factor;
  if constexpr (std::is_same_v<typename Format::Math, float>) return to_float(scale);
  else return scale;
}

template <class Format>
std::uint64_t contract_scale(std::uint64_t bits, double scale, int power, bool multiply) {
  if (power == 0) return bits;
  const auto factor = power_of(contract_factor<Format>(scale), power);
  const bool up = multiply == (power > 0);
  return scaling::scale_element<Format>(static_cast<typename Format::Bits>(bits), factor, up).bits;
}

}  // namespace

std::string_view dtype_name(DType dtype) { return info(dtype).name; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (const auto& entry : kInfo) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

std::size_t element_size(DType dtype) { return info(dtype).size; }

bool is_floating(DType dtype) { return info(dtype).floating; }

Buffer::Buffer(DType dtype, Index numel) : dtype_(dtype), numel_(numel) {
  // Callers validate element counts first; reaching here with a bad count is a bug.
  auto bytes = checked_mul(numel, static_cast<Index>(element_size(dtype)));
  if (numel < 0 || !bytes) throw std::length_error("shardcheck::Buffer: invalid element count");
  bytes_.assign(static_cast<std::size_t>(*bytes), std::byte{0});
}

namespace detail {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kHugeFrom = kHugePage;

std::size_t huge_size(std::size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// A few recently freed tensor-sized blocks, handed to the next buffer of the same size:
// the kernel zeroes every fresh page, which costs a converter writing a new F as much as
// the copy itself. Bounded (count and bytes), so it never holds more than a few tensors
// that were in use a moment ago. Off under AddressSanitizer, which must see every free.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::size_t kCachedBlocks = 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr std::size_t kCachedBlocks = 0;
#else
constexpr std::size_t kCachedBlocks = 8;
#endif
#else
constexpr std::size_t kCachedBlocks = 8;
#endif
constexpr std::size_t kCachedBytes = std::size_t{1} << 30;

struct BlockCache {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, void*>> blocks;  // (size, address)
  std::size_t bytes = 0;
  ~BlockCache() {
    for (auto& [size, p] : blocks) std::free(p);
  }
};

BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;  // never destroyed: buffers may outlive statics
  return *cache;
}

void* take_cached(std::size_t size) {
  if (kCachedBlocks == 0) return nullptr;
  BlockCache& c = block_cache();
  std::lock_guard lock(c.mutex);
  for (auto it = c.blocks.begin(); it != c.blocks.end(); ++it) {
    if (it->first != size) continue;
    void* p = it->second;
    c.bytes -= size;
    c.blocks.erase(it);
    return p;
  }
  return nullptr;
}

bool keep_cached(void* p, std::size_t size) {
  if (kCachedBlocks == 0 || size > kCachedBytes) return false;
  BlockCache& c = block_cache();
  std::lock_guard lock(c.mutex);
  while (!c.blocks.empty() && (c.blocks.size() >= kCachedBlocks || c.bytes + size > kCachedBytes)) {
    std::free(c.blocks.front().second);
    c.bytes -= c.blocks.front().first;
    c.blocks.erase(c.blocks.begin());
  }
  c.blocks.emplace_back(size, p);
  c.bytes += size;
  return true;
}
}  // namespace

void* allocate_bytes(std::size_t bytes) {
  if (bytes < kHugeFrom) return ::operator new(bytes);
  if (void* cached = take_cached(huge_size(bytes))) return cached;
  void* p = std::aligned_alloc(kHugePage, huge_size(bytes));
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  // Advice only: where the kernel has no huge pages the buffer is simply made of small ones.
  (void)madvise(p, huge_size(bytes), MADV_HUGEPAGE);
#endif
  return p;
}

void deallocate_bytes(void* p, std::size_t bytes) noexcept {
  if (bytes < kHugeFrom) {
    ::operator delete(p);
    return;
  }
  if (!keep_cached(p, huge_size(bytes))) std::free(p);
}

}  // namespace detail

Buffer Buffer::uninitialized(DType dtype, Index numel) {
  auto bytes = checked_mul(numel, static_cast<Index>(element_size(dtype)));
  if (numel < 0 || !bytes) throw std::length_error("shardcheck::Buffer: invalid element count");
  Buffer out;
  out.dtype_ = dtype;
  out.numel_ = numel;
  out.bytes_.resize(static_cast<std::size_t>(*bytes));
  return out;
}

Buffer Buffer::borrow(DType dtype, Index numel, const std::byte* data) {
  auto bytes = checked_mul(numel, static_cast<Index>(element_size(dtype)));
  if (numel < 0 || !bytes) throw std::length_error("shardcheck::Buffer: invalid element count");
  // The backends read elements as typed values, which needs natural alignment.
  if (numel > 0 && (data == nullptr || reinterpret_cast<std::uintptr_t>(data) % element_size(dtype) != 0)) {
    throw std::invalid_argument("shardcheck::Buffer: borrowed memory is null or not aligned to its element size");
  }
  Buffer out;
  out.dtype_ = dtype;
  out.numel_ = numel;
  // An empty view still needs a non-null address to hand out.
  static const std::byte kNothing{};
  out.borrowed_ = numel > 0 ? data : &kNothing;
  return out;
}

// Memory the buffer does not hold itself, checked as borrowed memory is.
Buffer Buffer::in_device_memory(DType dtype, Index numel, std::byte* data, std::shared_ptr<void> owner) {
  Buffer out = borrow(dtype, numel, data);
  out.owner_ = std::move(owner);
  out.memory_ = Memory::device;
  return out;
}

std::string_view memory_name(Memory memory) { return memory == Memory::device ? "device" : "host"; }

void Buffer::expect_host(const char* what) const {
  if (memory_ == Memory::host) return;
  throw std::logic_error(std::string("shardcheck::Buffer: ") + what +
                         " of a buffer in device memory on the host; a backend that reaches it reads it");
}

Buffer::Buffer(const Buffer& other) : dtype_(other.dtype_), numel_(other.numel_) {
  other.expect_host("a copy");
  bytes_.assign(other.data(), other.data() + other.size_bytes());
}

Buffer& Buffer::operator=(const Buffer& other) {
  if (this != &other) *this = Buffer(other);
  return *this;
}

// A moved-from buffer is empty, as a moved-from vector is.
Buffer::Buffer(Buffer&& other) noexcept
    : dtype_(other.dtype_),
      numel_(std::exchange(other.numel_, 0)),
      bytes_(std::move(other.bytes_)),
      borrowed_(std::exchange(other.borrowed_, nullptr)),
      owner_(std::move(other.owner_)),
      memory_(std::exchange(other.memory_, Memory::host)) {
  other.bytes_.clear();
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    dtype_ = other.dtype_;
    numel_ = std::exchange(other.numel_, 0);
    bytes_ = std::move(other.bytes_);
    other.bytes_.clear();
    borrowed_ = std::exchange(other.borrowed_, nullptr);
    owner_ = std::move(other.owner_);
    memory_ = std::exchange(other.memory_, Memory::host);
  }
  return *this;
}

std::byte* Buffer::data() {
  if (borrowed_ == nullptr) return bytes_.data();
  if (!owner_) throw std::logic_error("shardcheck::Buffer: a borrowed buffer is read-only");
  return const_cast<std::byte*>(borrowed_);
}

std::size_t Buffer::size_bytes() const {
  return static_cast<std::size_t>(numel_) * element_size(dtype_);
}

bool operator==(const Buffer& a, const Buffer& b) {
  a.expect_host("a comparison");
  b.expect_host("a comparison");
  if (a.dtype_ != b.dtype_ || a.numel_ != b.numel_) return false;
  const std::size_t n = a.size_bytes();
  return n == 0 || std::memcmp(a.data(), b.data(), n) == 0;
}

namespace {
// An element's bytes are little-endian whatever the host (the tensors of a checkpoint
// are); on a little-endian host that is one plain load or store of the element's width,
// which the reference model and the recorded path make once per element.
template <class Word>
std::uint64_t load_word(const std::byte* p) {
  Word w;
  std::memcpy(&w, p, sizeof w);
  return w;
}
template <class Word>
void store_word(std::byte* p, std::uint64_t bits) {
  const auto w = static_cast<Word>(bits);
  std::memcpy(p, &w, sizeof w);
}
}  // namespace

std::uint64_t Buffer::bits(Index i) const {
  expect_host("reading an element");
  const std::size_t size = element_size(dtype_);
  const std::byte* p = data() + static_cast<std::size_t>(i) * size;
  if constexpr (std::endian::native == std::endian::little) {
    switch (size) {
      case 1: return load_word<std::uint8_t>(p);
      case 2: return load_word<std::uint16_t>(p);
      case 4: return load_word<std::uint32_t>(p);
      case 8: return load_word<std::uint64_t>(p);
      default: break;
    }
  }
  std::uint64_t out = 0;
  for (std::size_t b = 0; b < size; ++b) out |= std::to_integer<std::uint64_t>(p[b]) << (8 * b);
  return out;
}

void Buffer::set_bits(Index i, std::uint64_t bits) {
  expect_host("writing an element");
  const std::size_t size = element_size(dtype_);
  std::byte* p = data() + static_cast<std::size_t>(i) * size;
  if constexpr (std::endian::native == std::endian::little) {
    switch (size) {
      case 1: return store_word<std::uint8_t>(p, bits);
      case 2: return store_word<std::uint16_t>(p, bits);
      case 4: return store_word<std::uint32_t>(p, bits);
      case 8: return store_word<std::uint64_t>(p, bits);
      default: break;
    }
  }
  for (std::size_t b = 0; b < size; ++b) p[b] = static_cast<std::byte>((bits >> (8 * b)) & 0xff);
}

std::optional<std::uint64_t> bits_from_double(DType dtype, double value) {
  switch (dtype) {
    case DType::float64: return to_bits(value);
    case DType::float32: return float32_bits(value);
    case DType::float16: return narrow_float_bits<Eigen::half>(value);
    case DType::bfloat16: return narrow_float_bits<Eigen::bfloat16>(value);
    case DType::boolean:
      if (value == 0.0) return 0;
      if (value == 1.0) return 1;
      return std::nullopt;
    default: break;
  }
  if (!std::isfinite(value) || std::trunc(value) != value) return std::nullopt;
  // 2^63 is exact in double; every integral double below it converts to int64 safely.
  if (value < -std::ldexp(1.0, 63) || value >= std::ldexp(1.0, 63)) return std::nullopt;
  return bits_from_integer(dtype, static_cast<std::int64_t>(value));
}

std::optional<std::uint64_t> bits_from_integer(DType dtype, std::int64_t value) {
  switch (dtype) {
    case DType::float64: return to_bits(static_cast<double>(value));
    case DType::float32: return to_bits(static_cast<float>(value));
    case DType::float16:
    case DType::bfloat16: return bits_from_double(dtype, round_to_odd_double(value));
    case DType::boolean:
      if (value == 0 || value == 1) return static_cast<std::uint64_t>(value);
      return std::nullopt;
    case DType::uint8:
      if (value < 0 || value > 255) return std::nullopt;
      return static_cast<std::uint64_t>(value);
    default: break;
  }
  const std::size_t width = element_size(dtype) * 8;
  if (width < 64) {
    const std::int64_t hi = (std::int64_t{1} << (width - 1)) - 1;
    if (value > hi || value < -hi - 1) return std::nullopt;
  }
  return static_cast<std::uint64_t>(value) & width_mask(dtype);
}

double bits_to_double(DType dtype, std::uint64_t bits) {
  switch (dtype) {
    case DType::float64: return from_bits<double>(bits);
    case DType::float32: return from_bits<float>(bits);
    case DType::float16: return static_cast<double>(static_cast<float>(from_bits<Eigen::half>(bits)));
    case DType::bfloat16:
      return static_cast<double>(static_cast<float>(from_bits<Eigen::bfloat16>(bits)));
    case DType::uint8:
    case DType::boolean: return static_cast<double>(bits & 0xff);
    default: return static_cast<double>(sign_extend(dtype, bits));
  }
}

std::string format_element(DType dtype, std::uint64_t bits) {
  bits &= width_mask(dtype);
  const int digits = static_cast<int>(element_size(dtype) * 2);
  std::string value;
  if (is_floating(dtype)) {
    value = fmt::format("{}", bits_to_double(dtype, bits));
  } else if (dtype == DType::uint8 || dtype == DType::boolean) {
    value = fmt::format("{}", bits);
  } else {
    value = fmt::format("{}", sign_extend(dtype, bits));
  }
  return fmt::format("{} (0x{:0{}x})", value, bits, digits);
}

bool is_nan_bits(DType dtype, std::uint64_t bits) {
  // A NaN has every exponent bit set and a non-zero mantissa: its magnitude bits
  // compare above those of infinity.
  switch (dtype) {
    case DType::float64: return (bits & 0x7fffffffffffffffULL) > 0x7ff0000000000000ULL;
    case DType::float32: return (bits & 0x7fffffffULL) > 0x7f800000ULL;
    case DType::float16: return (bits & 0x7fffULL) > 0x7c00ULL;
    case DType::bfloat16: return (bits & 0x7fffULL) > 0x7f80ULL;
    default: return false;
  }
}

std::uint64_t apply_scale(DType dtype, std::uint64_t bits, double scale, int power, bool multiply,
                          Arithmetic arithmetic) {
  if (arithmetic == Arithmetic::contract) {
    switch (dtype) {
      case DType::float64: return contract_scale<scaling::Float64>(bits, scale, power, multiply);
      case DType::float32: return contract_scale<scaling::Float32>(bits, scale, power, multiply);
      case DType::float16: return contract_scale<scaling::Float16>(bits, scale, power, multiply);
      case DType::bfloat16: return contract_scale<scaling::BFloat16>(bits, scale, power, multiply);
      default: return bits;  // integers are never scaled: strict refuses, legacy moves them as is
    }
  }
  switch (dtype) {
    case DType::float64: return to_bits(legacy_scale_in_type(from_bits<double>(bits), scale, power, multiply));
    case DType::float32: return to_bits(legacy_scale_in_type(from_bits<float>(bits), scale, power, multiply));
    case DType::float16:
      return to_bits(legacy_scale_in_type(from_bits<Eigen::half>(bits), scale, power, multiply));
    case DType::bfloat16:
      return to_bits(legacy_scale_in_type(from_bits<Eigen::bfloat16>(bits), scale, power, multiply));
    default: return bits;
  }
}

bool scale_fits_arithmetic(DType dtype, double scale) {
  if (dtype == DType::float64) {
    double factor = 0;
    return scaling::arithmetic_factor(scale, factor);
  }
  float factor = 0;
  return is_floating(dtype) && scaling::arithmetic_factor(scale, factor);
}

namespace {
template <class Format>
ScaleFault contract_fault(std::uint64_t bits, double scale, bool multiply) {
  return scaling::scale_element<Format>(static_cast<typename Format::Bits>(bits), contract_factor<Format>(scale),
                                        multiply)
      .fault;
}
}  // namespace

ScaleFault scale_fault(DType dtype, std::uint64_t bits, double scale, bool multiply) {
  switch (dtype) {
    case DType::float64: return contract_fault<scaling::Float64>(bits, scale, multiply);
    case DType::float32: return contract_fault<scaling::Float32>(bits, scale, multiply);
    case DType::float16: return contract_fault<scaling::Float16>(bits, scale, multiply);
    case DType::bfloat16: return contract_fault<scaling::BFloat16>(bits, scale, multiply);
    default: return ScaleFault::none;
  }
}

std::uint64_t marker_bits(DType dtype, Index i) {
  const auto n = static_cast<std::uint64_t>(i);
  // Floats: a mantissa counter, then the sign, then an exponent band centred on 1.0.
  // The band keeps every marker normal and far from overflow, so multiplying or
  // dividing by small powers of two (and negating) is exact.
  auto float_marker = [n](int mantissa_bits, int exponent_bits, int band) {
    const std::uint64_t bias = (std::uint64_t{1} << (exponent_bits - 1)) - 1;
    const std::uint64_t mantissa = n & ((std::uint64_t{1} << mantissa_bits) - 1);
    const std::uint64_t rest = n >> mantissa_bits;
    const std::uint64_t sign = rest & 1;
    const std::uint64_t exponent = bias - static_cast<std::uint64_t>(band / 2) + (rest >> 1) % band;
    return (sign << (mantissa_bits + exponent_bits)) | (exponent << mantissa_bits) | mantissa;
  };
  switch (dtype) {
    case DType::float64: return float_marker(52, 11, 16);
    case DType::float32: return float_marker(23, 8, 16);
    case DType::float16: return float_marker(10, 5, 16);
    case DType::bfloat16: return float_marker(7, 8, 32);
    case DType::boolean: return n & 1;
    default: break;
  }
  // Integers count with wraparound, skipping the poison pattern so a marker can
  // never be mistaken for uninitialised memory.
  const std::uint64_t mask = width_mask(dtype);
  const std::uint64_t poison = poison_bits(dtype);
  std::uint64_t v = mask == ~std::uint64_t{0} ? n : n % mask;
  if (v >= poison) v += 1;
  return v & mask;
}

Buffer marker_buffer(DType dtype, Index numel, Index salt) {
  Buffer out(dtype, numel);
  for (Index i = 0; i < numel; ++i) {
    // Unsigned addition: a large salt wraps instead of overflowing.
    const auto shifted = static_cast<std::uint64_t>(i) + static_cast<std::uint64_t>(salt);
    out.set_bits(i, marker_bits(dtype, static_cast<Index>(shifted)));
  }
  return out;
}

std::uint64_t poison_bits(DType dtype) {
  switch (dtype) {
    case DType::float64: return 0x7ff800000000deadULL;  // quiet NaN, payload 0xdead
    case DType::float32: return 0x7fc0deadULL;
    case DType::float16: return 0x7eadULL;
    case DType::bfloat16: return 0x7fedULL;
    default: return 0xa5a5a5a5a5a5a5a5ULL & width_mask(dtype);
  }
}

}  // namespace shardcheck
