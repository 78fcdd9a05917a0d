// Streaming (non-temporal) copies of contiguous rows, for the host code that moves
// large batches: the CPU's wide row copies and the device code on OpenMP threads.
// Internal to core; host code only (the device code calls it outside __CUDA_ARCH__).
//
// A copy far larger than the caches writes each destination line once and never reads
// it back: non-temporal stores skip the read-for-ownership of every line, a third of the
// memory traffic of a cached copy. (memcpy does the same for one large block, but a
// piece's rows are many short blocks.) Non-temporal stores are weakly ordered: whoever
// streams fences (stream_fence) before what it wrote may be read by another thread, and
// fences once per batch of rows, not per row, since a fence waits for every store in
// flight to reach memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace shardcheck::detail {

// Rows shorter than this go through memcpy: the head and tail a streaming row copies
// through memcpy would be most of it.
inline constexpr std::size_t kStreamRowBytes = 256;
// Batches smaller than this stay in the caches, where cached stores are the faster.
inline constexpr std::int64_t kStreamTotalBytes = std::int64_t{8} << 20;

// Writes kBytes (a multiple of 16) from `from` (any alignment) to `to` (16-byte aligned)
// with non-temporal stores (plain stores without SSE2); the caller fences.
template <std::size_t kBytes>
inline void stream_block(std::byte* to, const std::byte* from) {
  static_assert(kBytes % 16 == 0);
#if defined(__SSE2__)
  for (std::size_t k = 0; k < kBytes; k += 16) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(to + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(from + k)));
  }
#else
  std::memcpy(to, from, kBytes);
#endif
}

inline void copy_streaming(std::byte* to, const std::byte* from, std::size_t bytes) {
#if defined(__SSE2__)
  const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(to) % 16) % 16;
  if (head >= bytes) {
    std::memcpy(to, from, bytes);
    return;
  }
  std::memcpy(to, from, head);
  std::size_t k = head;
  for (; k + 64 <= bytes; k += 64) stream_block<64>(to + k, from + k);
  for (; k + 16 <= bytes; k += 16) stream_block<16>(to + k, from + k);
  std::memcpy(to + k, from + k, bytes - k);
#else
  std::memcpy(to, from, bytes);
#endif
}

// Whether a contiguous row of `bytes` is streamed when its batch asks for it (`stream`):
// only where it is long enough to pay for its head and tail.
inline bool streams(bool stream, std::size_t bytes) { return stream && bytes >= kStreamRowBytes; }

// A contiguous run of bytes: streamed with `stream` where it is long enough to pay for
// its head and tail (the caller fences), else memcpy.
inline void copy_run(std::byte* to, const std::byte* from, std::size_t bytes, bool stream) {
  if (streams(stream, bytes)) {
    copy_streaming(to, from, bytes);
  } else {
    std::memcpy(to, from, bytes);
  }
}

// Makes the streamed stores of the calling thread visible before its later stores.
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace shardcheck::detail
