// The ChoiceSource that lets a fuzzer's bytes drive the same generators as the
// properties and the campaign.
//
// FuzzedDataProvider's ranges are closed, like ChoiceSource's, so no conversion is
// needed here (RapidCheck's half-open ranges are converted in its own adapter). Where
// the clang header is not on the include path (a gcc build without clang installed),
// a small provider with the same byte consumption stands in, so a corpus file decodes
// to the same case in the libFuzzer build and in the gcc replay build.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shardcheck/gen/choice.h"

#if __has_include(<fuzzer/FuzzedDataProvider.h>)
#include <fuzzer/FuzzedDataProvider.h>
#define SHARDCHECK_HAVE_FDP 1
#endif

namespace shardcheck::fuzz {

#ifdef SHARDCHECK_HAVE_FDP
using ByteProvider = FuzzedDataProvider;
#else
// Consumes integers from the end of the input, most significant byte first, one byte
// per 8 bits of the range, then reduces modulo the range width: the scheme of
// FuzzedDataProvider::ConsumeIntegralInRange, so both builds read a file identically.
class ByteProvider {
 public:
  ByteProvider(const std::uint8_t* data, std::size_t size) : data_(data), remaining_(size) {}
  std::size_t remaining_bytes() const { return remaining_; }
  template <class T>
  T ConsumeIntegralInRange(T lo, T hi) {
    const std::uint64_t range = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
    std::uint64_t result = 0;
    std::size_t bits = 0;
    while (bits < 64 && (range >> bits) > 0 && remaining_ != 0) {
      --remaining_;
      result = (result << 8) | data_[remaining_];
      bits += 8;
    }
    if (range != UINT64_MAX) result %= range + 1;
    return static_cast<T>(static_cast<std::uint64_t>(lo) + result);
  }

 private:
  const std::uint8_t* data_;
  std::size_t remaining_;
};
#endif

class FdpChoices final : public gen::ChoiceSource {
 public:
  explicit FdpChoices(ByteProvider& bytes) : bytes_(bytes) {}

  // An exhausted input answers lo, as the ChoiceSource contract requires; the
  // provider would too, but saying it here keeps the contract visible.
  Index int_in(Index lo, Index hi) override {
    if (hi <= lo || bytes_.remaining_bytes() == 0) return lo;
    return bytes_.ConsumeIntegralInRange<Index>(lo, hi);
  }

 private:
  ByteProvider& bytes_;
};

}  // namespace shardcheck::fuzz
