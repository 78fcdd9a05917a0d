// Campaigns that survive the night: the shardcheck executable is stopped by SIGINT,
// SIGTERM and SIGKILL mid-campaign and must leave a readable report and every finding
// it announced; a stopped campaign resumed from its checkpoint must end exactly as an
// uninterrupted one; a case that crashes, hangs or exhausts memory (planted through the
// test-only hooks) must become one finding while every other case still runs.
//
// Long file: one test binary per tests/test_*.cc; these tests share the Running child
// process fixture and its signal helpers, and a split would add a binary and a link.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardcheck/campaign.h"
#include "shardcheck/case.h"
#include "../properties/src/campaign_internal.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

// Generous: CI runs this under AddressSanitizer on a loaded two-core machine.
constexpr auto kExitTimeout = 180s;

// The shardcheck executable running in the background, its stdout collected as it comes.
class Running {
 public:
  // `in_child` runs in the child before exec (limits for the program).
  Running(const std::vector<std::string>& args, const fs::path& stderr_file,
          const std::function<void()>& in_child = {}) {
    int out[2];
    if (pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      // A test runner may have been started with SIGINT ignored, which exec keeps.
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      if (in_child) in_child();
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      if (FILE* err = std::fopen(stderr_file.c_str(), "w")) dup2(fileno(err), STDERR_FILENO);
      std::vector<char*> argv{const_cast<char*>(SHARDCHECK_BINARY)};
      for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      execv(SHARDCHECK_BINARY, argv.data());
      _exit(127);
    }
    close(out[1]);
    start_ = SteadyClock::now();
    reader_ = std::thread([this, fd = out[0]] {
      char buffer[4096];
      ssize_t n;
      while ((n = read(fd, buffer, sizeof buffer)) > 0 || (n < 0 && errno == EINTR)) {
        if (n <= 0) continue;
        std::lock_guard lock(mutex_);
        out_.append(buffer, static_cast<std::size_t>(n));
      }
      close(fd);
    });
  }

  ~Running() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  std::string output() {
    std::lock_guard lock(mutex_);
    return out_;
  }

  // Waits until stdout holds `needle` and at least `min_elapsed` has passed since start.
  bool wait_for(const std::string& needle, std::chrono::milliseconds min_elapsed) {
    const auto deadline = SteadyClock::now() + 120s;
    while (SteadyClock::now() < deadline) {
      if (output().find(needle) != std::string::npos && SteadyClock::now() - start_ >= min_elapsed) return true;
      int status = 0;
      if (!reaped_ && waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        status_ = status;
      }
      if (reaped_) return false;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  void send(int signal) { kill(pid_, signal); }
  pid_t pid() const { return pid_; }

  double elapsed_since(SteadyClock::time_point t) const {
    return std::chrono::duration<double>(SteadyClock::now() - t).count();
  }

  // The wait status; the process is killed if it outlives the timeout.
  int wait(std::chrono::seconds timeout = kExitTimeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (!reaped_) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        status_ = status;
        break;
      }
      if (SteadyClock::now() > deadline) {
        ADD_FAILURE() << "shardcheck did not exit in time; killed";
        kill(pid_, SIGKILL);
      }
      std::this_thread::sleep_for(10ms);
    }
    if (reader_.joinable()) reader_.join();
    return status_;
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = -1;
  SteadyClock::time_point start_;
  std::thread reader_;
  std::mutex mutex_;
  std::string out_;
};

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }

// The start of the verdict line of a campaign a signal stopped.
std::string stopped_verdict(int code, const std::string& signal) {
  return "verdict: INCOMPLETE, exit " + std::to_string(code) + ": stopped by " + signal + " after ";
}

