// Whether DeepSpeed's released modules can be run here, for the tests that judge them
// (test_legacy_fidelity.cc, test_deepspeed_reshard.cc): they report SKIPPED with the reason
// otherwise. Setup: bash scripts/deepspeed-target.sh, then export what it prints.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include <fmt/format.h>

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

}  // namespace shardcheck
