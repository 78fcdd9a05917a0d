// The batched entries' defaults: one call per block, in the order each entry promises.
// A backend that runs batches (runs_batches()) overrides all four.
#include "shardcheck/backend.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>

#include "element_types.h"
#include "shardcheck/digest.h"
#include "two_view_walk.h"

namespace shardcheck {

bool Backend::copy_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading&,
                          std::uint64_t* digest_of_written) {
  if (digest_of_written != nullptr) return false;
  for (const BlockCopy& block : blocks) copy_block(dtype, block);
  return true;
}

void Backend::copy_blocks_first_wins(DType dtype, std::span<const BlockCopy> blocks, const Threading&) {
  for (std::size_t i = blocks.size(); i-- > 0;) copy_block(dtype, blocks[i]);
}

std::optional<BlockMismatch> Backend::compare_blocks(DType dtype, std::span<const BlockCopy> blocks, const Threading&) {
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (auto k = compare_block(dtype, blocks[i])) return BlockMismatch{i, *k};
  }
  return std::nullopt;
}

std::uint64_t Backend::digest(const Buffer& full, const Threading&) { return shardcheck::digest(full); }

namespace {

// The lowest destination address of an element of `b` that faults, with its source address.
template <class Format>
std::optional<ScaleFaultAt> scale_fault_in(const BlockCopy& b, std::size_t index) {
  using Bits = typename Format::Bits;
  typename Format::Math factor{};
  scaling::arithmetic_factor(b.scale, factor);
  const auto* from = reinterpret_cast<const Bits*>(b.from);
  std::optional<ScaleFaultAt> lowest;
  detail::walk(*b.shape, *b.from_view, *b.to_view, [&](Index, Index from_at, Index to_at) {
    if (lowest && to_at >= lowest->to) return false;
    if (scaling::scale_element<Format>(from[from_at], factor, b.multiply).fault != ScaleFault::none) {
      lowest = ScaleFaultAt{index, from_at, to_at};
    }
    return false;
  });
  return lowest;
}

}  // namespace

void expect_reaches(const Backend& backend, const Buffer& buffer, std::string_view what) {
  if (backend.reaches(buffer.memory())) return;
  throw std::invalid_argument(fmt::format("{} is in {} memory, which the {} backend does not reach", what,
                                          memory_name(buffer.memory()), backend.name()));
}

std::optional<ScaleFaultAt> Backend::first_scale_fault(DType dtype, std::span<const BlockCopy> blocks,
                                                       const Threading&) {
  if (!is_floating(dtype)) return std::nullopt;
  return detail::with_float_format(dtype, [&]<class Format>() -> std::optional<ScaleFaultAt> {
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (blocks[i].scale == 1.0 || blocks[i].numel == 0) continue;
      if (auto fault = scale_fault_in<Format>(blocks[i], i)) return fault;
    }
    return std::nullopt;
  });
}

Buffer Backend::allocate(DType dtype, Index numel, Memory memory, bool zeroed) {
  if (memory != Memory::host) {
    throw std::invalid_argument(fmt::format("the {} backend does not allocate {} memory", name(), memory_name(memory)));
  }
  return zeroed ? Buffer(dtype, numel) : Buffer::uninitialized(dtype, numel);
}

Buffer Backend::copy_to(const Buffer& buffer, Memory memory) {
  expect_reaches(*this, buffer, "the buffer to copy");
  Buffer out = allocate(buffer.dtype(), buffer.numel(), memory);
  if (buffer.numel() > 0) std::memcpy(out.data(), buffer.data(), buffer.size_bytes());
  return out;
}

std::uint64_t Backend::element_bits(const Buffer& buffer, Index i) {
  expect_reaches(*this, buffer, "the buffer read");
  return buffer.bits(i);
}

}  // namespace shardcheck
