// `shardcheck plan SOURCE.json TARGET.json [--json] [--dtype D] [--compare-replicas]
// [--max-segments N]`: a transfer plan (contract 11) from the source map's shards to the
// target map's, or the refusal.
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/case.h"
#include "shardcheck/dtype.h"
#include "shardcheck/reshard.h"

namespace shardcheck::cli {

namespace {

struct PlanArgs {
  std::string source_path;
  std::string target_path;
  bool json = false;
  std::string dtype = "float32";
  bool compare_replicas = false;
  std::int64_t max_segments = ReshardOptions{}.max_segments;
};

// A bare map, or an envelope of one parameter; nothing: the reason is printed (usage).
std::optional<Map> read_map(const std::string& path) {
  const FileText file = read_file(path);
  if (!file.text) {
    fmt::print(stderr, "shardcheck: {}\n", file.error);
    return std::nullopt;
  }
  auto map = decode_map_text(*file.text);
  if (!map) {
    fmt::print(stderr, "shardcheck: {}: {}\n", path, map.error().to_string());
    return std::nullopt;
  }
  return std::move(map).value();
}

// Elements and, for a person, what they weigh in the dtype.
std::string amount(Index elements, DType dtype) {
  return fmt::format("{} elements ({} bytes)", elements, elements * static_cast<Index>(element_size(dtype)));
}

void print_summary(const Plan& plan, DType dtype) {
  const PlanStatistics& s = plan.statistics;
  fmt::print("plan: {} segments, {} moved as {}\n", s.segments, amount(s.elements_moved, dtype), dtype_name(dtype));
  for (const auto& [pair, n] : s.elements_by_pair) {
    fmt::print("  source rank {} -> target rank {}: {}\n", pair.first, pair.second, amount(n, dtype));
  }
  for (const auto& [rank, n] : s.elements_read) fmt::print("  read from source rank {}: {}\n", rank, amount(n, dtype));
  if (s.replica_checks > 0) fmt::print("  replica comparisons: {} segments\n", s.replica_checks);
}

int run_plan(const PlanArgs& args) {
  const auto dtype = parse_dtype(args.dtype);
  if (!dtype) {
    fmt::print(stderr, "shardcheck: unknown dtype \"{}\"\n", args.dtype);
    return kExitUsage;
  }
  const auto source = read_map(args.source_path);
  if (!source) return kExitUsage;
  const auto target = read_map(args.target_path);
  if (!target) return kExitUsage;
  ReshardOptions options;
  options.compare_replicas = args.compare_replicas;
  options.max_segments = args.max_segments;
  auto made = plan(*source, *target, options);
  if (!made) {
    if (args.json) {
      Json out = {{"verdict", "refused"},
                  {"kind", std::string(kind_name(made.error().kind))},
                  {"message", made.error().message}};
      fmt::print("{}\n", out.dump(-1, ' ', true));
    } else {
      fmt::print("refused {}\n", made.error().to_string());
    }
    return kExitFound;
  }
  if (args.json) {
    fmt::print("{}\n", plan_to_json(made.value()).dump(-1, ' ', true));
  } else {
    print_summary(made.value(), *dtype);
  }
  return kExitOk;
}

}  // namespace

void register_plan(CLI::App& app, RunState& state) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* sub = app.add_subcommand(
      "plan", "Plan the transfer from a source map's shards to a target map's (contract section 11)");
  sub->add_option("source", args->source_path, "source map JSON file (a map, or an envelope of one)")->required();
  sub->add_option("target", args->target_path, "target map JSON file (a map, or an envelope of one)")->required();
  sub->add_flag("--json", args->json,
                "print the plan: logical_shape, segments as DeepSpeed's TransferSegment.to_dict, statistics");
  sub->add_option("--dtype", args->dtype, "the dtype the summary weighs bytes in (default float32)");
  add_max_input_bytes_option(sub);
  sub->add_flag("--compare-replicas", args->compare_replicas,
                "plan comparisons of every holder of a replicated source element, not only the lowest rank's");
  add_int_option(sub, "--max-segments", args->max_segments, std::int64_t{1}, std::numeric_limits<std::int64_t>::max(),
                 "the most segments the plan may hold, counted after merging; past it the plan is refused (format)");
  sub->callback([args, &state] { state.exit_code = run_plan(*args); });
}

}  // namespace shardcheck::cli