Json read_json(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "new finding: SIGNATURE (case I) -> PATH" lines: signature -> path.
std::map<std::string, std::string> announced(const std::string& out) {
  std::map<std::string, std::string> found;
  static const std::regex line(R"(new finding: (\S+) \(case \d+\) -> (\S+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator(); ++it) {
    found[(*it)[1]] = (*it)[2];
  }
  return found;
}

// The report's cases are the sum of its rows, and its totals add up.
void expect_consistent_report(const Json& report) {
  ASSERT_TRUE(report.is_object()) << "report.json is not a JSON object";
  long long cases = 0;
  for (const auto& [name, tally] : report.at("by_constructor").items()) cases += tally.at("cases").get<long long>();
  EXPECT_EQ(report.at("cases").get<long long>(), cases);
  const Json& t = report.at("total");
  auto count = [&](const char* key) { return t.at(key).get<long long>(); };
  EXPECT_EQ(count("cases"), count("refused") + count("exact") + count("silently_wrong") +
                                count("valid_but_different") + count("crashed") + count("target_faults"));
}

class CampaignResilience : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');  // parameterised tests: "Name/Param"
    dir_ = fs::temp_directory_path() / ("shardcheck-resilience-" + std::to_string(getpid()) + "-" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (HasFailure()) {
      std::printf("kept for inspection: %s\n", dir_.c_str());
      return;
    }
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
};

// --- stopped by a signal -----------------------------------------------------------

struct StopCase {
  int signal;
  const char* name;
  bool isolate;
};

void PrintTo(const StopCase& c, std::ostream* os) { *os << c.name; }

class StoppedBySignal : public CampaignResilience, public ::testing::WithParamInterface<StopCase> {};

TEST_P(StoppedBySignal, LeavesReportAndEveryAnnouncedFinding) {
  const StopCase param = GetParam();
  const fs::path out = dir_ / "out";
  // Far more cases than the test waits for: the signal always lands mid-campaign.
  Running campaign({"campaign", "--policy", "legacy", "--seed", "21", "--cases", "100000000", "--jobs", "2",
                    "--out", out.string(), param.isolate ? "--isolate" : "--no-isolate"},
                   dir_ / "stderr.txt");
  // Long enough for the report to have been rewritten since the start (every 2 s), with
  // room for a loaded machine that starves the writer for a while.
  ASSERT_TRUE(campaign.wait_for("new finding: ", 6000ms)) << "no finding announced\n" << read_text(dir_ / "stderr.txt");
  campaign.send(param.signal);
  const auto sent = SteadyClock::now();
  const int status = campaign.wait();
  const double stop_seconds = campaign.elapsed_since(sent);
  const std::string stdout_text = campaign.output();

  if (param.signal == SIGKILL) {
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  } else {
    // Graceful: the running cases finish, the rest is written, and the exit code is
    // 128 + the signal whatever was found, so that a cancelled job never looks finished.
    ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
    EXPECT_EQ(exit_code(status), 128 + param.signal) << read_text(dir_ / "stderr.txt");
    EXPECT_LT(stop_seconds, 60.0) << "a graceful stop waits for the cases running, not for the campaign";
    EXPECT_NE(stdout_text.find("report: "), std::string::npos) << stdout_text;
    const std::string verdict = stopped_verdict(128 + param.signal, param.signal == SIGINT ? "SIGINT" : "SIGTERM");
    EXPECT_NE(stdout_text.find(verdict), std::string::npos) << stdout_text;
    EXPECT_NE(stdout_text.find(" of 100000000 cases (found so far: "), std::string::npos) << stdout_text;
    EXPECT_NE(stdout_text.find("; continue with: shardcheck campaign --resume " + out.string() + "\n"),
              std::string::npos)
        << stdout_text;
    EXPECT_EQ(stdout_text.find("verdict: FAIL"), std::string::npos) << stdout_text;
  }

  const Json report = read_json(out / "report.json");
  ASSERT_FALSE(report.is_discarded()) << "report.json does not parse";
  expect_consistent_report(report);
  EXPECT_FALSE(report.at("complete").get<bool>());
  // At most a few seconds old: not the empty report written at the start.
  EXPECT_GE(report.at("seconds").get<double>(), 1.0);
  EXPECT_FALSE(read_text(out / "table.txt").empty());
  const Json checkpoint = read_json(out / "checkpoint.json");
  ASSERT_FALSE(checkpoint.is_discarded()) << "checkpoint.json does not parse";

  const auto printed = announced(stdout_text);
  ASSERT_FALSE(printed.empty());
  for (const auto& [signature, path] : printed) {
    ASSERT_TRUE(fs::exists(path)) << signature << " was announced but " << path << " is missing";
    const std::string text = read_text(path);
    auto decoded = shardcheck::decode_case_text(text);
    EXPECT_TRUE(decoded.ok()) << path << " is not a case file";
    EXPECT_EQ(read_json(path).value("signature", ""), signature);
  }
  std::set<std::string> reported;
  for (const auto& finding : report.at("findings")) {
    reported.insert(finding.at("signature").get<std::string>());
    EXPECT_TRUE(fs::exists(out / finding.at("file").get<std::string>())) << finding.dump();
  }
  if (param.signal != SIGKILL) {
    // After a graceful stop the report holds every finding announced.
    for (const auto& [signature, path] : printed) EXPECT_TRUE(reported.count(signature)) << signature;
    EXPECT_GT(report.at("cases").get<long long>(), 0);
  }
  for (const auto& entry : fs::directory_iterator(out)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << "left behind: " << entry.path();
  }
}

INSTANTIATE_TEST_SUITE_P(Signals, StoppedBySignal,
                         ::testing::Values(StopCase{SIGINT, "SIGINT", true}, StopCase{SIGTERM, "SIGTERM", true},
                                           StopCase{SIGKILL, "SIGKILL", true},
                                           StopCase{SIGTERM, "SIGTERM_in_process", false},
                                           StopCase{SIGKILL, "SIGKILL_in_process", false}),
                         [](const auto& info) { return std::string(info.param.name); });

// A second SIGINT does not wait for the running case (here one that never ends).
TEST_F(CampaignResilience, SecondInterruptStopsAtOnce) {
  const fs::path out = dir_ / "out";
  Running campaign({"campaign", "--seed", "5", "--cases", "100000000", "--jobs", "2", "--out", out.string(),
                    "--quiet", "--plant-hang-at", "3", "--case-time-limit", "600"},
                   dir_ / "stderr.txt");
  std::this_thread::sleep_for(1500ms);
  campaign.send(SIGINT);
  std::this_thread::sleep_for(500ms);
  campaign.send(SIGINT);
  const auto sent = SteadyClock::now();
  const int status = campaign.wait(60s);
  EXPECT_LT(campaign.elapsed_since(sent), 30.0);
  EXPECT_EQ(exit_code(status), 130) << read_text(dir_ / "stderr.txt");
  const Json report = read_json(out / "report.json");
  ASSERT_FALSE(report.is_discarded());
  expect_consistent_report(report);
}

// --- one campaign per output directory ------------------------------------------------

bool wait_for_file_text(const fs::path& path, const std::string& needle) {
  const auto deadline = SteadyClock::now() + 120s;
  while (SteadyClock::now() < deadline) {
    if (read_text(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// A second campaign on a folder in use is refused, naming the holder; a holder killed
// outright leaves no lock; rerunning the command of a stopped campaign (a re-submitted
// job) says how it goes on, and that goes on.
TEST_F(CampaignResilience, AFolderInUseIsRefusedAndAStoppedOneSaysHowToResume) {
  const fs::path out = dir_ / "out";
  const std::vector<std::string> args{"campaign", "--seed",       "5",     "--cases",    "100000000", "--jobs",
                                      "1",        "--no-isolate", "--out", out.string(), "--quiet"};
  Running first(args, dir_ / "stderr1.txt");
  const auto deadline = SteadyClock::now() + 120s;
  while (!fs::exists(out / "report.json") && SteadyClock::now() < deadline) std::this_thread::sleep_for(20ms);
  const std::string holder = "(pid " + std::to_string(first.pid()) + ")";
  for (const auto& [second, name] :
       {std::pair{
            std::vector<std::string>{"campaign", "--seed", "6", "--cases", "10", "--out", out.string(), "--quiet"},
            "stderr2.txt"},
        std::pair{std::vector<std::string>{"campaign", "--resume", out.string()}, "stderr3.txt"}}) {
    Running refused(second, dir_ / name);
    EXPECT_EQ(exit_code(refused.wait()), 2);
    const std::string text = read_text(dir_ / name);
    EXPECT_NE(text.find("shardcheck campaign: " + out.string() + " is in use by another shardcheck run " + holder),
              std::string::npos)
        << text;
  }
  first.send(SIGKILL);
  first.wait();
  {
    Running again(args, dir_ / "stderr4.txt");
    EXPECT_EQ(exit_code(again.wait()), 2);
  }
  const std::string refusal = read_text(dir_ / "stderr4.txt");
  EXPECT_NE(refusal.find(out.string() + " holds a stopped campaign ("), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("; continue it with: shardcheck campaign --resume " + out.string() + " (or give --overwrite"),
            std::string::npos)
      << refusal;
  Running resumed({"campaign", "--resume", out.string(), "--quiet"}, dir_ / "stderr5.txt");
  ASSERT_TRUE(wait_for_file_text(dir_ / "stderr5.txt", "resuming " + out.string())) << read_text(dir_ / "stderr5.txt");
  resumed.send(SIGTERM);
  EXPECT_EQ(exit_code(resumed.wait()), 143) << read_text(dir_ / "stderr5.txt");
  EXPECT_NE(resumed.output().find(stopped_verdict(143, "SIGTERM")), std::string::npos) << resumed.output();
}

std::set<std::string> file_names(const fs::path& folder) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder)) names.insert(entry.path().filename().string());
  return names;
}

// The case files report.json lists.
std::set<std::string> reported_files(const fs::path& out) {
  std::set<std::string> names;
  const Json report = read_json(out / "report.json");
  for (const auto& finding : report.at("findings")) {
    names.insert(fs::path(finding.at("file").get<std::string>()).filename().string());
  }
  return names;
}

// A killed run's temporaries, and a finding file its checkpoint never recorded, are gone
// after a resume and after --overwrite; a file of the user's that only looks alike stays.
TEST_F(CampaignResilience, ResumeAndOverwriteClearWhatAKilledRunLeft) {
  const fs::path out = dir_ / "out";
  auto campaign = [&](std::vector<std::string> args, const char* log) {
    Running run(args, dir_ / log);
    return exit_code(run.wait());
  };
  ASSERT_EQ(campaign({"campaign", "--policy", "legacy", "--seed", "3", "--cases", "300", "--jobs", "1", "--out",
                      out.string(), "--quiet"},
                     "stderr1.txt"),
            1);
  const std::vector<fs::path> leftovers{out / ".report.json.4242.7.tmp", out / "table.txt.4242.tmp",
                                        out / "findings" / ".x.json.4242.0.tmp"};
  auto plant = [&] {
    for (const auto& path : leftovers) std::ofstream(path) << "half a fi";
  };
  plant();
  std::ofstream(out / "notes.tmp") << "the user's";
  std::ofstream(out / "findings" / "unrecorded.json") << "{}";
  ASSERT_EQ(campaign({"campaign", "--resume", out.string(), "--quiet"}, "stderr2.txt"), 1)
      << read_text(dir_ / "stderr2.txt");
  for (const auto& path : leftovers) EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_TRUE(fs::exists(out / "notes.tmp"));
  EXPECT_EQ(file_names(out / "findings"), reported_files(out));
  plant();
  ASSERT_EQ(campaign({"campaign", "--policy", "legacy", "--seed", "4", "--cases", "300", "--jobs", "1", "--out",
                      out.string(), "--quiet", "--overwrite"},
                     "stderr3.txt"),
            1)
      << read_text(dir_ / "stderr3.txt");
  for (const auto& path : leftovers) EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_EQ(read_json(out / "report.json").at("seed"), 4);
  EXPECT_EQ(file_names(out / "findings"), reported_files(out)) << "a finding file of the seed-3 campaign is left";
}

// --- outputs that cannot be written --------------------------------------------------------

// A campaign whose output directory fills up: exit 3, a verdict that says the outputs are
// incomplete and invites no replay of files that are not there, and, once there is room,
// the command its verdict gives writes them.
void expect_incomplete(const fs::path& out, const std::string& stdout_text, const std::string& why) {
  EXPECT_NE(stdout_text.find("verdict: INCOMPLETE, exit 3: the outputs are incomplete: " + out.string()),
            std::string::npos)
      << stdout_text;
  EXPECT_NE(stdout_text.find(" could not be written: " + why), std::string::npos) << stdout_text;
  EXPECT_EQ(stdout_text.find("verdict: FAIL"), std::string::npos) << stdout_text;
  EXPECT_EQ(stdout_text.find("replay one with"), std::string::npos) << stdout_text;
  for (const auto& [signature, path] : announced(stdout_text)) {
    EXPECT_TRUE(fs::exists(path)) << signature << " was announced but " << path << " is not on disk";
  }
}

// Findings as found: what fills the disk here is the campaign's own writing, not the
// reduction that follows it (a rewrite of each finding file, tested in test_reduce.cc).
const std::vector<std::string> kFillingCampaign{"campaign", "--policy", "legacy", "--seed",
                                                "3",        "--cases",  "2000",   "--jobs",
                                                "2",        "--quiet",  "--reduce-evaluations", "0"};

// A 64 KiB tmpfs at `dir` for one test (root only), that can grow.
class SmallDisk {
 public:
  explicit SmallDisk(const fs::path& dir) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }
  bool grow() { return ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, "size=16m") == 0; }

 private:
  fs::path dir_;
  bool mounted_ = false;
  std::string error_;
};

