// The exec: target. One process per ExecTarget, kept alive across requests; its stdin
// and stdout are one socket (send with MSG_NOSIGNAL, so a dead process never raises
// SIGPIPE in the harness), its stderr a pipe whose tail explains a crash. Every wait is
// a poll() against a deadline, so a hung process costs one timeout, not the campaign.
#include "target_exec.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <variant>

#include <fmt/format.h>

#include "shardcheck/digest.h"
#include "shardcheck/oracles/descendants.h"

extern char** environ;

namespace shardcheck::oracles {

namespace {

constexpr int kProtocolVersion = 1;
constexpr std::size_t kStderrTail = 4096;
// A response line may carry a tensor; anything far beyond what was asked for is garbage.
constexpr std::size_t kBaseLineLimit = std::size_t{1} << 20;

void set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

TargetFault fault(FaultKind kind, std::string reason, std::string detail) {
  return TargetFault{kind, std::move(reason), std::move(detail)};
}

std::string excerpt(std::string_view text) {
  constexpr std::size_t kMax = 200;
  std::string out(text.substr(0, kMax));
  for (char& ch : out) {
    if (static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  }
  return text.size() > kMax ? out + "..." : out;
}

Json tensor_json(const Buffer& buffer, const Extents& shape) {
  Json out = Json::object();
  out["dtype"] = std::string(dtype_name(buffer.dtype()));
  out["shape"] = shape;
  out["data"] = base64_encode(buffer.data(), buffer.size_bytes());
  return out;
}

// The map as the request carries it: `map_text` where the case holds text (the target
// reads it itself), else `map`, the JSON as written or the decoded map encoded. A
// reshard's target side is `target_map` / `target_map_text`.
void put_map(Json& request, const TargetMap& map, const std::string& key = "map") {
  if (map.text != nullptr) {
    request[key + "_text"] = *map.text;
  } else if (map.json != nullptr) {
    request[key] = *map.json;
  } else if (map.map != nullptr) {
    request[key] = encode_map(*map.map, RankOrder::as_given);
  } else {
    request[key] = Json();
  }
}

// The digest a rebuild or reshard is asked to verify: `digest` and/or `digest_state`.
void put_digest(Json& request, const DigestRequest& digest) {
  if (digest.expected) request["digest"] = format_digest(*digest.expected);
  if (digest.state) request["digest_state"] = *digest.state;
}

constexpr const char* kBadFallback = "a fallback without an object holding a message";

// A response's `fallback` ({"type": ..., "message": ...}), or nullopt when it is not one.
std::optional<Declined> declined_of(const Json& fallback) {
  if (!fallback.is_object() || !fallback.contains("message") || !fallback["message"].is_string()) return std::nullopt;
  Declined declined;
  declined.message = fallback["message"].get<std::string>();
  if (fallback.contains("type") && fallback["type"].is_string()) declined.type = fallback["type"].get<std::string>();
  return declined;
}

// Reads a response's optional `fallback` into `into`; false when it is there but
// malformed (the answer is then garbage: kBadFallback).
bool read_fallback(const Json& response, std::optional<Declined>& into) {
  if (!response.contains("fallback")) return true;
  into = declined_of(response["fallback"]);
  return into.has_value();
}

// A result TENSOR of the protocol as a buffer of `dtype`, or why it is not one: the
// reason (a signature word) and what was wrong, for a garbage fault.
struct BadTensor {
  std::string reason;
  std::string what;
};
std::variant<Buffer, BadTensor> decode_tensor(const Json& tensor, DType dtype) {
  if (!tensor.is_object()) return BadTensor{"no-result", "no result tensor"};
  const auto type = tensor.find("dtype");
  if (type == tensor.end() || !type->is_string() || *type != dtype_name(dtype)) {
    return BadTensor{"wrong-dtype", fmt::format("a result that is not {}", dtype_name(dtype))};
  }
  const auto shape = tensor.find("shape");
  if (shape == tensor.end() || !shape->is_array()) return BadTensor{"bad-shape", "a result without a shape"};
  Index numel = 1;
  for (const auto& extent : *shape) {
    if (!extent.is_number_integer() || extent.get<std::int64_t>() < 0) {
      return BadTensor{"bad-shape", "a result shape that is not a list of non-negative integers"};
    }
    auto product = checked_mul(numel, extent.get<std::int64_t>());
    if (!product) return BadTensor{"bad-shape", "a result shape whose element count overflows"};
    numel = *product;
  }
  const auto data = tensor.find("data");
  if (data == tensor.end() || !data->is_string()) return BadTensor{"bad-data", "a result without data"};
  auto bytes = base64_decode(data->get_ref<const std::string&>());
  if (!bytes) return BadTensor{"bad-data", "result data that is not base64"};
  const auto size = static_cast<std::size_t>(element_size(dtype));
  if (numel > static_cast<Index>(bytes->size() / size) || bytes->size() != static_cast<std::size_t>(numel) * size) {
    return BadTensor{"bad-data",
                     fmt::format("{} result bytes for {} elements of {}", bytes->size(), numel, dtype_name(dtype))};
  }
  Buffer buffer(dtype, numel);
  if (!bytes->empty()) std::memcpy(buffer.data(), bytes->data(), bytes->size());
  return buffer;
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30));
}

}  // namespace

