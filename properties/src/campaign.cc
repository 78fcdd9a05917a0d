#include "shardcheck/campaign.h"

#include <algorithm>
#include <cmath>
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

std::string_view oracle_name(oracles::OracleKind oracle) { return oracles::oracle_kind_name(oracle); }

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
  // An operation its target answered by a fallback has a row of its own
  // ("reshard-after-fallback", "extract-after-fallback": props::op_label) beside the
  // answers it made through the map.
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
                     o.generate.op == Op::reshard ? ", reshard pairs"
                     : o.generate.op            ? fmt::format(", {} alone", op_name(*o.generate.op))
                                                : std::string(),
                     report.complete ? "" : "; stopped before the end (resume with --resume)");
  out += fmt::format("rerun: shardcheck campaign --seed {} --cases {} --{} {} --oracle {}{}{}{}\n", o.seed,
                     o.cases ? *o.cases : report.cases, o.eval.target.empty() ? "policy" : "target",
                     escape::terminal(oracles::shell_word(implementation_name(o))), oracle_name(o.eval.oracle),
                     o.shard_count > 1 ? fmt::format(" --shard {}/{}", o.shard_index, o.shard_count) : std::string(),
                     o.generate.record_digest ? " --digest" : "", o.generate.op ? fmt::format(" --op {}", op_name(*o.generate.op)) : std::string());
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
  if (o.generate.op) j["op"] = op_name(*o.generate.op);  // only then, so that other reports read as before
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

namespace {

// Counts beyond this are not a campaign's: refusing them keeps the sums below exact.
constexpr Index kMaxCount = Index{1} << 50;

// The option keys of checkpoints written before campaign_options.def, in the order they
// were written then (the rows follow `campaign --help` instead): a checkpoint keeps them
// in this order, and the key of a newer row follows them in row order. Never edited.
constexpr std::string_view kCheckpointKeyOrder[] = {
    "seed",           "requested_cases", "time_seconds",       "policy",      "target",        "target_timeout",
    "oracle",         "strict_layout",   "max_elements",       "digest",      "op",            "digest_share",
    "large_share",    "loopback_share",  "reduce_evaluations", "backend",     "backend_share", "share_backend",
    "shard_index",    "shard_count",     "jobs",               "isolate",     "case_time_limit",
    "case_memory_limit"};

// An option's value in a checkpoint, by its type (campaign_options.def's `type`).
template <class T>
Json option_json(const T& value) {
  return Json(value);
}
Json option_json(Policy policy) { return std::string(policy_name(policy)); }
Json option_json(oracles::OracleKind oracle) { return std::string(oracles::oracle_kind_name(oracle)); }
Json option_json(Op op) { return std::string(op_name(op)); }
template <class T>
Json option_json(const std::optional<T>& value) {
  return value ? option_json(*value) : Json(nullptr);
}

// Reads a checkpoint's value into `out`, or says what it should have been.
std::optional<std::string> decode(const Json& j, bool& out) {
  if (!j.is_boolean()) return "true or false";
  out = j.get<bool>();
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, std::string& out) {
  if (!j.is_string()) return "a string";
  out = j.get<std::string>();
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, double& out) {
  if (!j.is_number() || !std::isfinite(j.get<double>())) return "a number";
  out = j.get<double>();
  return std::nullopt;
}
// A whole number that is not negative, or nothing: nlohmann would read -1 as 2^64-1.
std::optional<std::uint64_t> whole_number(const Json& j) {
  if (j.is_number_unsigned()) return j.get<std::uint64_t>();
  if (j.is_number_integer() && j.get<std::int64_t>() >= 0) return static_cast<std::uint64_t>(j.get<std::int64_t>());
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, std::uint64_t& out) {
  const auto value = whole_number(j);
  if (!value) return fmt::format("a whole number from 0 to {}", std::numeric_limits<std::uint64_t>::max());
  out = *value;
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, int& out) {
  const auto value = whole_number(j);
  if (!value || *value > static_cast<std::uint64_t>(std::numeric_limits<int>::max())) {
    return fmt::format("a whole number from 0 to {}", std::numeric_limits<int>::max());
  }
  out = static_cast<int>(*value);
  return std::nullopt;
}
// A count: never past kMaxCount.
std::optional<std::string> decode(const Json& j, Index& out) {
  const auto value = whole_number(j);
  if (!value || *value > static_cast<std::uint64_t>(kMaxCount)) return "a whole number from 0 to 2^50";
  out = static_cast<Index>(*value);
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, Policy& out) {
  const auto policy = j.is_string() ? parse_policy(j.get<std::string>()) : std::nullopt;
  if (!policy) return "a policy (strict or legacy)";
  out = *policy;
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, oracles::OracleKind& out) {
  const auto oracle = j.is_string() ? oracles::parse_oracle_kind(j.get<std::string>()) : std::nullopt;
  if (!oracle) return "an oracle (" + oracles::oracle_choices() + ")";
  out = *oracle;
  return std::nullopt;
}
std::optional<std::string> decode(const Json& j, Op& out) {
  const auto op = j.is_string() ? parse_op(j.get<std::string>()) : std::nullopt;
  if (!op) return "an operation (rebuild, extract or reshard)";
  out = *op;
  return std::nullopt;
}
template <class T>
std::optional<std::string> decode(const Json& j, std::optional<T>& out) {
  if (j.is_null()) {
    out.reset();
    return std::nullopt;
  }
  T value{};
  auto why = decode(j, value);
  if (!why) out = value;
  return why ? std::optional<std::string>("null or " + *why) : std::nullopt;
}

// The fields of one JSON object of a checkpoint, read into typed values. The first fault
// is kept (`fault`, shared by every Fields of one read) and names the field at fault by
// its path ("seed", "findings[2].numel"); each read after it does nothing.
class Fields {
 public:
  Fields(const Json& object, std::string path, std::optional<Error>& fault)
      : object_(object), path_(std::move(path)), fault_(fault) {
    if (!object_.is_object()) fail(path_, "must be an object");
  }