TEST_F(CampaignResilience, AFullDiskIsAnIncompleteCampaignUntilResumed) {
  SmallDisk disk(dir_ / "disk");
  if (!disk.mounted()) {
    GTEST_SKIP() << "cannot mount a 64 KiB tmpfs (" << disk.error()
                 << "): it takes root; FileSizeLimitIsAnIncompleteCampaign shows the same with RLIMIT_FSIZE";
  }
  const fs::path out = dir_ / "disk" / "out";
  std::vector<std::string> args = kFillingCampaign;
  args.insert(args.end(), {"--out", out.string()});
  std::string stdout_text;
  {
    Running run(args, dir_ / "stderr1.txt");
    EXPECT_EQ(exit_code(run.wait()), 3) << read_text(dir_ / "stderr1.txt");
    stdout_text = run.output();
  }
  expect_incomplete(out, stdout_text, "No space left on device");
  ASSERT_TRUE(disk.grow()) << std::strerror(errno);
  // The verdict says what to run once there is room: a resume, or a new run over it.
  const bool resume = stdout_text.find("write them again with: shardcheck campaign --resume " + out.string() + "\n") !=
                      std::string::npos;
  EXPECT_TRUE(resume || stdout_text.find("run the campaign again with --overwrite") != std::string::npos)
      << stdout_text;
  if (!resume) args.push_back("--overwrite");
  Running again(resume ? std::vector<std::string>{"campaign", "--resume", out.string(), "--quiet"} : args,
                dir_ / "stderr2.txt");
  EXPECT_EQ(exit_code(again.wait()), 1) << read_text(dir_ / "stderr2.txt");
  EXPECT_TRUE(read_json(out / "report.json").at("complete").get<bool>());
  EXPECT_EQ(file_names(out / "findings"), reported_files(out));
  // Every finding of the filling campaign, as a run on a roomy disk reports them (162
  // since the generators' text_lenient_syntax row and aimed replica flips; 156 before).
  EXPECT_EQ(read_json(out / "report.json").at("findings").size(), 162u);
}

