// `shardcheck check MAP.json [--json]`: runs the contract 3 map checks (conditions 1-6) on a
// bare map or on every parameter of an envelope.
#include <unistd.h>

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

// On a terminal, a large map shows what it is doing on stderr: the pieces read and how
// far into the file, then the check; the line is cleared when done. Quiet otherwise, and
// for maps read in a blink.
class Progress {
 public:
  Progress(const std::string& path, std::size_t bytes) : path_(path), bytes_(bytes), tty_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { done(); }
  void done() {
    if (on_line_) std::fprintf(stderr, "\r\033[K");
    on_line_ = false;
  }
  void reading(std::size_t bytes_read, std::size_t pieces) {
    if (!tty_ || bytes_ == 0) return;
    show(fmt::format("shardcheck: reading {}: {} pieces, {}% of {} MB", path_, pieces, bytes_read * 100 / bytes_,
                     bytes_ >> 20));
  }
  void checking(const std::vector<NamedMap>& params) {
    if (!tty_ || !on_line_) return;
    std::size_t pieces = 0;
    for (const auto& param : params) {
      if (!param.map) continue;
      for (const RankEntry& entry : param.map.value().ranks) pieces += entry.pieces.size();
    }
    show(fmt::format("shardcheck: checking {} pieces", pieces));
  }

 private:
  void show(const std::string& line) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
    on_line_ = true;
  }
  std::string path_;
  std::size_t bytes_;
  bool tty_;
  bool on_line_ = false;  // shown only once a first progress report came (65,536 pieces)
};

int run_check(const CheckArgs& args) {
  std::optional<InputFile> file = InputFile::open(args.path);
  if (!file) return kExitUsage;
  Progress progress(args.path, file->text().size());
  auto document = read_document(file->text(), max_input_bytes(), [&](std::size_t bytes_read, std::size_t pieces) {
    file->release_before(bytes_read);
    progress.reading(bytes_read, pieces);
  });
  file.reset();  // the decoded maps are all that is needed now
  if (!document) {
    progress.done();
    fmt::print(stderr, "shardcheck: {}: {}\n", args.path, document.error().to_string());
    return kExitUsage;
  }
  const auto& params = document.value().params;
  progress.checking(params);
  // A bare map comes back as one unnamed entry; only envelope lines carry a name.
  const bool bare = !document.value().envelope;
  int exit_code = kExitOk;
  std::vector<Status> verdicts;
  verdicts.reserve(params.size());
  for (const auto& param : params) {
    verdicts.push_back(param.map ? check_map(param.map.value()) : Status(param.map.error()));
  }
  progress.done();  // before the verdicts, which go to stdout
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& param = params[i];
    const Status& status = verdicts[i];
    if (!status.ok()) exit_code = kExitFound;
    if (args.json) {
      // ensure_ascii: no raw control or C1 byte of a parameter name reaches a terminal.
      fmt::print("{}\n", verdict_json(param.name, bare, status).dump(-1, ' ', true));
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
  add_max_input_bytes_option(sub);
  sub->add_flag("--json", args->json,
                "one JSON object per map or parameter: param, verdict, kind, message, rank, piece, "
                "address, side, path (null where it does not apply)");
  sub->callback([args, &state] { state.exit_code = run_check(*args); });
}

}  // namespace shardcheck::cli
