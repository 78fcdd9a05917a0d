#include "shardcheck/oracles/backends.h"

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "shardcheck/convert.h"
#include "shardcheck/fnv1a.h"
#include "shardcheck/oracles/descendants.h"
#include "shardcheck/reshard.h"

namespace shardcheck::oracles {

namespace {

bool always_compiled() { return true; }

// The backends a user can name, the CPU backend first (the reference every other is
// compared with). `name` is what the made backend's name() says (a device backend's
// System::kName); `make` gives nullptr where the backend cannot run here; `compiled` says,
// without making one, whether this build has it.
struct BackendRow {
  std::string_view name;
  std::unique_ptr<Backend> (*make)();
  bool (*compiled)();
};

constexpr BackendRow kBackends[] = {
    {"cpu", make_cpu_backend, always_compiled},
    {"device-omp", make_device_omp_backend, device_omp_compiled},
    {"cuda", make_cuda_backend, cuda_compiled},
};

}  // namespace

std::vector<std::unique_ptr<Backend>> available_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  for (const BackendRow& row : kBackends) {
    if (auto backend = row.make()) backends.push_back(std::move(backend));
  }
  return backends;
}

std::unique_ptr<Backend> backend_named(std::string_view name) {
  // Only the one asked for is made: making CUDA's initialises its runtime in this process.
  for (const BackendRow& row : kBackends) {
    if (row.name == name) return row.make();
  }
  return nullptr;
}

bool backend_present(std::string_view name) {
  if (name != "cuda") return backend_named(name) != nullptr;
  if (!cuda_compiled()) return false;
  // CUDA's runtime, once initialised, is unusable in a child of fork(), and a campaign
  // forks its workers after asking: the device is looked for in a child of its own.
  const pid_t child = fork_own_child();
  if (child < 0) return false;
  if (child == 0) ::_exit(make_cuda_backend() ? 0 : 1);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  forget_own_child(child);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const BackendRow& row : kBackends) {
    if (row.compiled()) names.emplace_back(row.name);
  }
  return names;
}

LaunchShape launch_shape_for(const Case& c) {
  // A hash of the map as the case holds it: the same case, the same launch.
  Fnv1a hash;
  hash.add_bytes(encode_map_text(c.map));
  const std::uint64_t h = hash.value();
  static constexpr Index kTiles[] = {1, 2, 3, 7, 64, 1000, 0};
  LaunchShape shape;
  // Two threads: real parallelism on a 2-core machine, where more would only queue.
  shape.threads = 2;
  shape.tile = kTiles[h % std::size(kTiles)];
  return shape;
}

