// The backend executor (cryptofuzz style): runs every available backend on the same
// case and treats any difference between them as a finding with a one-line signature.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardcheck/backend.h"
#include "shardcheck/case.h"

namespace shardcheck::oracles {

// The CPU backend first (the reference module), then every other backend present.
std::vector<std::unique_ptr<Backend>> available_backends();

struct BackendDifference {
  std::string signature;  // "backend:<name>-vs-cpu:<op>:<verdict|kind|bits>"
  std::string message;
};

// Runs the case's ops (strict policy, shards extracted through the truth map) on every
// backend; std::nullopt when all agree on verdict, error kind and output bits.
std::optional<BackendDifference> compare_backends(const Case& c,
                                                  const std::vector<std::unique_ptr<Backend>>& backends);

}  // namespace shardcheck::oracles
