// Output directories and report paths of `campaign` and `campaign merge` (outputs.h).
#include "outputs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <utility>

#include <fmt/format.h>

namespace shardcheck::cli {

namespace fs = std::filesystem;

namespace {

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

std::string prepare_out_dir(const fs::path& dir, const std::string& flag) {
  std::error_code ec;
  fs::create_directories(dir / "findings", ec);
  if (ec) {
    return fmt::format("cannot create {}: {}; choose another {}", (dir / "findings").string(), ec.message(), flag);
  }
  for (const fs::path& folder : {dir, dir / "findings"}) {
    if (std::string why = try_writing_in(folder); !why.empty()) {
      return fmt::format("cannot write into {}: {}; free some space or choose another {}", folder.string(), why, flag);
    }
  }
  return {};
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
