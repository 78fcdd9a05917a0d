// The end of a campaign: each finding's kept case reduced while it shows the same
// (props::reduce_case), in worker processes when the campaign isolates its cases (a
// replay that crashes or hangs costs its worker, not the campaign), in threads otherwise.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "campaign_internal.h"
#include "shardcheck/oracles/descendants.h"
#include "shardcheck/reduce.h"

namespace shardcheck::campaign::detail {

namespace {

// What a finding's case becomes, or nullopt when it cannot be reduced: a worker's death
// (its case is not replayed in-process), no case, or a case that does not show the
// finding again when generated anew.
std::optional<FindingRecord> reduced_record(const Options& options, const FindingRecord& finding) {
  const props::JudgeId judge = finding.judge;
  if (!finding.has_case || judge == props::JudgeId::worker_crash || judge == props::JudgeId::worker_timeout ||
      judge == props::JudgeId::worker_oom) {
    return std::nullopt;
  }
  const Case c = generate_indexed_case(options, finding.first_case);
  const props::EvalOptions eval = eval_options_of(options, finding.first_case);
  const props::Shown shown = props::shown_by(c, eval);
  if (shown.signature != finding.signature) return std::nullopt;
  props::ReduceOptions reduce;
  reduce.max_evaluations =
      eval.target.empty() ? options.reduce_evaluations : std::max<Index>(1, options.reduce_evaluations / 10);
  const props::Reduced reduced = props::reduce_case(c, props::keeps_what_it_shows(shown, eval), reduce);
  FindingRecord out = finding;
  out.reproducer = reduced.reduced;
  out.reduction = FindingRecord::Reduction{reduced.steps, reduced.evaluations, reduced.minimal};
  return out;
}

Json record_json(std::size_t i, const FindingRecord& r) {
  return Json{{"i", i},
              {"case", encode_case(r.reproducer)},
              {"steps", r.reduction->steps},
              {"evaluations", r.reduction->evaluations},
              {"minimal", r.reduction->minimal}};
}

void apply_record(const Json& line, std::vector<FindingRecord>& findings) {
  if (!line.is_object() || !line.contains("i") || !line["i"].is_number_unsigned()) return;
  const auto i = line["i"].get<std::size_t>();
  if (i >= findings.size()) return;
  auto reproducer = decode_case(line.value("case", Json()));
  if (!reproducer) return;
  findings[i].reproducer = std::move(reproducer).value();
  findings[i].reduction = FindingRecord::Reduction{line.value("steps", Index{0}), line.value("evaluations", Index{0}),
                                                   line.value("minimal", false)};
}

// Reads a child's lines until it ends, `deadline` or a stop; false at the deadline or a stop.
bool read_child(int fd, std::chrono::steady_clock::time_point deadline, const Control& control, std::string& into) {
  char buffer[65536];
  for (;;) {
    if (control.stop != nullptr && control.stop->load() != 0) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
    if (ready < 0 && errno != EINTR) return true;
    if (ready <= 0) continue;
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    into.append(buffer, static_cast<std::size_t>(n));
  }
}

using Clock = std::chrono::steady_clock;

void reduce_in_processes(const Options& options, std::vector<FindingRecord>& findings, const Control& control,
                         Clock::time_point last_start) {
  const int jobs = std::max(1, std::min<int>(options.jobs, static_cast<int>(findings.size())));
  struct Child {
    pid_t pid = -1;
    int fd = -1;
    std::size_t assigned = 0;
  };
  std::vector<Child> children(static_cast<std::size_t>(jobs));
  const pid_t parent = ::getpid();
  for (int j = 0; j < jobs; ++j) {
    int pipe_fds[2];
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) break;
    const pid_t pid = oracles::fork_own_child();
    if (pid == 0) {
      ::close(pipe_fds[0]);
      ::signal(SIGINT, SIG_IGN);
      ::signal(SIGTERM, SIG_IGN);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(0);
      oracles::adopt_orphans();
      for (std::size_t i = static_cast<std::size_t>(j); i < findings.size() && Clock::now() < last_start;
           i += static_cast<std::size_t>(jobs)) {
        if (auto reduced = reduced_record(options, findings[i])) {
          const std::string line = record_json(i, *reduced).dump() + "\n";
          for (std::size_t sent = 0; sent < line.size();) {
            const ssize_t n = ::write(pipe_fds[1], line.data() + sent, line.size() - sent);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) ::_exit(1);
            sent += static_cast<std::size_t>(n);
          }
        }
      }
      oracles::end_stray_children(/*all=*/true);
      ::_exit(0);
    }
    ::close(pipe_fds[1]);
    if (pid < 0) {
      ::close(pipe_fds[0]);
      break;
    }
    children[static_cast<std::size_t>(j)] = Child{pid, pipe_fds[0], (findings.size() + jobs - 1 - j) / jobs};
  }
  for (Child& child : children) {
    if (child.pid < 0) continue;
    // A case's time limit per case the child reduces: a replay that hangs ends there.
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
                              options.case_time_limit * static_cast<double>(std::max<std::size_t>(1, child.assigned))));
    std::string text;
    if (!read_child(child.fd, deadline, control, text)) ::kill(child.pid, SIGKILL);
    ::close(child.fd);
    while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    oracles::forget_own_child(child.pid);
    for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos; start = end + 1) {
      apply_record(Json::parse(text.substr(start, end - start), nullptr, false), findings);
    }
  }
  oracles::end_stray_children();
}

void reduce_in_threads(const Options& options, std::vector<FindingRecord>& findings, Clock::time_point last_start) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> threads;
  const int jobs = std::max(1, std::min<int>(options.jobs, static_cast<int>(findings.size())));
  for (int j = 0; j < jobs; ++j) {
    threads.emplace_back([&] {
      for (std::size_t i = next++; i < findings.size() && Clock::now() < last_start; i = next++) {
        if (auto reduced = reduced_record(options, findings[i])) findings[i] = std::move(*reduced);
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace

void reduce_findings(const Options& options, std::vector<FindingRecord>& findings, const Control& control,
                     double seconds) {
  if (options.reduce_evaluations <= 0 || findings.empty()) return;
  // steady_clock is the same clock in a forked child: the children read this deadline too.
  const Clock::time_point last_start =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (options.isolate) {
    reduce_in_processes(options, findings, control, last_start);
  } else {
    reduce_in_threads(options, findings, last_start);
  }
}

}  // namespace shardcheck::campaign::detail
