// report.html: the campaign's report as one self-contained page (inline CSS and SVG, no
// script, nothing fetched), readable from a CI artifact or a file system.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "shardcheck/escape.h"
#include "shardcheck/campaign.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"

namespace shardcheck::campaign {

namespace {

// The outcome classes of a tally, in the table's order, with their colours.
struct Series {
  const char* name;
  const char* colour;
  Index Tally::*count;
};
constexpr std::array<Series, 6> kSeries = {{
    {"refused", "#4c78a8", &Tally::refused},
    {"exact", "#54a24b", &Tally::exact},
    {"silently wrong", "#e45756", &Tally::wrong},
    {"valid but different", "#f2cf5b", &Tally::valid_but_different},
    {"crashed", "#b279a2", &Tally::crashed},
    {"target faults", "#9d755d", &Tally::target_faults},
}};

std::string legend() {
  std::string out = "<p class=\"legend\">";
  for (const Series& s : kSeries) {
    out += fmt::format(
        "<span><svg width=\"12\" height=\"12\" aria-hidden=\"true\"><rect width=\"12\" height=\"12\" "
        "fill=\"{}\"/></svg> {}</span>",
        s.colour, s.name);
  }
  return out + "</p>\n";
}

// Horizontal stacked bars, one per row, each as wide as its share of the largest row.
std::string stacked_bars(const std::string& title, const std::vector<std::pair<std::string, Tally>>& rows) {
  constexpr int kLabel = 190, kBar = 560, kRowHeight = 20, kTop = 8;
  Index largest = 1;
  for (const auto& [name, t] : rows) largest = std::max(largest, t.cases);
  const int height = kTop * 2 + static_cast<int>(rows.size()) * kRowHeight;
  std::string svg = fmt::format(
      "<figure><figcaption>{}</figcaption>\n<svg class=\"chart\" role=\"img\" aria-label=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">\n",
      escape::markup(title), escape::markup(title), kLabel + kBar + 70, height, kLabel + kBar + 70, height);
  int y = kTop;
  for (const auto& [name, t] : rows) {
    svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>", kLabel - 6, y + 14, escape::markup(name));
    double x = kLabel;
    for (const Series& s : kSeries) {
      const Index count = t.*s.count;
      if (count == 0) continue;
      const double width = static_cast<double>(count) / static_cast<double>(largest) * kBar;
      svg += fmt::format(
          "<rect x=\"{:.2f}\" y=\"{}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"><title>{}: {} {}"
          "</title></rect>",
          x, y + 3, std::max(width, 0.5), kRowHeight - 6, s.colour, escape::markup(name), count, s.name);
      x += width;
    }
    svg += fmt::format("<text x=\"{:.2f}\" y=\"{}\">{}</text>\n", x + 4, y + 14, t.cases);
    y += kRowHeight;
  }
  return svg + "</svg></figure>\n";
}

// A line over time: the samples' (seconds, value) points.
std::string line_chart(const std::string& title, const std::string& unit,
                       const std::vector<std::pair<double, double>>& points, const char* colour) {
  constexpr int kWidth = 560, kHeight = 160, kLeft = 60, kBottom = 24, kTop = 10;
  double max_x = 1e-9, max_y = 1e-9;
  for (const auto& [x, y] : points) {
    max_x = std::max(max_x, x);
    max_y = std::max(max_y, y);
  }
  std::string path;
  for (const auto& [x, y] : points) {
    path += fmt::format("{}{:.2f},{:.2f}", path.empty() ? "M" : " L", kLeft + x / max_x * kWidth,
                        kTop + (1.0 - y / max_y) * (kHeight - kTop - kBottom));
  }
  std::string svg = fmt::format(
      "<figure><figcaption>{}</figcaption>\n<svg class=\"chart\" role=\"img\" aria-label=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\">\n",
      escape::markup(title), escape::markup(title), kLeft + kWidth + 20, kHeight, kLeft + kWidth + 20, kHeight);
  const int axis_y = kHeight - kBottom;
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>", kLeft, axis_y, kLeft + kWidth,
                     axis_y);
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#888\"/>", kLeft, kTop, kLeft, axis_y);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0f}</text>", kLeft - 4, kTop + 10, max_y);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">0</text>", kLeft - 4, axis_y);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.1f} s</text>", kLeft + kWidth, kHeight - 6, max_x);
  svg += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>", kLeft + 4, kHeight - 6, escape::markup(unit));
  svg += fmt::format("<path d=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", path, colour);
  // A dot per sample: a single sample draws no line.
  for (const auto& [x, y] : points) {
    svg +=
        fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"3\" fill=\"{}\"><title>{:.1f} s: {:.0f}</title></circle>",
                    kLeft + x / max_x * kWidth, kTop + (1.0 - y / max_y) * (kHeight - kTop - kBottom), colour, x, y);
  }
  return svg + "</svg></figure>\n";
}

std::string tally_rows(const std::string& section, const std::vector<std::pair<std::string, Tally>>& rows) {
  std::string out;
  for (const auto& [name, t] : rows) {
    out += fmt::format("<tr><td>{}</td><td>{}</td>", escape::markup(section), escape::markup(name));
    out += fmt::format("<td>{}</td>", t.cases);
    for (const Series& s : kSeries) {
      const Index count = t.*s.count;
      out += fmt::format(
          "<td{}>{}</td>",
          count > 0 && (s.count == &Tally::wrong || s.count == &Tally::crashed || s.count == &Tally::target_faults)
              ? " class=\"bad\""
              : "",
          count);
    }
    out += "</tr>\n";
  }
  return out;
}

