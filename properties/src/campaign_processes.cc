// Isolation: the campaign's cases run in forked worker processes, so a case that
// crashes, hangs or exhausts memory takes down its worker only. The parent blames the
// case the worker was on, records it as a finding, and starts a fresh worker that goes
// on after it.
//
// The parent and a worker talk over two pipes in frames (campaign_frames.h): a 32-bit
// payload length, a 32-bit type, the payload (little-endian integers, strings as
// length + bytes).
//   parent -> worker  RUN   [first, end) of shard-local case numbers
//   worker -> parent  BATCH [first, reached) and the tallies and findings of those
//                     cases; reached < end when the worker stopped early (stop flag).
// Closing the worker's command pipe tells it to exit. Which case a worker is on (and
// since when, and whether it is still generating the case or already evaluating it)
// lives in a shared memory slot per worker, written without a system call per case.
// An implementation under test in another program can take a worker's place by
// speaking these frames over its stdin/stdout; it would announce each case it starts
// with a frame of its own in place of the shared slot.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <fstream>
#include <new>

#include <fmt/format.h>

#include "campaign_frames.h"
#include "campaign_internal.h"
#include "shardcheck/oracles/descendants.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"

namespace shardcheck::campaign::detail {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// A worker whose allocation failed under its data limit exits with this.
constexpr int kExitOutOfMemory = 86;
// Cases per RUN frame; each worker has up to two frames queued so it never waits.
constexpr Index kBatchCases = 256;
constexpr int kQueued = 2;
// Workers that die between cases (nothing to blame) this many times in a row end the
// campaign: something is wrong with the workers themselves.
constexpr int kMaxUnexplainedDeaths = 4;

std::int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// --- frames: campaign_frames.h -----------------------------------------------------

bool write_all(int fd, const std::string& bytes) {
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    written += static_cast<std::size_t>(n);
  }
  return true;
}

bool read_exact(int fd, char* out, std::size_t size) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, out + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

// --- shared slots -------------------------------------------------------------------

// A cache line each: aligned for the atomics, and no worker's stores touch another's line.
struct alignas(64) Slot {
  std::atomic<std::int64_t> k{0};           // the shard-local number of its case
  std::atomic<std::int64_t> started_ns{0};  // CLOCK_MONOTONIC when the case began
  std::atomic<int> phase{0};                // 0 between cases, 1 generating, 2 evaluating
};

struct alignas(64) Shared {
  std::atomic<int> stop{0};
};

// One anonymous shared mapping made before any fork: the stop flag and a slot per worker.
class SharedMemory {
 public:
  explicit SharedMemory(int jobs) : size_(sizeof(Shared) + sizeof(Slot) * static_cast<std::size_t>(jobs)) {
    void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(errno));
    memory_ = static_cast<char*>(p);
    new (memory_) Shared;
    for (int i = 0; i < jobs; ++i) new (memory_ + sizeof(Shared) + sizeof(Slot) * i) Slot;
  }
  ~SharedMemory() { munmap(memory_, size_); }
  SharedMemory(const SharedMemory&) = delete;
  SharedMemory& operator=(const SharedMemory&) = delete;
  Shared& shared() { return *std::launder(reinterpret_cast<Shared*>(memory_)); }
  Slot& slot(int i) { return *std::launder(reinterpret_cast<Slot*>(memory_ + sizeof(Shared) + sizeof(Slot) * i)); }

 private:
  std::size_t size_;
  char* memory_ = nullptr;
};

// --- the worker process --------------------------------------------------------------

void limit_data(Index limit) {
  // RLIMIT_DATA (Linux 4.7 on) counts private writable memory, what allocations take,
  // but not the address space a device runtime or a large library reserves without
  // using it (CUDA's context, libtorch_cuda's segments): under RLIMIT_AS neither a CUDA
  // backend nor a torch target could start. AddressSanitizer's shadow is such memory,
  // made up front: there the parent's watch on resident memory is the only limit.
  if (kAddressSanitizer || limit <= 0) return;
  std::ifstream statm("/proc/self/statm");
  unsigned long long size = 0, resident = 0, shared = 0, text = 0, library = 0, data = 0;
  if (!(statm >> size >> resident >> shared >> text >> library >> data)) return;
  const auto current = static_cast<rlim_t>(data) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE));
  rlimit r{};
  r.rlim_cur = r.rlim_max = current + static_cast<rlim_t>(limit);
  setrlimit(RLIMIT_DATA, &r);
}

