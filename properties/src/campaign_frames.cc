#include "campaign_frames.h"

#include <algorithm>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "shardcheck/gen/corruption.h"
#include "shardcheck/gen/layout.h"
#include "shardcheck/oracles/descendants.h"

namespace shardcheck::campaign::detail {

std::string batch_frame(Range range, const BatchResult& result) {
  Encoder e;
  e.i64(range.first);
  e.i64(range.end);
  e.tallies(result.by_constructor);
  e.tallies(result.by_corruption);
  e.tallies(result.by_refusal_kind);
  e.tallies(result.by_op);
  e.u32(static_cast<std::uint32_t>(result.findings.size()));
  for (const auto& [signature, f] : result.findings) {
    e.u32(static_cast<std::uint32_t>(f.judge));
    e.str(f.signature);
    e.str(f.message);
    for (Index v : {f.index, f.occurrences, f.numel, f.pieces, Index{f.has_case}}) e.i64(v);
  }
  return e.frame(kBatch);
}

bool decode_batch(Decoder& d, Range& range, BatchResult& result) {
  range.first = d.i64();
  range.end = d.i64();
  d.tallies(result.by_constructor);
  d.tallies(result.by_corruption);
  d.tallies(result.by_refusal_kind);
  d.tallies(result.by_op);
  const std::uint32_t n = d.u32();
  for (std::uint32_t i = 0; d.ok() && i < n; ++i) {
    FindingState f;
    const std::uint32_t judge = d.u32();
    // A worker whose memory was damaged may send any number: only a row of the table.
    if (judge >= props::judges().size()) return false;
    f.judge = static_cast<props::JudgeId>(judge);
    f.signature = d.str();
    f.message = d.str();
    f.index = d.i64();
    f.occurrences = d.i64();
    f.numel = d.i64();
    f.pieces = d.i64();
    f.has_case = d.i64() != 0;
    result.findings[f.signature] = std::move(f);
  }
  return d.done();
}

namespace {

// Whether `text` is UTF-8 without control characters other than tab and newline (what
// a report, a case file and a terminal line can carry).
bool printable_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      if ((byte < 0x20 && byte != '\t' && byte != '\n') || byte == 0x7f) return false;
      ++i;
      continue;
    }
    const std::size_t length = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc2 ? 2 : 0;
    if (length == 0 || byte > 0xf4 || i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

// A table's rows: each counts no case more than the batch has and none crashed (only the
// parent counts those), its outcomes add up to its cases, and together they count from
// `least` to `most` cases.
std::string check_rows(const char* what, const std::map<std::string, Tally>& rows,
                       const std::function<bool(const std::string&)>& name_ok, Index n, Index least, Index most) {
  Index cases = 0;
  for (const auto& [name, t] : rows) {
    if (!name_ok(name)) return fmt::format("a {} row of an unknown name", what);
    for (Index v : {t.cases, t.refused, t.exact, t.wrong, t.valid_but_different, t.crashed, t.target_faults}) {
      if (v < 0 || v > n) return fmt::format("the {} row {} counts {}", what, name, v);
    }
    if (t.crashed != 0) return fmt::format("the {} row {} counts crashed cases", what, name);
    if (t.refused + t.exact + t.wrong + t.valid_but_different + t.target_faults != t.cases) {
      return fmt::format("the {} row {}: its outcomes do not add up to its {} cases", what, name, t.cases);
    }
    cases += t.cases;
  }
  if (cases < least || cases > most) return fmt::format("the {} rows count {} cases for a batch of {}", what, cases, n);
  return {};
}

bool known(std::span<const std::string_view> names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A reshard case's constructor row names its pair, "SOURCE->TARGET" (gen::generate_case).
bool known_constructor(const std::string& name) {
  const auto arrow = name.find("->");
  if (arrow == std::string::npos) return known(gen::constructor_names(), name);
  return known(gen::constructor_names(), name.substr(0, arrow)) &&
         known(gen::constructor_names(), name.substr(arrow + 2));
}

bool known_corruption(const std::string& name) {
  static const std::vector<std::string_view> kinds = [] {
    std::vector<std::string_view> out{gen::kNoCorruption};
    for (std::string_view kind : gen::corruption_kinds()) out.push_back(kind);
    return out;
  }();
  return known(kinds, name);
}

bool known_refusal_row(const std::string& name) {
  return name == "unknown" || name.rfind("unknown (", 0) == 0 || name == oracles::kUnsupportedType ||
         props::refusal_row_kind(name).has_value();
}

// Every operation, and each answered by its target's fallback (props::op_label).
bool known_op(const std::string& name) {
  return std::any_of(std::begin(kAllOps), std::end(kAllOps), [&](Op op) {
    return name == props::op_label(op, false) || name == props::op_label(op, true);
  });
}

// Constructor and corruption rows count every case once; refusal kinds and operations
// (a case may run two) count no more than they can.
std::string rows_hold(const BatchResult& result, Index n) {
  if (auto error = check_rows("constructor", result.by_constructor, known_constructor, n, n, n); !error.empty()) {
    return error;
  }
  if (auto error = check_rows("corruption", result.by_corruption, known_corruption, n, n, n); !error.empty()) {
    return error;
  }
  if (auto error = check_rows("refusal kind", result.by_refusal_kind, known_refusal_row, n, 0, n); !error.empty()) {
    return error;
  }
  return check_rows("operation", result.by_op, known_op, n, 0, 2 * n);
}

// Each finding belongs to a case of the range, under its judge's prefix, in printable text.
std::string findings_hold(const Ledger& ledger, Range range, const BatchResult& result) {
  const Index n = range.size();
  if (static_cast<Index>(result.findings.size()) > n) return fmt::format("{} findings from {} cases", result.findings.size(), n);
  Index occurrences = 0;
  for (const auto& [signature, f] : result.findings) {
    const std::string_view prefix = props::judge_row(f.judge).prefix;
    if (f.signature != signature || !printable_utf8(f.signature) || !printable_utf8(f.message) ||
        f.signature.find('\n') != std::string::npos ||
        f.signature.compare(0, prefix.size(), prefix) != 0 ||
        (f.signature.size() > prefix.size() && f.signature[prefix.size()] != ':')) {
      return "a finding whose signature is not its judge's, or whose text is not printable";
    }
    const Index k = (f.index - ledger.index_of(0)) / std::max<Index>(1, ledger.index_of(1) - ledger.index_of(0));
    if (k < range.first || k >= range.end || ledger.index_of(k) != f.index) {
      return fmt::format("a finding of case {}, not a case of the batch", f.index);
    }
    if (f.occurrences < 1 || f.occurrences > n || f.numel < 0 || f.pieces < 0 || !f.has_case) {
      return fmt::format("the finding {} counts what no batch can", f.signature);
    }
    occurrences += f.occurrences;
  }
  if (occurrences > n) return fmt::format("findings in {} of {} cases", occurrences, n);
  return {};
}

}  // namespace

// What a worker may say about `range` of shard-local case numbers: each tally sums up,
// the rows per constructor and per corruption each count every case of the range once,
// under names the generators use; refusal kinds and operations are known names and count
// no more cases than they can; each finding belongs to a case of the range. Empty when
// the batch holds up; else what does not.
std::string validate_batch(const Ledger& ledger, Range range, const BatchResult& result) {
  if (std::string error = rows_hold(result, range.size()); !error.empty()) return error;
  return findings_hold(ledger, range, result);
}

}  // namespace shardcheck::campaign::detail
