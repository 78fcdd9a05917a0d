// JUnit XML and Markdown reports of campaigns and replays (reports.h).
#include "reports.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "shardcheck/escape.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/properties.h"

namespace shardcheck::cli {

namespace fs = std::filesystem;

namespace {

std::string implementation_of(const campaign::Options& o) {
  return o.eval.target.empty() ? std::string(policy_name(o.eval.policy)) : o.eval.target;
}

// Why a table row fails, or empty: the campaign's own failure rule (Report::failed) per row.
std::string row_failure(const campaign::Tally& t, bool strict_layout) {
  std::vector<std::string> what;
  if (t.wrong > 0) what.push_back(fmt::format("{} silently wrong", t.wrong));
  if (t.crashed > 0) what.push_back(fmt::format("{} crashed", t.crashed));
  if (t.target_faults > 0) what.push_back(fmt::format("{} target faults", t.target_faults));
  if (strict_layout && t.valid_but_different > 0) {
    what.push_back(fmt::format("{} valid but different (--strict-layout)", t.valid_but_different));
  }
  return fmt::format("{}", fmt::join(what, ", "));
}

std::string tally_text(const campaign::Tally& t) {
  return fmt::format(
      "cases {}, refused {}, exact {}, silently wrong {}, valid but different {}, crashed {}, "
      "target faults {}",
      t.cases, t.refused, t.exact, t.wrong, t.valid_but_different, t.crashed, t.target_faults);
}

struct Row {
  std::string section;  // constructor, corruption, refused_as, operation
  std::string name;
  campaign::Tally tally;
};

// The table's rows as format_table lists them (every constructor and corruption kind,
// the refusal kinds seen, both operations).
std::vector<Row> table_rows(const campaign::Report& report) {
  std::vector<Row> rows;
  auto add = [&](const char* section, std::string_view name, const std::map<std::string, campaign::Tally>& tallies) {
    auto it = tallies.find(std::string(name));
    rows.push_back(Row{section, std::string(name), it == tallies.end() ? campaign::Tally{} : it->second});
  };
  for (std::string_view name : gen::constructor_names()) add("constructor", name, report.by_constructor);
  add("corruption", gen::kNoCorruption, report.by_corruption);
  for (std::string_view name : gen::corruption_kinds()) add("corruption", name, report.by_corruption);
  for (const auto& [name, tally] : report.by_refusal_kind) rows.push_back(Row{"refused_as", name, tally});
  for (Op op : {Op::rebuild, Op::extract}) add("operation", op_name(op), report.by_op);
  return rows;
}

std::string repro_command(const fs::path& file) { return "shardcheck repro " + oracles::shell_word(file.string()); }

}  // namespace

void add_report_options(CLI::App* sub, ReportFiles& files, bool markdown) {
  sub->add_option("--junit", files.junit, "Also write a JUnit XML report to FILE (docs/reports.md)")->type_name("FILE");
  if (markdown) {
    sub->add_option("--markdown", files.markdown, "Also write a Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY)")
        ->type_name("FILE");
  }
}

std::string campaign_junit(const campaign::Report& report, const fs::path& out) {
  const campaign::Options& o = report.options;
  std::string cases;
  int count = 0;
  int failures = 0;
  auto testcase = [&](const std::string& classname, const std::string& name, const std::string& failure_type,
                      const std::string& failure_message, const std::string& body, const std::string& system_out) {
    ++count;
    cases += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\">\n", escape::markup(classname),
                         escape::markup(name));
    if (!failure_message.empty()) {
      ++failures;
      cases += fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n", escape::markup(failure_type),
                           escape::markup(failure_message), escape::markup(body));
    }
    if (!system_out.empty()) cases += fmt::format("      <system-out>{}</system-out>\n", escape::markup(system_out));
    cases += "    </testcase>\n";
  };
  for (const auto& finding : report.findings) {
    const auto& row = props::judge_row(finding.judge);
    const fs::path file = out / "findings" / campaign::finding_file_name(finding.signature);
    std::string body =
        fmt::format("{}\n{} cases, first kept: case {}\n", finding.message, finding.occurrences, finding.first_case);
    body += finding.has_case ? fmt::format("case file: {}\nreplay: {}\n", file.string(), repro_command(file))
                             : "no case file: the case could not be generated again\n";
    std::string finding_class(props::finding_class_name(row.finding_class));  // "silently wrong"
    std::replace(finding_class.begin(), finding_class.end(), ' ', '_');
    testcase("shardcheck.finding." + finding_class, finding.signature, std::string(row.name), finding.message, body,
             "");
  }
  for (const Row& row : table_rows(report)) {
    const std::string why = row_failure(row.tally, o.eval.strict_layout);
    testcase("shardcheck.table." + row.section, row.name, "table-row", why, why.empty() ? "" : tally_text(row.tally),
             tally_text(row.tally));
  }
  if (!report.ledger_error.empty()) {
    testcase("shardcheck.campaign", "ledger", "ledger", "the campaign's cases are not exactly the cases it ran",
             report.ledger_error, "");
  }
  const std::string suite = fmt::format("shardcheck campaign --seed {} ({} {}, oracle {})", o.seed,
                                        o.eval.target.empty() ? "policy" : "target", implementation_of(o),
                                        oracles::oracle_kind_name(o.eval.oracle));
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format("<testsuites name=\"shardcheck\" tests=\"{}\" failures=\"{}\" errors=\"0\" time=\"{:.3f}\">\n",
                     count, failures, report.seconds);
  xml +=
      fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"{:.3f}\">\n",
                  escape::markup(suite), count, failures, report.seconds);
  xml += fmt::format(
      "    <properties>\n      <property name=\"seed\" value=\"{}\"/>\n"
      "      <property name=\"cases\" value=\"{}\"/>\n"
      "      <property name=\"implementation\" value=\"{}\"/>\n"
      "      <property name=\"complete\" value=\"{}\"/>\n    </properties>\n",
      o.seed, report.cases, escape::markup(implementation_of(o)), report.complete ? "true" : "false");
  xml += cases;
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

