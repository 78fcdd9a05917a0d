#include "heap_counter.h"

#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define SHARDCHECK_HEAP_COUNTER 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer)
#define SHARDCHECK_HEAP_COUNTER 0
#endif
#endif
#ifndef SHARDCHECK_HEAP_COUNTER
#define SHARDCHECK_HEAP_COUNTER 1
#endif

namespace shardcheck::bench {
namespace {
std::atomic<std::size_t> in_use{0};
std::atomic<std::size_t> peak{0};

// Usable sizes on both sides, so that a block is taken off exactly what it added.
void* counted(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  const std::size_t size = malloc_usable_size(p);
  const std::size_t now = in_use.fetch_add(size, std::memory_order_relaxed) + size;
  std::size_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
  return p;
}

void uncounted(void* p) noexcept {
  if (p == nullptr) return;
  in_use.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}
}  // namespace

bool heap_counter_installed() { return SHARDCHECK_HEAP_COUNTER != 0; }
std::size_t heap_bytes_in_use() { return in_use.load(); }
void reset_heap_peak() { peak.store(in_use.load()); }
std::size_t heap_peak_bytes() { return peak.load(); }

#if SHARDCHECK_HEAP_COUNTER
void* allocate(std::size_t bytes) { return counted(std::malloc(bytes == 0 ? 1 : bytes)); }
void* allocate_aligned(std::size_t bytes, std::align_val_t align) {
  const auto a = static_cast<std::size_t>(align);
  return counted(std::aligned_alloc(a, (bytes + a - 1) / a * a));
}
void release(void* p) noexcept { uncounted(p); }
#endif

}  // namespace shardcheck::bench

#if SHARDCHECK_HEAP_COUNTER
using shardcheck::bench::allocate;
using shardcheck::bench::allocate_aligned;
using shardcheck::bench::release;

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return allocate_aligned(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
#endif
