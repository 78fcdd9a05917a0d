// Input from outside as an attacker or an unlucky operator gives it (contract 2, every
// reader bounded before it reads): endless devices, FIFOs nobody writes, a 2 GB file of
// NULs, text after a document, and text meant to rewrite a terminal or a report. Each
// command must end soon with its usage exit code and one sentence, in little memory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "shardcheck/escape.h"

namespace {

namespace fs = std::filesystem;
namespace escape = shardcheck::escape;

struct Ran {
  int exit_code = -1;  // -1: killed at the deadline
  double seconds = 0;
  long peak_kib = 0;  // the child's peak resident memory
  std::string err;
};

// Runs the shardcheck binary with `args` (no shell), stdin from /dev/null, stdout
// dropped, stderr kept; kills it after `deadline` seconds.
Ran run(const std::vector<std::string>& args, double deadline = 20.0) {
  const fs::path err_path = fs::temp_directory_path() / ("shardcheck-hostile-" + std::to_string(getpid()) + ".err");
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDWR);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    std::vector<char*> argv{const_cast<char*>(SHARDCHECK_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(SHARDCHECK_BINARY, argv.data());
    _exit(127);
  }
  Ran ran;
  int status = 0;
  rusage usage{};
  for (;;) {
    const pid_t done = wait4(pid, &status, WNOHANG, &usage);
    if (done == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > deadline) {
      kill(pid, SIGKILL);
      wait4(pid, &status, 0, &usage);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ran.peak_kib = usage.ru_maxrss;
  if (WIFEXITED(status)) ran.exit_code = WEXITSTATUS(status);
  std::ifstream in(err_path);
  ran.err.assign(std::istreambuf_iterator<char>(in), {});
  fs::remove(err_path);
  return ran;
}

std::string example(const std::string& name) { return std::string(SHARDCHECK_SOURCE_DIR) + "/examples/" + name; }

class HostileInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardcheck-hostile-" + std::to_string(getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    for (pid_t writer : writers_) {
      kill(writer, SIGKILL);
      waitpid(writer, nullptr, 0);
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // A FIFO no process writes to; with `silent_writer`, one a process holds open for
  // writing and never writes.
  std::string fifo(const std::string& name, bool silent_writer) {
    const fs::path path = dir_ / name;
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0);
    if (silent_writer) {
      const pid_t writer = fork();
      if (writer == 0) {
        const int fd = open(path.c_str(), O_WRONLY);
        (void)fd;
        pause();
        _exit(0);
      }
      writers_.push_back(writer);
    }
    return path.string();
  }
  // 2 GB of NULs that take no disk (a sparse file).
  std::string nul_file() {
    const fs::path path = dir_ / "nul.json";
    std::ofstream(path).close();
    fs::resize_file(path, std::uintmax_t{2} << 30);
    return path.string();
  }
  fs::path dir_;
  std::vector<pid_t> writers_;
};

// 100 MB, and under AddressSanitizer also the shadow of a file the reader maps: the
// sanitizer's mmap interceptor clears one shadow byte per 8 mapped bytes (256 MB for 2 GB),
// memory of the sanitizer's, not the reader's (the release build reads it in 5 MB).
std::int64_t memory_bound_kib(std::uintmax_t mapped_bytes) {
  std::int64_t bound = 100 * 1024;
#if defined(__SANITIZE_ADDRESS__)
  bound += static_cast<std::int64_t>(mapped_bytes / 8 / 1024);
#else
  (void)mapped_bytes;
#endif
  return bound;
}

// Every reading command on every kind of endless or absent input: exit 2 within 5 s,
// one sentence on stderr naming the input, under 100 MB of memory.
TEST_F(HostileInput, EveryReaderEndsSoonInLittleMemory) {
  const std::string map = example("column-split-tp2.json");
  const std::vector<std::pair<std::string, std::string>> inputs{
      {"/dev/zero", "/dev/zero"},
      {"/dev/urandom", "/dev/urandom"},
      {"a FIFO no one opened", fifo("none", false)},
      {"a FIFO whose writer is silent", fifo("silent", true)},
      {"2 GB of NULs", nul_file()}};
  for (const auto& [what, input] : inputs) {
    // check waits for input as long as it does by default; the others are told a shorter
    // wait, so that the FIFOs' eight waits do not make the test slow.
    const std::string wait = "--input-timeout=0.5";
    const std::vector<std::vector<std::string>> commands{{"check", input},
                                                         {"plan", wait, input, map},
                                                         {"plan", wait, map, input},
                                                         {"repro", wait, input},
                                                         {"digest", wait, input},
                                                         {"digest", wait, map, "0=" + input, "1=" + input}};
    for (const auto& args : commands) {
      const Ran ran = run(args);
      const std::string label = what + ": shardcheck " + args[0] + " ... (" + ran.err + ")";
      EXPECT_EQ(ran.exit_code, 2) << label;
      EXPECT_LT(ran.seconds, 5.0) << label;
      EXPECT_LT(ran.peak_kib, memory_bound_kib(what == "2 GB of NULs" ? std::uintmax_t{2} << 30 : 0)) << label;
      EXPECT_NE(ran.err.find(input), std::string::npos) << label;
      EXPECT_EQ(ran.err.find('\n'), ran.err.size() - 1) << label << ": one line";
    }
  }
}

// The wait is the reader's, and --input-timeout sets it.
TEST_F(HostileInput, TheInputTimeoutIsTheWait) {
  const std::string silent = fifo("silent", true);
  const Ran ran = run({"check", "--input-timeout", "0.2", silent});
  EXPECT_EQ(ran.exit_code, 2) << ran.err;
  EXPECT_LT(ran.seconds, 2.0) << ran.err;
  EXPECT_NE(ran.err.find("no input came from " + silent + " for 0.2 s"), std::string::npos) << ran.err;
}

// A FIFO whose writer comes after the reader opened it is read whole.
TEST_F(HostileInput, AFifoWhoseWriterComesLaterIsRead) {
  const std::string path = fifo("late", false);
  const pid_t writer = fork();
  if (writer == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::ifstream map(example("column-split-tp2.json"));
    std::ofstream(path) << map.rdbuf();
    _exit(0);
  }
  writers_.push_back(writer);
  const Ran ran = run({"check", path});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
}

// Contract 2: any byte after the document other than whitespace, a NUL included, is
// `format`; so is a NUL inside it, at the byte where it stands.
TEST_F(HostileInput, NulBytesAfterOrInsideADocumentAreRefused) {
  std::ifstream in(example("column-split-tp2.json"));
  const std::string map((std::istreambuf_iterator<char>(in)), {});
  const std::string trimmed = map.substr(0, map.find_last_not_of(" \n") + 1);
  for (const auto& [name, text, byte] :
       std::vector<std::tuple<std::string, std::string, std::size_t>>{
           {"after.json", trimmed + std::string(3, '\0'), trimmed.size() + 1},
           {"inside.json", trimmed.substr(0, 10) + '\0' + trimmed.substr(10), 11}}) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    const Ran ran = run({"check", path.string()});
    EXPECT_EQ(ran.exit_code, 2) << name << ": " << ran.err;
    EXPECT_NE(ran.err.find("invalid JSON at byte " + std::to_string(byte) + " (a NUL byte"), std::string::npos)
        << name << ": " << ran.err;
  }
}

