// Output directories and report paths of `campaign` and `campaign merge` (outputs.h).
#include "outputs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "shardcheck/campaign.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/target.h"

namespace shardcheck::cli {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLockName = ".shardcheck.lock";
// The files a campaign or a merge writes beside findings/.
constexpr const char* kOutputNames[] = {"checkpoint.json", "report.json", "table.txt", "report.html"};

// Cases done by the stopped campaign whose checkpoint DIR holds; nothing when DIR holds
// none, an unreadable one, or a finished campaign's.
std::optional<Index> stopped_campaign(const fs::path& dir) {
  const fs::path file = dir / "checkpoint.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::nullopt;
  FileText text = read_file(file.string());
  if (!text.text) return std::nullopt;
  auto json = parse_json(*text.text);
  if (!json) return std::nullopt;
  auto checkpoint = campaign::checkpoint_from_json(json.value());
  if (!checkpoint || checkpoint.value().report.complete) return std::nullopt;
  return checkpoint.value().report.cases;
}

// Why a new run may not write into DIR, or empty: it holds another run's outputs, which
// the new ones would mix with (a finding file of each, a report of one).
std::string refuse_used(const fs::path& dir, const std::string& flag) {
  std::vector<std::string> held;
  std::error_code ec;
  for (const char* name : kOutputNames) {
    if (fs::exists(dir / name, ec)) held.emplace_back(name);
  }
  const std::size_t findings = finding_files_in(dir).size();
  if (findings > 0) held.push_back(fmt::format("{} finding file{}", findings, findings == 1 ? "" : "s"));
  if (held.empty()) return {};
  const std::string quoted = oracles::shell_word(dir.string());
  if (const auto done = stopped_campaign(dir)) {
    // Rerunning the command of a preempted job lands here: say how it goes on instead.
    return fmt::format(
        "{} holds a stopped campaign ({} cases done); continue it with: shardcheck campaign --resume {} (or give "
        "--overwrite to start again)",
        dir.string(), *done, quoted);
  }
  return fmt::format(
      "{} holds the outputs of an earlier run ({}); choose another {}, or give --overwrite to replace them",
      dir.string(), fmt::join(held, ", "), flag);
}

// Removes what an earlier run wrote (--overwrite): its outputs and finding files.
std::string remove_outputs(const fs::path& dir) {
  std::vector<fs::path> doomed;
  for (const char* name : kOutputNames) doomed.push_back(dir / name);
  for (const std::string& name : finding_files_in(dir)) doomed.push_back(dir / "findings" / name);
  for (const fs::path& path : doomed) {
    std::error_code ec;
    fs::remove(path, ec);
    if (ec) return fmt::format("cannot remove {} (--overwrite): {}", path.string(), ec.message());
  }
  return {};
}

// A killed writer's temporaries, in DIR and DIR/findings.
std::string remove_temporaries(const fs::path& dir) {
  for (const fs::path& folder : {dir, dir / "findings"}) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(folder, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
      if (!is_writer_temporary(it->path().filename().string()) || !it->is_regular_file(ec)) continue;
      std::error_code removed;
      fs::remove(it->path(), removed);
      if (removed) return fmt::format("cannot remove {}: {}", it->path().string(), removed.message());
    }
  }
  return {};
}

// Writes one byte into a temporary in `folder` and removes it: a full disk or a folder
// that takes no file shows now, before the run. The system's reason, or empty.
std::string try_writing_in(const fs::path& folder) {
  const fs::path probe = folder / fmt::format(".probe.{}.tmp", static_cast<long>(getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  std::string why;
  ssize_t n;
  do {
    n = ::write(fd, "\n", 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) why = n < 0 ? std::strerror(errno) : "the disk took no byte";
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  ::unlink(probe.c_str());
  return why;
}

// Why the report file at `path` cannot be written, or empty.
std::string report_file_trouble(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::is_directory(status)) return "it is a directory, not a file";
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    // A device or a pipe is written in place (write_report_file): it must open.
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return std::strerror(errno);
    ::close(fd);
    return {};
  }
  // A file is written beside itself and renamed into place: its folder must take one.
  fs::path folder = fs::path(path).parent_path();
  if (folder.empty()) folder = ".";
  return try_writing_in(folder);
}

}  // namespace

