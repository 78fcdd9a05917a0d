// The frames a campaign's parent and its workers exchange (campaign_processes.cc says
// how they talk): little-endian integers, strings as length + bytes, a frame as length,
// type and payload. A worker is not trusted: a BATCH frame is decoded with bounds, and
// validate_batch holds what it says to what a batch of those cases can say.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "campaign_internal.h"

namespace shardcheck::campaign::detail {

inline constexpr std::uint32_t kRun = 1;
inline constexpr std::uint32_t kBatch = 2;
inline constexpr std::uint32_t kMaxPayload = 256u << 20;

class Encoder {
 public:
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void i64(Index v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    bytes_.append(s);
  }
  void tally(const Tally& t) {
    for (Index v : {t.cases, t.refused, t.exact, t.wrong, t.valid_but_different, t.crashed, t.target_faults}) i64(v);
  }
  void tallies(const std::map<std::string, Tally>& map) {
    u32(static_cast<std::uint32_t>(map.size()));
    for (const auto& [name, t] : map) {
      str(name);
      tally(t);
    }
  }
  // The frame: length and type first.
  std::string frame(std::uint32_t type) const {
    std::string out(8, '\0');
    const auto length = static_cast<std::uint32_t>(bytes_.size());
    std::memcpy(out.data(), &length, 4);
    std::memcpy(out.data() + 4, &type, 4);
    return out + bytes_;
  }

 private:
  void raw(const void* p, std::size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

class Decoder {
 public:
  Decoder(const char* data, std::size_t size) : p_(data), left_(size) {}
  bool ok() const { return ok_; }
  bool done() const { return ok_ && left_ == 0; }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  Index i64() {
    Index v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    const std::uint32_t n = u32();
    if (!ok_ || n > left_) {
      ok_ = false;
      return {};
    }
    std::string s(p_, n);
    p_ += n;
    left_ -= n;
    return s;
  }
  Tally tally() {
    Tally t;
    for (Index* field : {&t.cases, &t.refused, &t.exact, &t.wrong, &t.valid_but_different, &t.crashed,
                         &t.target_faults}) {
      *field = i64();
    }
    return t;
  }
  void tallies(std::map<std::string, Tally>& map) {
    const std::uint32_t n = u32();
    for (std::uint32_t i = 0; ok_ && i < n; ++i) {
      std::string name = str();
      map[std::move(name)] = tally();
    }
  }

 private:
  void raw(void* out, std::size_t n) {
    if (!ok_ || left_ < n) {
      ok_ = false;
      return;
    }
    std::memcpy(out, p_, n);
    p_ += n;
    left_ -= n;
  }
  const char* p_;
  std::size_t left_;
  bool ok_ = true;
};

// A worker's BATCH frame for `range`: [first, reached) and what its cases found.
std::string batch_frame(Range range, const BatchResult& result);
// The frame's payload back; false when it does not decode whole.
bool decode_batch(Decoder& d, Range& range, BatchResult& result);
// Why a decoded batch cannot be what a worker ran for `range`, or empty.
std::string validate_batch(const Ledger& ledger, Range range, const BatchResult& result);

}  // namespace shardcheck::campaign::detail
