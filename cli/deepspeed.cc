// `shardcheck deepspeed inspect CHECKPOINT_DIR`: lives in the Python package
// (shardcheck.deepspeed_checkpoint reads torch-saved checkpoints with shardcheck.torchfile,
// without torch), so this command hands its arguments to `python -m shardcheck deepspeed ...`. The interpreter is
// $SHARDCHECK_PYTHON, else the Python of the environment this executable is installed in
// (its own folder's python3, or, where auditwheel moved it into
// <prefix>/lib/pythonX.Y/site-packages/shardcheck.scripts/, <prefix>/bin/python3), else the
// one the package was built for (a `pip install .` build), else python3 on PATH.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.h"

namespace shardcheck::cli {

namespace {

// The python3 of the environment that holds this executable, or "".
std::string installed_python() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return "";
  const std::filesystem::path folder = self.parent_path();
  std::vector<std::filesystem::path> candidates{folder / "python3"};
  const std::filesystem::path site = folder.parent_path();
  if (folder.filename() == "shardcheck.scripts" &&
      (site.filename() == "site-packages" || site.filename() == "dist-packages")) {
    candidates.push_back(site.parent_path().parent_path().parent_path() / "bin" / "python3");
  }
  for (const auto& candidate : candidates) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

std::string python_interpreter() {
  if (const char* chosen = std::getenv("SHARDCHECK_PYTHON"); chosen != nullptr && *chosen != '\0') return chosen;
  if (std::string installed = installed_python(); !installed.empty()) return installed;
#ifdef SHARDCHECK_PYTHON_EXECUTABLE
  if (::access(SHARDCHECK_PYTHON_EXECUTABLE, X_OK) == 0) return SHARDCHECK_PYTHON_EXECUTABLE;
#endif
  return "python3";
}

// Run by the interpreter in place of `-m shardcheck`, so that a Python without the package
// (or without one of its dependencies) is a usage error that says what to do, not a
// traceback with exit 1.
constexpr const char* kLauncher = R"(import sys
try:
    from shardcheck.__main__ import run
except ImportError as error:
    sys.stderr.write(f"shardcheck deepspeed: {sys.executable} cannot import the shardcheck package ({error}); "
                     "install it for that Python (bash scripts/campaign.sh, or pip install . from the repository), "
                     "or set SHARDCHECK_PYTHON to a Python that has it\n")
    sys.exit(2)
sys.exit(run(sys.argv[1:]))
)";

int run_deepspeed(const std::vector<std::string>& args) {
  const std::string python = python_interpreter();
  std::vector<std::string> words{python, "-c", kLauncher, "deepspeed"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  ::execvp(argv[0], argv.data());
  fmt::print(stderr,
             "shardcheck deepspeed: cannot run {}: {} (set SHARDCHECK_PYTHON to a Python with the "
             "shardcheck package: pip install .; torch only for --unsafe-load)\n",
             python, std::strerror(errno));
  return kExitUsage;
}

}  // namespace

void register_deepspeed(CLI::App& app, RunState& state) {
  auto args = std::make_shared<std::vector<std::string>>();
  CLI::App* sub = app.add_subcommand(
      "deepspeed", "DeepSpeed checkpoints: `deepspeed inspect DIR` checks and rebuilds their mapped parameters");
  sub->prefix_command();
  sub->callback([sub, args, &state] {
    *args = sub->remaining();
    state.exit_code = run_deepspeed(*args);
  });
}

}  // namespace shardcheck::cli
