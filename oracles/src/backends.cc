#include "shardcheck/oracles/backends.h"

#include <fmt/format.h>

#include "shardcheck/convert.h"

namespace shardcheck::oracles {

std::vector<std::unique_ptr<Backend>> available_backends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(make_cpu_backend());
  if (auto cuda = make_cuda_backend()) backends.push_back(std::move(cuda));
  return backends;
}

namespace {

// One backend's results for the case: rebuild output (or refusal), then each rank's extract.
struct Run {
  std::vector<std::string> labels;  // what each result is
  std::vector<Result<Buffer>> results;
};

Run run_on(const Case& c, Backend& backend) {
  Run run;
  ConvertOptions options;
  options.backend = &backend;
  options.scale_power = c.scale_power;
  const Map& truth = c.truth_map();
  const Index numel = checked_numel(truth.logical_shape).value_or(0);
  const Buffer full = marker_buffer(c.dtype, numel);
  if (c.ops.has(Op::rebuild)) {
    ConvertOptions cpu_truth;  // shards come from the truth map on the default backend
    cpu_truth.scale_power = c.scale_power;
    auto shards = extract_all(truth, full, cpu_truth);
    run.labels.push_back("rebuild");
    run.results.push_back(shards ? rebuild(c.map, shards.value(), c.dtype, options)
                                 : Result<Buffer>(shards.error()));
  }
  if (c.ops.has(Op::extract)) {
    for (const auto& entry : c.map.ranks) {
      run.labels.push_back(fmt::format("extract r{}", entry.rank));
      run.results.push_back(extract(c.map, full, entry.rank, options));
    }
  }
  return run;
}

}  // namespace

std::optional<BackendDifference> compare_backends(const Case& c,
                                                  const std::vector<std::unique_ptr<Backend>>& backends) {
  if (backends.size() < 2) return std::nullopt;
  const Run reference = run_on(c, *backends.front());
  for (std::size_t b = 1; b < backends.size(); ++b) {
    const Run other = run_on(c, *backends[b]);
    for (std::size_t i = 0; i < reference.results.size(); ++i) {
      const auto& want = reference.results[i];
      const auto& got = other.results[i];
      const std::string prefix = fmt::format("backend:{}-vs-{}:{}", backends[b]->name(),
                                             backends.front()->name(), reference.labels[i]);
      if (want.ok() != got.ok()) {
        return BackendDifference{prefix + ":verdict",
                                 fmt::format("{} {} on {} but {} on {}", reference.labels[i],
                                             want.ok() ? "succeeds" : "is refused", backends.front()->name(),
                                             got.ok() ? "succeeds" : "is refused", backends[b]->name())};
      }
      if (!want.ok()) {
        if (want.error().kind != got.error().kind) {
          return BackendDifference{prefix + ":kind", want.error().to_string() + " vs " + got.error().to_string()};
        }
        continue;
      }
      const Buffer& x = want.value();
      const Buffer& y = got.value();
      for (Index e = 0; e < x.numel() && e < y.numel(); ++e) {
        if (x.bits(e) != y.bits(e)) {
          return BackendDifference{
              prefix + ":bits", fmt::format("{} element {}: {} {} vs {} {}", reference.labels[i], e,
                                            backends.front()->name(), format_element(x.dtype(), x.bits(e)),
                                            backends[b]->name(), format_element(y.dtype(), y.bits(e)))};
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace shardcheck::oracles
