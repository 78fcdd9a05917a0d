#include "shardcheck/oracles/descendants.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace shardcheck::oracles {

namespace {

// A spin lock, not a mutex: a forked child (a campaign worker goes on without exec)
// finds it as the forking thread left it, held, and can clear it with one store.
std::atomic<bool> g_busy{false};
std::vector<pid_t>& own_children() {
  static std::vector<pid_t> children;
  return children;
}

struct Held {
  Held() {
    while (g_busy.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
  }
  ~Held() { g_busy.store(false, std::memory_order_release); }
};

// The children of this process, read from /proc/<pid>/stat (its fourth field is the
// parent's pid; the second, the command, is in parentheses and may hold spaces).
std::vector<pid_t> children_of_self() {
  std::vector<pid_t> children;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return children;
  while (const dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || pid <= 0) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    std::FILE* stat = std::fopen(path, "re");
    if (stat == nullptr) continue;
    char line[1024];
    const bool read = std::fgets(line, sizeof line, stat) != nullptr;
    std::fclose(stat);
    const char* close = read ? std::strrchr(line, ')') : nullptr;
    char state = 0;
    long parent = 0;
    if (close != nullptr && std::sscanf(close + 1, " %c %ld", &state, &parent) == 2 && parent == self) {
      children.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(proc);
  return children;
}

}  // namespace

void adopt_orphans() {
  static std::once_flag once;
  std::call_once(once, [] { ::prctl(PR_SET_CHILD_SUBREAPER, 1); });
}

pid_t fork_own_child() {
  Held held;
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The parent's children are not this process's; the lock is the forking thread's.
    own_children().clear();
    g_busy.store(false, std::memory_order_release);
    return 0;
  }
  if (pid > 0) own_children().push_back(pid);
  return pid;
}

void forget_own_child(pid_t child) {
  Held held;
  auto& own = own_children();
  own.erase(std::remove(own.begin(), own.end(), child), own.end());
}

int end_stray_children(bool all) {
  int ended = 0;
  for (;;) {
    std::vector<pid_t> strays;
    {
      Held held;
      const auto& own = own_children();
      for (pid_t child : children_of_self()) {
        if (all || std::find(own.begin(), own.end(), child) == own.end()) strays.push_back(child);
      }
      for (pid_t stray : strays) ::kill(stray, SIGKILL);
    }
    if (strays.empty()) return ended;
    for (pid_t stray : strays) {
      while (::waitpid(stray, nullptr, 0) < 0 && errno == EINTR) {
      }
      ++ended;
    }
  }
}

}  // namespace shardcheck::oracles