ExecTarget::ExecTarget(std::string name, std::string command, const TargetOptions& options)
    : name_(std::move(name)), command_(std::move(command)), options_(options) {}

ExecTarget::~ExecTarget() { stop(std::chrono::milliseconds(2000)); }

void ExecTarget::detach() {
  if (io_fd_ >= 0) close(io_fd_);
  if (err_fd_ >= 0) close(err_fd_);
  io_fd_ = err_fd_ = -1;
  pid_ = -1;
  pending_.clear();
}

std::string ExecTarget::spawn() {
  int io[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, io) != 0) {
    return fmt::format("socketpair failed: {}", std::strerror(errno));
  }
  int err[2];
  if (pipe2(err, O_CLOEXEC) != 0) {
    const int saved = errno;
    close(io[0]);
    close(io[1]);
    return fmt::format("pipe failed: {}", std::strerror(saved));
  }
  std::string shell = "/bin/sh";
  std::string dash_c = "-c";
  char* argv[] = {shell.data(), dash_c.data(), command_.data(), nullptr};
  const pid_t parent = getpid();
  // Whatever the target starts and leaves comes back here to be ended (descendants.h).
  adopt_orphans();
  // fork, not posix_spawn: the child must die with the thread that started it (a
  // campaign worker killed for a timeout must not leave its target behind), which
  // only prctl in the child can arrange. Between fork and exec the child calls only
  // async-signal-safe functions.
  const pid_t pid = fork_own_child();
  if (pid < 0) {
    const int saved = errno;
    for (int fd : {io[0], io[1], err[0], err[1]}) close(fd);
    return fmt::format("cannot start /bin/sh: {}", std::strerror(saved));
  }
  if (pid == 0) {
    // Its own process group, so a timeout kills whatever the shell started, and default
    // signal handling whatever the harness itself ignores or blocks.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM}) signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(io[1], STDIN_FILENO);
    dup2(io[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execve(shell.c_str(), argv, environ);
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before any kill(-pid)
  close(io[1]);
  close(err[1]);
  pid_ = pid;
  io_fd_ = io[0];
  err_fd_ = err[0];
  set_nonblocking(io_fd_);
  set_nonblocking(err_fd_);
  err_tail_.clear();
  pending_.clear();
  crash_reports_ = false;
  ++starts_;
  return {};
}

std::string ExecTarget::start() {
  if (pid_ >= 0) return {};
  if (std::string error = spawn(); !error.empty()) return error;
  Json hello = {{"op", "hello"}, {"protocol", kProtocolVersion}};
  auto answer = exchange(std::move(hello), options_.startup_timeout_seconds, 0);
  if (auto* f = std::get_if<TargetFault>(&answer)) {
    return fmt::format("{} ({}) on the handshake: {}", fault_name(f->kind), f->reason, f->detail);
  }
  if (auto* r = std::get_if<TargetRefusal>(&answer)) {
    stop(std::chrono::milliseconds(500));
    return "the handshake was refused: " + r->to_string();
  }
  const Json& response = std::get<Json>(answer);
  if (response.contains("protocol") && response["protocol"] != kProtocolVersion) {
    stop(std::chrono::milliseconds(500));
    return fmt::format("it speaks protocol {}, shardcheck speaks {}", response["protocol"].dump(),
                       kProtocolVersion);
  }
  const auto it = response.find("implementation");
  implementation_ = it != response.end() && it->is_string() ? it->get<std::string>() : name_;
  // The operations it serves (docs/protocol.md, "hello"): rebuild and extract unless it
  // lists what it serves (an adapter of a restore step serves extract alone).
  serves_rebuild_ = serves_extract_ = true;
  serves_reshard_ = false;
  if (const auto ops = response.find("ops"); ops != response.end() && ops->is_array()) {
    const auto lists = [&](Op op) {
      return std::find(ops->begin(), ops->end(), Json(std::string(op_name(op)))) != ops->end();
    };
    serves_rebuild_ = lists(Op::rebuild);
    serves_extract_ = lists(Op::extract);
    serves_reshard_ = lists(Op::reshard);
  }
  const auto reports = response.find("crash_reports");
  crash_reports_ = reports != response.end() && *reports == true;
  return {};
}

void ExecTarget::drain_stderr() {
  if (err_fd_ < 0) return;
  char buffer[4096];
  while (true) {
    const ssize_t n = read(err_fd_, buffer, sizeof buffer);
    if (n > 0) {
      err_tail_.append(buffer, static_cast<std::size_t>(n));
      if (err_tail_.size() > 2 * kStderrTail) err_tail_.erase(0, err_tail_.size() - kStderrTail);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) {
      close(err_fd_);
      err_fd_ = -1;
    }
    return;
  }
}

std::string ExecTarget::stderr_tail() const {
  std::string tail = err_tail_.size() > kStderrTail ? err_tail_.substr(err_tail_.size() - kStderrTail) : err_tail_;
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail.empty() ? std::string() : "\n--- its stderr ends with ---\n" + tail;
}

void ExecTarget::stop(std::chrono::milliseconds grace) {
  if (pid_ < 0) return;
  if (io_fd_ >= 0) close(io_fd_);
  io_fd_ = -1;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  siginfo_t info{};
  while (true) {
    info.si_pid = 0;
    // WNOWAIT: the unreaped leader keeps its process group id reserved for the kill below.
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) break;
    if (info.si_pid == pid_ || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(-pid_, SIGKILL);  // anything it left behind in its group (or itself, past the grace)
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  forget_own_child(pid_);
  // What it started outside its group (setsid) is this process's now that it is gone.
  end_stray_children();
  drain_stderr();
  if (err_fd_ >= 0) close(err_fd_);
  err_fd_ = -1;
  pid_ = -1;
  pending_.clear();
}

TargetFault ExecTarget::reap_as_crash(std::string what) {
  // It closed its stdout: usually it is exiting; give it a moment to say how.
  if (io_fd_ >= 0) close(io_fd_);
  io_fd_ = -1;
  std::string reason = "closed-stdout";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(1000);
  siginfo_t info{};
  while (std::chrono::steady_clock::now() < deadline) {
    info.si_pid = 0;
    if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) break;
    if (info.si_pid == pid_) {
      reason = info.si_code == CLD_EXITED ? fmt::format("exit-{}", info.si_status)
                                          : fmt::format("signal-{}", info.si_status);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  drain_stderr();
  std::string detail = fmt::format("{} ({}){}", what, reason, stderr_tail());
  stop(std::chrono::milliseconds(0));
  return fault(FaultKind::crash, reason, std::move(detail));
}

std::optional<std::string> ExecTarget::crash_report(const std::string& line) const {
  if (!crash_reports_) return std::nullopt;
  const Json report = Json::parse(line, nullptr, false);
  if (!report.is_object() || report.size() != 1 || !report.contains("crash") || !report["crash"].is_string()) {
    return std::nullopt;
  }
  // Only the reasons a process's own death gives, so that signatures stay the same.
  const std::string reason = report["crash"].get<std::string>();
  for (std::string_view prefix : {"exit-", "signal-"}) {
    if (reason.size() > prefix.size() && reason.compare(0, prefix.size(), prefix) == 0 &&
        std::all_of(reason.begin() + static_cast<std::ptrdiff_t>(prefix.size()), reason.end(),
                    [](char ch) { return ch >= '0' && ch <= '9'; })) {
      return reason;
    }
  }
  return std::nullopt;
}

TargetFault ExecTarget::child_crashed(std::string what, const std::string& reason) {
  drain_stderr();
  std::string detail = fmt::format("{} ({}){}", what, reason, stderr_tail());
  err_tail_.clear();  // the next child's stderr, as a fresh process's would be
  // The newline that ends what is left of the dead child's request (the server skips
  // input through it), so that the next child's first line is the next request.
  auto send_newline = [this] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (send(io_fd_, "\n", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      pollfd p{io_fd_, POLLOUT, 0};
      const int wait = remaining_ms(deadline);
      if (wait == 0) return false;
      poll(&p, 1, wait);
    }
    return true;
  };
  const bool sent = pending_.empty() && send_newline();
  if (!sent) stop(std::chrono::milliseconds(0));  // out of step: a fresh process instead
  return fault(FaultKind::crash, reason, std::move(detail));
}

std::optional<TargetFault> ExecTarget::unsolicited_output() {
  pollfd p{io_fd_, POLLIN, 0};
  if (pending_.empty() && !(poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP)))) return std::nullopt;
  char buffer[4096];
  const ssize_t n = recv(io_fd_, buffer, sizeof buffer, MSG_DONTWAIT);
  if (pending_.empty() && n == 0) return reap_as_crash("it exited between requests");
  if (n > 0) pending_.append(buffer, static_cast<std::size_t>(n));
  if (!pending_.empty() && pending_.find('\n') == pending_.size() - 1) {
    if (auto reason = crash_report(pending_.substr(0, pending_.size() - 1))) {
      pending_.clear();
      return child_crashed("it died between requests", *reason);
    }
  }
  if (pending_.empty()) return std::nullopt;
  std::string detail = "unsolicited output: " + excerpt(pending_);
  stop(std::chrono::milliseconds(0));
  return fault(FaultKind::garbage, "unsolicited-output", std::move(detail));
}

std::variant<ExecTarget::Sent, TargetFault> ExecTarget::send_and_read_line(const std::string& out, const std::string& op,
                                                                         double timeout_seconds,
                                                                         std::size_t expected_bytes) {
  const std::size_t line_limit = kBaseLineLimit + 2 * out.size() + 2 * expected_bytes;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(timeout_seconds));
  Sent result;
  while (true) {
    const int wait = remaining_ms(deadline);
    if (wait == 0) {
      drain_stderr();
      std::string detail = fmt::format("no answer to {} within {:g} s{}", op, timeout_seconds, stderr_tail());
      stop(std::chrono::milliseconds(0));
      return fault(FaultKind::timeout, "timeout", std::move(detail));
    }
    pollfd fds[2] = {{io_fd_, static_cast<short>(POLLIN | (result.bytes < out.size() ? POLLOUT : 0)), 0},
                     {err_fd_, POLLIN, 0}};
    const int ready = poll(fds, err_fd_ >= 0 ? 2 : 1, wait);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return reap_as_crash(fmt::format("poll failed: {}", std::strerror(errno)));
    }
    if (err_fd_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) drain_stderr();
    if ((fds[0].revents & POLLOUT) && result.bytes < out.size()) {
      const ssize_t n =
          send(io_fd_, out.data() + result.bytes, out.size() - result.bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) result.bytes += static_cast<std::size_t>(n);
      else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return reap_as_crash(fmt::format("it stopped reading its input during {}", op));
      }
    }
    if (!(fds[0].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char buffer[65536];
    const ssize_t n = recv(io_fd_, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return reap_as_crash(fmt::format("it died during {}", op));
    }
    if (n > 0) pending_.append(buffer, static_cast<std::size_t>(n));
    const auto newline = pending_.find('\n');
    if (newline != std::string::npos) {
      result.line = pending_.substr(0, newline);
      pending_.erase(0, newline + 1);
      return result;
    }
    if (pending_.size() > line_limit) {
      stop(std::chrono::milliseconds(0));
      return fault(FaultKind::garbage, "too-long",
                   fmt::format("a response line to {} longer than {} bytes", op, line_limit));
    }
  }
}

TargetResult<Json> ExecTarget::answer_of(const Sent& sent, bool whole_request_sent, std::int64_t id,
                                         const std::string& op) {
  const std::string& line = sent.line;
  auto garbage = [&](std::string reason, std::string what) -> TargetResult<Json> {
    std::string detail = fmt::format("{} in the answer to {}: {}", what, op, excerpt(line));
    stop(std::chrono::milliseconds(0));
    return fault(FaultKind::garbage, std::move(reason), std::move(detail));
  };
  // A child that died reading the request reports before the request is all sent.
  if (auto reason = crash_report(line); reason && pending_.empty()) {
    return child_crashed(fmt::format("it died during {}", op), *reason);
  }
  if (!whole_request_sent) return garbage("answered-early", "an answer before the whole request was read");
  if (!pending_.empty()) return garbage("extra-output", "more than one line");
  // nlohmann reads a NUL byte as the end of its input; JSON text cannot hold one.
  Json response = line.find('\0') == std::string::npos ? Json::parse(line, nullptr, false) : Json(Json::value_t::discarded);
  if (response.is_discarded()) return garbage("not-json", "not JSON");
  if (!response.is_object()) return garbage("not-object", "not a JSON object");
  const auto id_field = response.find("id");
  if (id_field == response.end() || !id_field->is_number_integer() || id_field->get<std::int64_t>() != id) {
    return garbage("wrong-id", fmt::format("no id {}", id));
  }
  const auto ok = response.find("ok");
  if (ok == response.end() || !ok->is_boolean()) return garbage("no-ok", "no boolean \"ok\"");
  if (ok->get<bool>()) return response;
  const auto error = response.find("error");
  if (error == response.end() || !error->is_object() || !error->contains("message") ||
      !(*error)["message"].is_string()) {
    return garbage("bad-error", "a refusal without an error object holding a message");
  }
  TargetRefusal refusal;
  refusal.message = (*error)["message"].get<std::string>();
  if (error->contains("type") && (*error)["type"].is_string()) refusal.type = (*error)["type"].get<std::string>();
  if (error->contains("kind") && (*error)["kind"].is_string()) {
    refusal.kind = parse_kind((*error)["kind"].get<std::string>());
  }
  if (!read_fallback(response, refusal.fallback)) return garbage("bad-fallback", kBadFallback);
  return refusal;
}

TargetResult<Json> ExecTarget::exchange(Json request, double timeout_seconds, std::size_t expected_bytes) {
  const std::string op = request.value("op", std::string("request"));
  if (pid_ < 0) {
    if (std::string error = start(); !error.empty()) return fault(FaultKind::crash, "start", error);
  }
  // Output nobody asked for, or an exit after the last answer, belongs to no request:
  // it is charged to this one, which is the first to see it.
  if (auto unsolicited = unsolicited_output()) return std::move(*unsolicited);
  const std::int64_t id = next_id_++;
  request["id"] = id;
  const std::string out = request.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  auto sent = send_and_read_line(out, op, timeout_seconds, expected_bytes);
  if (auto* failed = std::get_if<TargetFault>(&sent)) return std::move(*failed);
  const Sent& answered = std::get<Sent>(sent);
  return answer_of(answered, answered.bytes == out.size(), id, op);
}

TargetFault ExecTarget::garbage_answer(const std::string& op, const Json& response, std::string reason,
                                       std::string what) {
  stop(std::chrono::milliseconds(0));
  return fault(FaultKind::garbage, std::move(reason),
               fmt::format("{} in the answer to {}: {}", what, op, excerpt(response.dump())));
}

TargetResult<TensorAnswer> ExecTarget::tensor_request(Json request, DType dtype, Index expected_numel) {
  const std::string op = request.value("op", std::string("request"));
  const auto expected_bytes = static_cast<std::size_t>(std::max<Index>(expected_numel, 0)) * element_size(dtype);
  auto answer = exchange(std::move(request), options_.timeout_seconds, expected_bytes);
  if (auto* f = std::get_if<TargetFault>(&answer)) return std::move(*f);
  if (auto* r = std::get_if<TargetRefusal>(&answer)) return std::move(*r);
  const Json& response = std::get<Json>(answer);
  const auto result = response.find("result");
  auto tensor = decode_tensor(result == response.end() ? Json() : *result, dtype);
  if (auto* bad = std::get_if<BadTensor>(&tensor)) return garbage_answer(op, response, bad->reason, bad->what);
  TensorAnswer out(std::move(std::get<Buffer>(tensor)));
  if (!read_fallback(response, out.fallback)) return garbage_answer(op, response, "bad-fallback", kBadFallback);
  return out;
}

TargetResult<Accepted> ExecTarget::check(const TargetMap& map) {
  Json request = {{"op", "check"}};
  put_map(request, map);
  auto answer = exchange(std::move(request), options_.timeout_seconds, 0);
  if (auto* f = std::get_if<TargetFault>(&answer)) return std::move(*f);
  if (auto* r = std::get_if<TargetRefusal>(&answer)) return std::move(*r);
  return Accepted{};
}

TargetResult<TensorAnswer> ExecTarget::rebuild(const TargetMap& map, const ShardSet& shards, DType dtype,
                                         int scale_power, const DigestRequest& digest) {
  Json request = {{"op", "rebuild"}, {"dtype", std::string(dtype_name(dtype))}, {"scale_power", scale_power}};
  put_map(request, map);
  put_digest(request, digest);
  Json tensors = Json::object();
  for (const auto& [rank, shard] : shards) tensors[std::to_string(rank)] = tensor_json(shard, {shard.numel()});
  request["shards"] = std::move(tensors);
  Index expected = 0;
  if (map.map != nullptr) expected = checked_numel(map.map->logical_shape).value_or(0);
  return tensor_request(std::move(request), dtype, expected);
}

TargetResult<TensorAnswer> ExecTarget::extract(const TargetMap& map, const Buffer& full, Rank rank, int scale_power) {
  // F travels in the map's logical shape when that fits, as a caller would hold it.
  Extents shape{full.numel()};
  if (map.map != nullptr && checked_numel(map.map->logical_shape) == full.numel() &&
      std::all_of(map.map->logical_shape.begin(), map.map->logical_shape.end(), [](Index e) { return e >= 0; })) {
    shape = map.map->logical_shape;
  }
  Json request = {{"op", "extract"}, {"dtype", std::string(dtype_name(full.dtype()))},
                  {"scale_power", scale_power}, {"rank", rank}, {"full", tensor_json(full, shape)}};
  put_map(request, map);
  Index expected = 0;
  if (const RankEntry* entry = map.map != nullptr ? map.map->find_rank(rank) : nullptr; entry && entry->shard_shape) {
    expected = checked_numel(*entry->shard_shape).value_or(0);
  }
  return tensor_request(std::move(request), full.dtype(), expected);
}

}  // namespace shardcheck::oracles