namespace {

constexpr Index kNotCompared = Index{1} << 28;

// One backend's results for the case: rebuild output (or refusal), then each rank's
// extract, then the reshard's target shards (or refusal).
struct Run {
  std::vector<std::string> labels;  // what each result is
  std::vector<Result<Buffer>> results;
  std::optional<Result<ShardSet>> resharded;
};

// A backend that reaches a device's memory converts there: inputs copied over first,
// results copied back, so that the differential judges conversion where the data lives.
Memory memory_for(const Backend& backend) { return backend.reaches(Memory::device) ? Memory::device : Memory::host; }

Result<Buffer> brought_back(Backend& backend, Result<Buffer> result) {
  if (!result || result.value().memory() == Memory::host) return result;
  return backend.copy_to(result.value(), Memory::host);
}

Result<ShardSet> brought_back(Backend& backend, Result<ShardSet> result) {
  if (!result) return result;
  return copy_shards_to(backend, result.value(), Memory::host);
}

// The shards the truth map writes from F on the CPU backend: every backend is handed the
// same shards, whatever its own extract does.
Result<ShardSet> truth_shards(const Case& c, const Map& truth, const Buffer& host_full) {
  ConvertOptions cpu_truth;
  cpu_truth.scale_power = c.scale_power;
  return extract_all(truth, host_full, cpu_truth);
}

// Contract 11 on `backend`: the plan of the case's pair (a pure function of the two maps,
// so the same plan on every backend) executed on the shards the truth map wrote, where the
// backend's data lives. Every replica holder is compared (compare_replicas), so that the
// backends' comparisons are judged as well as their copies, and a digest the case asks for
// is verified, on shards that may be in a device's memory.
Result<ShardSet> reshard_on(const Case& c, Backend& backend, const LaunchShape& shape, const Buffer& host_full) {
  auto shards = truth_shards(c, c.truth_map(), host_full);
  if (!shards) return shards.error();
  const Memory where = memory_for(backend);
  const ShardSet placed =
      where == Memory::host ? std::move(shards).value() : copy_shards_to(backend, shards.value(), where);
  ReshardOptions options;
  options.compare_replicas = true;
  options.backend = &backend;
  options.threading = Threading{shape.threads, 0, shape.tile};
  options.scale_power = c.scale_power;
  options.expected_digest = c.digest;
  options.digest_state = c.digest_state;
  return brought_back(backend, reshard(c.map, *c.target_map, placed, c.dtype, options));
}

Run run_on(const Case& c, Backend& backend, const LaunchShape& shape) {
  Run run;
  const Memory where = memory_for(backend);
  ConvertOptions options;
  options.backend = &backend;
  // Every size goes through the threads: a race shows where the data is small too.
  options.threads = shape.threads;
  options.tile = shape.tile;
  options.parallel_min_bytes = 0;
  options.scale_power = c.scale_power;
  const Map& truth = c.truth_map();
  const Index numel = checked_numel(truth.logical_shape).value_or(0);
  const Buffer host_full = marker_buffer(c.dtype, numel);
  if (c.ops.has(Op::rebuild)) {
    auto shards = truth_shards(c, truth, host_full);
    run.labels.push_back("rebuild");
    if (!shards) {
      run.results.push_back(Result<Buffer>(shards.error()));
    } else {
      const ShardSet placed =
          where == Memory::host ? std::move(shards).value() : copy_shards_to(backend, shards.value(), where);
      run.results.push_back(brought_back(backend, rebuild(c.map, placed, c.dtype, options)));
    }
  }
  if (c.ops.has(Op::extract)) {
    const Buffer placed_full = where == Memory::host ? Buffer() : backend.copy_to(host_full, where);
    const Buffer& full = where == Memory::host ? host_full : placed_full;
    for (const auto& entry : c.map.ranks) {
      run.labels.push_back(fmt::format("extract r{}", entry.rank));
      run.results.push_back(brought_back(backend, extract(c.map, full, entry.rank, options)));
    }
  }
  if (c.ops.has(Op::reshard) && c.target_map) run.resharded = reshard_on(c, backend, shape, host_full);
  return run;
}

// "backend:<name>-vs-<reference>:<label>", the part of a signature before what differs.
struct Compared {
  std::string_view reference;
  std::string_view other;
  std::string prefix(std::string_view label) const {
    return fmt::format("backend:{}-vs-{}:{}", other, reference, label);
  }
};

// The verdicts and, for two refusals, the whole error: kind, rank, piece and address are
// the verdict as much as the kind.
template <class T>
std::optional<BackendDifference> verdict_difference(const Compared& names, const std::string& label,
                                                    const Result<T>& want, const Result<T>& got) {
  if (want.ok() != got.ok()) {
    return BackendDifference{names.prefix(label) + ":verdict",
                             fmt::format("{} {} on {} but {} on {}", label, want.ok() ? "succeeds" : "is refused",
                                         names.reference, got.ok() ? "succeeds" : "is refused", names.other)};
  }
  if (want.ok()) return std::nullopt;
  if (want.error().kind != got.error().kind || want.error().to_string() != got.error().to_string()) {
    return BackendDifference{names.prefix(label) + (want.error().kind != got.error().kind ? ":kind" : ":error"),
                             want.error().to_string() + " vs " + got.error().to_string()};
  }
  return std::nullopt;
}

std::optional<BackendDifference> bits_difference(const Compared& names, const std::string& label, const Buffer& x,
                                                 const Buffer& y) {
  for (Index e = 0; e < x.numel() && e < y.numel(); ++e) {
    if (x.bits(e) != y.bits(e)) {
      return BackendDifference{
          names.prefix(label) + ":bits",
          fmt::format("{} element {}: {} {} vs {} {}", label, e, names.reference, format_element(x.dtype(), x.bits(e)),
                      names.other, format_element(y.dtype(), y.bits(e)))};
    }
  }
  return std::nullopt;
}

// The reshard's verdict, then its target shards rank by rank ("reshard r<rank>", as an
// extract names its rank): the same ranks, the same bits.
std::optional<BackendDifference> reshard_difference(const Compared& names, const Result<ShardSet>& want,
                                                    const Result<ShardSet>& got) {
  if (auto difference = verdict_difference(names, "reshard", want, got)) return difference;
  if (!want.ok()) return std::nullopt;
  for (const auto& [rank, shard] : want.value()) {
    const std::string label = fmt::format("reshard r{}", rank);
    const auto it = got.value().find(rank);
    if (it == got.value().end() || it->second.numel() != shard.numel()) {
      return BackendDifference{
          names.prefix(label) + ":shape",
          fmt::format("{}: {} elements on {}, {} on {}", label, shard.numel(), names.reference,
                      it == got.value().end() ? "no shard" : std::to_string(it->second.numel()), names.other)};
    }
    if (auto difference = bits_difference(names, label, shard, it->second)) return difference;
  }
  if (got.value().size() != want.value().size()) {
    return BackendDifference{names.prefix("reshard") + ":shape",
                             fmt::format("reshard: {} target shards on {}, {} on {}", want.value().size(),
                                         names.reference, got.value().size(), names.other)};
  }
  return std::nullopt;
}

std::optional<BackendDifference> run_difference(const Compared& names, const Run& reference, const Run& other) {
  for (std::size_t i = 0; i < reference.results.size(); ++i) {
    const auto& want = reference.results[i];
    const auto& got = other.results[i];
    if (auto difference = verdict_difference(names, reference.labels[i], want, got)) return difference;
    if (!want.ok()) continue;
    if (auto difference = bits_difference(names, reference.labels[i], want.value(), got.value())) return difference;
  }
  if (reference.resharded && other.resharded) return reshard_difference(names, *reference.resharded, *other.resharded);
  return std::nullopt;
}

}  // namespace

std::optional<BackendDifference> compare_backends(const Case& c,
                                                  const std::vector<std::unique_ptr<Backend>>& backends) {
  return compare_backends(c, backends, launch_shape_for(c));
}

std::optional<BackendDifference> compare_backends(const Case& c, const std::vector<std::unique_ptr<Backend>>& backends,
                                                  const LaunchShape& shape) {
  if (backends.size() < 2) return std::nullopt;
  // A case whose F could not be allocated here (addresses near 2^63) is the checks'
  // business, not the backends': there is no data to move.
  const Index numel = checked_numel(c.truth_map().logical_shape).value_or(kNotCompared);
  if (numel < 0 || numel >= kNotCompared) return std::nullopt;
  const Run reference = run_on(c, *backends.front(), shape);
  for (std::size_t b = 1; b < backends.size(); ++b) {
    const Run other = run_on(c, *backends[b], shape);
    const Compared names{backends.front()->name(), backends[b]->name()};
    if (auto difference = run_difference(names, reference, other)) return difference;
  }
  return std::nullopt;
}

}  // namespace shardcheck::oracles