// The same without root: every file over 8 KiB fails as on a full disk (EFBIG).
TEST_F(CampaignResilience, FileSizeLimitIsAnIncompleteCampaign) {
  const fs::path out = dir_ / "out";
  std::vector<std::string> args = kFillingCampaign;
  args.insert(args.end(), {"--out", out.string()});
  Running run(args, dir_ / "stderr.txt", [] {
    signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails instead of killing
    rlimit limit{8192, 8192};
    setrlimit(RLIMIT_FSIZE, &limit);
  });
  EXPECT_EQ(exit_code(run.wait()), 3) << read_text(dir_ / "stderr.txt");
  expect_incomplete(out, run.output(), "File too large");
}

// --- resume ------------------------------------------------------------------------

// What must be equal between a resumed and an uninterrupted campaign.
Json outcome(const Json& report) {
  Json findings = Json::array();
  for (const auto& f : report.at("findings")) {
    findings.push_back({f.at("signature"), f.at("message"), f.at("case_index"), f.at("occurrences"), f.at("file")});
  }
  return Json{{"cases", report.at("cases")},           {"total", report.at("total")},
              {"by_constructor", report.at("by_constructor")}, {"by_corruption", report.at("by_corruption")},
              {"by_refusal_kind", report.at("by_refusal_kind")}, {"by_op", report.at("by_op")},
              {"findings", findings},
              {"complete", report.at("complete")},     {"failed", report.at("failed")}};
}

