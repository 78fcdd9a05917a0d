// The batched entries' defaults: one call per block, in the order each entry promises.
// A backend that runs batches (runs_batches()) overrides all four.
#include "shardcheck/backend.h"

#include "shardcheck/digest.h"

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

}  // namespace shardcheck
