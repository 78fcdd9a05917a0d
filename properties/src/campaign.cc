#include "shardcheck/campaign.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "campaign_internal.h"
#include "shardcheck/escape.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/splitmix.h"
#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"

namespace shardcheck::campaign {

void Tally::add(Outcome outcome) {
  ++cases;
  switch (outcome) {
    case Outcome::refused: ++refused; break;
    case Outcome::exact: ++exact; break;
    case Outcome::wrong: ++wrong; break;
    case Outcome::wrong_valid_layout: ++valid_but_different; break;
    case Outcome::target_fault: ++target_faults; break;
  }
}

void Tally::add_crashed() {
  ++cases;
  ++crashed;
}

void Tally::merge(const Tally& other) {
  cases += other.cases;
  refused += other.refused;
  exact += other.exact;
  wrong += other.wrong;
  valid_but_different += other.valid_but_different;
  crashed += other.crashed;
  target_faults += other.target_faults;
}

bool Report::failed() const {
  if (!ledger_error.empty()) return true;
  if (total.wrong > 0 || !findings.empty()) return true;
  return options.eval.strict_layout && total.valid_but_different > 0;
}

std::uint64_t case_seed(std::uint64_t seed, Index index) {
  // splitmix64 finaliser over (seed, index): independent streams per case.
  return splitmix64_mix(seed + kSplitMixGamma * (static_cast<std::uint64_t>(index) + 1));
}

Variant variant_of(const Options& options, Index index) {
  // A stream of its own (not the case's seed, whose bits start the case's draws).
  const std::uint64_t h = case_seed(options.seed ^ 0x6a09e667f3bcc909ull, index);
  auto share = [&](int slot, int n) { return n > 0 && ((h >> (16 * slot)) & 0xffff) % static_cast<unsigned>(n) == 0; };
  Variant v;
  // An implementation of the user's may ignore digests (docs/protocol.md): it is judged
  // by them with --digest only, as before.
  v.digest = options.eval.target.empty() && share(0, options.digest_share);
  v.large = share(1, options.large_share);
  v.loopback = options.eval.target.empty() && !options.loopback_target.empty() && share(2, options.loopback_share);
  v.backend = options.eval.backend.empty() && !options.share_backend.empty() && share(3, options.backend_share);
  return v;
}

props::EvalOptions eval_options_of(const Options& options, Index index) {
  props::EvalOptions eval = options.eval;
  const Variant variant = variant_of(options, index);
  if (variant.loopback) eval.target = options.loopback_target;
  if (variant.backend) eval.backend = options.share_backend;
  return eval;
}

Case generate_indexed_case(const Options& options, Index index) {
  gen::SeededChoices choices(case_seed(options.seed, index));
  const Variant variant = variant_of(options, index);
  if (!variant.digest && !variant.large) return gen::generate_case(choices, options.generate);
  gen::CaseOptions generate = options.generate;
  generate.record_digest = generate.record_digest || variant.digest;
  generate.layout.large = variant.large;
  return gen::generate_case(choices, generate);
}

Report run(const Options& options, const Control& control) {
  using namespace detail;
  const auto start = Clock::now();
  const double previous_seconds = control.resume ? control.resume->report.seconds : 0.0;
  auto seconds = [&] {
    return previous_seconds + std::chrono::duration<double>(Clock::now() - start).count();
  };
  Ledger ledger(options, control.resume);
  std::unique_ptr<Writer> writer;
  if (!control.out.empty()) {
    writer = std::make_unique<Writer>(options, control, ledger, seconds);
    writer->start(control.resume ? control.resume->report.findings : std::vector<FindingRecord>{},
                  /*threaded=*/!options.isolate);
  }
  Monitor monitor(options, control, ledger, start, previous_seconds);
  const auto immediate = [&] {
    if (writer) writer->flush_now();
    std::_Exit(130);
  };
  if (options.isolate) run_processes(options, control, ledger, writer.get(), monitor, immediate);
  else run_threads(options, ledger, writer.get(), monitor, immediate);

  // A time budget is complete when it ran out; a count when every case ran (with both,
  // the count decides, so that --resume can finish it).
  const bool complete = ledger.all_done() || (!options.cases && monitor.deadline_reached());
  const double total_seconds = seconds();
  if (writer) writer->finish(complete);
  Report report = ledger.snapshot(total_seconds, complete).report;
  report.ledger_error = ledger.audit(complete);
  for (auto& finding : report.findings) {
    if (finding.has_case) finding.reproducer = generate_indexed_case(options, finding.first_case);
  }
  // A campaign that ran every case reduces what it found (a stopped one leaves its
  // finding files as found, for --resume to finish).
  const bool stopped = control.stop != nullptr && control.stop->load() != 0;
  if (complete && !stopped && report.ledger_error.empty()) {
    detail::reduce_findings(options, report.findings, control, std::max(60.0, total_seconds));
    if (writer) writer->write_reduced(report.findings);
  }
  if (writer) report.output_errors = writer->output_errors();
  return report;
}

Report run(const Options& options, const std::function<void(Index)>& progress,
           double progress_interval) {
  Control control;
  control.progress = progress;
  control.progress_interval = progress_interval;
  return run(options, control);
}

namespace {

// One part of the table: a title and its rows. Names are escaped for a terminal: a
// refusal row may carry an implementation's own error type (escape.h).
struct TableSection {
  std::string title;
  std::vector<std::pair<std::string, Tally>> rows;
  std::size_t without_cases = 0;  // known names with no case, left out
};

// Rows for the known names in their order, then any other name seen (a worker that
// died generating its case is tallied as "unknown"); a known name without a case is
// counted, not shown (a reshard campaign's 36 pairs of constructors are mostly empty).
TableSection table_section(std::string title, const std::vector<std::string_view>& names,
                           const std::map<std::string, Tally>& tallies) {
  TableSection section{std::move(title), {}, 0};
  for (std::string_view name : names) {
    auto it = tallies.find(std::string(name));
    if (it == tallies.end() || it->second.cases == 0) {
      ++section.without_cases;
    } else {
      section.rows.emplace_back(name, it->second);
    }
  }
  for (const auto& [name, tally] : tallies) {
    if (std::find(names.begin(), names.end(), name) == names.end()) section.rows.emplace_back(name, tally);
  }
  return section;
}

// The sections one under another, their first column as wide as the longest name.
std::string render_table(const std::vector<TableSection>& sections) {
  std::size_t width = 12;
  for (const TableSection& section : sections) {
    width = std::max(width, section.title.size());
    for (const auto& row : section.rows) width = std::max(width, escape::terminal(row.first).size());
  }
  const auto line = [width](std::string_view name, const auto&... columns) {
    return fmt::format("  {:<{}} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n", name, width, columns...);
  };
  std::string out;
  for (const TableSection& section : sections) {
    if (!out.empty()) out += "\n";
    if (!section.title.empty()) {
      out += line(section.title, "cases", "refused", "exact", "wrong", "valid-diff", "crashed", "target-fault");
    }
    for (const auto& [name, t] : section.rows) {
      out += line(escape::terminal(name), t.cases, t.refused, t.exact, t.wrong, t.valid_but_different, t.crashed,
                  t.target_faults);
    }
    if (section.without_cases > 0) out += fmt::format("  ({} more {} without a case)\n", section.without_cases,
                                                      section.without_cases == 1 ? "row" : "rows");
  }
  return out;
}

std::string_view oracle_name(oracles::OracleKind oracle) {
  return oracle == oracles::OracleKind::truth ? "truth" : "same-map";
}

// What ran the conversions: the target's name, or the policy's.
std::string implementation_name(const Options& o) {
  return o.eval.target.empty() ? std::string(policy_name(o.eval.policy)) : o.eval.target;
}

}  // namespace

std::string format_table(const Report& report) {
  const std::vector<std::string_view> constructors(gen::constructor_names().begin(),
                                                   gen::constructor_names().end());
  std::vector<std::string_view> kinds{gen::kNoCorruption};
  for (std::string_view kind : gen::corruption_kinds()) kinds.push_back(kind);
  std::vector<TableSection> sections;
  sections.push_back(table_section("constructor", constructors, report.by_constructor));
  sections.push_back(table_section("corruption", kinds, report.by_corruption));
  if (!report.by_refusal_kind.empty()) sections.push_back(table_section("refused as", {}, report.by_refusal_kind));
  // Per operation: a content digest closes the valid-but-different class for rebuild and
  // for a reshard whose source map is at fault, never for extract.
  TableSection operations{"operation", {}, 0};
  // Rebuild and extract always have a row (the table every campaign prints); other
  // operations where the campaign ran them.
  // A reshard its target answered by its documented fallback has a row of its own
  // ("reshard-after-fallback", props::op_label) beside the plans it made.
  for (Op op : kAllOps) {
    for (bool after_fallback : {false, true}) {
      const std::string label = props::op_label(op, after_fallback);
      auto it = report.by_op.find(label);
      if (it == report.by_op.end() && (after_fallback || (op != Op::rebuild && op != Op::extract))) continue;
      operations.rows.emplace_back(label, it == report.by_op.end() ? Tally{} : it->second);
    }
  }
  sections.push_back(std::move(operations));
  sections.push_back(TableSection{"", {{"total", report.total}}, 0});
  std::string out = render_table(sections);
  const double rate = report.seconds > 0 ? static_cast<double>(report.cases) / report.seconds : 0.0;
  const Options& o = report.options;
  out += fmt::format("\n{} cases in {:.1f} s ({:.0f} cases/s, {} job{}{}); {} {}, oracle {}{}{}{}\n", report.cases,
                     report.seconds, rate, o.jobs, o.jobs == 1 ? "" : "s", o.isolate ? ", isolated" : "",
                     o.eval.target.empty() ? "policy" : "target", escape::terminal(implementation_name(o)),
                     oracle_name(o.eval.oracle),
                     o.generate.record_digest ? ", content digests recorded and verified" : "",
                     o.generate.reshard ? ", reshard pairs" : "",
                     report.complete ? "" : "; stopped before the end (resume with --resume)");
  out += fmt::format("rerun: shardcheck campaign --seed {} --cases {} --{} {} --oracle {}{}{}{}\n", o.seed,
                     o.cases ? *o.cases : report.cases, o.eval.target.empty() ? "policy" : "target",
                     escape::terminal(oracles::shell_word(implementation_name(o))), oracle_name(o.eval.oracle),
                     o.shard_count > 1 ? fmt::format(" --shard {}/{}", o.shard_index, o.shard_count) : std::string(),
                     o.generate.record_digest ? " --digest" : "", o.generate.reshard ? " --op reshard" : "");
  if (!o.eval.backend.empty()) out.insert(out.size() - 1, " --backend " + o.eval.backend);
  return out;
}

namespace {

Json tally_json(const Tally& t) {
  return Json{{"cases", t.cases},
              {"refused", t.refused},
              {"exact", t.exact},
              {"silently_wrong", t.wrong},
              {"valid_but_different", t.valid_but_different},
              {"crashed", t.crashed},
              {"target_faults", t.target_faults}};
}

// The checkpoint's compact form of a tally: the seven counts in Tally's order.
Json tally_array(const Tally& t) {
  return Json::array({t.cases, t.refused, t.exact, t.wrong, t.valid_but_different, t.crashed, t.target_faults});
}

}  // namespace

Json report_to_json(const Report& report) {
  const Options& o = report.options;
  Json j;
  j["seed"] = o.seed;
  j["requested_cases"] = o.cases ? Json(*o.cases) : Json(nullptr);
  j["time_seconds"] = o.time_seconds ? Json(*o.time_seconds) : Json(nullptr);
  j["policy"] = policy_name(o.eval.policy);
  if (!o.eval.target.empty()) j["target"] = o.eval.target;
  if (!o.eval.backend.empty()) j["backend"] = o.eval.backend;
  j["oracle"] = oracle_name(o.eval.oracle);
  j["jobs"] = o.jobs;
  j["isolate"] = o.isolate;
  j["shard"] = fmt::format("{}/{}", o.shard_index, o.shard_count);
  j["max_elements"] = o.generate.layout.max_elements;
  j["digest"] = o.generate.record_digest;
  if (o.generate.reshard) j["op"] = "reshard";  // only then, so that other reports read as before
  j["complete"] = report.complete;
  j["cases"] = report.cases;
  j["seconds"] = report.seconds;
  j["cases_per_second"] = report.seconds > 0 ? static_cast<double>(report.cases) / report.seconds : 0.0;
  j["total"] = tally_json(report.total);
  for (const auto* section : {"by_constructor", "by_corruption", "by_refusal_kind", "by_op"}) j[section] = Json::object();
  for (const auto& [name, tally] : report.by_constructor) j["by_constructor"][name] = tally_json(tally);
  for (const auto& [name, tally] : report.by_corruption) j["by_corruption"][name] = tally_json(tally);
  for (const auto& [name, tally] : report.by_refusal_kind) j["by_refusal_kind"][name] = tally_json(tally);
  for (const auto& [name, tally] : report.by_op) j["by_op"][name] = tally_json(tally);
  j["findings"] = Json::array();
  for (const auto& finding : report.findings) {
    Json f{{"signature", finding.signature},
           {"message", finding.message},
           {"case_index", finding.first_case},
           {"occurrences", finding.occurrences}};
    f["file"] = finding.has_case ? Json("findings/" + finding_file_name(finding.signature)) : Json(nullptr);
    j["findings"].push_back(std::move(f));
  }
  if (!report.ledger_error.empty()) j["ledger_error"] = report.ledger_error;
  j["failed"] = report.failed();
  return j;
}

Json checkpoint_to_json(const Checkpoint& checkpoint) {
  const Report& report = checkpoint.report;
  const Options& o = report.options;
  Json j;
  j["shardcheck_checkpoint"] = 1;
  j["seed"] = o.seed;
  j["requested_cases"] = o.cases ? Json(*o.cases) : Json(nullptr);
  j["time_seconds"] = o.time_seconds ? Json(*o.time_seconds) : Json(nullptr);
  j["policy"] = policy_name(o.eval.policy);
  j["target"] = o.eval.target;
  j["target_timeout"] = o.eval.target_timeout_seconds;
  j["oracle"] = oracle_name(o.eval.oracle);
  j["strict_layout"] = o.eval.strict_layout;
  j["max_elements"] = o.generate.layout.max_elements;
  j["digest"] = o.generate.record_digest;
  if (o.generate.reshard) j["op"] = "reshard";
  j["digest_share"] = o.digest_share;
  j["large_share"] = o.large_share;
  j["loopback_share"] = o.loopback_share;
  j["reduce_evaluations"] = o.reduce_evaluations;
  j["backend"] = o.eval.backend;
  j["backend_share"] = o.backend_share;
  j["share_backend"] = o.share_backend;
  j["shard_index"] = o.shard_index;
  j["shard_count"] = o.shard_count;
  j["jobs"] = o.jobs;
  j["isolate"] = o.isolate;
  j["case_time_limit"] = o.case_time_limit;
  j["case_memory_limit"] = o.case_memory_limit;
  j["seconds"] = report.seconds;
  j["complete"] = report.complete;
  j["done"] = Json::array();
  for (const auto& [first, end] : checkpoint.done) j["done"].push_back(Json::array({first, end}));
  for (const auto* section : {"by_constructor", "by_corruption", "by_refusal_kind", "by_op"}) j[section] = Json::object();
  for (const auto& [name, tally] : report.by_constructor) j["by_constructor"][name] = tally_array(tally);
  for (const auto& [name, tally] : report.by_corruption) j["by_corruption"][name] = tally_array(tally);
  for (const auto& [name, tally] : report.by_refusal_kind) j["by_refusal_kind"][name] = tally_array(tally);
  for (const auto& [name, tally] : report.by_op) j["by_op"][name] = tally_array(tally);
  j["findings"] = Json::array();
  for (const auto& finding : report.findings) {
    j["findings"].push_back(Json{{"judge", std::string(props::judge_row(finding.judge).name)},
                                 {"signature", finding.signature},
                                 {"message", finding.message},
                                 {"case_index", finding.first_case},
                                 {"occurrences", finding.occurrences},
                                 {"numel", finding.numel},
                                 {"pieces", finding.pieces},
                                 {"has_case", finding.has_case}});
  }
  return j;
}

namespace {

// Counts beyond this are not a campaign's: refusing them keeps the sums below exact.
constexpr Index kMaxCount = Index{1} << 50;

Index checked_count(const Json& j, const char* what) {
  const Index value = j.get<Index>();
  if (value < 0 || value > kMaxCount) throw std::out_of_range(fmt::format("{} out of range", what));
  return value;
}

Index count_field(const Json& j, const char* key) { return checked_count(j.at(key), key); }

// Six counts: a checkpoint written before target faults were counted (none then).
Tally tally_from_array(const Json& j) {
  if (!j.is_array() || (j.size() != 7 && j.size() != 6)) throw std::out_of_range("a tally is not an array of 7 counts");
  Tally t;
  Index* fields[] = {&t.cases, &t.refused, &t.exact, &t.wrong, &t.valid_but_different, &t.crashed, &t.target_faults};
  Index sum = 0;
  for (std::size_t i = 0; i < j.size(); ++i) {
    *fields[i] = checked_count(j[i], "a tally count");
    if (i > 0) sum += *fields[i];
  }
  if (sum != t.cases) throw std::out_of_range("a tally's outcomes do not add up to its cases");
  return t;
}

Checkpoint parse_checkpoint(const Json& j) {
  if (!j.is_object() || !j.contains("shardcheck_checkpoint") || j.at("shardcheck_checkpoint") != 1) {
    throw std::out_of_range("not a shardcheck checkpoint (version 1)");
  }
  Checkpoint checkpoint;
  Report& report = checkpoint.report;
  Options& o = report.options;
  o.seed = j.at("seed").get<std::uint64_t>();
  if (!j.at("requested_cases").is_null()) o.cases = count_field(j, "requested_cases");
  if (!j.at("time_seconds").is_null()) o.time_seconds = j.at("time_seconds").get<double>();
  if (!o.cases && !o.time_seconds) throw std::out_of_range("neither a case count nor a time budget");
  const auto policy = parse_policy(j.at("policy").get<std::string>());
  if (!policy) throw std::out_of_range("unknown policy");
  o.eval.policy = *policy;
  // Absent from checkpoints written before targets existed: the policy ran.
  if (j.contains("target")) o.eval.target = j.at("target").get<std::string>();
  if (j.contains("target_timeout")) o.eval.target_timeout_seconds = j.at("target_timeout").get<double>();
  if (!(o.eval.target_timeout_seconds > 0)) throw std::out_of_range("target_timeout is not positive");
  const auto oracle = j.at("oracle").get<std::string>();
  if (oracle == "truth") o.eval.oracle = oracles::OracleKind::truth;
  else if (oracle == "same-map") o.eval.oracle = oracles::OracleKind::same_map;
  else throw std::out_of_range("unknown oracle");
  o.eval.strict_layout = j.at("strict_layout").get<bool>();
  o.generate.layout.max_elements = count_field(j, "max_elements");
  o.generate.record_digest = j.at("digest").get<bool>();
  // Absent from checkpoints of campaigns that did not reshard.
  if (j.contains("op")) {
    if (j.at("op") != "reshard") throw std::out_of_range("unknown op");
    o.generate.reshard = true;
  }
  // Absent from checkpoints written before the shared variants: none, as that campaign ran.
  o.digest_share = j.value("digest_share", 0);
  o.large_share = j.value("large_share", 0);
  o.loopback_share = j.value("loopback_share", 0);
  o.reduce_evaluations = j.value("reduce_evaluations", Index{0});
  o.eval.backend = j.value("backend", std::string());
  o.backend_share = j.value("backend_share", 0);
  o.share_backend = j.value("share_backend", std::string());
  if (o.digest_share < 0 || o.large_share < 0 || o.loopback_share < 0 || o.backend_share < 0 ||
      o.reduce_evaluations < 0) {
    throw std::out_of_range("a share is negative");
  }
  o.shard_index = j.at("shard_index").get<int>();
  o.shard_count = j.at("shard_count").get<int>();
  if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count) {
    throw std::out_of_range("shard out of range");
  }
  o.jobs = std::max(1, j.at("jobs").get<int>());
  o.isolate = j.at("isolate").get<bool>();
  o.case_time_limit = j.at("case_time_limit").get<double>();
  o.case_memory_limit = count_field(j, "case_memory_limit");
  report.seconds = j.at("seconds").get<double>();
  report.complete = j.at("complete").get<bool>();