namespace shardcheck::oracles {

bool ExecTarget::supports(Op op) const {
  switch (op) {
    case Op::rebuild: return serves_rebuild_;
    case Op::extract: return serves_extract_;
    case Op::reshard: return serves_reshard_;
  }
  return false;
}

TargetResult<Resharded> ExecTarget::reshard(const TargetMap& source, const TargetMap& target, const ShardSet& shards,
                                            DType dtype, int scale_power, const DigestRequest& digest) {
  if (!supports(Op::reshard)) return unsupported(Op::reshard, name_);
  Json request = {{"op", "reshard"}, {"dtype", std::string(dtype_name(dtype))}, {"scale_power", scale_power}};
  put_map(request, source);
  put_map(request, target, "target_map");
  put_digest(request, digest);
  Json tensors = Json::object();
  for (const auto& [rank, shard] : shards) tensors[std::to_string(rank)] = tensor_json(shard, {shard.numel()});
  request["shards"] = std::move(tensors);
  Index expected = 0;
  if (target.map != nullptr) {
    for (const auto& entry : target.map->ranks) {
      if (entry.shard_shape) expected += checked_numel(*entry.shard_shape).value_or(0);
    }
  }
  const auto expected_bytes = static_cast<std::size_t>(expected) * element_size(dtype);
  auto answer = exchange(std::move(request), options_.timeout_seconds, expected_bytes);
  if (auto* f = std::get_if<TargetFault>(&answer)) return std::move(*f);
  if (auto* r = std::get_if<TargetRefusal>(&answer)) return std::move(*r);
  const Json& response = std::get<Json>(answer);
  const std::string op(op_name(Op::reshard));
  const auto result = response.find("result");
  if (result == response.end() || !result->is_object()) {
    return garbage_answer(op, response, "no-result", "no object of shards by rank");
  }
  Resharded out;
  for (const auto& [key, tensor] : result->items()) {
    auto rank = parse_rank_key(key);
    if (!rank) return garbage_answer(op, response, "bad-rank", fmt::format("a shard for rank key '{}'", excerpt(key)));
    auto decoded = decode_tensor(tensor, dtype);
    if (auto* bad = std::get_if<BadTensor>(&decoded)) return garbage_answer(op, response, bad->reason, bad->what);
    out.shards.emplace(*rank, std::move(std::get<Buffer>(decoded)));
  }
  if (!read_fallback(response, out.fallback)) return garbage_answer(op, response, "bad-fallback", kBadFallback);
  return out;
}

}  // namespace shardcheck::oracles
