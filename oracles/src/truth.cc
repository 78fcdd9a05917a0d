#include "shardcheck/oracles/truth.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shardcheck/digest.h"
#include "shardcheck/oracles/reference.h"

namespace shardcheck::oracles {

namespace {

// Marker tensors are allocated from a case file's logical shape, which is untrusted.
constexpr Index kMaxCaseElements = Index{1} << 26;

Result<Index> case_numel(const Map& map, std::string_view which) {
  for (Index extent : map.logical_shape) {
    if (extent < 0) {
      return make_error(ErrorKind::format,
                        fmt::format("the {} map's logical shape has a negative extent", which));
    }
  }
  auto numel = checked_numel(map.logical_shape);
  if (!numel) {
    return make_error(ErrorKind::format,
                      fmt::format("the {} map's logical shape overflows 64 bits", which));
  }
  if (*numel > kMaxCaseElements) {
    return make_error(ErrorKind::format,
                      fmt::format("the {} map's logical shape holds {} elements, more than the "
                                  "{} a case may use",
                                  which, *numel, kMaxCaseElements));
  }
  return *numel;
}

Buffer to_buffer(DType dtype, const std::vector<std::uint64_t>& values) {
  Buffer buffer(dtype, static_cast<Index>(values.size()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    buffer.set_bits(static_cast<Index>(i), values[i]);
  }
  return buffer;
}

// A numel mismatch counts the missing or extra elements as differing, and points at
// the first element past the shorter buffer when the common part agrees.
std::optional<Difference> compare(const Buffer& expected, const Buffer& actual) {
  Index common = std::min(expected.numel(), actual.numel());
  Difference d;
  d.count = std::max(expected.numel(), actual.numel()) - common;
  d.element = common;
  bool found = false;
  d.nan_bits_only = expected.numel() == actual.numel();
  for (Index i = 0; i < common; ++i) {
    if (expected.bits(i) == actual.bits(i)) continue;
    if (!found) d.element = i;
    found = true;
    ++d.count;
    d.nan_bits_only = d.nan_bits_only && is_nan_bits(expected.dtype(), expected.bits(i)) &&
                      is_nan_bits(actual.dtype(), actual.bits(i));
  }
  if (d.count == 0) return std::nullopt;
  d.expected_bits = d.element < expected.numel() ? expected.bits(d.element) : 0;
  d.actual_bits = d.element < actual.numel() ? actual.bits(d.element) : 0;
  return d;
}

std::string refused_message(const Error& error) { return "refused " + error.to_string(); }

void set_refused(OpOutcome& out, Error error) {
  out.verdict = Outcome::refused;
  out.message = refused_message(error);
  out.error = std::move(error);
}

void set_refused(OpOutcome& out, const TargetRefusal& refusal) {
  out.verdict = Outcome::refused;
  out.message = "refused " + refusal.to_string();
  if (refusal.error) {
    out.error = *refusal.error;
    return;
  }
  if (refusal.kind) out.error = fault::foreign_refusal(*refusal.kind, refusal.type, refusal.message);
  out.refusal = refusal;
}

void set_fault(OpOutcome& out, const TargetFault& fault) {
  out.verdict = Outcome::target_fault;
  out.message = fmt::format("FAULT: target {} ({}): {}", fault_name(fault.kind), fault.reason, fault.detail);
  out.fault = fault;
}

// The tensor a target returned, or nullptr after recording its refusal or fault.
Buffer* take_answer(OpOutcome& out, TargetResult<Buffer>& answer) {
  if (auto* refusal = std::get_if<TargetRefusal>(&answer)) {
    set_refused(out, *refusal);
    return nullptr;
  }
  if (auto* fault = std::get_if<TargetFault>(&answer)) {
    set_fault(out, *fault);
    return nullptr;
  }
  return &std::get<Buffer>(answer);
}

// The map under test for a target. A map shardcheck decodes goes as DeepSpeed writes it
// (encoded from the decoded map, rank and piece order as given), so that what every target
// reads is the format itself and not a spelling of it that only shardcheck's decoder
// accepts (ranks as a list, -0). A map it refuses goes as the case holds it (contract 9),
// its text or its JSON: an exec target reads it itself, a built-in policy refuses it.
TargetMap target_map(const Case& c) {
  TargetMap out;
  if (undecoded_source_map_error(c).ok()) {
    out.map = &c.map;
  } else if (c.map_text) {
    out.text = &*c.map_text;
  } else if (c.undecoded_map) {
    out.json = &*c.undecoded_map;
  }
  return out;
}

// Python's int() of a JSON string ("2", " -1", "+01", "1_000", "\t7\n"): nullopt unless,
// once whitespace is stripped from both ends, the text is an optionally signed run of
// decimal digits (single underscores between digits, leading zeros allowed) whose value
// fits 64 bits. Past 64 bits int() still gives a number, but no map field can hold it.
std::optional<std::int64_t> python_int(std::string_view text) {
  auto space = [](char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= '\x1c' && ch <= '\x1f'); };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  bool negative = false;
  if (!text.empty() && (text.front() == '+' || text.front() == '-')) {
    negative = text.front() == '-';
    text.remove_prefix(1);
  }
  if (text.empty() || text.front() == '_' || text.back() == '_') return std::nullopt;
  // Accumulated as a negative number, whose range reaches INT64_MIN.
  constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  std::int64_t value = 0;
  char previous = 0;
  for (char ch : text) {
    if (ch == '_') {
      if (previous == '_') return std::nullopt;
      previous = ch;
      continue;
    }
    if (ch < '0' || ch > '9') return std::nullopt;
    const int digit = ch - '0';
    if (value < (kMin + digit) / 10) return std::nullopt;
    value = value * 10 - digit;
    previous = ch;
  }
  if (negative) return value;
  if (value == kMin) return std::nullopt;
  return -value;
}

// Every number and numeric string as int() makes it (a float truncated toward zero), and
// the ranks' keys too, a later key for the same rank replacing an earlier one, as a
// Python dict built from them would.
Json as_python_ints(const Json& value, bool ranks) {
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isfinite(v) && std::fabs(v) < 0x1p62) return Json(static_cast<std::int64_t>(std::trunc(v)));
    return value;
  }
  if (value.is_string()) {
    if (auto v = python_int(value.get<std::string>())) return Json(*v);
    return value;
  }
  if (value.is_array()) {
    Json out = Json::array();
    for (const auto& item : value) out.push_back(as_python_ints(item, false));
    return out;
  }
  if (!value.is_object()) return value;
  Json out = Json::object();
  for (const auto& [key, item] : value.items()) {
    std::string name = key;
    if (ranks) {
      if (auto id = python_int(key)) name = std::to_string(*id);
    }
    out[name] = as_python_ints(item, !ranks && key == "ranks");
  }
  return out;
}

