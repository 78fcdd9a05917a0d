// The documents' commands run as written: every ```sh block of README.md and docs/ (a
// block tagged `bash` is a template or a build step, not run here). Each block runs in a
// scratch folder that sees the repository's examples/, corpus/, scripts/ and out/ and
// this build's `shardcheck` first on PATH, one line at a time; a line may find something
// (exit 1) but must not be a usage error (2), a crash or a missing command.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Block {
  std::string file;  // relative to the repository
  int line = 0;      // of the opening fence
  std::vector<std::string> commands;
};

void PrintTo(const Block& block, std::ostream* os) { *os << block.file << ":" << block.line; }

std::vector<Block> sh_blocks() {
  const fs::path root(SHARDCHECK_SOURCE_DIR);
  std::vector<fs::path> files{root / "README.md"};
  for (const auto& entry : fs::recursive_directory_iterator(root / "docs")) {
    if (entry.path().extension() == ".md") files.push_back(entry.path());
  }
  std::sort(files.begin() + 1, files.end());
  std::vector<Block> blocks;
  for (const fs::path& path : files) {
    std::ifstream in(path);
    std::string text;
    int number = 0;
    Block* open = nullptr;
    while (std::getline(in, text)) {
      ++number;
      if (open == nullptr && text == "```sh") {
        blocks.push_back(Block{fs::relative(path, root).string(), number, {}});
        open = &blocks.back();
      } else if (open != nullptr && text.rfind("```", 0) == 0) {
        open = nullptr;
      } else if (open != nullptr && !text.empty() && text[0] != '#') {
        open->commands.push_back(text);
      }
    }
  }
  return blocks;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class DocumentedCommands : public ::testing::TestWithParam<Block> {};

TEST_P(DocumentedCommands, RunAsWritten) {
  const Block& block = GetParam();
  const fs::path root(SHARDCHECK_SOURCE_DIR);
  bool deepspeed = false;
  for (const auto& c : block.commands) deepspeed |= c.find("deepspeed") != std::string::npos;
  if (deepspeed && std::getenv("SHARDCHECK_DEEPSPEED_PATH") == nullptr) {
    GTEST_SKIP() << "needs DeepSpeed's sdist and torch: set SHARDCHECK_DEEPSPEED_PATH (CI does, after "
                    "scripts/deepspeed-target.sh)";
  }
  const fs::path scratch =
      fs::temp_directory_path() / ("shardcheck-docs-" + std::to_string(::getpid()) + "-" + std::to_string(block.line));
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  for (const char* shared : {"examples", "corpus", "scripts", "out", "adapters"}) {
    if (fs::exists(root / shared)) fs::create_directory_symlink(root / shared, scratch / shared);
  }
  const std::string bin_dir = fs::path(SHARDCHECK_BINARY).parent_path().string();
  for (const std::string& command : block.commands) {
    const std::string log = (scratch / "output.txt").string();
    const std::string line = "cd " + shell_quote(scratch.string()) + " && PATH=" + shell_quote(bin_dir) +
                             ":\"$PATH\" timeout 600 bash -c " + shell_quote(command) + " >" + shell_quote(log) +
                             " 2>&1";
    const int status = std::system(line.c_str());
    std::ifstream in(log);
    std::stringstream output;
    output << in.rdbuf();
    ASSERT_TRUE(WIFEXITED(status)) << block.file << ":" << block.line << ": " << command << "\n" << output.str();
    const int code = WEXITSTATUS(status);
    EXPECT_TRUE(code == 0 || code == 1) << block.file << ":" << block.line << ": `" << command << "` exited " << code
                                        << "\n"
                                        << output.str();
    EXPECT_FALSE(output.str().empty()) << command << " printed nothing";
  }
  fs::remove_all(scratch);
}

std::string block_name(const ::testing::TestParamInfo<Block>& info) {
  std::string name;
  for (char c : info.param.file + "_" + std::to_string(info.param.line)) {
    name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Docs, DocumentedCommands, ::testing::ValuesIn(sh_blocks()), block_name);

TEST(Docs, TheReadmeHasRunnableCommonTasks) {
  int in_readme = 0;
  for (const Block& block : sh_blocks()) in_readme += block.file == "README.md" ? 1 : 0;
  EXPECT_GE(in_readme, 5);
}

// What `python3 scripts/SCRIPT ARGUMENT` prints (stdout and stderr), and its exit status.
std::string run_script(const std::string& script, const std::string& argument, int& status) {
  const std::string command = "python3 " + shell_quote(std::string(SHARDCHECK_SOURCE_DIR) + "/scripts/" + script) +
                              " " + argument + " 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    status = -1;
    return "popen failed";
  }
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int raw = pclose(pipe);
  status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return output;
}

// CONTRIBUTING.md's size rules (files of at most 800 lines, functions of at most 80, or a
// reason written at the top or above), checked by scripts/house_rules.py over the tree,
// and the script shown able to find a breach.
TEST(HouseRules, EveryLongFileAndFunctionSaysWhy) {
  if (!fs::exists(fs::path(SHARDCHECK_SOURCE_DIR) / ".git")) GTEST_SKIP() << "not a git checkout: no file list";
  int status = 0;
  const std::string output = run_script("house_rules.py", shell_quote(SHARDCHECK_SOURCE_DIR), status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("house_rules: 0 breaches"), std::string::npos) << output;
}

// Every row of the mutant catalogue still plants its mutant: its search text occurs
// exactly once in its file (a rewrite that moves the line leaves the row stale, and a stale
// row is never run again).
TEST(HouseRules, EveryMutantOfTheCatalogueStillApplies) {
  int status = 0;
  const std::string output = run_script("mutants.py", "--list", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find(" mutants, 0 stale"), std::string::npos) << output;
}

TEST(HouseRules, TheCheckFindsABreach) {
  int status = 0;
  const std::string output = run_script("house_rules.py", "--self-test", status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("self-test passed"), std::string::npos) << output;
}

}  // namespace