  bool has(std::string_view key) const { return object_.is_object() && object_.contains(std::string(key)); }
  std::string path_of(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }
  // The value of a key that must be there, or nullptr (a fault, unless there was one).
  const Json* at(std::string_view key) {
    if (fault_) return nullptr;
    if (!has(key)) {
      fail(path_of(key), "is missing");
      return nullptr;
    }
    return &object_[std::string(key)];
  }
  template <class T>
  void read(std::string_view key, T& out) {
    if (const Json* value = at(key)) read_value(*value, path_of(key), out);
  }
  // A key that older checkpoints lack: then `out` keeps its value.
  template <class T>
  void read_if_present(std::string_view key, T& out) {
    if (has(key)) read(key, out);
  }
  template <class T>
  void read_value(const Json& value, const std::string& path, T& out) {
    if (fault_) return;
    if (auto why = decode(value, out)) {
      std::string got = value.dump(-1, ' ', false, Json::error_handler_t::replace);
      if (got.size() > 40) got = got.substr(0, 37) + "...";
      fail(path, fmt::format("must be {}, got {}", *why, got));
    }
  }
  // A fault of the field at `path` ("" for the whole checkpoint): "<path> <what>".
  void fail(const std::string& path, std::string_view what) {
    if (fault_) return;
    const std::string sentence = path.empty() ? fmt::format("malformed checkpoint: {}", what)
                                              : fmt::format("malformed checkpoint: {} {}", path, what);
    fault_ = make_error(ErrorKind::format, sentence, Where::in_json(path.empty() ? "$" : "$." + path));
  }