  Index done = 0;
  Index previous_end = -1;
  for (const auto& range : j.at("done")) {
    if (!range.is_array() || range.size() != 2) throw std::out_of_range("a done range is not [first, end]");
    const Index first = checked_count(range[0], "a done range");
    const Index end = checked_count(range[1], "a done range");
    if (first < 0 || end <= first || first <= previous_end) {
      throw std::out_of_range("done ranges are not sorted, disjoint and non-empty");
    }
    previous_end = end;
    done += end - first;
    checkpoint.done.emplace_back(first, end);
  }
  for (const auto& [name, tally] : j.at("by_constructor").items()) report.by_constructor[name] = tally_from_array(tally);
  for (const auto& [name, tally] : j.at("by_corruption").items()) report.by_corruption[name] = tally_from_array(tally);
  for (const auto& [name, tally] : j.at("by_refusal_kind").items()) report.by_refusal_kind[name] = tally_from_array(tally);
  for (const auto& [name, tally] : j.at("by_op").items()) report.by_op[name] = tally_from_array(tally);
  for (const auto& [name, tally] : report.by_constructor) {
    report.total.merge(tally);
    if (report.total.cases > kMaxCount) throw std::out_of_range("the tallies count too many cases");
  }
  report.cases = report.total.cases;
  if (report.cases != done) throw std::out_of_range("the tallies do not count the done cases");
  for (const auto& f : j.at("findings")) {
    FindingRecord record;
    const auto judge = props::judge_named(f.at("judge").get<std::string>());
    if (!judge) throw std::out_of_range("a finding names no judge of findings.def");
    record.judge = *judge;
    record.signature = f.at("signature").get<std::string>();
    record.message = f.at("message").get<std::string>();
    record.first_case = count_field(f, "case_index");
    record.occurrences = count_field(f, "occurrences");
    record.numel = count_field(f, "numel");
    record.pieces = count_field(f, "pieces");
    record.has_case = f.at("has_case").get<bool>();
    report.findings.push_back(std::move(record));
  }
  std::sort(report.findings.begin(), report.findings.end(),
            [](const FindingRecord& a, const FindingRecord& b) { return a.signature < b.signature; });
  return checkpoint;
}

}  // namespace

