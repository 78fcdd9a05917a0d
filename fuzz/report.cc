#include "report.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "shardcheck/oracles/reference.h"

namespace shardcheck::fuzz {

namespace {

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, "1") == 0;
}

std::atomic<bool> g_stats_enabled{false};
std::atomic<long long> g_inputs{0};
std::atomic<long long> g_usable{0};

void print_stats() {
  const long long inputs = g_inputs.load();
  const long long usable = g_usable.load();
  std::fprintf(stderr, "SHARDCHECK-STATS: %lld inputs, %lld usable (%.1f%%)\n", inputs, usable,
               inputs == 0 ? 0.0 : 100.0 * static_cast<double>(usable) / static_cast<double>(inputs));
}

}  // namespace

void report_finding(const props::Finding& finding, std::string_view found_by, bool under_legacy) {
  props::FoundWith found;
  found.policy = under_legacy ? Policy::legacy : Policy::strict;
  found.by = fmt::format("fuzz target {}", found_by);
  const Json j = props::finding_case_file(finding, found);
  // The signature goes out first and alone, flushed, so that even a log cut short by
  // the abort keeps the line campaigns deduplicate by.
  std::fprintf(stderr, "\n%.*s%s\n", static_cast<int>(kFindingPrefix.size()), kFindingPrefix.data(),
               finding.signature.c_str());
  std::fprintf(stderr, "%s\n", finding.message.c_str());
  std::fflush(stderr);
  std::fprintf(stderr, "%.*s\n%s\n%.*s\n", static_cast<int>(kCaseBegin.size()), kCaseBegin.data(),
               j.dump(2, ' ', false, Json::error_handler_t::replace).c_str(), static_cast<int>(kCaseEnd.size()), kCaseEnd.data());
  std::fflush(stderr);
  // abort() skips atexit: a measurement run that ends in a finding still reports.
  if (g_stats_enabled) print_stats();
  std::abort();
}

bool replay_strict() {
  static const bool strict = env_flag("SHARDCHECK_REPLAY_STRICT");
  return strict;
}

InputScope::~InputScope() { oracles::forget_reference_verdicts(); }

void count_input(bool usable) {
  static const bool enabled = [] {
    if (!env_flag("SHARDCHECK_FUZZ_STATS")) return false;
    std::atexit(print_stats);
    g_stats_enabled = true;
    return true;
  }();
  if (!enabled) return;
  g_inputs.fetch_add(1, std::memory_order_relaxed);
  if (usable) g_usable.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace shardcheck::fuzz
