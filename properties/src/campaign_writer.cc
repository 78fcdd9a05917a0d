// Keeps a campaign's output directory current while it runs, so that a campaign killed
// at any moment leaves every finding it announced and a report a few seconds old.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "campaign_internal.h"

namespace shardcheck::campaign::detail {

namespace fs = std::filesystem;

Writer::Writer(const Options& options, const Control& control, const Ledger& ledger,
               std::function<double()> seconds)
    : options_(options), control_(control), ledger_(ledger), seconds_(std::move(seconds)) {}

Writer::~Writer() {
  if (thread_.joinable()) {
    {
      std::lock_guard lock(mutex_);
      finishing_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
}

void Writer::start(const std::vector<FindingRecord>& known, bool threaded) {
  std::error_code ec;
  fs::create_directories(control_.out / "findings", ec);
  if (ec) warn(fmt::format("cannot create {}: {}", (control_.out / "findings").string(), ec.message()));
  // A resumed campaign: the files are made to match the record it resumes from (a
  // killed run may have left a case that its checkpoint never committed).
  std::vector<FindingState> rewrite;
  for (const auto& record : known) {
    FindingState state = FindingState::from(record);
    best_[record.signature] = state;
    rewrite.push_back(std::move(state));
  }
  write_findings(std::move(rewrite), false);
  write_state(false);
  next_flush_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(control_.flush_interval));
  if (threaded) thread_ = std::thread([this] { loop(); });
}

void Writer::offer(const FindingState& finding) {
  {
    std::lock_guard lock(mutex_);
    auto [it, inserted] = best_.try_emplace(finding.signature, finding);
    if (!inserted) {
      if (!(finding.key() < it->second.key())) return;
      it->second = finding;
    }
    queue_.push_back(finding);
  }
  wake_.notify_one();
}

void Writer::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_until(lock, next_flush_, [&] { return finishing_ || !queue_.empty(); });
    const bool finishing = finishing_;
    lock.unlock();
    pump();
    lock.lock();
    if (finishing && queue_.empty()) return;
  }
}

void Writer::pump() {
  std::vector<FindingState> batch;
  {
    std::lock_guard lock(mutex_);
    batch.swap(queue_);
  }
  if (!batch.empty()) write_findings(std::move(batch), true);
  if (Clock::now() >= next_flush_) {
    write_state(false);
    next_flush_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(control_.flush_interval));
  }
}

void Writer::write_findings(std::vector<FindingState> batch, bool announce) {
  std::lock_guard lock(write_mutex_);
  Report context;
  context.options = options_;
  for (const auto& finding : batch) {
    auto known = on_disk_.find(finding.signature);
    const bool is_new = known == on_disk_.end();
    // Offers arrive in order per signature, but a final reconciliation may bring an
    // earlier (larger) committed case: only a different case is written.
    if (!is_new && known->second.index == finding.index) continue;
    FindingRecord record = finding.record();
    fs::path path;
    if (finding.has_case) {
      record.reproducer = generate_indexed_case(options_, finding.index);
      path = control_.out / "findings" / finding_file_name(finding.signature);
      if (!write_file(path, finding_case_file(context, record).dump(2) + "\n")) continue;
    }
    on_disk_[finding.signature] = Written{finding.index, finding.key()};
    if (announce && is_new && control_.on_new_finding) control_.on_new_finding(record, path);
  }
}

void Writer::write_reduced(const std::vector<FindingRecord>& findings) {
  std::lock_guard lock(write_mutex_);
  Report context;
  context.options = options_;
  for (const FindingRecord& finding : findings) {
    if (!finding.reduction) continue;
    write_file(control_.out / "findings" / finding_file_name(finding.signature),
               finding_case_file(context, finding).dump(2) + "\n");
  }
}

void Writer::write_state(bool complete, bool final) {
  Checkpoint checkpoint = ledger_.snapshot(seconds_(), complete);
  // The last report says whether the ledger adds up (every worker has returned by now).
  if (final) checkpoint.report.ledger_error = ledger_.audit(complete);
  std::lock_guard lock(write_mutex_);
  const Report& report = checkpoint.report;
  timeline_.push_back(TimelineSample{report.seconds, report.cases, static_cast<Index>(report.findings.size())});
  // A day's campaign samples tens of thousands of times: every other sample goes once
  // there are too many for a chart, the first and the latest always kept.
  constexpr std::size_t kMaxSamples = 2048;
  if (timeline_.size() > kMaxSamples) {
    std::vector<TimelineSample> thinned;
    for (std::size_t i = 0; i < timeline_.size(); i += 2) thinned.push_back(timeline_[i]);
    if (timeline_.size() % 2 == 0) thinned.push_back(timeline_.back());
    timeline_ = std::move(thinned);
  }
  write_file(control_.out / "checkpoint.json", checkpoint_to_json(checkpoint).dump() + "\n");
  write_file(control_.out / "table.txt", format_table(report));
  write_file(control_.out / "report.json", report_to_json(report).dump(2) + "\n");
  write_file(control_.out / "report.html", report_html(report, timeline_));
}

void Writer::flush_now() { write_state(false); }

void Writer::finish(bool complete) {
  {
    std::lock_guard lock(mutex_);
    finishing_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
  else pump();
  // Every case offered is committed by now, but a file may still hold a smaller case
  // from a run that was killed before committing it: the record decides.
  std::vector<FindingState> committed;
  for (const auto& record : ledger_.snapshot(0, complete).report.findings) {
    committed.push_back(FindingState::from(record));
  }
  write_findings(std::move(committed), true);
  write_state(complete, /*final=*/true);
}

// Writes a sibling temporary file and renames it over `path`: a reader (or a campaign
// killed mid-write) sees the old file or the new one, never part of one. The temporary's
// name (".NAME.PID.N.tmp") is what a later run clears as a killed writer's leftover.
bool Writer::write_file(const fs::path& path, const std::string& text) {
  static std::atomic<unsigned> counter{0};
  const fs::path temp = path.parent_path() / fmt::format(".{}.{}.{}.tmp", path.filename().string(),
                                                         static_cast<long>(getpid()), counter.fetch_add(1));
  std::string why;
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) why = std::strerror(errno);
  std::size_t written = 0;
  while (why.empty() && written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      why = n < 0 ? std::strerror(errno) : "the disk took no more bytes";
    else
      written += static_cast<std::size_t>(n);
  }
  if (fd >= 0 && ::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  if (why.empty() && ::rename(temp.c_str(), path.c_str()) != 0) why = std::strerror(errno);
  if (why.empty()) {
    failing_.erase(path);
    return true;
  }
  if (fd >= 0) ::unlink(temp.c_str());
  // A full disk fails every write for as long as it lasts: one warning per file.
  if (failing_.count(path) == 0) warn(fmt::format("cannot write {}: {}", path.string(), why));
  failing_[path] = why;
  return false;
}

std::vector<OutputError> Writer::output_errors() {
  std::lock_guard lock(write_mutex_);
  std::vector<OutputError> errors;
  for (const auto& [path, why] : failing_) errors.push_back(OutputError{path, why});
  return errors;
}

void Writer::warn(const std::string& message) {
  if (control_.on_warning) control_.on_warning(message);
}

}  // namespace shardcheck::campaign::detail
