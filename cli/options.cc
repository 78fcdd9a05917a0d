// Numeric command-line options parsed exactly (see commands.h).
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/listed.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck::cli {

namespace {

bool all_digits(const std::string& text, std::size_t from) {
  if (from >= text.size()) return false;
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  return true;
}

// The magnitude of decimal digits, or nothing when it does not fit 64 bits.
std::optional<std::uint64_t> magnitude(const std::string& text, std::size_t from) {
  std::uint64_t value = 0;
  for (std::size_t i = from; i < text.size(); ++i) {
    const auto digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

constexpr double kMaxSeconds = 1e9;

}  // namespace

std::vector<std::string> oracle_names() {
  std::vector<std::string> out;
  for (const auto& row : oracles::kOracleNames) out.emplace_back(row.name);
  return out;
}

std::string oracle_help() {
  // The first row is the default.
  return listed(oracles::kOracleNames, [first = oracles::kOracleNames[0].name](const oracles::OracleName& row) {
    return std::string(row.name) + (row.name == first ? " (default)" : "");
  });
}

std::uint64_t parse_uint64_option(const std::string& name, const std::string& text) {
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  if (!all_digits(text, 0)) {
    throw CLI::ValidationError(
        fmt::format("{} must be a whole number from 0 to {}, got {}", name, kMax, text.empty() ? "nothing" : text));
  }
  const auto value = magnitude(text, 0);
  if (!value) {
    throw CLI::ValidationError(
        fmt::format("{} must be at most {} (an unsigned 64-bit integer), got {}", name, kMax, text));
  }
  return *value;
}

std::int64_t parse_int_option(const std::string& name, const std::string& text, std::int64_t min, std::int64_t max,
                              bool max_is_type_limit) {
  auto out_of_range = [&] {
    if (max_is_type_limit) return CLI::ValidationError(fmt::format("{} must be >= {}, got {}", name, min, text));
    return CLI::ValidationError(fmt::format("{} must be between {} and {}, got {}", name, min, max, text));
  };
  const bool negative = !text.empty() && text.front() == '-';
  if (!all_digits(text, negative ? 1 : 0)) {
    throw CLI::ValidationError(fmt::format("{} must be a whole number, got {}", name, text.empty() ? "nothing" : text));
  }
  const auto value = magnitude(text, negative ? 1 : 0);
  if (negative) {
    // |INT64_MIN| is one more than INT64_MAX.
    constexpr auto kMinMagnitude = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1;
    if (!value || *value > kMinMagnitude) throw out_of_range();
    const std::int64_t signed_value =
        *value == kMinMagnitude ? std::numeric_limits<std::int64_t>::min() : -static_cast<std::int64_t>(*value);
    if (signed_value < min) throw out_of_range();
    return signed_value;
  }
  if (!value || *value > static_cast<std::uint64_t>(max)) {
    if (!max_is_type_limit) throw out_of_range();
    throw CLI::ValidationError(fmt::format("{} must be <= {}, got {}", name, max, text));
  }
  const auto signed_value = static_cast<std::int64_t>(*value);
  if (signed_value < min) throw out_of_range();
  return signed_value;
}

CLI::Option* add_max_input_bytes_option(CLI::App* sub) {
  const std::string name = "--max-input-bytes";
  auto* option = sub->add_option_function<std::string>(
      name,
      [name](const std::string& text) {
        set_max_input_bytes(static_cast<std::uint64_t>(parse_int_option(
            name, text, 1, static_cast<std::int64_t>(kMaxInputBytesCeiling), false)));
      },
      fmt::format("the most bytes read from one file, maps, case files and shards alike (default {}: an eighth "
                  "of this machine's memory, at least 64 MiB; at most {})",
                  default_max_input_bytes(), kMaxInputBytesCeiling));
  sub->add_option_function<std::string>(
         "--input-timeout",
         [](const std::string& text) { set_input_wait_seconds(parse_seconds_option("--input-timeout", text)); },
         fmt::format("seconds a reader waits for input that does not come (a FIFO with no writer, a silent pipe) "
                     "before it refuses it (default {:g})",
                     kDefaultInputWaitSeconds))
      ->type_name("SECONDS");
  return option->type_name("BYTES");
}

double parse_seconds_option(const std::string& name, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double value = text.empty() ? 0.0 : std::strtod(begin, &end);
  const bool whole = !text.empty() && end == begin + text.size() && errno != ERANGE;
  // The upper bound (about 31 years) keeps every deadline computed from it within range.
  if (!whole || !std::isfinite(value) || !(value > 0) || value > kMaxSeconds) {
    throw CLI::ValidationError(fmt::format("{} must be a number of seconds > 0 and <= {:.0f}, got {}", name,
                                           kMaxSeconds, text.empty() ? "nothing" : text));
  }
  return value;
}

}  // namespace shardcheck::cli
