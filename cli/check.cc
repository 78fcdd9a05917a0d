// `shardcheck check MAP.json`: runs the spec 3 map checks (conditions 1-6) on a bare
// map or on every parameter of an envelope.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/checks.h"
#include "shardcheck/json.h"

namespace shardcheck::cli {

namespace {

struct CheckArgs {
  std::string path;
};

int run_check(const CheckArgs& args) {
  const std::optional<Json> json = read_json_file(args.path);
  if (!json) return kExitUsage;
  auto document = decode_document(*json);
  if (!document) {
    fmt::print(stderr, "shardcheck: {}: {}\n", args.path, document.error().to_string());
    return kExitUsage;
  }
  const auto& params = document.value();
  // A bare map comes back as one unnamed entry; only envelope lines carry a name.
  bool bare = params.size() == 1 && params.front().name.empty() && !json->contains("params");
  int exit_code = kExitOk;
  for (const auto& param : params) {
    Status status = param.map ? check_map(param.map.value()) : Status(param.map.error());
    std::string verdict = status.ok() ? "valid" : "refused " + status.error().to_string();
    if (!status.ok()) exit_code = kExitFound;
    if (bare) fmt::print("{}\n", verdict);
    else fmt::print("{}: {}\n", param.name, verdict);
  }
  return exit_code;
}

}  // namespace

void register_check(CLI::App& app, RunState& state) {
  auto args = std::make_shared<CheckArgs>();
  CLI::App* sub = app.add_subcommand(
      "check", "Check a map or an envelope of maps against spec section 3 (conditions 1-6)");
  sub->add_option("map", args->path, "map or envelope JSON file")->required();
  sub->callback([args, &state] { state.exit_code = run_check(*args); });
}

}  // namespace shardcheck::cli
