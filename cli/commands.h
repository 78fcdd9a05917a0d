// Subcommands of the `shardcheck` executable. Each lives in its own file and is added
// to the app by one register_<name> function; main.cc only wires them together.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <CLI/CLI.hpp>

#include "shardcheck/json.h"

namespace shardcheck::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFound = 1;  // something refused, silently wrong, or not as expected
inline constexpr int kExitUsage = 2;  // unreadable input, unusable case, bad usage
// `campaign` and `campaign merge`: an output could not be written (a full disk), so the
// files on disk do not show the whole verdict.
inline constexpr int kExitIncomplete = 3;
// A campaign stopped by a signal before the end exits 128 + the signal, as a shell
// reports a process the signal killed: 130 for SIGINT, 143 for SIGTERM.
inline constexpr int kExitSignalBase = 128;

// A subcommand's callback runs inside CLI::App::parse and stores its exit code here.
struct RunState {
  int exit_code = kExitOk;
};

void register_check(CLI::App& app, RunState& state);
void register_repro(CLI::App& app, RunState& state);
void register_digest(CLI::App& app, RunState& state);
void register_campaign(CLI::App& app, RunState& state);
void register_plan(CLI::App& app, RunState& state);
void register_reduce(CLI::App& app, RunState& state);
// `campaign merge`, a subcommand of the campaign command; returned so that the campaign's
// own callback can tell that a merge was asked for instead.
CLI::App* register_campaign_merge(CLI::App* campaign_command, RunState& state);
// `deepspeed ...`: handed to the Python package (python -m shardcheck deepspeed ...).
void register_deepspeed(CLI::App& app, RunState& state);
// Hidden: the strict policy as a protocol target, the far end of the campaign's loopback.
void register_serve_protocol(CLI::App& app, RunState& state);

// --oracle: the names of oracles::kOracleNames, the first the default.
std::vector<std::string> oracle_names();
std::string oracle_help();  // "truth (default) or same-map"

// --- numeric options, parsed exactly and refused in plain words ----------------------
// CLI11's own conversions wrap "-1" into an unsigned value, saturate what does not fit,
// read "010" as octal and print a range check on a double ("0.000000 to 1797...").
// These take decimal digits (with a '-' where the range allows it) and throw a
// CLI::ValidationError whose message is the whole sentence: "--cases must be >= 0, got -1".

// Any unsigned 64-bit integer (seeds).
std::uint64_t parse_uint64_option(const std::string& name, const std::string& text);
// An integer in [min, max]; the message names only the lower bound when max is the
// type's own maximum.
std::int64_t parse_int_option(const std::string& name, const std::string& text, std::int64_t min, std::int64_t max,
                              bool max_is_type_limit);
// A finite number of seconds > 0.
double parse_seconds_option(const std::string& name, const std::string& text);

namespace detail {
template <class T>
struct OptionalValue {
  using type = T;
};
template <class T>
struct OptionalValue<std::optional<T>> {
  using type = T;
};
}  // namespace detail

// `target` is an integer or a std::optional of one.
template <class T>
CLI::Option* add_uint64_option(CLI::App* sub, const std::string& name, T& target, const std::string& description) {
  auto* option = sub->add_option_function<std::string>(
      name, [&target, name](const std::string& text) { target = parse_uint64_option(name, text); }, description);
  return option->type_name("UINT64");
}

template <class T>
CLI::Option* add_int_option(CLI::App* sub, const std::string& name, T& target,
                            typename detail::OptionalValue<T>::type min, typename detail::OptionalValue<T>::type max,
                            const std::string& description) {
  using Value = typename detail::OptionalValue<T>::type;
  static_assert(std::is_integral_v<Value> && std::is_signed_v<Value>);
  const bool type_limit = max == std::numeric_limits<Value>::max();
  auto* option = sub->add_option_function<std::string>(
      name,
      [&target, name, min, max, type_limit](const std::string& text) {
        target = static_cast<Value>(parse_int_option(name, text, min, max, type_limit));
      },
      description);
  return option->type_name("INT");
}

template <class T>
CLI::Option* add_seconds_option(CLI::App* sub, const std::string& name, T& target, const std::string& description) {
  auto* option = sub->add_option_function<std::string>(
      name, [&target, name](const std::string& text) { target = parse_seconds_option(name, text); }, description);
  return option->type_name("SECONDS");
}

// The whole input, or an error sentence naming the path ("PATH is a directory, not a
// file" for a directory, rather than whatever reading it gives).
struct FileText {
  std::optional<std::string> text;
  std::string error;
};

// How long a reader waits for input that does not come (a FIFO with no writer, a pipe
// whose writer is silent) before it refuses it; --input-timeout changes it.
inline constexpr double kDefaultInputWaitSeconds = 3.0;
double input_wait_seconds();
void set_input_wait_seconds(double seconds);

// What read_input accepts (contract 2: every reader bounded before it reads).
struct InputRules {
  std::uint64_t max_bytes = max_input_bytes();  // more is refused `format`, naming the limit
  double wait_seconds = input_wait_seconds();
  // JSON text: reading stops after the first byte JSON text cannot hold (a control byte,
  // NUL included), whose parser then refuses it there without the rest being read.
  bool json = true;
  // false: reading stops at max_bytes and the caller judges what it got (a shard read up
  // to one byte more than its map's shard takes), instead of refusing the input.
  bool refuse_past_limit = true;
};

// Reads a file of any kind (regular, device, FIFO, /dev/stdin) within `rules`: a regular
// file over the limit is refused by its size before a byte is read; anything else is
// read in chunks and refused as soon as it passes the limit, or when no input comes for
// rules.wait_seconds.
FileText read_input(const std::string& path, const InputRules& rules);
// JSON text within the default rules.
FileText read_file(const std::string& path);

// --max-input-bytes N and --input-timeout SECONDS on a command that reads maps, case
// files or shards: set the limits of every reader in the process (set_max_input_bytes,
// set_input_wait_seconds); without them the defaults apply.
CLI::Option* add_max_input_bytes_option(CLI::App* sub);

// A file's text for a reader that goes through it once, front to back. A regular file is
// mapped, not copied, and the pages the reader has passed can be given back
// (release_before), so that reading a large map does not hold its text twice nor whole;
// anything else (a pipe, a device) is read by read_file. A file over max_input_bytes() is
// refused before it is read, with the reader's own `format` error.
class InputFile {
 public:
  // Nothing, after printing "shardcheck: <why>" to stderr (the caller exits with the usage code).
  static std::optional<InputFile> open(const std::string& path);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile();
  std::string_view text() const { return text_; }
  // Drops the pages wholly before `offset` from memory; reading them again reads the file.
  void release_before(std::size_t offset);

 private:
  InputFile() = default;
  std::string_view text_;
  void* mapped_ = nullptr;  // the mapping, when mapped
  std::string copy_;        // the text, when read
  std::size_t released_ = 0;
};

// The file parsed as JSON; on failure prints "shardcheck: <why>" to stderr (the caller
// exits with the usage code) and returns nothing.
std::optional<Json> read_json_file(const std::string& path);

}  // namespace shardcheck::cli
