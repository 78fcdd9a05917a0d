// Typed errors. One table of kinds (spec section 3), one place that formats them.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "shardcheck/types.h"

namespace shardcheck {

// Stable kinds; their names (kind_name) are spelled in CLI output and stored files, so they never change.
enum class ErrorKind {
  count,           // a rank's pieces hold a different number of elements than its shard
  bounds,          // a view reaches outside F or outside its shard
  itself,          // a view overlaps itself (not is_unique)
  twice,           // an address or element written twice where that is not allowed
  uncovered,       // an element of F or a shard address nobody writes
  different_data,  // replicas of one element hold different bits
  holders,         // locations disagree with the ranks that really hold the data
  scale,           // invalid scale, or scale with scale_power != 1, or on a non-float dtype
  shape,           // a supplied buffer has the wrong element count
  format,          // malformed input: types, missing keys, negative numbers, overflow
};

inline constexpr ErrorKind kAllErrorKinds[] = {
    ErrorKind::count,     ErrorKind::bounds,         ErrorKind::itself,
    ErrorKind::twice,     ErrorKind::uncovered,      ErrorKind::different_data,
    ErrorKind::holders,   ErrorKind::scale,          ErrorKind::shape,
    ErrorKind::format};

std::string_view kind_name(ErrorKind kind);
std::optional<ErrorKind> parse_kind(std::string_view name);

// Which buffer an `address` refers to.
enum class Side { none, full, shard };

struct Error {
  ErrorKind kind = ErrorKind::format;
  std::optional<Rank> rank;    // the rank whose piece list is concerned
  std::optional<Index> piece;  // index of the piece in that rank's list, as written
  std::optional<Index> address;  // element of F (Side::full) or shard address (Side::shard)
  Side side = Side::none;
  std::string path;     // JSON path for format errors, e.g. "$.ranks.1.pieces[0].source"
  std::string message;  // one sentence a user can act on

  // "<kind>: <message>"
  std::string to_string() const;
  friend bool operator==(const Error&, const Error&) = default;
};

// Builds an error; `message` should already name rank/piece/address in words.
Error make_error(ErrorKind kind, std::string message);

// A value or a typed error. The core returns these; it never throws for bad input.
template <class T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

// std::nullopt means "no error".
using Status = std::optional<Error>;

}  // namespace shardcheck
