// A map as an implementation written in Python reads it (DeepSpeed's from_dict, int() on
// every number): the input syntax of the code under test, not the oracle's. The truth
// oracle uses it only for a map shardcheck's decoder refuses and a target that reads maps
// itself (contract 9), to write the data that implementation is then judged on.
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "truth_internal.h"

namespace shardcheck::oracles {

namespace {

// Python's int() of a JSON string ("2", " -1", "+01", "1_000", "\t7\n"): nullopt unless,
// once whitespace is stripped from both ends, the text is an optionally signed run of
// decimal digits (single underscores between digits, leading zeros allowed) whose value
// fits 64 bits. Past 64 bits int() still gives a number, but no map field can hold it.
std::optional<std::int64_t> python_int(std::string_view text) {
  auto space = [](char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= '\x1c' && ch <= '\x1f'); };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '_' || text.back() == '_') return std::nullopt;
  // Accumulated as a negative number, whose range reaches INT64_MIN.
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  std::int64_t value = 0;
  char previous = 0;
  for (char ch : text) {
    if (ch == '_') {
      if (previous == '_') return std::nullopt;
      previous = ch;
      continue;
    }
    if (ch < '0' || ch > '9') return std::nullopt;
    const int digit = ch - '0';
    if (value < (kMin + digit) / 10) return std::nullopt;
    value = value * 10 - digit;
    previous = ch;
  }
  if (negative) return value;
  if (value == kMin) return std::nullopt;
  return -value;
}

// Every number and numeric string as int() makes it (a float truncated toward zero), and
// the ranks' keys too, a later key for the same rank replacing an earlier one, as a
// Python dict built from them would.
Json as_python_ints(const Json& value, bool ranks) {
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isfinite(v) && std::fabs(v) < 0x1p62) return Json(static_cast<std::int64_t>(std::trunc(v)));
    return value;
  }
  if (value.is_string()) {
    if (auto v = python_int(value.get<std::string>())) return Json(*v);
    return value;
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(as_python_ints(item, false));
    return out;
  }
  if (!value.is_object()) return value;
  Json out = Json::object();
  for (const auto& [key, item] : value.items()) {
    std::string name = key;
    if (ranks) {
      if (auto id = python_int(key)) name = std::to_string(*id);
    }
    out[name] = as_python_ints(item, !ranks && key == "ranks");
  }
  return out;
}

}  // namespace

// A map under test that shardcheck's decoder refuses, as the case for an implementation
// that reads maps itself (contract 9): with a truth map the shards come from it as ever;
// without, the data (the producer's shards, F's shape) comes from the map read as
// DeepSpeed's from_dict reads JSON, with int() on every number. The target still gets the
// map as written. nullopt when even that reading does not give a map.
std::optional<Case> as_read_by_the_implementation(const Case& c) {
  if (c.truth) return c;
  Json written;
  if (c.undecoded_map) {
    written = *c.undecoded_map;
  } else if (c.map_text) {
    // JSON as Python's json module reads it: a repeated key keeps its last value.
    written = Json::parse(*c.map_text, nullptr, /*allow_exceptions=*/false);
    if (written.is_discarded()) return std::nullopt;
    if (written.is_object() && written.contains("version") && written.contains("params") &&
        written["params"].is_object() && written["params"].size() == 1) {
      written = Json(written["params"].begin().value());
    }
  } else {
    return std::nullopt;
  }
  auto read = decode_map(as_python_ints(written, false), "$.map");
  if (!read) return std::nullopt;
  Case data = c;
  data.map = std::move(read).value();
  return data;
}

}  // namespace shardcheck::oracles