OutDirLock::~OutDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string OutDirLock::acquire(const fs::path& dir, const std::string& what_to_do) {
  if (fd_ >= 0) return {};
  const fs::path file = dir / kLockName;
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot lock {}: {}", file.string(), std::strerror(errno));
  // A POSIX record lock, not flock: the campaign's forked workers do not inherit it, so it
  // goes the moment the campaign's own process does, whatever its workers still do.
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (::fcntl(fd, F_SETLK, &whole) != 0) {
    const int error = errno;
    struct flock holder = whole;
    const bool known = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK && holder.l_pid > 0;
    // The pid the holder wrote, where the lock does not tell (a network file system).
    char text[32] = {};
    const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
    ::close(fd);
    if (error != EACCES && error != EAGAIN)
      return fmt::format("cannot lock {}: {}", file.string(), std::strerror(error));
    std::string pid = known ? std::to_string(holder.l_pid) : std::string(text, std::max<ssize_t>(n, 0));
    pid.erase(
        std::remove_if(pid.begin(), pid.end(), [](char ch) { return !std::isdigit(static_cast<unsigned char>(ch)); }),
        pid.end());
    return fmt::format("{} is in use by another shardcheck run ({}); {}", dir.string(),
                       pid.empty() ? "its pid is not recorded yet" : "pid " + pid, what_to_do);
  }
  // The pid is for the next run's refusal only: the lock holds without it (a full disk).
  const std::string pid = fmt::format("{}\n", static_cast<long>(getpid()));
  if (::ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd, pid.data(), pid.size(), 0);
  }
  fd_ = fd;
  return {};
}

std::string prepare_out_dir(const fs::path& dir, Reuse reuse, const std::string& flag, OutDirLock& lock) {
  std::error_code ec;
  fs::create_directories(dir / "findings", ec);
  if (ec)
    return fmt::format("cannot create {}: {}; choose another {}", (dir / "findings").string(), ec.message(), flag);
  if (std::string held = lock.acquire(dir, "wait for it to end, or choose another " + flag); !held.empty()) {
    return held;
  }
  if (reuse == Reuse::refuse) {
    if (std::string used = refuse_used(dir, flag); !used.empty()) return used;
  }
  if (reuse == Reuse::overwrite) {
    if (std::string error = remove_outputs(dir); !error.empty()) return error;
  }
  if (std::string error = remove_temporaries(dir); !error.empty()) return error;
  for (const fs::path& folder : {dir, dir / "findings"}) {
    if (std::string why = try_writing_in(folder); !why.empty()) {
      return fmt::format("cannot write into {}: {}; free some space or choose another {}", folder.string(), why, flag);
    }
  }
  return {};
}

std::string remove_unrecorded_findings(const fs::path& dir, const std::set<std::string>& recorded) {
  for (const std::string& name : finding_files_in(dir)) {
    if (recorded.count(name) > 0) continue;
    std::error_code ec;
    fs::remove(dir / "findings" / name, ec);
    if (ec) return fmt::format("cannot remove {}: {}", (dir / "findings" / name).string(), ec.message());
  }
  return {};
}

std::vector<std::string> finding_files_in(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir / "findings", ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.front() != '.' && it->path().extension() == ".json") names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool is_writer_temporary(const std::string& name) {
  // NAME.PID.tmp (write_report_file, the probes) and .NAME.PID.N.tmp (the campaign's
  // writer): digits just before ".tmp", so that a file of the user's called x.tmp stays.
  constexpr std::string_view kSuffix = ".tmp";
  if (name.size() <= kSuffix.size() || name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return false;
  }
  const std::string stem = name.substr(0, name.size() - kSuffix.size());
  const std::size_t dot = stem.rfind('.');
  if (dot == std::string::npos || dot + 1 == stem.size()) return false;
  return std::all_of(stem.begin() + static_cast<std::ptrdiff_t>(dot) + 1, stem.end(),
                     [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
}

std::string probe_report_files(const ReportFiles& files) {
  for (const auto& [flag, path] : {std::pair{"--junit", files.junit}, std::pair{"--markdown", files.markdown}}) {
    if (path.empty()) continue;
    if (std::string why = report_file_trouble(path); !why.empty()) {
      return fmt::format("cannot write {} {}: {}; choose a path that can be written", flag, path, why);
    }
  }
  return {};
}

}  // namespace shardcheck::cli