std::vector<std::pair<std::string, Tally>> rows_of(std::span<const std::string_view> names,
                                                   const std::map<std::string, Tally>& tallies) {
  std::vector<std::pair<std::string, Tally>> rows;
  for (std::string_view name : names) {
    auto it = tallies.find(std::string(name));
    rows.emplace_back(std::string(name), it == tallies.end() ? Tally{} : it->second);
  }
  return rows;
}

constexpr const char* kStyle = R"(body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}.verdict{padding:8px 12px;border-radius:4px;font-weight:600}
.pass{background:#e3f4e1}.fail{background:#fbe3e3}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}td:first-child,td:nth-child(2),th:first-child{text-align:left}
td.bad{background:#fbe3e3;font-weight:600}table.findings td{text-align:left}code{font-size:12px}.legend span{margin-right:14px}
svg.chart text{font-size:12px;fill:#333}figure{margin:12px 0}figcaption{font-weight:600})";

}  // namespace

std::string report_html(const Report& report, std::span<const TimelineSample> timeline) {
  const Options& o = report.options;
  const std::string implementation = o.eval.target.empty() ? std::string(policy_name(o.eval.policy)) : o.eval.target;
  const bool failed = report.failed();
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html +=
      fmt::format("<title>shardcheck campaign, seed {}</title>\n<style>{}</style>\n</head>\n<body>\n", o.seed, kStyle);
  html += fmt::format("<h1>shardcheck campaign, seed {}</h1>\n", o.seed);
  html += fmt::format("<p class=\"verdict {}\">{}: {} cases{}, {} finding signatures, {} silently wrong</p>\n",
                      failed ? "fail" : "pass", failed ? "FAIL" : "PASS", report.cases,
                      report.complete ? "" : " (stopped early)", report.findings.size(), report.total.wrong);
  const double rate = report.seconds > 0 ? static_cast<double>(report.cases) / report.seconds : 0.0;
  html += fmt::format("<p>{} <code>{}</code>, oracle {}, {:.1f} s ({:.0f} cases/s){}{}.</p>\n",
                      o.eval.target.empty() ? "Policy" : "Target", escape::markup(implementation),
                      oracles::oracle_kind_name(o.eval.oracle), report.seconds, rate,
                      o.shard_count > 1 ? fmt::format(", shard {}/{}", o.shard_index, o.shard_count) : "",
                      o.generate.record_digest ? ", content digests recorded and verified" : "");

  std::vector<std::string_view> kinds{gen::kNoCorruption};
  for (std::string_view kind : gen::corruption_kinds()) kinds.push_back(kind);
  const auto by_corruption = rows_of(kinds, report.by_corruption);
  const auto by_constructor = rows_of(gen::constructor_names(), report.by_constructor);
  html += "<h2>Outcomes</h2>\n" + legend();
  html += stacked_bars("Outcomes per corruption kind", by_corruption);
  html += stacked_bars("Outcomes per constructor", by_constructor);

  if (timeline.size() >= 2) {
    std::vector<std::pair<double, double>> rate_points, finding_points;
    for (std::size_t i = 0; i < timeline.size(); ++i) {
      finding_points.emplace_back(timeline[i].seconds, static_cast<double>(timeline[i].findings));
      if (i == 0) continue;
      const double dt = timeline[i].seconds - timeline[i - 1].seconds;
      if (dt <= 0) continue;
      rate_points.emplace_back(timeline[i].seconds,
                               static_cast<double>(timeline[i].cases - timeline[i - 1].cases) / dt);
    }
    html += "<h2>Over time</h2>\n";
    if (!rate_points.empty()) html += line_chart("Cases per second", "cases/s", rate_points, "#4c78a8");
    html += line_chart("Finding signatures found", "signatures", finding_points, "#e45756");
  }

  if (!report.findings.empty()) {
    html += fmt::format(
        "<h2>{} finding signatures</h2>\n<table class=\"findings\">\n<tr><th>signature</th><th>cases</th>"
        "<th>first case</th><th>replay</th></tr>\n",
        report.findings.size());
    for (const auto& finding : report.findings) {
      const std::string file = "findings/" + finding_file_name(finding.signature);
      html += fmt::format("<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                          escape::markup(finding.signature), finding.occurrences, finding.first_case,
                          finding.has_case
                              ? fmt::format("<a href=\"{0}\"><code>shardcheck repro {0}</code></a>", escape::markup(file))
                              : std::string("(no case file)"));
    }
    html += "</table>\n";
  }
  if (!report.ledger_error.empty()) {
    html +=
        fmt::format("<p class=\"verdict fail\">The ledger does not add up: {}</p>\n", escape::markup(report.ledger_error));
  }

  html += "<h2>Table</h2>\n<table>\n<tr><th></th><th>row</th><th>cases</th>";
  for (const Series& s : kSeries) html += fmt::format("<th>{}</th>", s.name);
  html += "</tr>\n";
  html += tally_rows("constructor", by_constructor);
  html += tally_rows("corruption", by_corruption);
  std::vector<std::pair<std::string, Tally>> refused(report.by_refusal_kind.begin(), report.by_refusal_kind.end());
  html += tally_rows("refused as", refused);
  std::vector<std::pair<std::string, Tally>> ops(report.by_op.begin(), report.by_op.end());
  html += tally_rows("operation", ops);
  html += tally_rows("", {{"total", report.total}});
  html += "</table>\n</body>\n</html>\n";
  return html;
}

}  // namespace shardcheck::campaign