std::map<std::string, std::string> directory_files(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) files[entry.path().filename().string()] = read_text(entry.path());
  return files;
}

class Resume : public CampaignResilience, public ::testing::WithParamInterface<bool> {};

TEST_P(Resume, EndsExactlyAsAnUninterruptedRun) {
  const std::string isolate = GetParam() ? "--isolate" : "--no-isolate";
  // Not --quiet: the first run is stopped once it announces a finding.
  // Findings reduced, as by default, with a budget small enough that no reduction meets
  // the campaign's reduction deadline: only deadline cuts could make the runs differ.
  const std::vector<std::string> campaign_args{"campaign", "--policy", "legacy", "--seed",
                                               "31",       "--cases",  "3000",   "--jobs",
                                               "2",        "--reduce-evaluations", "20"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = campaign_args;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const fs::path stopped = dir_ / "stopped";
  const fs::path whole = dir_ / "whole";
  {
    Running first(with({"--out", stopped.string(), isolate}), dir_ / "stderr1.txt");
    ASSERT_TRUE(first.wait_for("new finding: ", 0ms)) << read_text(dir_ / "stderr1.txt");
    first.send(SIGTERM);
    EXPECT_EQ(exit_code(first.wait()), 143);
  }
  const Json partial = read_json(stopped / "report.json");
  ASSERT_FALSE(partial.is_discarded());
  ASSERT_FALSE(partial.at("complete").get<bool>()) << "the campaign ended before SIGTERM: nothing to resume";
  EXPECT_LT(partial.at("cases").get<long long>(), 3000);
  {
    Running resumed({"campaign", "--resume", stopped.string(), "--quiet", isolate}, dir_ / "stderr2.txt");
    EXPECT_EQ(exit_code(resumed.wait()), 1) << read_text(dir_ / "stderr2.txt");
  }
  {
    Running uninterrupted(with({"--out", whole.string(), isolate}), dir_ / "stderr3.txt");
    EXPECT_EQ(exit_code(uninterrupted.wait()), 1);
  }
  const Json a = read_json(stopped / "report.json");
  const Json b = read_json(whole / "report.json");
  ASSERT_FALSE(a.is_discarded());
  ASSERT_FALSE(b.is_discarded());
  EXPECT_TRUE(a.at("complete").get<bool>());
  const Json resumed_outcome = outcome(a);
  const Json whole_outcome = outcome(b);
  for (const auto& [key, value] : whole_outcome.items()) {
    EXPECT_TRUE(resumed_outcome.at(key) == value) << key << " differs: resumed " << resumed_outcome.at(key).dump().substr(0, 400)
                                          << "\nuninterrupted " << value.dump().substr(0, 400);
  }
  const auto resumed_files = directory_files(stopped / "findings");
  const auto whole_files = directory_files(whole / "findings");
  EXPECT_EQ(resumed_files.size(), whole_files.size());
  for (const auto& [name, text] : whole_files) {
    auto it = resumed_files.find(name);
    if (it == resumed_files.end()) ADD_FAILURE() << "the resumed campaign lacks findings/" << name;
    else EXPECT_TRUE(it->second == text) << "findings/" << name << " differs";
  }
  // The tables differ only in the timing line.
  auto without_timing = [](const std::string& table) {
    return std::regex_replace(table, std::regex(R"(\n\d+ cases in [^\n]*\n)"), "\n");
  };
  EXPECT_EQ(without_timing(read_text(stopped / "table.txt")), without_timing(read_text(whole / "table.txt")));
}

INSTANTIATE_TEST_SUITE_P(Modes, Resume, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "Isolated" : "InProcess"); });

TEST_F(CampaignResilience, ResumeRefusesWhatTheCheckpointDecides) {
  const fs::path out = dir_ / "out";
  {
    Running run({"campaign", "--seed", "1", "--cases", "50", "--jobs", "1", "--out", out.string(), "--quiet"},
                dir_ / "stderr.txt");
    EXPECT_EQ(exit_code(run.wait()), 0);
  }
  {
    Running resumed({"campaign", "--resume", out.string(), "--seed", "2"}, dir_ / "stderr2.txt");
    EXPECT_EQ(exit_code(resumed.wait()), 2);
  }
  std::ofstream(out / "checkpoint.json") << R"({"shardcheck_checkpoint": 1, "seed": 1})";
  Running broken({"campaign", "--resume", out.string()}, dir_ / "stderr3.txt");
  EXPECT_EQ(exit_code(broken.wait()), 2);
  EXPECT_NE(read_text(dir_ / "stderr3.txt").find("malformed checkpoint"), std::string::npos)
      << read_text(dir_ / "stderr3.txt");
}