Result<Checkpoint> checkpoint_from_json(const Json& json) {
  // The parse reads nlohmann values with checked accessors, which throw on a wrong type or
  // a missing key; the exception stops here and becomes the reader's error.
  try {
    return parse_checkpoint(json);
  } catch (const std::exception& e) {
    return make_error(ErrorKind::format, std::string("malformed checkpoint: ") + e.what());
  }
}

Json finding_case_file(const Report& report, const FindingRecord& finding) {
  const props::EvalOptions& eval = report.options.eval;
  const bool other_target = !eval.target.empty();
  props::FoundWith found;
  found.policy = eval.policy;
  found.target = eval.target;
  // A case that went through the loopback target replays through it.
  if (eval.target.empty()) found.target = eval_options_of(report.options, finding.first_case).target;
  // A backend finding replays through the backend differential (`repro` reads the record).
  if (finding.judge == props::JudgeId::backend_differs) {
    found.backend = eval_options_of(report.options, finding.first_case).backend;
  }
  found.by = fmt::format("shardcheck campaign --seed {} (case {}, {} {})", report.options.seed, finding.first_case,
                         other_target ? "target" : "policy",
                         other_target ? eval.target : std::string(policy_name(eval.policy)));
  Json file =
      props::finding_case_file(props::Finding{finding.judge, finding.signature, finding.message, finding.reproducer},
                               found);
  if (finding.reduction) {
    file["reduced"] = Json{{"from_case", finding.first_case},
                           {"steps", finding.reduction->steps},
                           {"evaluations", finding.reduction->evaluations},
                           {"locally_minimal", finding.reduction->minimal}};
  }
  return file;
}

std::string finding_file_name(std::string_view signature) {
  std::string out;
  for (char ch : signature) {
    const bool keep = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
    out += keep ? ch : '-';
  }
  return out.substr(0, 120) + ".json";
}

}  // namespace shardcheck::campaign