// A map under test that shardcheck's decoder refuses, as the case for an implementation
// that reads maps itself (contract 9): with a truth map the shards come from it as ever;
// without, the data (the producer's shards, F's shape) comes from the map read as
// DeepSpeed's from_dict reads JSON, with int() on every number. The target still gets the
// map as written. nullopt when even that reading does not give a map.
std::optional<Case> as_read_by_the_implementation(const Case& c) {
  if (c.truth) return c;
  Json written;
  if (c.undecoded_map) {
    written = *c.undecoded_map;
  } else if (c.map_text) {
    // JSON as Python's json module reads it: a repeated key keeps its last value.
    written = Json::parse(*c.map_text, nullptr, /*allow_exceptions=*/false);
    if (written.is_discarded()) return std::nullopt;
    if (written.is_object() && written.contains("version") && written.contains("params") &&
        written["params"].is_object() && written["params"].size() == 1) {
      written = Json(written["params"].begin().value());
    }
  } else {
    return std::nullopt;
  }
  auto read = decode_map(as_python_ints(written, false), "$.map");
  if (!read) return std::nullopt;
  Case data = c;
  data.map = std::move(read).value();
  return data;
}

void set_compared(OpOutcome& out, const std::string& what, const Buffer& expected,
                  const Buffer& actual) {
  auto diff = compare(expected, actual);
  if (!diff) {
    out.verdict = Outcome::exact;
    out.message = "exact";
    return;
  }
  out.verdict = Outcome::wrong;
  out.difference = *diff;
  DType dtype = expected.dtype();
  if (expected.numel() != actual.numel()) {
    out.message = fmt::format("WRONG: {} returned {} elements where {} are expected", what,
                              actual.numel(), expected.numel());
    return;
  }
  out.message = fmt::format("WRONG: {} element {} expected {} got {}; {} of {} elements differ{}",
                            what, diff->element, format_element(dtype, diff->expected_bits),
                            format_element(dtype, diff->actual_bits), diff->count, expected.numel(),
                            diff->nan_bits_only ? ", all of them NaNs whose bits changed (contract 1.2 keeps a "
                                                  "NaN's payload, sign and signalling bit)"
                                                : "");
}

struct Inputs {
  std::optional<Buffer> full;      // F, when the case needs it
  ShardSet shards;                 // what the map under test is converted from
  std::optional<Buffer> expected;  // the correct rebuild output, when one exists
  std::optional<Error> no_truth;   // why no correct output exists
  bool truth_wrote_shards = false;  // shards are the reference model's extract of F
  ExpectedVsFull vs_full;          // where the expected tensor is not F, and why
};

bool has_scale(const Map& map) {
  for (const auto& entry : map.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0) return true;
    }
  }
  return false;
}

bool is_power_of_two(double scale) {
  int exponent = 0;
  return std::fabs(std::frexp(scale, &exponent)) == 0.5;
}


// Contract 8: the expected tensor is the truth map's own rebuild of the shards; where it
// is not F, says where and why. With every truth scale a power of two it must be F, but
// for an element the truth map wrote as a subnormal of fewer bits (gradual underflow,
// which section 1.2 does not refuse): anything else is a defect of the harness itself.
// `shards_given`: the case file's own shards, which need not have been written from its F;
// the difference is then theirs to explain, never the harness's.
ExpectedVsFull compare_with_full(const Case& c, const Buffer& expected, const Buffer& full, bool shards_given = false) {
  ExpectedVsFull out;
  out.difference = compare(full, expected);
  if (!out.difference) return out;
  if (shards_given) {
    out.reason = fmt::format("element {} of F holds {} but the truth map's rebuild of the case's shards gives {}: "
                             "the shards were not written from this F",
                             out.difference->element, format_element(c.dtype, out.difference->expected_bits),
                             format_element(c.dtype, out.difference->actual_bits));
    return out;
  }
  const Map& truth = c.truth_map();
  std::optional<double> inexact;
  for (const auto& entry : truth.ranks) {
    for (const auto& piece : entry.pieces) {
      if (piece.scale != 1.0 && !is_power_of_two(piece.scale) && !inexact) inexact = piece.scale;
    }
  }
  const Index element = out.difference->element;
  const std::string where = fmt::format("element {} of F holds {} but the truth map's rebuild gives {}", element,
                                        format_element(c.dtype, out.difference->expected_bits),
                                        format_element(c.dtype, out.difference->actual_bits));
  if (inexact) {
    out.reason = fmt::format("{}: the scale {} is not a power of two, so scaling rounds", where, *inexact);
    return out;
  }
  // Every differing element must be one whose scaled copy underflowed into fewer bits.
  const auto pairing = reference_pairing(truth);
  for (Index e = 0; pairing && e < full.numel(); ++e) {
    if (full.bits(e) == expected.bits(e)) continue;
    bool underflowed = false;
    for (const auto& pair : pairing->pairs) {
      if (pair.element != e || pair.scale == 1.0) continue;
      underflowed = underflowed || underflows_when_scaled(c.dtype, full.bits(e), pair.scale);
    }
    if (!underflowed) {
      out.harness_defect = fmt::format(
          "every scale of the truth map is a power of two, yet the expected tensor is not F: element {} of F holds "
          "{} but the truth map's rebuild gives {} (contract 8)",
          e, format_element(c.dtype, full.bits(e)), format_element(c.dtype, expected.bits(e)));
      out.reason = out.harness_defect;
      return out;
    }
  }
  out.reason = fmt::format("{}: a power-of-two scale wrote it below the smallest normal, with fewer bits "
                           "(gradual underflow)",
                           where);
  return out;
}

// What a correct rebuild returns from the shards the truth map wrote: F itself when no
// piece is scaled (data moves bit-exact), else the reference model's rebuild, whose
// rounding (contract 1.2) may not give F back for a scale that is not a power
// of two or a value written as a subnormal. Replicas scaled differently may then
// disagree, and no correct tensor exists.
void set_expected_from_truth(const Case& c, Inputs& in) {
  const Map& truth = c.truth_map();
  if (!has_scale(truth)) {
    in.expected = in.full;
    return;
  }
  auto rebuilt = oracles::reference_rebuild(truth, in.shards, c.dtype, c.scale_power);
  if (!rebuilt) {
    in.no_truth = rebuilt.error();
    return;
  }
  in.expected = std::move(rebuilt).value();
  in.vs_full = compare_with_full(c, *in.expected, *in.full);
}