// --- isolation -----------------------------------------------------------------------

Json run_to_report(const fs::path& dir, const std::string& name, std::vector<std::string> extra, int& code) {
  std::vector<std::string> args{"campaign", "--seed", "41", "--cases", "1500", "--jobs", "2", "--quiet",
                                "--out",    (dir / name).string()};
  args.insert(args.end(), extra.begin(), extra.end());
  Running run(args, dir / (name + "-stderr.txt"));
  code = exit_code(run.wait());
  return read_json(dir / name / "report.json");
}

TEST_F(CampaignResilience, GarbageFromAWorkerIsACrashFindingOfItsCase) {
  int clean_code = -1, planted_code = -1;
  const Json clean = run_to_report(dir_, "clean", {}, clean_code);
  const Json planted = run_to_report(dir_, "planted", {"--plant-garbage-at", "700"}, planted_code);
  ASSERT_FALSE(clean.is_discarded());
  ASSERT_FALSE(planted.is_discarded());
  EXPECT_EQ(clean_code, 0);
  EXPECT_EQ(planted_code, 1) << "garbage from a worker is a finding, and the campaign goes on";
  EXPECT_TRUE(planted.at("complete").get<bool>());
  EXPECT_FALSE(planted.contains("ledger_error")) << planted.at("ledger_error");
  expect_consistent_report(planted);
  // Every case counted once: the planted one as crashed, its batch's others as before.
  EXPECT_EQ(planted.at("cases"), clean.at("cases"));
  EXPECT_EQ(planted.at("total").at("crashed").get<long long>(), 1);
  ASSERT_EQ(planted.at("findings").size(), 1u) << planted.at("findings").dump(1);
  const Json& finding = planted.at("findings")[0];
  EXPECT_EQ(finding.at("case_index").get<long long>(), 700);
  EXPECT_EQ(finding.at("signature").get<std::string>().rfind("crash:garbage:", 0), 0u) << finding.dump();
  EXPECT_NE(finding.at("message").get<std::string>().find("do not hold up"), std::string::npos) << finding.dump();
  ASSERT_TRUE(finding.at("file").is_string());
  EXPECT_TRUE(fs::exists(dir_ / "planted" / finding.at("file").get<std::string>()));
}

TEST(CampaignLedger, AuditNamesLostAndDoubledCases) {
  shardcheck::campaign::Options options;
  options.cases = 100;
  {
    shardcheck::campaign::detail::Ledger ledger(options, nullptr);
    auto range = ledger.take(60);
    ASSERT_TRUE(range);
    ledger.give_back(*range);
    EXPECT_EQ(ledger.audit(false), "") << "a range handed out and given back whole is not lost";
    auto again = ledger.take(60);
    ASSERT_TRUE(again);
    ledger.give_back({again->first + 1, again->end});  // case 0 neither done nor given back
    EXPECT_NE(ledger.audit(false).find("neither done nor waiting"), std::string::npos) << ledger.audit(false);
  }
  {
    shardcheck::campaign::detail::Ledger ledger(options, nullptr);
    auto range = ledger.take(10);
    ASSERT_TRUE(range);
    shardcheck::campaign::detail::BatchResult result;
    result.by_constructor["replicated"].cases = 10;
    result.by_constructor["replicated"].exact = 10;
    ledger.commit(*range, result);
    EXPECT_EQ(ledger.audit(false), "");
    EXPECT_NE(ledger.audit(true).find("complete with 10 of its 100"), std::string::npos) << ledger.audit(true);
    ledger.commit({5, 6}, shardcheck::campaign::detail::BatchResult{});
    EXPECT_NE(ledger.audit(false).find("committed twice"), std::string::npos) << ledger.audit(false);
  }
  {
    shardcheck::campaign::detail::Ledger ledger(options, nullptr);
    auto range = ledger.take(10);
    ASSERT_TRUE(range);
    shardcheck::campaign::detail::BatchResult result;
    result.by_constructor["replicated"].cases = 9;  // one case of the ten not tallied
    result.by_constructor["replicated"].exact = 9;
    ledger.commit(*range, result);
    EXPECT_NE(ledger.audit(false).find("tallies count 9"), std::string::npos) << ledger.audit(false);
  }
}