std::string campaign_markdown(const campaign::Report& report, const fs::path& out) {
  const campaign::Options& o = report.options;
  std::string md;
  const bool failed = report.failed();
  md += fmt::format("## shardcheck campaign: {}\n\n", failed ? "FAIL" : "PASS");
  md += fmt::format("{} cases{} in {:.1f} s, seed {}, {} {}, oracle {}{}.\n\n", report.cases,
                    report.complete ? "" : " (stopped early)", report.seconds, o.seed,
                    o.eval.target.empty() ? "policy" : "target", escape::markdown_code(implementation_of(o)),
                    oracles::oracle_kind_name(o.eval.oracle),
                    o.generate.record_digest ? ", content digests recorded and verified" : "");
  const auto& t = report.total;
  md += fmt::format(
      "| | cases | refused | exact | silently wrong | valid but different | crashed | target faults |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n"
      "| **total** | {} | {} | {} | {} | {} | {} | {} |\n",
      t.cases, t.refused, t.exact, t.wrong, t.valid_but_different, t.crashed, t.target_faults);
  std::string section;
  for (const Row& row : table_rows(report)) {
    if (row.tally.cases == 0) continue;
    const auto& r = row.tally;
    md += fmt::format("| {}: {} | {} | {} | {} | {} | {} | {} | {} |\n", row.section, escape::markdown_code(row.name),
                      r.cases, r.refused,
                      r.exact, r.wrong, r.valid_but_different, r.crashed, r.target_faults);
  }
  if (!report.ledger_error.empty()) {
    md += fmt::format("\n**The ledger does not add up**: {}\n", escape::markdown_code(report.ledger_error));
  }
  if (!report.findings.empty()) {
    md += fmt::format("\n### {} finding signatures\n\n| signature | cases | replay |\n|---|---:|---|\n",
                      report.findings.size());
    for (const auto& finding : report.findings) {
      const fs::path file = out / "findings" / campaign::finding_file_name(finding.signature);
      md += fmt::format("| {} | {} | {} |\n", escape::markdown_code(finding.signature), finding.occurrences,
                        finding.has_case ? escape::markdown_code(repro_command(file)) : "(no case file)");
    }
  }
  if (t.valid_but_different > 0 && !o.eval.strict_layout) {
    md += fmt::format(
        "\n{} valid-but-different cases do not fail the run: their maps pass every check "
        "(contract 10; `--digest` closes it for rebuild, `--strict-layout` makes them findings).\n",
        t.valid_but_different);
  }
  return md;
}

