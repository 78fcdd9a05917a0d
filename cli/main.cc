#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <fmt/format.h>

#include "commands.h"

namespace shardcheck::cli {

FileText read_file(const std::string& path) {
  FileText out;
  // A directory opens as a stream on Linux and reads as nothing, which would then be
  // reported as whatever an empty file is (invalid JSON): name it for what it is.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    out.error = "cannot read " + path + ": it is a directory, not a file";
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    out.error = "cannot read " + path + ": " + std::strerror(errno);
    return out;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    out.error = "cannot read " + path;
    return out;
  }
  out.text = std::move(text).str();
  return out;
}

std::optional<Json> read_json_file(const std::string& path) {
  FileText file = read_file(path);
  if (!file.text) {
    fmt::print(stderr, "shardcheck: {}\n", file.error);
    return std::nullopt;
  }
  auto json = parse_json(*file.text);
  if (!json) {
    fmt::print(stderr, "shardcheck: {}: {}\n", path, json.error().to_string());
    return std::nullopt;
  }
  return std::move(json.value());
}

}  // namespace shardcheck::cli

namespace {
constexpr const char* kVersion = "shardcheck 0.1.0 (affine map format 1)";
}

int main(int argc, char** argv) {
  using namespace shardcheck::cli;
  CLI::App app{"shardcheck: verify DeepSpeed affine shard maps and replay conversion cases"};
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  RunState state;
  register_check(app, state);
  register_repro(app, state);
  register_digest(app, state);
  register_campaign(app, state);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11's own exit codes would collide with ours: only help and version succeed.
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "shardcheck: %s\n", e.what());
    return kExitUsage;
  }
  return state.exit_code;
}