TEST_F(CampaignResilience, CrashingAndHangingCasesBecomeOneFindingEach) {
  int clean_code = -1, planted_code = -1;
  const Json clean = run_to_report(dir_, "clean", {}, clean_code);
  const Json planted = run_to_report(
      dir_, "planted", {"--plant-crash-at", "500", "--plant-hang-at", "1000", "--case-time-limit", "3"}, planted_code);
  ASSERT_FALSE(clean.is_discarded());
  ASSERT_FALSE(planted.is_discarded());
  EXPECT_EQ(clean_code, 0) << "a strict campaign finds nothing";
  EXPECT_EQ(planted_code, 1) << "a crash or a hang is a finding";
  EXPECT_TRUE(planted.at("complete").get<bool>());
  expect_consistent_report(planted);

  // Every case ran: the two bad ones as crashed, the others as in the clean run.
  EXPECT_EQ(planted.at("cases"), clean.at("cases"));
  EXPECT_EQ(planted.at("total").at("crashed").get<long long>(), 2);
  long long displaced = 0;
  for (const char* outcome : {"refused", "exact", "silently_wrong", "valid_but_different"}) {
    const long long difference = clean.at("total").at(outcome).get<long long>() - planted.at("total").at(outcome).get<long long>();
    EXPECT_GE(difference, 0) << outcome;
    displaced += difference;
  }
  EXPECT_EQ(displaced, 2);

  ASSERT_EQ(planted.at("findings").size(), 2u) << planted.at("findings").dump(1);
  std::map<std::string, long long> by_kind;
  for (const auto& finding : planted.at("findings")) {
    const std::string signature = finding.at("signature").get<std::string>();
    by_kind[signature.substr(0, signature.find(':'))] = finding.at("case_index").get<long long>();
    EXPECT_EQ(finding.at("occurrences").get<long long>(), 1);
    const fs::path file = dir_ / "planted" / finding.at("file").get<std::string>();
    ASSERT_TRUE(fs::exists(file)) << file;
    EXPECT_TRUE(shardcheck::decode_case_text(read_text(file)).ok()) << file;
  }
  EXPECT_EQ(by_kind, (std::map<std::string, long long>{{"crash", 500}, {"timeout", 1000}}));
  EXPECT_EQ(planted.at("findings").at(0).at("signature").get<std::string>().rfind("crash:SIGABRT:", 0), 0u);
}

TEST_F(CampaignResilience, CaseOverTheMemoryLimitBecomesAFinding) {
  int code = -1;
  const Json report =
      run_to_report(dir_, "oom", {"--plant-oom-at", "40", "--case-memory-limit", "768"}, code);
  ASSERT_FALSE(report.is_discarded());
  EXPECT_EQ(code, 1);
  EXPECT_EQ(report.at("cases").get<long long>(), 1500);
  ASSERT_EQ(report.at("findings").size(), 1u) << report.at("findings").dump(1);
  EXPECT_EQ(report.at("findings").at(0).at("signature").get<std::string>().rfind("oom:", 0), 0u);
  EXPECT_EQ(report.at("findings").at(0).at("case_index").get<long long>(), 40);
}

// --- an implementation under test in another process ---------------------------------

// The interpreter of tests/python/protocol_impl.py (as in test_targets.cc).
std::string python() {
  const char* chosen = std::getenv("SHARDCHECK_TEST_PYTHON");
  return chosen != nullptr && *chosen != '\0' ? chosen : "/usr/bin/python3";
}

std::string impl_target(const std::string& flags = "") {
  return "exec:exec " + python() + " " + SHARDCHECK_SOURCE_DIR + "/tests/python/protocol_impl.py" +
         (flags.empty() ? "" : " " + flags);
}

class TargetCampaign : public CampaignResilience, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    CampaignResilience::SetUp();
    if (std::system((python() + " -c 'import numpy' >/dev/null 2>&1").c_str()) != 0) {
      GTEST_SKIP() << python() << " cannot import numpy (apt-get install python3-numpy, or set SHARDCHECK_TEST_PYTHON)";
    }
  }
  std::string isolate() const { return GetParam() ? "--isolate" : "--no-isolate"; }
};