// A worker leaves nothing behind: its targets and whatever they started (descendants.h).
[[noreturn]] void worker_exit(int code) {
  oracles::end_stray_children(/*all=*/true);
  _exit(code);
}

[[noreturn]] void worker_main(const Options& options, const Ledger& ledger, Shared& shared, Slot& slot,
                              int commands, int results, pid_t parent) {
  // Stopping is the parent's business: a Ctrl-C reaches the whole process group.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGPIPE, SIG_DFL);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(0);
  if (const int null = ::open("/dev/null", O_WRONLY); null >= 0) {
    dup2(null, STDOUT_FILENO);
    ::close(null);
  }
  limit_data(options.case_memory_limit);
  oracles::adopt_orphans();
  const auto phase = [&slot](int p) { slot.phase.store(p, std::memory_order_release); };
  try {
    for (;;) {
      char header[8];
      if (!read_exact(commands, header, sizeof header)) worker_exit(0);
      std::uint32_t length = 0, type = 0;
      std::memcpy(&length, header, 4);
      std::memcpy(&type, header + 4, 4);
      if (type != kRun || length != 16) worker_exit(3);
      char payload[16];
      if (!read_exact(commands, payload, sizeof payload)) worker_exit(0);
      Decoder d(payload, sizeof payload);
      const Range range{d.i64(), d.i64()};
      BatchResult result;
      Index k = range.first;
      for (; k < range.end; ++k) {
        if (shared.stop.load(std::memory_order_relaxed) != 0) break;
        slot.k.store(k, std::memory_order_relaxed);
        slot.started_ns.store(monotonic_ns(), std::memory_order_relaxed);
        run_case(options, ledger.index_of(k), result, phase);
        slot.phase.store(0, std::memory_order_release);
      }
      if (options.plant_garbage_at && !result.by_constructor.empty()) {
        const Index planted = *options.plant_garbage_at;
        for (Index j = range.first; j < k; ++j) {
          if (ledger.index_of(j) == planted) ++result.by_constructor.begin()->second.cases;
        }
      }
      if (!write_all(results, batch_frame({range.first, k}, result))) worker_exit(0);
      if (k < range.end) worker_exit(0);
    }
  } catch (const std::bad_alloc&) {
    _exit(kExitOutOfMemory);
  }
}

// --- the parent ---------------------------------------------------------------------

std::string signal_name(int signal) {
  switch (signal) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGTRAP: return "SIGTRAP";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("signal{}", signal);
  }
}

Index resident_bytes(pid_t pid) {
  std::ifstream statm(fmt::format("/proc/{}/statm", static_cast<long>(pid)));
  unsigned long long size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return static_cast<Index>(resident) * static_cast<Index>(sysconf(_SC_PAGESIZE));
}

struct Worker {
  pid_t pid = -1;
  int commands = -1;  // write end of its command pipe; -1 once closed
  int results = -1;   // read end of its result pipe
  std::string inbox;
  std::deque<Range> assigned;
  // When the parent killed it: why ("timeout", "oom") and the case it was on.
  std::string killed_for;
  Index killed_k = -1;
  int killed_phase = 0;
  // Killed for results that do not hold up: why, and whether its batch was taken back
  // to run again one case at a time (then its death blames no case).
  std::string garbage_why;
  bool garbage_retried = false;
  bool alive() const { return pid > 0; }
  // The parent kills it for `why`, blaming case k (-1: none) that was in `phase`.
  void kill_for(const std::string& why, Index k, int phase) {
    killed_for = why;
    killed_k = k;
    killed_phase = phase;
    ::kill(pid, SIGKILL);
  }
};

// --- scheduling: which cases a worker runs next ----------------------------------------

// The ledger's batches, and the cases of a batch whose results did not hold up, run again
// one per frame, so that the case whose results are garbage is named (and only that case).
class Schedule {
 public:
  Schedule(Ledger& ledger, Writer* writer) : ledger_(ledger), writer_(writer) {}

  // The next range to run: a case of a retried batch, alone, or the ledger's next batch.
  std::optional<Range> take(bool stopping) {
    if (!singles_.empty() && !stopping) {
      const Index k = singles_.front();
      singles_.pop_front();
      return Range{k, k + 1};
    }
    return ledger_.take(kBatchCases);
  }