bool needs_full(const Case& c, OracleKind oracle) {
  return !c.shards || c.ops.has(Op::extract) || c.ops.has(Op::reshard) || oracle == OracleKind::same_map;
}

Result<Buffer> make_full(const Case& c, const Map& map, std::string_view which) {
  auto numel = case_numel(map, which);
  if (!numel) return numel.error();
  if (!c.full) return marker_buffer(c.dtype, numel.value());
  if (static_cast<Index>(c.full->size()) != numel.value()) {
    return make_error(ErrorKind::shape,
                      fmt::format("the case's full tensor has {} values but the {} map's "
                                  "logical shape holds {}",
                                  c.full->size(), which, numel.value()));
  }
  return to_buffer(c.dtype, *c.full);
}

Buffer poisoned(DType dtype, Index numel) {
  Buffer out(dtype, numel);
  const std::uint64_t poison = poison_bits(dtype);
  for (Index i = 0; i < numel; ++i) out.set_bits(i, poison);
  return out;
}

// What a producer writing F through `map` itself leaves on disk (contract 9):
// DeepSpeed's unchecked extract per rank, poison at shard addresses no piece writes; a
// rank that extract cannot write at all (a view past its shard, say) holds only poison.
// Allocation stays bounded as for any untrusted map: a poison-only shard no larger than
// the unchecked extract itself would allocate, all shards together no more than a case
// may use for F. A rank past those bounds, or whose shard shape has no size, gets none.
ShardSet producer_shards(const Map& map, const Buffer& full, int scale_power) {
  std::vector<const RankEntry*> entries;
  for (const auto& entry : map.ranks) {
    if (entry.shard_shape) entries.push_back(&entry);
  }
  std::stable_sort(entries.begin(), entries.end(),
                   [](const RankEntry* a, const RankEntry* b) { return a->rank < b->rank; });
  const Index per_rank = std::max(full.numel(), CheckLimits{}.max_walked_addresses);
  Index budget = kMaxCaseElements;
  ShardSet out;
  for (const RankEntry* entry : entries) {
    const auto numel = checked_numel(*entry->shard_shape);
    if (out.count(entry->rank) > 0 || !numel || *numel < 0 || *numel > std::min(per_rank, budget)) {
      continue;
    }
    budget -= *numel;
    auto shard = legacy_extract(map, full, entry->rank, scale_power);
    out.emplace(entry->rank, shard ? std::move(shard).value() : poisoned(full.dtype(), *numel));
  }
  return out;
}

// Contract 9: a refusal that needs no data, the case's verdict even where its shards
// cannot be written (the truth's own scale refused, an F too large to make): the map under
// test fails contract 3, or a conversion of the case's dtype refuses its scale (1.2: zero,
// subnormal or not finite in the arithmetic type, any scale on an integer dtype, a scaled
// piece with a power other than 1). ok() when the map under test passes both.
Status refusal_without_data(const Case& c) {
  const ReferenceVerdict verdict = reference_check(c.map);
  if (!verdict.valid()) {
    if (verdict.error) return *verdict.error;
    return make_error(*verdict.kind, verdict.reason);
  }
  return reference_scale_refusal(c.map, c.dtype, c.scale_power);
}

Result<Inputs> prepare_truth(const Case& c) {
  Inputs in;
  const Map& truth = c.truth_map();
  if (needs_full(c, OracleKind::truth) || c.full) {
    auto full = make_full(c, truth, "truth");
    if (!full) {
      // An F that cannot be made: the case runs with no data where the map under test
      // is refused without any (contract 9), so strict refuses it with its kind.
      Status invalid = refusal_without_data(c);
      if (invalid.ok()) return full.error();
      in.full = Buffer(c.dtype, 0);
      if (c.shards) {
        for (const auto& [rank, values] : *c.shards) in.shards.emplace(rank, to_buffer(c.dtype, values));
      }
      in.no_truth = invalid.error();
      return in;
    }
    in.full = std::move(full.value());
  }
  if (!c.shards) {
    // The truth shards come from the reference model, never from the extract under
    // test: a fault shared by extract and rebuild would otherwise round-trip unseen.
    auto shards = reference_extract_all(truth, *in.full, c.scale_power);
    if (shards) {
      in.shards = std::move(shards.value());
      in.truth_wrote_shards = true;
      set_expected_from_truth(c, in);
      return in;
    }
    if (c.truth) {
      // The truth cannot write the shards (its scale refused, say). Only when the map
      // under test passes what needs no data is the case unusable (contract 9); else its
      // refusal is the verdict, and an implementation is given what the producer would
      // have written through the truth map unchecked, and owes that refusal.
      if (refusal_without_data(c).ok()) {
        return reworded(shards.error(), "in the truth map, " + shards.error().sentence);
      }
      in.shards = producer_shards(truth, *in.full, c.scale_power);
      in.no_truth = shards.error();
      // They were written from F: F is what a converter that accepts anyway must return.
      in.expected = in.full;
      return in;
    }
    if (reference_check(c.map).valid()) {
      // A valid map that cannot write F. A scale no conversion of this dtype may apply
      // (contract 1.2) leaves no correct tensor, and strict owes its refusal whatever the
      // shards hold: they are what the producer wrote. An element of F the scale would
      // overflow or flush is data the map could not have written, so a case that reads
      // shards is unusable; an extract reads F alone, and refusing that element is its
      // verdict (contract 1.2 puts the refusal in conversion, and repro knows the dtype).
      const bool reads_shards = c.ops.has(Op::rebuild) || c.ops.has(Op::reshard);
      const bool scale_refused = !reference_scale_refusal(c.map, c.dtype, c.scale_power).ok();
      if (reads_shards && !scale_refused) {
        return reworded(shards.error(), "the map cannot write F, " + shards.error().sentence);
      }
      in.shards = producer_shards(c.map, *in.full, c.scale_power);
      in.no_truth = shards.error();
      // Contract 9: the shards were written from F, so F is what a converter that accepts
      // the scale anyway must return; its acceptance is judged apart (owed_refusal).
      if (scale_refused) in.expected = in.full;
      return in;
    }
    // Nothing is known about the data but the reported map: it wrote the shards.
    in.shards = producer_shards(c.map, *in.full, c.scale_power);
    in.expected = in.full;
    return in;
  }
  for (const auto& [rank, values] : *c.shards) in.shards.emplace(rank, to_buffer(c.dtype, values));
  if (c.full) {
    // Contract 8: the expected tensor is the truth map's rebuild of the shards, and F
    // only where that rebuild refuses (a case whose shards admit no correct tensor).
    auto rebuilt = reference_rebuild(truth, in.shards, c.dtype, c.scale_power);
    if (!rebuilt) {
      in.expected = in.full;
      return in;
    }
    in.expected = std::move(rebuilt).value();
    in.vs_full = compare_with_full(c, *in.expected, *in.full, /*shards_given=*/true);
    return in;
  }
  auto rebuilt = reference_rebuild(truth, in.shards, c.dtype, c.scale_power);
  if (rebuilt) {
    in.expected = std::move(rebuilt.value());
  } else if (auto agreed = c.truth ? std::nullopt : reference_agreed_rebuild(c.map, in.shards, c.dtype, c.scale_power)) {
    // An invalid reported map whose shards still leave no doubt about F (contract 9): that
    // F is what a correct converter could return, and accepting the map is judged apart.
    in.expected = std::move(agreed);
  } else {
    in.no_truth = rebuilt.error();
  }
  return in;
}