namespace {

// Writes all of `text` to `fd`: empty, or the system's reason.
std::string write_all(int fd, const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? std::strerror(errno) : "the disk took no more bytes";
    written += static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

std::string write_report_reason(const fs::path& path, const std::string& text) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (fs::exists(status) && !fs::is_regular_file(status)) {
    // A device or a pipe (/dev/stdout, /dev/full) is written in place: a rename would
    // replace the device node itself with a file.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return std::strerror(errno);
    std::string why = write_all(fd, text);
    if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
    return why;
  }
  const fs::path temp = path.string() + fmt::format(".{}.tmp", static_cast<long>(getpid()));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::strerror(errno);
  std::string why = write_all(fd, text);
  if (::close(fd) != 0 && why.empty()) why = std::strerror(errno);
  if (why.empty() && ::rename(temp.c_str(), path.c_str()) != 0) why = std::strerror(errno);
  if (!why.empty()) ::unlink(temp.c_str());
  return why;
}

std::string write_report_file(const fs::path& path, const std::string& text) {
  const std::string why = write_report_reason(path, text);
  return why.empty() ? std::string() : fmt::format("cannot write {}: {}", path.string(), why);
}

std::vector<campaign::OutputError> write_campaign_reports(const campaign::Report& report, const fs::path& out,
                                                          const ReportFiles& files, const char* command) {
  std::vector<campaign::OutputError> errors;
  auto write = [&](const std::string& path, const std::string& text) {
    if (path.empty()) return;
    if (std::string why = write_report_reason(path, text); !why.empty()) {
      fmt::print(stderr, "shardcheck {}: cannot write {}: {}\n", command, path, why);
      errors.push_back(campaign::OutputError{path, why});
    }
  };
  write(files.junit, campaign_junit(report, out));
  write(files.markdown, campaign_markdown(report, out));
  return errors;
}

std::string repro_junit(const std::string& folder, const std::vector<ReplayedCase>& cases) {
  int failures = 0;
  int errors = 0;
  double seconds = 0;
  std::string body;
  for (const auto& c : cases) {
    seconds += c.seconds;
    const std::string name = fs::path(c.path).filename().string();
    body += fmt::format("    <testcase classname=\"shardcheck.repro\" name=\"{}\" file=\"{}\" time=\"{:.3f}\">\n",
                        escape::markup(name), escape::markup(c.path), c.seconds);
    std::string text = fmt::format("{}\n", fmt::join(c.lines, "\n"));
    if (c.exit_code == kExitFound) {
      ++failures;
      text += fmt::format("replayed with {}\nreplay: {}\n", c.implementation, repro_command(c.path));
      body += fmt::format("      <failure type=\"repro\" message=\"{}\">{}</failure>\n",
                          escape::markup(c.lines.empty() ? "failed" : c.lines.front()), escape::markup(text));
    } else if (c.exit_code != kExitOk) {
      ++errors;
      body += fmt::format("      <error type=\"unusable\" message=\"{}\">{}</error>\n",
                          escape::markup(c.lines.empty() ? "cannot be replayed" : c.lines.front()), escape::markup(text));
    } else {
      body += fmt::format("      <system-out>{}</system-out>\n", escape::markup(text));
    }
    body += "    </testcase>\n";
  }
  std::string xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  xml += fmt::format("<testsuites name=\"shardcheck\" tests=\"{}\" failures=\"{}\" errors=\"{}\" time=\"{:.3f}\">\n",
                     cases.size(), failures, errors, seconds);
  xml += fmt::format(
      "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"0\" time=\"{:.3f}\">\n",
      escape::markup("shardcheck repro " + folder), cases.size(), failures, errors, seconds);
  xml += body;
  xml += "  </testsuite>\n</testsuites>\n";
  return xml;
}

}  // namespace shardcheck::cli
