// SmallVector<T, N>: a vector of trivially copyable values that keeps up to N of them
// inside the object and moves to the heap beyond that.
//
// Extents, strides and a piece's replica list are short (a tensor has a handful of axes,
// a block a handful of replicas) and every map holds four of them per piece. As
// std::vector, a piece was five heap blocks, allocated on every copy of a map and
// scattered in memory for every check of one; in place, it is one object. The interface
// is the part of std::vector's that the project uses, with the same meaning; elements
// are values (no constructors or destructors run), which is what keeps it short.
#pragma once

#include <algorithm>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <new>
#include <span>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace shardcheck {

template <class T, std::size_t N>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>,
                "SmallVector holds plain values");
  static_assert(N > 0 && N <= 64);

 public:
  using value_type = T;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = T&;
  using const_reference = const T&;
  using pointer = T*;
  using const_pointer = const T*;
  using iterator = T*;
  using const_iterator = const T*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  SmallVector() noexcept = default;
  explicit SmallVector(size_type count) { resize(count); }
  SmallVector(size_type count, const T& value) { assign(count, value); }
  SmallVector(std::initializer_list<T> values) { assign(values.begin(), values.end()); }
  template <std::input_iterator It>
  SmallVector(It first, It last) {
    assign(first, last);
  }
  // From a std::vector: a copy, as assigning one vector to another was.
  SmallVector(const std::vector<T>& values) { assign(values.begin(), values.end()); }  // NOLINT(implicit)

  SmallVector(const SmallVector& other) { copy_from(other); }
  SmallVector(SmallVector&& other) noexcept { take(other); }
  SmallVector& operator=(const SmallVector& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  SmallVector& operator=(SmallVector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  SmallVector& operator=(std::initializer_list<T> values) {
    assign(values.begin(), values.end());
    return *this;
  }
  ~SmallVector() { release(); }

  void assign(size_type count, const T& value) {
    const T copy = value;  // `value` may live in this vector
    clear();
    resize(count, copy);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    clear();
    if constexpr (std::forward_iterator<It>) {
      reserve(static_cast<size_type>(std::distance(first, last)));
      T* out = ptr();
      for (; first != last; ++first) out[size_++] = *first;
    } else {
      for (; first != last; ++first) push_back(*first);
    }
  }

  T* data() noexcept { return ptr(); }
  const T* data() const noexcept { return ptr(); }
  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  static constexpr size_type inline_capacity() noexcept { return N; }
  size_type max_size() const noexcept { return std::numeric_limits<std::uint32_t>::max(); }

  iterator begin() noexcept { return ptr(); }
  iterator end() noexcept { return ptr() + size_; }
  const_iterator begin() const noexcept { return ptr(); }
  const_iterator end() const noexcept { return ptr() + size_; }
  const_iterator cbegin() const noexcept { return ptr(); }
  const_iterator cend() const noexcept { return ptr() + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }

  T& operator[](size_type i) noexcept { return ptr()[i]; }
  const T& operator[](size_type i) const noexcept { return ptr()[i]; }
  T& front() noexcept { return ptr()[0]; }
  const T& front() const noexcept { return ptr()[0]; }
  T& back() noexcept { return ptr()[size_ - 1]; }
  const T& back() const noexcept { return ptr()[size_ - 1]; }

  void reserve(size_type wanted) {
    if (wanted <= capacity_) return;
    if (wanted > max_size()) throw std::length_error("SmallVector::reserve");
    // Grows by half again at least, as vectors do, so that push_back is amortised O(1).
    const size_type grown = std::max<size_type>(wanted, capacity_ + capacity_ / 2);
    const size_type capacity = std::min<size_type>(grown, max_size());
    T* fresh = static_cast<T*>(::operator new(capacity * sizeof(T)));
    if (size_ > 0) std::memcpy(fresh, ptr(), size_ * sizeof(T));
    if (on_heap()) ::operator delete(heap_);
    heap_ = fresh;
    capacity_ = static_cast<std::uint32_t>(capacity);
  }
  void resize(size_type count) { resize(count, T{}); }
  void resize(size_type count, const T& value) {
    if (count > size_) {
      const T copy = value;
      reserve(count);
      std::fill(ptr() + size_, ptr() + count, copy);
    }
    size_ = static_cast<std::uint32_t>(count);
  }
  void clear() noexcept { size_ = 0; }
  void push_back(const T& value) {
    if (size_ == capacity_) {
      const T copy = value;  // `value` may live in this vector
      reserve(size_type{size_} + 1);
      ptr()[size_++] = copy;
      return;
    }
    ptr()[size_++] = value;
  }
  template <class... Args>
  T& emplace_back(Args&&... args) {
    push_back(T(std::forward<Args>(args)...));
    return back();
  }
  void pop_back() noexcept { --size_; }

  iterator insert(const_iterator at, const T& value) { return insert(at, size_type{1}, value); }
  iterator insert(const_iterator at, size_type count, const T& value) {
    const T copy = value;
    const size_type index = open_gap(at, count);
    std::fill(ptr() + index, ptr() + index + count, copy);
    return ptr() + index;
  }
  template <std::forward_iterator It>
  iterator insert(const_iterator at, It first, It last) {
    // Copied out first: the range may lie in this vector, which the gap would move.
    const SmallVector values(first, last);
    const size_type index = open_gap(at, values.size());
    if (!values.empty()) std::memcpy(ptr() + index, values.data(), values.size() * sizeof(T));
    return ptr() + index;
  }
  iterator insert(const_iterator at, std::initializer_list<T> values) {
    return insert(at, values.begin(), values.end());
  }
  iterator erase(const_iterator at) { return erase(at, at + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const auto index = static_cast<size_type>(first - ptr());
    const auto removed = static_cast<size_type>(last - first);
    std::memmove(ptr() + index, ptr() + index + removed, (size_ - index - removed) * sizeof(T));
    size_ -= static_cast<std::uint32_t>(removed);
    return ptr() + index;
  }

  void swap(SmallVector& other) noexcept {
    SmallVector moved(std::move(other));
    other = std::move(*this);
    *this = std::move(moved);
  }
  friend void swap(SmallVector& a, SmallVector& b) noexcept { a.swap(b); }

  friend bool operator==(const SmallVector& a, const SmallVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend auto operator<=>(const SmallVector& a, const SmallVector& b) {
    return std::lexicographical_compare_three_way(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const SmallVector& a, const std::vector<T>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  // The elements sit in inline_ while capacity_ is N and in heap_ beyond: the two share
  // their bytes, so a piece's four vectors take 40 bytes each rather than 48 (a map of
  // 10^7 pieces holds 4 * 10^7 of them).
  bool on_heap() const noexcept { return capacity_ > N; }
  T* ptr() noexcept { return on_heap() ? heap_ : inline_; }
  const T* ptr() const noexcept { return on_heap() ? heap_ : inline_; }
  void release() noexcept {
    if (on_heap()) ::operator delete(heap_);
    capacity_ = N;
    size_ = 0;
  }
  // Takes other's elements (its heap block, or a copy of its inline ones) and leaves it
  // empty. *this holds nothing on the heap. The inline buffer is copied whole: a copy of
  // a size known at compile time is a few moves, where a call to memcpy costs more than
  // the handful of elements it would move (unused slots are bytes nobody reads).
  void take(SmallVector& other) noexcept {
    if (other.on_heap()) {
      heap_ = other.heap_;
      capacity_ = other.capacity_;
      other.capacity_ = N;
    } else {
      std::memcpy(inline_, other.inline_, sizeof(inline_));
    }
    size_ = other.size_;
    other.size_ = 0;
  }
  // Its elements, in place when they fit (whole, as in take), else in a block of their size.
  void copy_from(const SmallVector& other) {
    if (!on_heap() && !other.on_heap()) {
      std::memcpy(inline_, other.inline_, sizeof(inline_));
    } else {
      clear();
      reserve(other.size_);
      if (other.size_ > 0) std::memcpy(ptr(), other.ptr(), other.size_ * sizeof(T));
    }
    size_ = other.size_;
  }
  // Makes room for `count` elements at `at`; returns the index of the first.
  size_type open_gap(const_iterator at, size_type count) {
    const auto index = static_cast<size_type>(at - ptr());
    reserve(size_type{size_} + count);
    T* data = ptr();
    std::memmove(data + index + count, data + index, (size_ - index) * sizeof(T));
    size_ += static_cast<std::uint32_t>(count);
    return index;
  }

  // Zeroed, so that copying the inline buffer whole (take, copy_from) reads no
  // indeterminate bytes.
  union {
    T* heap_;
    T inline_[N] = {};
  };
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = N;
};

}  // namespace shardcheck