// A shard file longer than the map's shard is refused having read one byte past it.
TEST_F(HostileInput, AShardLongerThanItsMapSaysIsRefused) {
  const fs::path shard = dir_ / "long.bin";
  std::ofstream(shard, std::ios::binary) << std::string(4 * 16 + 4, 'x');  // rank 0: (4, 4) float32
  const Ran ran = run({"digest", example("column-split-tp2.json"), "0=" + shard.string(), "1=" + shard.string()});
  EXPECT_EQ(ran.exit_code, 2) << ran.err;
  EXPECT_NE(ran.err.find(shard.string() + " holds more than the 64 bytes of rank 0's shard"), std::string::npos)
      << ran.err;
}

// The interpreter of tests/python/protocol_impl.py (as in test_targets.cc).
std::string python() {
  const char* chosen = std::getenv("SHARDCHECK_TEST_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
}

// Whether process `pid` still runs (a zombie has ended).
bool running(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

// An implementation that leaves a child in its process group and a daemon outside it
// (setsid) at every start: when the campaign ends, none of them runs, with workers or
// threads, and on a case time-out (the worker killed mid-case) too.
TEST_F(HostileInput, NoProcessOfATargetOutlivesItsCampaign) {
  if (std::system((python() + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << python() << " cannot import numpy (apt-get install python3-numpy, or set SHARDCHECK_TEST_PYTHON)";
  }
  for (const std::string isolate : {"--isolate", "--no-isolate"}) {
    const fs::path left = dir_ / ("left" + isolate);
    fs::create_directories(left);
    const std::string target = "exec:exec " + python() + " " + SHARDCHECK_SOURCE_DIR +
                               "/tests/python/protocol_impl.py --leave-behind " + left.string() + " --hang-on 40";
    const Ran ran = run({"campaign", "--target", target, "--seed", "3", "--cases", "200", "--jobs", "2", isolate,
                         "--target-timeout", "1", "--out", (dir_ / ("out" + isolate)).string(), "--quiet"},
                        120.0);
    EXPECT_NE(ran.exit_code, -1) << isolate << ": " << ran.err;
    int seen = 0;
    for (const auto& entry : fs::directory_iterator(left)) {
      ++seen;
      const pid_t pid = static_cast<pid_t>(std::stol(entry.path().filename().string()));
      EXPECT_FALSE(running(pid)) << isolate << ": process " << pid << " of the target outlived the campaign";
    }
    EXPECT_GE(seen, 4) << isolate << ": the target left nothing behind, so the test tests nothing";
  }
}

// The hostile strings of issue 44 in every medium: no control character reaches a
// terminal, no newline or pipe ends a Markdown table row, no markup reaches HTML.
TEST(Escape, HostileTextCannotRewriteWhereItGoes) {
  const std::string hostile = "Err`|\n## heading <img src=x onerror=alert(1)> \x1b]0;title\x07\x1b[31mred\xc2\x9b\xff";
  const std::string terminal = escape::terminal(hostile);
  for (char c : terminal) EXPECT_FALSE(static_cast<unsigned char>(c) < 0x20 || c == 0x7f) << terminal;
  EXPECT_EQ(terminal.find("\xc2\x9b"), std::string::npos) << "a C1 control (CSI) passed";
  EXPECT_NE(terminal.find("\\x1b]0;title\\x07"), std::string::npos) << terminal;
  EXPECT_NE(terminal.find("\\xc2\\x9b\\xff"), std::string::npos) << terminal;
  EXPECT_EQ(escape::terminal("ünïcode ✓"), "ünïcode ✓");
  EXPECT_EQ(escape::terminal("two\nlines\x1b", escape::Newlines::keep), "two\nlines\\x1b");

  const std::string code = escape::markdown_code(hostile);
  EXPECT_EQ(code.find('\n'), std::string::npos) << code;
  for (std::size_t at = code.find('|'); at != std::string::npos; at = code.find('|', at + 1)) {
    EXPECT_EQ(code[at - 1], '\\') << "an unescaped pipe would end the cell: " << code;
  }
  EXPECT_EQ(code.rfind("``", 0), 0u) << "a fence longer than the backtick inside: " << code;
  EXPECT_EQ(escape::markdown_code("`"), "`` ` ``");
  EXPECT_EQ(escape::markdown_code("plain"), "`plain`");

  const std::string markup = escape::markup(hostile);
  EXPECT_EQ(markup.find('<'), std::string::npos) << markup;
  EXPECT_EQ(markup.find('\x1b'), std::string::npos) << markup;
}

}  // namespace