// Contract 10 from the outside: a rebuild asked to verify a digest may return only a
// tensor with that digest, a reshard only target shards that hold F with that digest.
// Why this answer breaks it (`answered` says what was returned, `actual` is its digest),
// or nothing. The record is the map's, in a reshard the source map's.
std::optional<std::string> digest_not_enforced(const Case& c, std::string_view answered, std::uint64_t actual) {
  if (!c.digest && !c.digest_state) return std::nullopt;
  const std::string_view recorder = c.target_map ? "the source map" : "the map";
  if (c.digest_state) {
    auto it = c.map.content_digests.find(*c.digest_state);
    if (it == c.map.content_digests.end()) {
      return fmt::format("{} although {} records no content digest for state \"{}\" as asked", answered, recorder,
                         *c.digest_state);
    }
    if (it->second != actual) {
      return fmt::format("{} with content digest {} although {} records {} for state \"{}\"", answered,
                         format_digest(actual), recorder, format_digest(it->second), *c.digest_state);
    }
  }
  if (c.digest && *c.digest != actual) {
    return fmt::format("{} with content digest {} although the expected digest is {}", answered,
                       format_digest(actual), format_digest(*c.digest));
  }
  return std::nullopt;
}

// An answer that ignored the digest it was asked to verify is silently wrong, whatever
// its bits (contract 10: exactly the answers a digest check refuses).
void mark_digest_ignored(OpOutcome& out, const std::string& why) {
  out.digest_ignored = true;
  constexpr std::string_view kWrong = "WRONG: ";
  const bool was_wrong = out.verdict == Outcome::wrong && out.message.starts_with(kWrong);
  out.message = was_wrong ? fmt::format("{}{}; {}", kWrong, why, out.message.substr(kWrong.size()))
                          : fmt::format("{}{}", kWrong, why);
  out.verdict = Outcome::wrong;
}

// A condition-7 refusal names two values of one element of F: the copy it read and the
// one written before. Both must be copies the shards really hold, unscaled as section 1.2
// says (the values a user compares when deciding which replica is damaged). Why not, or
// empty; only refusals in the core's own words are read.
std::string misreported_values(const Case& c, const Inputs& in, const Error& error) {
  constexpr std::string_view kHolds = "this replica holds ";
  if (error.kind != ErrorKind::different_data || error.side != Side::full || !error.address ||
      !error.sentence.starts_with(kHolds)) {
    return {};
  }
  const std::vector<std::uint64_t> copies =
      reference_copies(c.map, in.shards, c.dtype, c.scale_power, *error.address);
  if (copies.size() < 2) return {};
  auto names_a_copy = [&](std::string_view before, std::string_view after) {
    for (const std::uint64_t bits : copies) {
      if (error.sentence.find(fmt::format("{}{}{}", before, format_element(c.dtype, bits), after)) !=
          std::string::npos) {
        return true;
      }
    }
    return false;
  };
  if (names_a_copy(kHolds, " at shard address") && names_a_copy(" wrote ", " here")) return {};
  std::vector<std::string> shown;
  for (const std::uint64_t bits : copies) shown.push_back(format_element(c.dtype, bits));
  return fmt::format("the refusal reports values that are not the copies of element {} of F (unscaled: {}): {}",
                     *error.address, fmt::join(shown, ", "), error.sentence);
}

OpOutcome run_rebuild(const Case& c, const Inputs& in, Target& target) {
  OpOutcome out;
  out.op = Op::rebuild;
  auto answer = target.rebuild(target_map(c), in.shards, c.dtype, c.scale_power,
                               DigestRequest{c.digest, c.digest_state});
  Buffer* result = take_answer(out, answer);
  if (result == nullptr) {
    // Condition 7 binds the contract's implementations; the legacy model compares a replica
    // with whatever F holds, as DeepSpeed does, poison included, and says so.
    if (out.error && !target.is_legacy_model()) out.misreported = misreported_values(c, in, *out.error);
    return out;
  }
  out.output = std::move(*result);
  if (has_scale(c.map)) {
    // Contract 1.2 refuses elements a scale loses, which no check of the map can see.
    auto reference = reference_rebuild(c.map, in.shards, c.dtype, c.scale_power);
    if (!reference && reference.error().kind == ErrorKind::scale) out.owed_refusal = reference.error();
  }
  if (!in.expected) {
    out.verdict = Outcome::wrong;
    out.message = "WRONG: rebuild returned a tensor where no correct tensor exists: " +
                  (in.no_truth ? in.no_truth->to_string() : std::string("no ground truth"));
  } else {
    set_compared(out, "rebuild", *in.expected, *out.output);
  }
  if (auto why = digest_not_enforced(c, "rebuild accepted a tensor", digest(*out.output))) {
    mark_digest_ignored(out, *why);
  }
  return out;
}

bool has_shard(const Map& map, Rank rank) {
  const RankEntry* entry = map.find_rank(rank);
  return entry != nullptr && entry->shard_shape.has_value();
}

OpOutcome extract_one(const Case& c, const Inputs& in, Rank rank, Target& target) {
  const Buffer& full = *in.full;
  OpOutcome out;
  out.op = Op::extract;
  out.rank = rank;
  auto answer = target.extract(target_map(c), full, rank, c.scale_power);
  Buffer* got = take_answer(out, answer);
  if (got == nullptr) return out;
  const Map& truth = c.truth_map();
  if (!has_shard(truth, rank) && got->numel() == 0) {
    // An empty shard for a rank the truth map does not list holds no data: nothing differs.
    out.message = "exact";
    out.output = std::move(*got);
    return out;
  }
  if (!has_shard(truth, rank)) {
    out.verdict = Outcome::wrong;
    out.message = fmt::format("WRONG: extract returned a shard for rank {}, which the truth map "
                              "does not have",
                              rank);
    return out;
  }
  auto want = in.truth_wrote_shards && in.shards.contains(rank)
                  ? Result<Buffer>(in.shards.at(rank))
                  : reference_extract(truth, full, rank, c.scale_power);
  if (!want) {
    out.verdict = Outcome::wrong;
    out.message = fmt::format("WRONG: extract rank {} returned a shard where no correct shard "
                              "exists: {}",
                              rank, want.error().to_string());
    return out;
  }
  set_compared(out, fmt::format("extract rank {}", rank), want.value(), *got);
  if (has_scale(c.map)) {
    auto reference = reference_extract(c.map, full, rank, c.scale_power);
    if (!reference && reference.error().kind == ErrorKind::scale) out.owed_refusal = reference.error();
  }
  out.output = std::move(*got);
  return out;
}

