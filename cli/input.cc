// Reading what comes from outside, bounded before it is read (contract 2): maps, case
// files, checkpoints and shards, from files of any kind (regular, device, FIFO, a pipe
// on /dev/stdin). A regular file is refused by its size before a byte is read; anything
// else is read in chunks up to the limit and one byte more; a reader waits for input a
// bounded time; JSON text stops at the first byte JSON cannot hold, so /dev/zero or a
// file of NULs is refused after one chunk, not after the limit.
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "commands.h"

namespace shardcheck::cli {

namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 16;
std::atomic<double> g_input_wait_seconds{kDefaultInputWaitSeconds};

// RFC 8259: a control byte (below 0x20) stands in JSON text only escaped, except the
// whitespace tab, line feed and carriage return; NUL included.
std::size_t first_control_byte(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r') return i;
  }
  return std::string_view::npos;
}

// Closes the descriptor however the read ends.
struct Descriptor {
  int fd;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits until `fd` has input (or its writer is gone); false when none came in time.
bool wait_for_input(int fd, double seconds) {
  pollfd watched{fd, POLLIN, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int ready = ::poll(&watched, 1, static_cast<int>(std::max<std::int64_t>(0, left.count())));
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return true;  // the read that follows says what is wrong
  }
}

std::string seconds_text(double seconds) { return fmt::format("{:g} s", seconds); }

}  // namespace

double input_wait_seconds() { return g_input_wait_seconds.load(std::memory_order_relaxed); }
void set_input_wait_seconds(double seconds) { g_input_wait_seconds.store(seconds, std::memory_order_relaxed); }

FileText read_input(const std::string& path, const InputRules& rules) {
  FileText out;
  // O_NONBLOCK: opening a FIFO no writer has opened yet returns at once (the wait below
  // bounds it) instead of blocking in open() for ever.
  Descriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (file.fd < 0) {
    out.error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return out;
  }
  struct stat facts {};
  if (::fstat(file.fd, &facts) != 0) {
    out.error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
    return out;
  }
  // A directory opens and reads as nothing, which would be reported as whatever an empty
  // file is (invalid JSON): name it for what it is.
  if (S_ISDIR(facts.st_mode)) {
    out.error = fmt::format("cannot read {}: it is a directory, not a file", path);
    return out;
  }
  const bool regular = S_ISREG(facts.st_mode);
  if (regular && rules.refuse_past_limit) {
    if (Status bad = check_input_size(static_cast<std::uint64_t>(facts.st_size), rules.max_bytes); !bad.ok()) {
      out.error = fmt::format("{}: {}", path, bad.error().to_string());
      return out;
    }
  }
  std::string text;
  if (regular) text.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(facts.st_size, rules.max_bytes)));
  char chunk[kChunkBytes];
  bool waited_for_writer = false;
  for (;;) {
    const ssize_t got = ::read(file.fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && errno == EAGAIN) {
      if (!wait_for_input(file.fd, rules.wait_seconds)) {
        out.error = fmt::format("no input came from {} for {} (--input-timeout waits longer)", path,
                                seconds_text(rules.wait_seconds));
        return out;
      }
      continue;
    }
    if (got < 0) {
      out.error = fmt::format("cannot read {}: {}", path, std::strerror(errno));
      return out;
    }
    if (got == 0) {
      // A FIFO reads as ended while no writer has come yet: wait for one, a bounded time.
      if (S_ISFIFO(facts.st_mode) && text.empty() && !waited_for_writer) {
        waited_for_writer = true;
        if (wait_for_input(file.fd, rules.wait_seconds)) continue;
        out.error = fmt::format("no input came from {} for {} (--input-timeout waits longer)", path,
                                seconds_text(rules.wait_seconds));
        return out;
      }
      break;
    }
    std::string_view read(chunk, static_cast<std::size_t>(got));
    // JSON text is kept up to and with a byte JSON cannot hold: its parser refuses it
    // there (or earlier), as it would the whole input, which is not read.
    const std::size_t bad = rules.json ? first_control_byte(read) : std::string_view::npos;
    if (bad != std::string_view::npos) read = read.substr(0, bad + 1);
    if (text.size() + read.size() > rules.max_bytes) {
      if (!rules.refuse_past_limit) {
        text.append(read.substr(0, rules.max_bytes - text.size()));
        break;
      }
      out.error = fmt::format("{}: {}", path, input_past_limit(rules.max_bytes).error().to_string());
      return out;
    }
    text.append(read);
    if (bad != std::string_view::npos) break;
  }
  out.text = std::move(text);
  return out;
}

FileText read_file(const std::string& path) { return read_input(path, InputRules{}); }

std::optional<InputFile> InputFile::open(const std::string& path) {
  struct stat facts {};
  if (::stat(path.c_str(), &facts) == 0 && S_ISREG(facts.st_mode) && facts.st_size > 0) {
    const auto size = static_cast<std::uint64_t>(facts.st_size);
    if (Status bad = check_input_size(size, max_input_bytes()); !bad.ok()) {
      fmt::print(stderr, "shardcheck: {}: {}\n", path, bad.error().to_string());
      return std::nullopt;
    }
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      fmt::print(stderr, "shardcheck: cannot read {}: {}\n", path, std::strerror(errno));
      return std::nullopt;
    }
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (mapped != MAP_FAILED) {
      ::madvise(mapped, size, MADV_SEQUENTIAL);
      InputFile file;
      file.mapped_ = mapped;
      file.text_ = std::string_view(static_cast<const char*>(mapped), size);
      return file;
    }
  }
  FileText read = read_file(path);  // not a regular file, an empty one, or one that would not map
  if (!read.text) {
    fmt::print(stderr, "shardcheck: {}\n", read.error);
    return std::nullopt;
  }
  InputFile file;
  file.copy_ = std::move(*read.text);
  file.text_ = file.copy_;
  return file;
}

InputFile::InputFile(InputFile&& other) noexcept
    : text_(other.text_), mapped_(other.mapped_), copy_(std::move(other.copy_)), released_(other.released_) {
  if (mapped_ == nullptr) text_ = copy_;
  other.mapped_ = nullptr;
  other.text_ = {};
}

InputFile::~InputFile() {
  if (mapped_ != nullptr) ::munmap(mapped_, text_.size());
}

void InputFile::release_before(std::size_t offset) {
  if (mapped_ == nullptr) return;
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const std::size_t end = std::min(offset, text_.size()) / page * page;
  if (end <= released_) return;
  ::madvise(static_cast<char*>(mapped_) + released_, end - released_, MADV_DONTNEED);
  released_ = end;
}

std::optional<Json> read_json_file(const std::string& path) {
  FileText file = read_file(path);
  if (!file.text) {
    fmt::print(stderr, "shardcheck: {}\n", file.error);
    return std::nullopt;
  }
  auto json = parse_json(*file.text);
  if (!json) {
    fmt::print(stderr, "shardcheck: {}: {}\n", path, json.error().to_string());
    return std::nullopt;
  }
  return std::move(json.value());
}

}  // namespace shardcheck::cli