  // A range handed out and not run goes back where it came from.
  void return_range(Range range) {
    if (range.empty()) return;
    if (range.size() == 1 && retry_of(range.first) != nullptr) singles_.push_front(range.first);
    else ledger_.give_back(range);
  }

  // The batch `whole` gave results that do not hold up (`why`): its cases run again
  // one at a time, unless it is one of those already.
  void retry_one_by_one(Range whole, const std::string& why) {
    if (retry_of(whole.first) != nullptr) return;
    retries_.push_back(Retry{whole, whole.size(), false, why});
    for (Index k = whole.first; k < whole.end; ++k) singles_.push_back(k);
  }

  // Case k of a retried batch ran again: `blamed` when its results were garbage again.
  void settle(Index k, bool blamed) {
    Retry* r = retry_of(k);
    if (r == nullptr) return;
    --r->left;
    r->blamed = r->blamed || blamed;
    if (r->left > 0 || r->blamed) return;
    // Each case alone gave results that hold up: the garbage did not come back, and no
    // case can be blamed. It is a finding all the same (a worker's memory went bad).
    FindingState finding;
    finding.judge = props::JudgeId::worker_crash;
    finding.signature = props::signature_of(finding.judge, "garbage:unrepeated");
    finding.message = fmt::format(
        "a worker process sent results for cases {} to {} that do not hold up ({}); run again one at a time, "
        "each case's results did",
        ledger_.index_of(r->whole.first), ledger_.index_of(r->whole.end - 1), r->why);
    finding.index = ledger_.index_of(r->whole.first);
    finding.occurrences = 1;
    finding.has_case = false;
    BatchResult result;
    result.add_finding(finding);
    ledger_.commit({r->whole.first, r->whole.first}, result);
    if (writer_) writer_->offer(finding);
  }

  // Cases of retried batches that a stop left unrun go back to the ledger.
  void give_back_singles() {
    for (Index k : singles_) ledger_.give_back({k, k + 1});
    singles_.clear();
  }

 private:
  struct Retry {
    Range whole;
    Index left = 0;  // its cases not yet run again
    bool blamed = false;
    std::string why;
  };

  Retry* retry_of(Index k) {
    for (Retry& r : retries_) {
      if (r.left > 0 && k >= r.whole.first && k < r.whole.end) return &r;
    }
    return nullptr;
  }

  Ledger& ledger_;
  Writer* writer_;
  std::deque<Index> singles_;  // cases of retried batches, to run one per frame
  std::vector<Retry> retries_;
};

// --- the watchdog: cases past their time or memory limit ------------------------------

// Kills the worker of a case that runs past the time limit or whose worker holds more
// than the memory limit; the worker's death is then blamed on that case (Pool::reap).
class Watchdog {
 public:
  Watchdog(const Options& options, SharedMemory& memory) : options_(options), memory_(memory) {}

  // Time on every call; memory (a read of /proc per worker) every 100 ms.
  void watch(std::vector<Worker>& workers) {
    if (Clock::now() - last_memory_watch_ >= std::chrono::milliseconds(100)) {
      last_memory_watch_ = Clock::now();
      watch_memory(workers);
    }
    watch_time(workers);
  }

 private:
  void watch_time(std::vector<Worker>& workers) {
    if (options_.case_time_limit <= 0) return;
    const auto limit_ns = static_cast<std::int64_t>(options_.case_time_limit * 1e9);
    const std::int64_t now = monotonic_ns();
    for (std::size_t i = 0; i < workers.size(); ++i) {
      Worker& w = workers[i];
      if (!w.alive() || !w.killed_for.empty()) continue;
      Slot& slot = memory_.slot(static_cast<int>(i));
      const std::int64_t started = slot.started_ns.load(std::memory_order_relaxed);
      const Index k = slot.k.load(std::memory_order_relaxed);
      const int phase = slot.phase.load(std::memory_order_acquire);
      // Read twice: a worker that moved on between the loads is not late.
      if (phase == 0 || started != slot.started_ns.load(std::memory_order_relaxed)) continue;
      if (now - started > limit_ns) w.kill_for("timeout", k, phase);
    }
  }