OpOutcome run_extract(const Case& c, const Inputs& in, Target& target) {
  std::set<Rank> ranks;
  for (const Map* map : {&c.map, &c.truth_map()}) {
    for (const auto& entry : map->ranks) {
      if (entry.shard_shape) ranks.insert(entry.rank);
    }
  }
  // Contract 9: an extract applies the whole-map checks even with no rank to extract, so
  // an invalid map with none still owes a refusal: ask for the lowest rank id it could
  // name. A valid one has nothing to extract.
  if (ranks.empty() && !reference_check(c.map).valid()) ranks.insert(0);
  std::optional<OpOutcome> refused;
  std::optional<OpOutcome> fault;
  for (Rank rank : ranks) {
    OpOutcome out = extract_one(c, in, rank, target);
    if (out.verdict == Outcome::wrong) return out;
    if (out.verdict == Outcome::target_fault && !fault) fault = std::move(out);
    if (out.verdict == Outcome::refused && !refused) refused = std::move(out);
  }
  if (fault) return *fault;
  if (refused) return *refused;
  OpOutcome out;
  out.op = Op::extract;
  out.message = "exact";
  return out;
}

// The target shards a reshard returned, rank by rank, against the reference model's
// extract of F through the true target map.
void judge_resharded(OpOutcome& out, const Case& c, const Inputs& in, const ShardSet& got) {
  // F as the shards hold it: the F they were written from, else a correct rebuild of them.
  const Buffer* f = in.truth_wrote_shards && in.full ? &*in.full : in.expected ? &*in.expected : nullptr;
  if (f == nullptr) {
    out.verdict = Outcome::wrong;
    out.message = "WRONG: reshard returned shards where no correct tensor exists: " +
                  (in.no_truth ? in.no_truth->to_string() : std::string("no ground truth"));
    return;
  }
  const Map& truth = c.target_truth_map();
  std::set<Rank> ranks;
  for (const auto& entry : truth.ranks) {
    if (entry.shard_shape) ranks.insert(entry.rank);
  }
  for (const auto& [rank, shard] : got) {
    if (!ranks.contains(rank) && shard.numel() > 0) {
      out.verdict = Outcome::wrong;
      out.rank = rank;
      out.message =
          fmt::format("WRONG: reshard returned a shard for rank {}, which the true target map does not have", rank);
      return;
    }
  }
  for (Rank rank : ranks) {
    out.rank = rank;
    auto want = reference_extract(truth, *f, rank, c.scale_power);
    if (!want) {
      out.verdict = Outcome::wrong;
      out.message = fmt::format("WRONG: reshard returned target rank {}'s shard where no correct shard exists: {}",
                                rank, want.error().to_string());
      return;
    }
    const auto it = got.find(rank);
    // An empty shard holds no data: a plan that leaves it out has lost nothing.
    if (it == got.end() && want.value().numel() == 0) continue;
    if (it == got.end()) {
      out.verdict = Outcome::wrong;
      out.message = fmt::format("WRONG: reshard returned no shard for target rank {}", rank);
      return;
    }
    set_compared(out, fmt::format("reshard target rank {}", rank), want.value(), it->second);
    if (out.verdict == Outcome::wrong) return;
  }
  out.rank.reset();
  out.message = "exact";
  out.verdict = Outcome::exact;
}

// What a fallback returned or refused is what its caller gets: judged the same, said apart.
void note_fallback(OpOutcome& out, const std::optional<Declined>& fallback) {
  if (!fallback) return;
  out.fallback = fallback;
  out.message += fmt::format(" (after its documented fallback: it declined to plan, {}: {})", fallback->type,
                             fallback->message);
}

// Contract 11: the target map's shards from the shards the truth map wrote, through a plan
// made from the pair under test (either side may be corrupted), compared rank by rank with
// the reference model's extract of F through the true target map.
OpOutcome run_reshard(const Case& c, const Inputs& in, Target& target) {
  OpOutcome out;
  out.op = Op::reshard;
  TargetMap to;
  to.map = &*c.target_map;
  auto answer = target.reshard(target_map(c), to, in.shards, c.dtype, c.scale_power,
                               DigestRequest{c.digest, c.digest_state});
  if (auto* refusal = std::get_if<TargetRefusal>(&answer)) {
    set_refused(out, *refusal);
    note_fallback(out, refusal->fallback);
    return out;
  }
  if (auto* fault = std::get_if<TargetFault>(&answer)) {
    set_fault(out, *fault);
    return out;
  }
  const Resharded& resharded = std::get<Resharded>(answer);
  judge_resharded(out, c, in, resharded.shards);
  // F as the returned shards hold it through the target map the reshard was given (a
  // target map that does not fit them has no such F: its shards are judged by their bits).
  if (c.digest || c.digest_state) {
    if (auto shares = reference_digest_shares(*c.target_map, resharded.shards, c.dtype, c.scale_power)) {
      std::uint64_t actual = 0;
      for (const auto& [rank, share] : *shares) actual += share;
      if (auto why = digest_not_enforced(c, "reshard returned target shards", actual)) {
        mark_digest_ignored(out, *why);
      } else if (c.digest_state) {
        // Both maps describe one tensor: a target-side record the shards contradict is
        // one the reshard ignored as well.
        const auto it = c.target_map->content_digests.find(*c.digest_state);
        if (it != c.target_map->content_digests.end() && it->second != actual) {
          mark_digest_ignored(out, fmt::format("reshard returned target shards with content digest {} although the "
                                               "target map records {} for state \"{}\"",
                                               format_digest(actual), format_digest(it->second), *c.digest_state));
        }
      }
    }
  }
  note_fallback(out, resharded.fallback);
  return out;
}

