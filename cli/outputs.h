// Where `campaign` and `campaign merge` write: an output directory and report files
// (--junit, --markdown) tried before the run, so that a path that cannot be written is a
// usage error before any case runs rather than a failure after the whole campaign.
#pragma once

#include <filesystem>
#include <string>

#include "reports.h"

namespace shardcheck::cli {

// Makes DIR and DIR/findings and writes a byte into both folders to see that they take
// one. Empty when the run may go on; else the sentence to print after "shardcheck
// COMMAND: " (the caller exits with the usage code). `flag` names the option that gave DIR.
std::string prepare_out_dir(const std::filesystem::path& dir, const std::string& flag);

// Tries every report path `files` names before the run: its folder takes a file (a
// byte written and removed), or the device or pipe it names opens for writing. Empty,
// or the sentence ("cannot write --junit PATH: ...").
std::string probe_report_files(const ReportFiles& files);

}  // namespace shardcheck::cli
