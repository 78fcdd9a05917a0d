// The backend executor (cryptofuzz style): runs every available backend on the same
// case and treats any difference between them as a finding with a one-line signature.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shardcheck/backend.h"
#include "shardcheck/case.h"

namespace shardcheck::oracles {

// The CPU backend first (the reference module), then every other backend present: the
// device code on OpenMP threads (built with Thrust), CUDA where a device is.
std::vector<std::unique_ptr<Backend>> available_backends();
// One of them by name ("cpu", "device-omp", "cuda"); nullptr when it is not present.
std::unique_ptr<Backend> backend_named(std::string_view name);
// Whether backend_named(name) would give one, asked without initialising a device
// runtime in this process (a process that forks workers afterwards asks this).
bool backend_present(std::string_view name);
// The names this build knows (present or not: CUDA without a device is named).
std::vector<std::string> backend_names();

// How batched backends are driven for a case: thread count and work-item tile. A few of
// the case's own bytes choose it (launch_shape_for); no answer may change with it.
struct LaunchShape {
  int threads = 2;
  Index tile = 0;  // 0: the backend's default
};
LaunchShape launch_shape_for(const Case& c);

struct BackendDifference {
  // "backend:<name>-vs-cpu:<what>:<verdict|kind|error|bits|shape>", <what> one of
  // "rebuild", "extract r<rank>", "reshard" (its verdict and error) and "reshard r<rank>"
  // (a target shard's bits).
  std::string signature;
  std::string message;
};

// Runs the case's ops (strict policy, shards extracted through the truth map) on every
// backend, every size on `shape.threads` threads, where the backend's data lives (a
// device's memory when it reaches one); a reshard executes the plan of the case's pair,
// comparing every replica holder, and verifies the case's digest. std::nullopt when all
// agree on verdict, the whole error (kind, rank, piece, address) and output bits (every
// target shard of a reshard), or when the truth map's F has 2^28 elements or more (no
// data to move here).
std::optional<BackendDifference> compare_backends(const Case& c,
                                                  const std::vector<std::unique_ptr<Backend>>& backends,
                                                  const LaunchShape& shape);
// With the case's own launch shape.
std::optional<BackendDifference> compare_backends(const Case& c,
                                                  const std::vector<std::unique_ptr<Backend>>& backends);

}  // namespace shardcheck::oracles