// Contract 3 validity for one operation, judged by the reference model, never by the code
// under test: the map passes conditions 1-6 and, for a rebuild of shards, condition 7 (a
// strict rebuild that stopped comparing replicas must not make its own wrong tensors look
// valid). An extract reads no shard: its map is valid by conditions 1-6, whatever the
// shards the truth map wrote hold.
bool valid_layout(const Case& c, Op op, const ShardSet* shards) {
  if (!reference_check(c.map).valid()) return false;
  // A valid layout that the conversion must still refuse (a scale with p != 1, or on
  // integers): a tensor returned is wrong, not merely different.
  if (!reference_scale_refusal(c.map, c.dtype, c.scale_power).ok()) return false;
  // Resharding: both maps of the pair, and their scales, which a plan copies and never
  // changes (contract 11).
  if (op == Op::reshard && c.target_map &&
      (!reference_check(*c.target_map).valid() || !reference_reshard_scale_refusal(c.map, *c.target_map).ok())) {
    return false;
  }
  if (shards == nullptr || op != Op::rebuild) return true;
  return !reference_replicas_differ(c.map, *shards, c.dtype, c.scale_power);
}

// Each operation's validity, and the case's: every operation it lists.
// Judged once per operation (condition 7 and a reshard pair's scales walk every element).
void set_valid_layout(CaseOutcome& outcome, const Case& c, const ShardSet* shards) {
  std::map<Op, bool> judged;
  auto valid_for = [&](Op op) {
    const auto [at, added] = judged.try_emplace(op, false);
    if (added) at->second = valid_layout(c, op, shards);
    return at->second;
  };
  for (OpOutcome& op : outcome.ops) op.valid_layout = valid_for(op.op);
  const auto ops = c.ops.list();
  outcome.valid_layout = std::all_of(ops.begin(), ops.end(), valid_for);
}

void summarize(CaseOutcome& outcome) {
  const OpOutcome* refused = nullptr;
  const OpOutcome* fault = nullptr;
  for (const auto& op : outcome.ops) {
    if (op.verdict == Outcome::wrong) {
      outcome.verdict = Outcome::wrong;
      outcome.message = op.message;
      return;
    }
    if (op.verdict == Outcome::target_fault && fault == nullptr) fault = &op;
    if (op.verdict == Outcome::refused && refused == nullptr) refused = &op;
  }
  if (fault != nullptr) {
    outcome.verdict = Outcome::target_fault;
    outcome.fault = fault->fault;
    outcome.message = fault->message;
    return;
  }
  if (refused != nullptr) {
    outcome.verdict = Outcome::refused;
    outcome.error = refused->error;
    outcome.refusal = refused->refusal;
    outcome.message = refused->message;
    return;
  }
  outcome.verdict = Outcome::exact;
  outcome.message = "exact";
  if (outcome.ops.empty() && !outcome.unsupported.empty()) {
    std::vector<std::string_view> names;
    for (Op op : outcome.unsupported) names.push_back(op_name(op));
    outcome.message = fmt::format("not run: the target does not implement {}", fmt::join(names, ", "));
  }
}

std::string kinds_text(const Case& c) {
  std::vector<std::string> names;
  if (c.expect_error) names.emplace_back(kind_name(*c.expect_error));
  for (auto kind : c.accept_errors) names.emplace_back(kind_name(kind));
  return fmt::format("{}", fmt::join(names, " or "));
}

// Whether the outcome is what `expected` names: a wrong verdict is wrong_valid_layout
// only on a map that passes every check of contract 3.
bool is_outcome(const CaseOutcome& outcome, Outcome expected) {
  if (expected == Outcome::wrong_valid_layout) return wrong_on_valid_layout(outcome);
  return outcome.verdict == expected;
}

std::string got_text(const CaseOutcome& outcome) {
  if (wrong_on_valid_layout(outcome)) {
    return "wrong (on a valid layout)";
  }
  return std::string(outcome_name(outcome.verdict));
}

std::string judge_strict(const Case& c, const CaseOutcome& outcome, bool judge_kinds) {
  bool kinds_given = judge_kinds && (c.expect_error || !c.accept_errors.empty());
  if (!c.expect && !kinds_given) return {};
  Outcome expect = c.expect.value_or(Outcome::refused);
  if (!is_outcome(outcome, expect)) {
    return fmt::format("expected {}{}, got {}", outcome_name(expect),
                       expect == Outcome::refused && kinds_given ? " " + kinds_text(c) : std::string(),
                       got_text(outcome));
  }
  if (expect != Outcome::refused || !kinds_given) return {};
  if (!outcome.error) return fmt::format("expected refused {}, got refused unknown", kinds_text(c));
  ErrorKind kind = outcome.error->kind;
  bool accepted = c.expect_error == kind;
  for (auto k : c.accept_errors) accepted = accepted || k == kind;
  if (accepted) return {};
  return fmt::format("expected refused {}, got refused {}", kinds_text(c), kind_name(kind));
}

std::string judge_legacy(const Case& c, const CaseOutcome& outcome) {
  if (c.legacy_expect && !is_outcome(outcome, *c.legacy_expect)) {
    return fmt::format("legacy expected {}, got {}", outcome_name(*c.legacy_expect),
                       got_text(outcome));
  }
  if (!c.legacy_output) return {};
  const Buffer* output = nullptr;
  for (const auto& op : outcome.ops) {
    if (op.op == Op::rebuild && op.output) output = &*op.output;
  }
  if (output == nullptr) return "legacy expected a rebuild output, but rebuild returned none";
  auto diff = compare(to_buffer(c.dtype, *c.legacy_output), *output);
  if (!diff) return {};
  return fmt::format("legacy output differs at element {}: expected {} got {}; {} elements differ",
                     diff->element, format_element(c.dtype, diff->expected_bits),
                     format_element(c.dtype, diff->actual_bits), diff->count);
}

void judge(const Case& c, const Target& target, CaseOutcome& outcome) {
  // A target that ran none of the operations an expectation is about is not held to it:
  // none of the case's (it serves none of them: "not run"), or not the rebuild that
  // shards supplied with the case are for (a damaged replica, condition 7), where a
  // restore step serves extract alone.
  const bool rebuild_not_run =
      std::find(outcome.unsupported.begin(), outcome.unsupported.end(), Op::rebuild) != outcome.unsupported.end();
  if ((outcome.ops.empty() && !outcome.unsupported.empty()) || (c.shards && rebuild_not_run)) {
    outcome.expectation_message.clear();
    outcome.matches_expectation = true;
    outcome.expectation_judged = false;
    return;
  }
  outcome.expectation_message = target.is_legacy_model()
                                    ? judge_legacy(c, outcome)
                                    : judge_strict(c, outcome, target.judges_kinds());
  outcome.matches_expectation = outcome.expectation_message.empty();
}

