// Subcommands of the `shardcheck` executable. Each lives in its own file and is added
// to the app by one register_<name> function; main.cc only wires them together.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "shardcheck/json.h"

namespace shardcheck::cli {

// Exit codes shared by every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFound = 1;  // something refused, silently wrong, or not as expected
inline constexpr int kExitUsage = 2;  // unreadable input, unusable case, bad usage

// A subcommand's callback runs inside CLI::App::parse and stores its exit code here.
struct RunState {
  int exit_code = kExitOk;
};

void register_check(CLI::App& app, RunState& state);
void register_repro(CLI::App& app, RunState& state);
void register_digest(CLI::App& app, RunState& state);
void register_campaign(CLI::App& app, RunState& state);

// The whole file, or an error sentence naming the path.
struct FileText {
  std::optional<std::string> text;
  std::string error;
};
FileText read_file(const std::string& path);

// The file parsed as JSON; on failure prints "shardcheck: <why>" to stderr (the caller
// exits with the usage code) and returns nothing.
std::optional<Json> read_json_file(const std::string& path);

}  // namespace shardcheck::cli
