// Names as a sentence lists them, for help texts and errors: "a, b or c".
#pragma once

#include <string>
#include <string_view>

namespace shardcheck {

// Each name of `rows` (name_of(row)), separated by ", " and, between the last two, by
// `last_separator`.
template <class Rows, class NameOf>
std::string listed(const Rows& rows, NameOf name_of, std::string_view last_separator = " or ") {
  std::string out;
  const std::size_t n = std::size(rows);
  std::size_t k = 0;
  for (const auto& row : rows) {
    if (k > 0) out += k + 1 == n ? last_separator : std::string_view(", ");
    out += name_of(row);
    ++k;
  }
  return out;
}

}  // namespace shardcheck