// The target is part of what the checkpoint holds: a campaign stopped by SIGTERM resumes
// through the same implementation and ends as an uninterrupted run.
TEST_P(TargetCampaign, ResumesThroughTheSameTarget) {
  const std::string target = impl_target();
  const std::vector<std::string> campaign_args{"campaign", "--target", target, "--seed", "5", "--cases", "3000",
                                               "--jobs",   "2",        "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = campaign_args;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const fs::path stopped = dir_ / "stopped";
  const fs::path whole = dir_ / "whole";
  {
    Running first(with({"--out", stopped.string(), isolate()}), dir_ / "stderr1.txt");
    // The first checkpoint is written about two seconds in: then stop.
    const auto deadline = SteadyClock::now() + 120s;
    while (!fs::exists(stopped / "checkpoint.json") && SteadyClock::now() < deadline) std::this_thread::sleep_for(20ms);
    first.send(SIGTERM);
    EXPECT_EQ(exit_code(first.wait()), 143) << read_text(dir_ / "stderr1.txt");
  }
  const Json checkpoint = read_json(stopped / "checkpoint.json");
  ASSERT_FALSE(checkpoint.is_discarded());
  EXPECT_EQ(checkpoint.at("target"), target);
  const Json partial = read_json(stopped / "report.json");
  ASSERT_FALSE(partial.is_discarded());
  EXPECT_EQ(partial.at("target"), target);
  ASSERT_FALSE(partial.at("complete").get<bool>()) << "the campaign ended before SIGTERM: nothing to resume";
  {
    Running resumed({"campaign", "--resume", stopped.string(), "--quiet", isolate()}, dir_ / "stderr2.txt");
    EXPECT_EQ(exit_code(resumed.wait()), 0) << read_text(dir_ / "stderr2.txt");
  }
  EXPECT_NE(read_text(dir_ / "stderr2.txt").find("target " + target), std::string::npos)
      << read_text(dir_ / "stderr2.txt");
  {
    Running uninterrupted(with({"--out", whole.string(), isolate()}), dir_ / "stderr3.txt");
    EXPECT_EQ(exit_code(uninterrupted.wait()), 0) << read_text(dir_ / "stderr3.txt");
  }
  const Json a = read_json(stopped / "report.json");
  const Json b = read_json(whole / "report.json");
  ASSERT_FALSE(a.is_discarded());
  ASSERT_FALSE(b.is_discarded());
  EXPECT_TRUE(a.at("complete").get<bool>());
  EXPECT_EQ(outcome(a), outcome(b));
  EXPECT_EQ(b.at("total").at("target_faults").get<long long>(), 0);
  EXPECT_GT(b.at("total").at("exact").get<long long>(), 0);
  // The rerun line names the target, quoted for the shell.
  EXPECT_NE(read_text(whole / "table.txt").find("--target '" + target + "'"), std::string::npos)
      << read_text(whole / "table.txt");
}

// A target process that dies is restarted: each worker (process or thread) owns its own,
// every crash is one target fault and one finding, and the cases after it still run.
TEST_P(TargetCampaign, ACrashingTargetIsRestartedAndEveryCaseRuns) {
  const fs::path out = dir_ / "crashing";
  {
    Running run({"campaign", "--target", impl_target("--crash-on 15"), "--seed", "41", "--cases", "200", "--jobs", "2",
                 "--quiet", "--out", out.string(), isolate()},
                dir_ / "stderr.txt");
    EXPECT_EQ(exit_code(run.wait()), 1) << read_text(dir_ / "stderr.txt");
  }
  const Json report = read_json(out / "report.json");
  ASSERT_FALSE(report.is_discarded());
  expect_consistent_report(report);
  EXPECT_TRUE(report.at("complete").get<bool>());
  EXPECT_EQ(report.at("cases").get<long long>(), 200);
  const Json& total = report.at("total");
  const long long faults = total.at("target_faults").get<long long>();
  // 200 cases make a few hundred requests, and one in 15 of each process crashes it;
  // without a restart every request after the first crash would fault.
  EXPECT_GE(faults, 4) << total.dump();
  EXPECT_LT(faults, 200 / 3) << "after a crash the next request must find a fresh process: " << total.dump();
  EXPECT_EQ(total.at("crashed").get<long long>(), 0) << "a target's crash must not take its worker down";
  EXPECT_EQ(total.at("silently_wrong").get<long long>(), 0);
  EXPECT_GT(total.at("exact").get<long long>(), 0);
  ASSERT_FALSE(report.at("findings").empty());
  for (const auto& finding : report.at("findings")) {
    EXPECT_EQ(finding.at("signature").get<std::string>().rfind("target-crash:", 0), 0u) << finding.dump();
  }
}

// The merge replays the shards' findings through their exec: target only when the
// command line gives it: a command that a checkpoint names is never run by itself.
TEST_P(TargetCampaign, MergeReplaysThroughTheTargetOnlyWhenGiven) {
  const std::string target = impl_target("--ignore-scale");
  std::vector<std::string> shards;
  for (const char* shard : {"0", "1"}) {
    shards.push_back((dir_ / ("shard-" + std::string(shard))).string());
    Running run({"campaign", "--target", target, "--seed", "5", "--cases", "300", "--jobs", "2", "--quiet", "--shard",
                 std::string(shard) + "/2", "--out", shards.back(), isolate()},
                dir_ / "stderr.txt");
    ASSERT_EQ(exit_code(run.wait()), 1) << read_text(dir_ / "stderr.txt");
  }
  const fs::path merged = dir_ / "merged";
  {
    Running refused({"campaign", "merge", shards[0], shards[1], "--out", merged.string()}, dir_ / "refused.txt");
    EXPECT_EQ(exit_code(refused.wait()), 2);
  }
  EXPECT_EQ(read_text(dir_ / "refused.txt"),
            "shardcheck campaign merge: the shards ran target '" + target +
                "', and shardcheck does not run a command named by a file: give it as --target to replay their "
                "findings\n");
  EXPECT_FALSE(fs::exists(merged));
  {
    Running given({"campaign", "merge", shards[0], shards[1], "--out", merged.string(), "--target", target},
                  dir_ / "given.txt");
    EXPECT_EQ(exit_code(given.wait()), 1) << read_text(dir_ / "given.txt");
  }
  EXPECT_FALSE(read_json(merged / "report.json").at("findings").empty());
  EXPECT_EQ(file_names(merged / "findings"), reported_files(merged));
}

INSTANTIATE_TEST_SUITE_P(Modes, TargetCampaign, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "Isolated" : "InProcess"); });

}  // namespace
