// `shardcheck check MAP.json [--json]`: runs the contract 3 map checks (conditions 1-6) on a
// bare map or on every parameter of an envelope.
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
  bool json = false;
};

const char* side_name(Side side) {
  switch (side) {
    case Side::full: return "full";
    case Side::shard: return "shard";
    case Side::none: break;
  }
  return nullptr;
}

// One line of `check --json`: every key is always present, null when it does not apply.
Json verdict_json(const std::string& name, bool bare, const Status& status) {
  Json out = Json::object();
  out["param"] = bare ? Json(nullptr) : Json(name);
  out["verdict"] = status.ok() ? "valid" : "refused";
  const Error* error = status.ok() ? nullptr : &status.error();
  auto optional = [](const auto& value) { return value ? Json(*value) : Json(nullptr); };
  out["kind"] = error ? Json(std::string(kind_name(error->kind))) : Json(nullptr);
  out["message"] = error ? Json(error->message) : Json(nullptr);
  out["rank"] = error ? optional(error->rank) : Json(nullptr);
  out["piece"] = error ? optional(error->piece) : Json(nullptr);
  out["address"] = error ? optional(error->address) : Json(nullptr);
  const char* side = error ? side_name(error->side) : nullptr;
  out["side"] = side ? Json(side) : Json(nullptr);
  out["path"] = error && !error->path.empty() ? Json(error->path) : Json(nullptr);
  return out;
}

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
    if (!status.ok()) exit_code = kExitFound;
    if (args.json) {
      fmt::print("{}\n", verdict_json(param.name, bare, status).dump());
      continue;
    }
    std::string verdict = status.ok() ? "valid" : "refused " + status.error().to_string();
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
  sub->add_flag("--json", args->json,
                "one JSON object per map or parameter: param, verdict, kind, message, rank, piece, "
                "address, side, path (null where it does not apply)");
  sub->callback([args, &state] { state.exit_code = run_check(*args); });
}

}  // namespace shardcheck::cli