  // Under AddressSanitizer this is the only memory limit, elsewhere a backstop to the
  // data limit set in the worker.
  void watch_memory(std::vector<Worker>& workers) {
    if (options_.case_memory_limit <= 0) return;
    for (std::size_t i = 0; i < workers.size(); ++i) {
      Worker& w = workers[i];
      if (!w.alive() || !w.killed_for.empty()) continue;
      if (resident_bytes(w.pid) <= options_.case_memory_limit) continue;
      Slot& slot = memory_.slot(static_cast<int>(i));
      const int phase = slot.phase.load(std::memory_order_acquire);
      w.kill_for("oom", phase != 0 ? slot.k.load() : -1, phase);
    }
  }

  const Options& options_;
  SharedMemory& memory_;
  Clock::time_point last_memory_watch_ = Clock::now();
};

// --- the workers ----------------------------------------------------------------------

// Keeps `jobs` worker processes fed with ranges from the schedule, reads their batches,
// and replaces a worker that died, blaming the case it was on.
class Pool {
 public:
  Pool(const Options& options, const Control& control, Ledger& ledger, Writer* writer)
      : options_(options), control_(control), ledger_(ledger), writer_(writer),
        jobs_(std::max(1, options.jobs)), memory_(jobs_), workers_(static_cast<std::size_t>(jobs_)),
        schedule_(ledger, writer), watchdog_(options, memory_) {}