// Every op the oracle runs refuses with `error`: no conversion can read the map under test.
CaseOutcome refused_outright(const Case& c, const Error& error, OracleKind oracle) {
  CaseOutcome outcome;
  // The same-map round trip runs one rebuild whatever the case lists.
  const std::vector<Op> ops = oracle == OracleKind::same_map ? std::vector<Op>{Op::rebuild} : c.ops.list();
  for (Op op : ops) {
    OpOutcome out;
    out.op = op;
    set_refused(out, error);
    outcome.ops.push_back(std::move(out));
  }
  outcome.valid_layout = false;
  return outcome;
}

// Contract 10: each rank's share of the digest, as the core computes it from the
// shards of a case that verifies digests, against the reference model's count. Why they
// differ, or empty.
std::string shares_disagree(const Case& c, const Inputs& in) {
  const auto expected = reference_digest_shares(c.map, in.shards, c.dtype, c.scale_power);
  const auto shares = digest_shares(c.map, in.shards, c.scale_power);
  if (!expected) {
    if (!shares) return {};
    return "digest_shares computed shares where a rebuild must refuse";
  }
  if (!shares) return "digest_shares refused a map and shards a rebuild accepts: " + shares.error().to_string();
  if (shares.value() == *expected) return {};
  for (const auto& [rank, share] : *expected) {
    const auto it = shares.value().find(rank);
    if (it == shares.value().end()) return fmt::format("digest_shares gives rank {} no share", rank);
    if (it->second != share) {
      return fmt::format("rank {}'s digest share is {} but its elements sum to {}", rank, format_digest(it->second),
                         format_digest(share));
    }
  }
  return "digest_shares gives a share to a rank without a shard";
}

Result<CaseOutcome> run_truth(const Case& c, Target& target) {
  auto inputs = prepare_truth(c);
  if (!inputs) return inputs.error();
  const Inputs& in = inputs.value();
  CaseOutcome outcome;
  for (Op op : c.ops.list()) {
    if (!target.supports(op)) {
      outcome.unsupported.push_back(op);
      continue;
    }
    switch (op) {
      case Op::rebuild:
        outcome.ops.push_back(run_rebuild(c, in, target));
        break;
      case Op::extract:
        outcome.ops.push_back(run_extract(c, in, target));
        break;
      case Op::reshard:
        outcome.ops.push_back(run_reshard(c, in, target));
        break;
    }
  }
  set_valid_layout(outcome, c, &in.shards);
  if (!in.expected) outcome.no_correct_rebuild = in.no_truth;
  outcome.expected_vs_full = in.vs_full;
  if (c.digest || c.digest_state) outcome.digest_shares_wrong = shares_disagree(c, in);
  return outcome;
}

// Every rank's shard through the target, as extract_all does for a policy.
Result<ShardSet> target_extract_all(const Case& c, const Buffer& full, Target& target, OpOutcome& op) {
  std::set<Rank> ranks;
  for (const auto& entry : c.map.ranks) {
    if (entry.shard_shape) ranks.insert(entry.rank);
  }
  ShardSet shards;
  for (Rank rank : ranks) {
    auto answer = target.extract(target_map(c), full, rank, c.scale_power);
    Buffer* shard = take_answer(op, answer);
    if (shard == nullptr) return make_error(ErrorKind::format, op.message);
    shards.emplace(rank, std::move(*shard));
  }
  return shards;
}

Result<CaseOutcome> run_same_map(const Case& c, Target& target) {
  CaseOutcome outcome;
  OpOutcome op;
  op.op = Op::rebuild;
  auto full = make_full(c, c.map, "tested");
  if (!full) {
    // A shape no conversion could accept is the map's fault, not the case's.
    if (Status error = check_structure(c.map); !error.ok()) return refused_outright(c, error.error(), OracleKind::same_map);
    return full.error();
  }
  auto shards = target_extract_all(c, full.value(), target, op);
  Inputs in;
  if (shards) {
    in.shards = std::move(shards.value());
    in.expected = full.value();
    op = run_rebuild(c, in, target);
  }
  outcome.ops.push_back(std::move(op));
  set_valid_layout(outcome, c, shards ? &in.shards : nullptr);
  return outcome;
}

std::string hex(DType dtype, std::uint64_t bits) {
  return fmt::format("0x{:0{}x}", bits, element_size(dtype) * 2);
}

Json error_to_json(const Error& error) {
  Json out = Json::object();
  out["kind"] = std::string(kind_name(error.kind));
  if (error.rank) out["rank"] = *error.rank;
  if (error.piece) out["piece"] = *error.piece;
  if (error.address) {
    out["address"] = *error.address;
    out["side"] = error.side == Side::full ? "full" : error.side == Side::shard ? "shard" : "none";
  }
  if (!error.path.empty()) out["path"] = error.path;
  out["message"] = error.message;
  return out;
}

// Small outputs are worth showing whole: a reproduction is read by a person.
constexpr Index kMaxOutputInJson = 64;

Json op_to_json(DType dtype, const OpOutcome& op) {
  Json out = Json::object();
  out["op"] = std::string(op_name(op.op));
  out["verdict"] = std::string(outcome_name(op.verdict));
  if (op.error) out["kind"] = std::string(kind_name(op.error->kind));
  if (op.rank) out["rank"] = *op.rank;
  if (op.digest_ignored) out["digest_ignored"] = true;
  out["valid_layout"] = op.valid_layout;
  out["message"] = op.message;
  if (op.error) out["error"] = error_to_json(*op.error);
  if (op.refusal) {
    if (!op.error) out["kind"] = "unknown";
    out["target_error"] = {{"type", op.refusal->type}, {"message", op.refusal->message}};
  }
  if (op.fallback) out["fallback"] = {{"type", op.fallback->type}, {"message", op.fallback->message}};
  if (op.fault) {
    out["fault"] = {{"kind", std::string(fault_name(op.fault->kind))},
                    {"reason", op.fault->reason},
                    {"detail", op.fault->detail}};
  }
  if (op.difference) {
    const Difference& d = *op.difference;
    out["difference"] = {{"element", d.element},
                         {"expected", hex(dtype, d.expected_bits)},
                         {"actual", hex(dtype, d.actual_bits)},
                         {"expected_value", bits_to_double(dtype, d.expected_bits)},
                         {"actual_value", bits_to_double(dtype, d.actual_bits)},
                         {"count", d.count}};
  }
  if (op.output && op.output->numel() <= kMaxOutputInJson) {
    Json values = Json::array();
    for (Index i = 0; i < op.output->numel(); ++i) values.push_back(hex(dtype, op.output->bits(i)));
    out["output"] = std::move(values);
  }
  return out;
}

}  // namespace

