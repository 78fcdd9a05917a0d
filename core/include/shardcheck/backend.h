// Backends move and compare strided blocks of raw elements. One interface; the CPU
// backend (Eigen) is always present, CUDA when built with the toolkit and a device
// is present. Every call works on one piece: `shape` and two views.
#pragma once

#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck {

struct BlockCopy {
  const Extents* shape = nullptr;
  const std::byte* from = nullptr;
  StridedView from_view;
  std::byte* to = nullptr;
  StridedView to_view;
  // Scaling: to = from * scale^power when multiply, from / scale^power otherwise.
  // scale == 1 moves bits unchanged.
  double scale = 1.0;
  int power = 1;
  bool multiply = true;
  // Contract 1.2's arithmetic (NaN bits kept, float32 opmath for 16-bit types);
  // only the legacy model asks for torch's arithmetic instead.
  Arithmetic arithmetic = Arithmetic::contract;
};

// The block of one piece in each direction of contract 1.2: rebuild reads the shard through
// the dest view and writes F through the source view, dividing by scale^p; extract
// reads F and writes the shard, multiplying. Every conversion path builds its copies here.
BlockCopy rebuild_block(const Piece& piece, const Buffer& shard, Buffer& full, int scale_power);
BlockCopy extract_block(const Piece& piece, const Buffer& full, Buffer& shard, int scale_power);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Copies one block; views have been checked (in bounds, unique destination).
  virtual void copy_block(DType dtype, const BlockCopy& copy) = 0;
  // Compares `from` (after scaling as in copy_block) with what `to` already holds,
  // bitwise. Returns the row-major index within the block of the first mismatch.
  virtual std::optional<Index> compare_block(DType dtype, const BlockCopy& copy) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// nullptr when CUDA support was not built or no device is present.
std::unique_ptr<Backend> make_cuda_backend();
bool cuda_compiled();

}  // namespace shardcheck
