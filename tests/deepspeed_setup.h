// Whether DeepSpeed's released modules can be run here, for the tests that judge them
// (test_legacy_fidelity.cc, test_deepspeed_reshard.cc): they report SKIPPED with the reason
// otherwise. Setup: bash scripts/deepspeed-target.sh, then export what it prints.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "shardcheck/oracles/target.h"

namespace shardcheck {

// Why deepspeed/checkpoint/`module` of $SHARDCHECK_DEEPSPEED_PATH cannot be run by the
// adapter (/usr/bin/python3 with torch), or "" when it can.
inline std::string deepspeed_unavailable(const std::string& module = "affine.py") {
  const char* path = std::getenv("SHARDCHECK_DEEPSPEED_PATH");
  if (path == nullptr || *path == '\0') {
    return "SHARDCHECK_DEEPSPEED_PATH is not set (run bash scripts/deepspeed-target.sh and export what it prints)";
  }
  if (!std::filesystem::exists(std::filesystem::path(path) / "deepspeed" / "checkpoint" / module)) {
    return fmt::format("SHARDCHECK_DEEPSPEED_PATH={} holds no deepspeed/checkpoint/{}", path, module);
  }
  if (std::system("/usr/bin/python3 -c 'import torch, numpy' >/dev/null 2>&1") != 0) {
    return "torch is not importable by /usr/bin/python3 (apt-get install python3-torch)";
  }
  return {};
}

// The major version of the torch the DeepSpeed adapters run on (the interpreter
// oracles::adapter_python gives the `deepspeed` target), 0 when it cannot say. DeepSpeed's
// code is the same on both, torch's is not (docs/guide/targets.md, "On torch 2").
inline int adapter_torch_major() {
  const auto targets = oracles::named_targets();
  const auto row = std::find_if(targets.begin(), targets.end(), [](const auto& t) { return t.name == "deepspeed"; });
  if (row == targets.end()) return 0;
  const std::string command =
      oracles::shell_word(oracles::adapter_python(*row)) + " -c 'import torch; print(torch.__version__.split(\".\")[0])' 2>/dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return 0;
  int major = 0;
  if (std::fscanf(pipe, "%d", &major) != 1) major = 0;
  ::pclose(pipe);
  return major;
}

}  // namespace shardcheck