 private:
  const Json& object_;
  std::string path_;
  std::optional<Error>& fault_;
};

// Six counts: a checkpoint written before target faults were counted (none then).
void read_tally(Fields& fields, const Json& j, const std::string& path, Tally& t) {
  if (!j.is_array() || (j.size() != 7 && j.size() != 6)) return fields.fail(path, "must be an array of 7 counts");
  Index* counts[] = {&t.cases, &t.refused, &t.exact, &t.wrong, &t.valid_but_different, &t.crashed, &t.target_faults};
  Index sum = 0;
  for (std::size_t i = 0; i < j.size(); ++i) {
    fields.read_value(j[i], fmt::format("{}[{}]", path, i), *counts[i]);
    if (i > 0) sum += *counts[i];
  }
  if (sum != t.cases) fields.fail(path, "has outcomes that do not add up to its cases");
}

void read_tallies(Fields& fields, std::string_view section, std::map<std::string, Tally>& out) {
  const Json* tallies = fields.at(section);
  if (!tallies) return;
  if (!tallies->is_object()) return fields.fail(std::string(section), "must be an object");
  for (const auto& [name, tally] : tallies->items()) {
    read_tally(fields, tally, fmt::format("{}.{}", section, name), out[name]);
  }
}

// The done ranges: sorted, disjoint and non-empty; returns how many cases they hold.
Index read_done(Fields& fields, std::vector<std::pair<Index, Index>>& done) {
  const Json* ranges = fields.at("done");
  if (!ranges) return 0;
  if (!ranges->is_array()) {
    fields.fail("done", "must be an array of [first, end] ranges");
    return 0;
  }
  Index cases = 0;
  Index previous_end = -1;
  for (std::size_t i = 0; i < ranges->size(); ++i) {
    const Json& range = (*ranges)[i];
    const std::string path = fmt::format("done[{}]", i);
    if (!range.is_array() || range.size() != 2) {
      fields.fail(path, "must be [first, end]");
      return 0;
    }
    Index first = 0, end = 0;
    fields.read_value(range[0], path + "[0]", first);
    fields.read_value(range[1], path + "[1]", end);
    if (end <= first || first <= previous_end) fields.fail(path, "is not sorted, disjoint and non-empty");
    previous_end = end;
    cases += end - first;
    done.emplace_back(first, end);
  }
  return cases;
}

void read_findings(Fields& fields, std::optional<Error>& fault, std::vector<FindingRecord>& findings) {
  const Json* list = fields.at("findings");
  if (!list) return;
  if (!list->is_array()) return fields.fail("findings", "must be an array");
  for (std::size_t i = 0; i < list->size() && !fault; ++i) {
    Fields f((*list)[i], fmt::format("findings[{}]", i), fault);
    FindingRecord record;
    std::string judge;
    f.read("judge", judge);
    if (const auto id = props::judge_named(judge)) {
      record.judge = *id;
    } else {
      f.fail(f.path_of("judge"), "names no judge of findings.def");
    }
    f.read("signature", record.signature);
    f.read("message", record.message);
    f.read("case_index", record.first_case);
    f.read("occurrences", record.occurrences);
    f.read("numel", record.numel);
    f.read("pieces", record.pieces);
    f.read("has_case", record.has_case);
    findings.push_back(std::move(record));
  }
}

// The options of campaign_options.def's checkpointed rows (by their types), and the
// checks across them.
void read_options(Fields& fields, Options& o) {
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  if (!((traits) & kCheckpointed)) {                                                          \
  } else if (!fields.has(#key) && ((traits) & kOffWhenAbsent)) {                              \
    o.field = type{};                                                                         \
  } else if ((traits) & kDefaultWhenAbsent) {                                                 \
    fields.read_if_present(#key, o.field);                                                    \
  } else {                                                                                    \
    fields.read(#key, o.field);                                                               \
  }
#include "shardcheck/campaign_options.def"
  // The op row (kCheckpointedByHand): absent from checkpoints of campaigns that mixed operations.
  fields.read_if_present("op", o.generate.op);
  if (!o.cases && !o.time_seconds) fields.fail("", "it has neither a case count nor a time budget");
  if (!(o.eval.target_timeout_seconds > 0)) fields.fail("target_timeout", "must be positive");
  if (o.shard_count < 1) fields.fail("shard_count", "must be at least 1");
  if (o.shard_index >= o.shard_count) fields.fail("shard_index", "must be below shard_count");
  o.jobs = std::max(1, o.jobs);
}

}  // namespace

Json checkpoint_to_json(const Checkpoint& checkpoint) {
  const Report& report = checkpoint.report;
  const Options& o = report.options;
  Json options = Json::object();
#define SHARDCHECK_CAMPAIGN_OPTION(key, field, type, default_value, flag, min, max, help, traits) \
  if ((traits) & kCheckpointed) options[#key] = option_json(o.field);
#include "shardcheck/campaign_options.def"
  // The op row (kCheckpointedByHand): only then, so that other checkpoints read as before.
  if (o.generate.op) options["op"] = option_json(o.generate.op);
  Json j;
  j["shardcheck_checkpoint"] = 1;
  for (std::string_view key : kCheckpointKeyOrder) {
    if (!options.contains(std::string(key))) continue;
    j[std::string(key)] = options[std::string(key)];
    options.erase(std::string(key));
  }
  for (const auto& [key, value] : options.items()) j[key] = value;
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

Result<Checkpoint> checkpoint_from_json(const Json& json) {
  std::optional<Error> fault;
  if (!json.is_object() || !json.contains("shardcheck_checkpoint") || json["shardcheck_checkpoint"] != 1) {
    return make_error(ErrorKind::format, "malformed checkpoint: not a shardcheck checkpoint (version 1)");
  }
  Fields fields(json, "", fault);
  Checkpoint checkpoint;
  Report& report = checkpoint.report;
  read_options(fields, report.options);
  fields.read("seconds", report.seconds);
  fields.read("complete", report.complete);
  const Index done = read_done(fields, checkpoint.done);
  read_tallies(fields, "by_constructor", report.by_constructor);
  read_tallies(fields, "by_corruption", report.by_corruption);
  read_tallies(fields, "by_refusal_kind", report.by_refusal_kind);
  read_tallies(fields, "by_op", report.by_op);
  for (const auto& [name, tally] : report.by_constructor) {
    report.total.merge(tally);
    if (report.total.cases > kMaxCount) fields.fail("by_constructor", "counts too many cases");
  }
  report.cases = report.total.cases;
  if (report.cases != done) fields.fail("done", "holds other cases than the tallies count");
  read_findings(fields, fault, report.findings);
  if (fault) return *fault;
  std::sort(report.findings.begin(), report.findings.end(),
            [](const FindingRecord& a, const FindingRecord& b) { return a.signature < b.signature; });
  return checkpoint;
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