// Whether value * scale, exactly, lies below the dtype's smallest normal: scaling into
// that range keeps fewer bits (gradual underflow, even rounding up to the smallest
// normal), so a power-of-two scale may not give the value back. The smallest normal of
// each dtype is the model's own list, not the core's.
bool underflows_when_scaled(DType dtype, std::uint64_t bits, double scale) {
  const double value = std::fabs(bits_to_double(dtype, bits));
  if (value == 0 || std::isnan(value) || std::isinf(value)) return false;
  // value * scale, exactly: with value = mv * 2^ev and scale = ms * 2^es (frexp), the
  // product is mv * ms * 2^(ev + es), computed without forming it (a double product of
  // two float64 values may itself round across the smallest normal).
  int ev = 0, es = 0;
  const double mv = std::frexp(value, &ev);
  const double ms = std::frexp(std::fabs(scale), &es);
  int smallest_normal_exponent = -126;
  if (dtype == DType::float16) smallest_normal_exponent = -14;
  if (dtype == DType::float64) smallest_normal_exponent = -1022;
  return std::ldexp(mv * ms, ev + es - smallest_normal_exponent) < 1.0;
}

Result<std::uint64_t> truth_digest(const Case& c) {
  auto full = make_full(c, c.truth_map(), "truth");
  if (!full) return full.error();
  if (!has_scale(c.truth_map())) return digest(full.value());
  // A scaled map gives back what its rounding leaves of F (contract 1.2), and
  // that is the tensor a correct rebuild returns and the digest it must verify.
  Inputs in;
  in.full = std::move(full).value();
  auto shards = reference_extract_all(c.truth_map(), *in.full, c.scale_power);
  if (!shards) return shards.error();
  in.shards = std::move(shards).value();
  set_expected_from_truth(c, in);
  if (!in.expected) return *in.no_truth;
  return digest(*in.expected);
}

bool wrong_on_valid_layout(const CaseOutcome& outcome) {
  return outcome.verdict == Outcome::wrong &&
         std::all_of(outcome.ops.begin(), outcome.ops.end(),
                     [](const OpOutcome& op) { return op.verdict != Outcome::wrong || op.valid_layout; });
}

Result<CaseOutcome> run_case(const Case& c, Target& target, OracleKind oracle) {
  Result<CaseOutcome> outcome = CaseOutcome{};
  bool undecoded = false;
  bool not_asked = false;
  if (Status error = undecoded_map_error(c); !error.ok()) {
    undecoded = true;
    // A built-in policy reads the map with shardcheck's decoder, which refuses it with
    // kind format (contract 9); an implementation that reads maps itself is asked too.
    std::optional<Case> data;
    // An undecoded target map is refused by shardcheck's decoder alone: the protocol hands
    // an implementation a reshard's target map decoded.
    if (target.reads_map_itself() && oracle == OracleKind::truth && !c.undecoded_target_map) {
      data = as_read_by_the_implementation(c);
    }
    outcome = data ? run_truth(*data, target) : Result<CaseOutcome>(refused_outright(c, error.error(), oracle));
    not_asked = !data && target.reads_map_itself();
  } else if (oracle == OracleKind::same_map) {
    outcome = run_same_map(c, target);
  } else {
    outcome = run_truth(c, target);
  }
  if (!outcome) return outcome;
  CaseOutcome& result = outcome.value();
  result.policy = target.is_legacy_model() ? Policy::legacy : Policy::strict;
  result.target = target.name();
  if (undecoded) {  // a map that does not decode is refused format
    result.valid_layout = false;
    for (OpOutcome& op : result.ops) op.valid_layout = false;
  }
  result.accepted_invalid = std::any_of(result.ops.begin(), result.ops.end(), [](const OpOutcome& op) {
    const bool returned = op.verdict == Outcome::exact || op.verdict == Outcome::wrong;  // a tensor came back
    return returned && !op.valid_layout;
  });
  summarize(result);
  if (not_asked) {
    // The verdict is shardcheck's decoder's, not the implementation's: say so.
    result.message = fmt::format("{} (shardcheck's decoder; {} was not asked, as no data can be written for a map "
                                 "that reads as no map)",
                                 result.message, target.name());
  }
  judge(c, target, result);
  return outcome;
}

Result<CaseOutcome> run_case(const Case& c, const ConvertOptions& options, OracleKind oracle) {
  auto target = make_policy_target(options);
  return run_case(c, *target, oracle);
}

Json outcome_to_json(const Case& c, const CaseOutcome& outcome) {
  Json out = Json::object();
  out["name"] = c.name;
  out["policy"] = std::string(policy_name(outcome.policy));
  if (!outcome.target.empty()) out["target"] = outcome.target;
  out["verdict"] = std::string(outcome_name(outcome.verdict));
  if (outcome.error) out["kind"] = std::string(kind_name(outcome.error->kind));
  else if (outcome.verdict == Outcome::refused) out["kind"] = "unknown";
  if (outcome.fault) out["fault"] = std::string(fault_name(outcome.fault->kind));
  out["message"] = outcome.message;
  out["valid_layout"] = outcome.valid_layout;
  out["accepted_invalid"] = outcome.accepted_invalid;
  if (const auto& d = outcome.expected_vs_full.difference) {
    out["expected_differs_from_full"] = {{"element", d->element},
                                         {"full", hex(c.dtype, d->expected_bits)},
                                         {"expected", hex(c.dtype, d->actual_bits)},
                                         {"count", d->count},
                                         {"reason", outcome.expected_vs_full.reason}};
  }
  if (!outcome.expected_vs_full.harness_defect.empty()) out["harness_defect"] = outcome.expected_vs_full.harness_defect;
  out["matches_expectation"] = outcome.matches_expectation;
  if (!outcome.matches_expectation) out["expectation_message"] = outcome.expectation_message;
  Json ops = Json::array();
  for (const auto& op : outcome.ops) ops.push_back(op_to_json(c.dtype, op));
  out["ops"] = std::move(ops);
  if (!outcome.unsupported.empty()) {
    Json names = Json::array();
    for (Op op : outcome.unsupported) names.push_back(std::string(op_name(op)));
    out["unsupported"] = std::move(names);
  }
  return out;
}

std::string oracle_choices(std::string_view last_separator) {
  std::string out;
  const std::size_t n = std::size(kOracleNames);
  for (std::size_t k = 0; k < n; ++k) {
    if (k > 0) out += k + 1 == n ? last_separator : std::string_view(", ");
    out += kOracleNames[k].name;
  }
  return out;
}

}  // namespace shardcheck::oracles
