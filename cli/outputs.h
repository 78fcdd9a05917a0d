// Where `campaign` and `campaign merge` write: an output directory held by one run at a
// time and never holding two campaigns' files, and report files (--junit, --markdown)
// tried before the run, so that a path that cannot be written is a usage error before any
// case runs rather than a failure after the whole campaign.
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "reports.h"

namespace shardcheck::cli {

// The lock of an output directory: a write lock (fcntl) on DIR/.shardcheck.lock, held
// until the process ends (the kernel drops it with the process, so a crashed holder
// leaves no stale lock). The file also holds the holder's pid, for the next run's
// refusal where the lock cannot say it.
class OutDirLock {
 public:
  OutDirLock() = default;
  OutDirLock(const OutDirLock&) = delete;
  OutDirLock& operator=(const OutDirLock&) = delete;
  ~OutDirLock();
  // Empty once held; else the sentence saying who holds it (or why it cannot be taken).
  std::string acquire(const std::filesystem::path& dir, const std::string& what_to_do);

 private:
  int fd_ = -1;
};

// What a run may do with a directory that holds outputs already (a report, a checkpoint
// or finding files).
enum class Reuse {
  refuse,     // a new campaign or merge: refused, saying how to resume or overwrite
  resume,     // --resume: the campaign's own outputs, written on
  overwrite,  // --overwrite: the outputs are removed first
};

// Makes DIR and DIR/findings, takes the lock, applies `reuse`, removes the temporaries
// of a killed writer, and writes a byte into both folders to see that they take one.
// Empty when the run may go on; else the sentence to print after "shardcheck COMMAND: "
// (the caller exits with the usage code). `flag` names the option that gave DIR.
std::string prepare_out_dir(const std::filesystem::path& dir, Reuse reuse, const std::string& flag, OutDirLock& lock);

// Removes DIR/findings/*.json files whose names are not in `recorded`: cases a killed
// run found after its last checkpoint, run again by the resume. Empty, or the sentence.
std::string remove_unrecorded_findings(const std::filesystem::path& dir, const std::set<std::string>& recorded);

// The finding files in DIR/findings (*.json names), sorted.
std::vector<std::string> finding_files_in(const std::filesystem::path& dir);

// Whether `name` is a temporary of shardcheck's writers ("NAME.PID.tmp",
// ".NAME.PID.N.tmp"): what a killed run leaves behind.
bool is_writer_temporary(const std::string& name);

// Tries every report path `files` names before the run: its folder takes a file (a
// byte written and removed), or the device or pipe it names opens for writing. Empty,
// or the sentence ("cannot write --junit PATH: ...").
std::string probe_report_files(const ReportFiles& files);

}  // namespace shardcheck::cli