  void run(Monitor& monitor, const std::function<void()>& immediate) {
    for (;;) {
      const int stop = monitor.poll();
      if (stop == kStopImmediate) {
        kill_all();
        immediate();
      }
      if (stop != 0 && !stopping_) begin_stop();
      for (int i = 0; i < jobs_; ++i) feed(i);
      if (std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.alive(); })) return;
      wait_and_read(std::chrono::milliseconds(20));
      if (writer_) writer_->pump();
      watchdog_.watch(workers_);
    }
  }

  // Cases of retried batches that a stop left unrun go back to the ledger.
  void give_back_singles() { schedule_.give_back_singles(); }

 private:
  // Keeps worker i busy: starts it when there is work, queues ranges, retires it
  // (closes its command pipe) when there is none left.
  void feed(int i) {
    Worker& w = workers_[i];
    if (!w.alive()) {
      if (stopping_) return;
      auto range = schedule_.take(stopping_);
      if (!range) return;
      if (!spawn(i)) {
        schedule_.return_range(*range);
        return;
      }
      send(w, *range);
    }
    if (w.commands < 0) return;
    while (static_cast<int>(w.assigned.size()) < kQueued) {
      auto range = schedule_.take(stopping_);
      if (!range) break;
      send(w, *range);
    }
    if (w.assigned.empty()) close_commands(w);
  }

  void send(Worker& w, Range range) {
    Encoder e;
    e.i64(range.first);
    e.i64(range.end);
    w.assigned.push_back(range);
    // A failed write means the worker is gone: its death is handled when its result
    // pipe reports end of file.
    if (!write_all(w.commands, e.frame(kRun))) close_commands(w);
  }

  void close_commands(Worker& w) {
    if (w.commands >= 0) ::close(w.commands);
    w.commands = -1;
  }

  bool spawn(int i) {
    int commands[2], results[2];
    if (pipe2(commands, O_CLOEXEC) != 0) return spawn_failed();
    if (pipe2(results, O_CLOEXEC) != 0) {
      ::close(commands[0]);
      ::close(commands[1]);
      return spawn_failed();
    }
    const pid_t parent = getpid();
    const pid_t pid = oracles::fork_own_child();
    if (pid < 0) {
      for (int fd : {commands[0], commands[1], results[0], results[1]}) ::close(fd);
      return spawn_failed();
    }
    if (pid == 0) {
      ::close(commands[1]);
      ::close(results[0]);
      // Another worker's command pipe held open here would keep it from ever seeing
      // end of file.
      for (const Worker& other : workers_) {
        if (other.commands >= 0) ::close(other.commands);
        if (other.results >= 0) ::close(other.results);
      }
      worker_main(options_, ledger_, memory_.shared(), memory_.slot(i), commands[0], results[1], parent);
    }
    ::close(commands[0]);
    ::close(results[1]);
    fcntl(results[0], F_SETFL, fcntl(results[0], F_GETFL) | O_NONBLOCK);
    Worker& w = workers_[i];
    w = Worker{};
    w.pid = pid;
    w.commands = commands[1];
    w.results = results[0];
    memory_.slot(i).phase.store(0);
    return true;
  }

  bool spawn_failed() {
    warn(fmt::format("cannot start a worker process: {}", std::strerror(errno)));
    if (std::none_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.alive(); })) {
      begin_stop();
    }
    return false;
  }

  void begin_stop() {
    stopping_ = true;
    ledger_.request_stop();
    memory_.shared().stop.store(1, std::memory_order_relaxed);
    // A worker waiting for its next range exits on end of file; one in a case sees
    // the stop flag after it, reports what it ran and exits.
    for (Worker& w : workers_) close_commands(w);
  }

  void wait_and_read(std::chrono::milliseconds timeout) {
    std::vector<pollfd> fds;
    std::vector<int> owners;
    for (int i = 0; i < jobs_; ++i) {
      if (!workers_[i].alive()) continue;
      fds.push_back(pollfd{workers_[i].results, POLLIN, 0});
      owners.push_back(i);
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
    if (ready <= 0) return;  // timeout, or a signal (EINTR): the loop polls the stop flag
    for (std::size_t j = 0; j < fds.size(); ++j) {
      if (fds[j].revents != 0) drain(owners[j]);
    }
  }

  // Reads what worker i wrote; at end of file the worker is gone.
  void drain(int i) {
    Worker& w = workers_[i];
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(w.results, buffer, sizeof buffer);
      if (n > 0) {
        w.inbox.append(buffer, static_cast<std::size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      parse(i);
      reap(i);
      return;
    }
    parse(i);
  }

  void parse(int i) {
    Worker& w = workers_[i];
    if (!w.garbage_why.empty()) {
      w.inbox.clear();  // nothing it sends after garbage is trusted
      return;
    }
    std::size_t at = 0;
    while (w.inbox.size() - at >= 8) {
      std::uint32_t length = 0, type = 0;
      std::memcpy(&length, w.inbox.data() + at, 4);
      std::memcpy(&type, w.inbox.data() + at + 4, 4);
      if (type != kBatch || length > kMaxPayload) return garbage(i, "a frame of another type or size");
      if (w.inbox.size() - at - 8 < length) break;
      Decoder d(w.inbox.data() + at + 8, length);
      Range range;
      BatchResult result;
      if (!decode_batch(d, range, result)) return garbage(i, "a frame that does not decode");
      if (w.assigned.empty() || range.first != w.assigned.front().first || range.end < range.first ||
          range.end > w.assigned.front().end) {
        return garbage(i, "results for cases it was not given");
      }
      if (std::string why = validate_batch(ledger_, range, result); !why.empty()) return garbage(i, why);
      accept(w, range, result);
      at += 8 + length;
    }
    w.inbox.erase(0, at);
  }

  void accept(Worker& w, Range range, const BatchResult& result) {
    const Range whole = w.assigned.front();
    w.assigned.pop_front();
    ledger_.commit(range, result);
    if (range.end < whole.end) schedule_.return_range({range.end, whole.end});
    for (Index k = range.first; k < range.end; ++k) schedule_.settle(k, false);
    if (writer_) {
      for (const auto& [signature, finding] : result.findings) writer_->offer(finding);
    }
    unexplained_deaths_ = 0;
  }

  // Worker i sent something that is not a batch of its cases, or a batch whose counts do
  // not hold up: nothing from it is trusted, it is killed, and the campaign goes on. A
  // batch of one case blames that case (a crash finding, "crash:garbage:..."); a larger
  // batch runs again one case per frame, so that the case whose results are garbage is
  // named.
  void garbage(int i, const std::string& why) {
    Worker& w = workers_[i];
    w.inbox.clear();
    w.garbage_why = why;
    if (w.killed_for.empty()) {
      w.killed_for = "crash:garbage";
      w.killed_k = -1;
      w.killed_phase = 2;
      if (!w.assigned.empty() && w.assigned.front().size() == 1) {
        w.killed_k = w.assigned.front().first;
      } else if (!w.assigned.empty()) {
        const Range front = w.assigned.front();
        w.assigned.pop_front();
        schedule_.retry_one_by_one(front, why);
        w.garbage_retried = true;
      }
    }
    warn(fmt::format("a worker process sent results that do not hold up ({}); it is replaced", why));
    ::kill(w.pid, SIGKILL);
  }

  // Worker i's result pipe ended: collect its exit status, blame its case if it died
  // in one, and hand its unfinished ranges back.
  void reap(int i) {
    Worker& w = workers_[i];
    int status = 0;
    while (waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    oracles::forget_own_child(w.pid);
    // What a worker killed in a case left running (its targets' descendants) was handed
    // to this process (descendants.h).
    oracles::end_stray_children();
    Slot& slot = memory_.slot(i);
    int phase = slot.phase.load(std::memory_order_acquire);
    Index k = slot.k.load(std::memory_order_relaxed);
    std::string kind = w.killed_for;
    bool blamed = false;
    if (!kind.empty()) {
      // Killed by the parent: the case it judged, even if the worker moved on since.
      k = w.killed_k;
      phase = w.killed_phase;
      blamed = k >= 0;
    } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
      if (WIFEXITED(status) && WEXITSTATUS(status) == kExitOutOfMemory) kind = "oom";
      else if (WIFSIGNALED(status)) kind = "crash:" + signal_name(WTERMSIG(status));
      else kind = fmt::format("crash:exit{}", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      blamed = phase != 0;
    }
    blamed = blamed && !w.assigned.empty() && k >= w.assigned.front().first && k < w.assigned.front().end;
    if (blamed) {
      blame(w, k, kind, phase == 2);
    } else if (!kind.empty() && !w.garbage_retried) {
      ++unexplained_deaths_;
      warn(fmt::format("a worker process died between cases ({}); it is replaced", kind));
      if (unexplained_deaths_ >= kMaxUnexplainedDeaths && !stopping_) {
        warn("worker processes keep dying between cases; the campaign stops");
        begin_stop();
      }
    }
    for (const Range& range : w.assigned) schedule_.return_range(range);
    close_commands(w);
    ::close(w.results);
    w = Worker{};
    slot.phase.store(0);
  }

  // Case k of the worker's current range took the worker down: it is done, as a
  // finding; the rest of the range goes back.
  void blame(Worker& w, Index k, const std::string& kind, bool generated) {
    const Range front = w.assigned.front();
    w.assigned.pop_front();
    const Index index = ledger_.index_of(k);
    std::string message;
    if (kind == "timeout") {
      message = fmt::format("case {} ran longer than {} s; its worker was killed", index, options_.case_time_limit);
    } else if (kind == "oom") {
      message = fmt::format("case {} took more than {} MiB of memory; its worker was stopped", index,
                            options_.case_memory_limit >> 20);
    } else if (kind == "crash:garbage") {
      message = fmt::format("case {}: its worker process sent results that do not hold up ({})", index, w.garbage_why);
    } else {
      message = fmt::format("case {} took its worker process down ({})", index, kind.substr(kind.find(':') + 1));
    }
    if (!generated) message += " while the case was being generated";
    BatchResult result;
    record_worker_death(options_, index, kind, message, generated, result);
    ledger_.commit({k, k + 1}, result);
    schedule_.return_range({front.first, k});
    schedule_.return_range({k + 1, front.end});
    schedule_.settle(k, true);
    if (writer_) {
      for (const auto& [signature, finding] : result.findings) writer_->offer(finding);
    }
    unexplained_deaths_ = 0;
  }

  void kill_all() {
    for (Worker& w : workers_) {
      if (!w.alive()) continue;
      ::kill(w.pid, SIGKILL);
      while (waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      oracles::forget_own_child(w.pid);
    }
    oracles::end_stray_children();
  }

  void warn(const std::string& message) {
    if (control_.on_warning) control_.on_warning(message);
  }

  const Options& options_;
  const Control& control_;
  Ledger& ledger_;
  Writer* writer_;
  int jobs_;
  SharedMemory memory_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  int unexplained_deaths_ = 0;
  Schedule schedule_;
  Watchdog watchdog_;
};

}  // namespace

void run_processes(const Options& options, const Control& control, Ledger& ledger, Writer* writer,
                   Monitor& monitor, const std::function<void()>& immediate) {
  // A write to a worker that just died must fail with EPIPE, not end the campaign.
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &previous);
  // The descendants of a worker that dies (its targets' and theirs) are handed here.
  oracles::adopt_orphans();
  {
    Pool pool(options, control, ledger, writer);
    pool.run(monitor, immediate);
    pool.give_back_singles();
  }
  // The last workers' strays, handed over as their parents ended.
  oracles::end_stray_children();
  sigaction(SIGPIPE, &previous, nullptr);
}

}  // namespace shardcheck::campaign::detail
