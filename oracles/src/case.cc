#include "shardcheck/case.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <span>

#include <fmt/format.h>

#include "shardcheck/digest.h"
#include "shardcheck/listed.h"

namespace shardcheck {

namespace {

struct OpRow {
  Op op;
  std::string_view name;
  std::string_view doc;
};
constexpr OpRow kOpRows[] = {
#define SHARDCHECK_OP(name, doc) {Op::name, #name, doc},
#include "shardcheck/ops.def"
#undef SHARDCHECK_OP
};

// The spelling older case files use for rebuild and extract together.
constexpr std::string_view kBothOps = "both";

}  // namespace

// Rank keys (of shards here and in the target protocol) are canonical decimal ids so that "1" and "01" cannot both name rank 1.
std::optional<Rank> parse_rank_key(const std::string& key) {
  if (key.empty() || (key.size() > 1 && key[0] == '0')) return std::nullopt;
  Rank rank = 0;
  auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), rank, 10);
  if (ec != std::errc() || end != key.data() + key.size() || rank < 0) return std::nullopt;
  return rank;
}

std::string_view op_name(Op op) {
  for (const auto& row : kOpRows) {
    if (row.op == op) return row.name;
  }
  return "rebuild";
}

std::string_view op_doc(Op op) {
  for (const auto& row : kOpRows) {
    if (row.op == op) return row.doc;
  }
  return {};
}

std::optional<Op> parse_op(std::string_view name) {
  for (const auto& row : kOpRows) {
    if (row.name == name) return row.op;
  }
  return std::nullopt;
}

std::string op_choices(std::string_view last_separator) {
  return listed(kOpRows, [](const OpRow& row) { return row.name; }, last_separator);
}

OpList::OpList(std::initializer_list<Op> ops) {
  for (Op op : ops) add(op);
}

std::vector<Op> OpList::list() const {
  std::vector<Op> out;
  for (Op op : kAllOps) {
    if (has(op)) out.push_back(op);
  }
  return out;
}

namespace {

constexpr int kCaseVersion = 1;

Error format_error(const std::string& path, std::string message) {
  return make_error(ErrorKind::format, std::move(message), Where::in_json(path));
}

// "op": one name, "both" (older files: rebuild and extract), or a non-empty list of names.
Result<OpList> decode_ops(const Json& json) {
  auto one = [](const Json& item, const std::string& path) -> Result<Op> {
    if (!item.is_string()) return format_error(path, "expected an operation name");
    auto op = parse_op(item.get<std::string>());
    if (!op) {
      return format_error(path, fmt::format("expected {}, got \"{}\"", op_choices(), item.get<std::string>()));
    }
    return *op;
  };
  if (json.is_string() && json.get<std::string>() == kBothOps) return OpList{Op::rebuild, Op::extract};
  if (json.is_string()) {
    auto op = one(json, "$.op");
    if (!op) return op.error();
    return OpList{op.value()};
  }
  if (!json.is_array() || json.empty()) {
    return format_error("$.op", "expected an operation name or a non-empty list of them");
  }
  OpList out;
  for (std::size_t i = 0; i < json.size(); ++i) {
    auto op = one(json[i], fmt::format("$.op[{}]", i));
    if (!op) return op.error();
    if (out.has(op.value())) {
      return format_error(fmt::format("$.op[{}]", i), fmt::format("operation {} is listed twice", op_name(op.value())));
    }
    out.add(op.value());
  }
  return out;
}

// Rebuild and extract together are written "both", as before operations were a list, so
// that a case file this version writes reads the same in an older one.
Json encode_ops(const OpList& ops) {
  const std::vector<Op> list = ops.list();
  if (list.size() == 1) return std::string(op_name(list.front()));
  if (ops == OpList{Op::rebuild, Op::extract}) return std::string(kBothOps);
  Json out = Json::array();
  for (Op op : list) out.push_back(std::string(op_name(op)));
  return out;
}

unsigned width_bits(DType dtype) { return static_cast<unsigned>(element_size(dtype) * 8); }

std::string hex_bits(DType dtype, std::uint64_t bits) {
  return fmt::format("0x{:0{}x}", bits, element_size(dtype) * 2);
}

Result<std::uint64_t> decode_hex(DType dtype, const std::string& text, const std::string& path) {
  if (text.size() < 3 || text[0] != '0' || (text[1] != 'x' && text[1] != 'X')) {
    return format_error(path, fmt::format("value \"{}\" is neither a number nor \"0x...\" bits",
                                          text));
  }
  std::uint64_t bits = 0;
  const char* first = text.data() + 2;
  const char* last = text.data() + text.size();
  auto [end, ec] = std::from_chars(first, last, bits, 16);
  if (ec == std::errc::result_out_of_range) {
    return format_error(path, fmt::format("bits \"{}\" do not fit 64 bits", text));
  }
  if (ec != std::errc() || end != last) {
    return format_error(path, fmt::format("bits \"{}\" are not hexadecimal", text));
  }
  unsigned width = width_bits(dtype);
  if (width < 64 && (bits >> width) != 0) {
    return format_error(path, fmt::format("bits \"{}\" do not fit the {}-bit dtype {}", text,
                                          width, dtype_name(dtype)));
  }
  return bits;
}

Result<std::uint64_t> decode_number(DType dtype, const Json& json, const std::string& path) {
  std::optional<std::uint64_t> bits;
  if (is_floating(dtype)) {
    bits = bits_from_double(dtype, json.get<double>());
  } else if (json.is_number_unsigned()) {
    // nlohmann counts unsigned as integer too; above int64's range nothing we have fits.
    auto value = json.get<std::uint64_t>();
    if (value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      bits = bits_from_integer(dtype, static_cast<std::int64_t>(value));
    }
  } else if (json.is_number_integer()) {
    bits = bits_from_integer(dtype, json.get<std::int64_t>());
  } else {
    double value = json.get<double>();
    // 2^63 is exactly representable; anything at or beyond it cannot be an int64.
    constexpr double kLimit = 9223372036854775808.0;
    if (std::isfinite(value) && std::trunc(value) == value && value >= -kLimit && value < kLimit) {
      bits = bits_from_integer(dtype, static_cast<std::int64_t>(value));
    } else if (std::isfinite(value) && std::trunc(value) != value) {
      return format_error(path, fmt::format("value {} is not an integer, as dtype {} needs",
                                            json.dump(), dtype_name(dtype)));
    }
  }
  if (!bits) {
    return format_error(path, fmt::format("value {} does not fit dtype {}", json.dump(),
                                          dtype_name(dtype)));
  }
  return *bits;
}

Result<std::uint64_t> decode_value(DType dtype, const Json& json, const std::string& path) {
  if (json.is_number()) return decode_number(dtype, json, path);
  if (json.is_string()) return decode_hex(dtype, json.get<std::string>(), path);
  return format_error(path, "a value must be a JSON number or a \"0x...\" bits string");
}

Result<std::vector<std::uint64_t>> decode_values(DType dtype, const Json& json,
                                                 const std::string& path) {
  if (!json.is_array()) return format_error(path, "values must be a JSON array");
  std::vector<std::uint64_t> out;
  out.reserve(json.size());  // bounded by the parsed document, not by a number in it
  for (std::size_t i = 0; i < json.size(); ++i) {
    auto bits = decode_value(dtype, json[i], fmt::format("{}[{}]", path, i));
    if (!bits) return bits.error();
    out.push_back(bits.value());
  }
  return out;
}

Result<std::map<Rank, std::vector<std::uint64_t>>> decode_shards(DType dtype, const Json& json,
                                                                const std::string& path) {
  if (!json.is_object()) return format_error(path, "shards must be an object keyed by rank");
  std::map<Rank, std::vector<std::uint64_t>> out;
  for (const auto& [key, values] : json.items()) {
    auto rank = parse_rank_key(key);
    std::string item_path = fmt::format("{}.{}", path, key);
    if (!rank) {
      return format_error(item_path, fmt::format("shard key \"{}\" is not a rank id", key));
    }
    auto decoded = decode_values(dtype, values, item_path);
    if (!decoded) return decoded.error();
    if (!out.emplace(*rank, std::move(decoded.value())).second) {
      return format_error(item_path, fmt::format("rank {} has two shards", *rank));
    }
  }
  return out;
}

Result<std::string> get_string(const Json& json, const std::string& path) {
  if (!json.is_string()) return format_error(path, "expected a string");
  return json.get<std::string>();
}

Result<std::int64_t> get_integer(const Json& json, const std::string& path) {
  if (json.is_number_unsigned() &&
      json.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return format_error(path, "expected an integer that fits 64 bits");
  }
  if (json.is_number_integer()) return json.get<std::int64_t>();
  return format_error(path, "expected an integer that fits 64 bits");
}

Result<ErrorKind> get_kind(const Json& json, const std::string& path) {
  auto name = get_string(json, path);
  if (!name) return name.error();
  auto kind = parse_kind(name.value());
  if (!kind) return format_error(path, fmt::format("expected an error kind, got \"{}\"", name.value()));
  return *kind;
}

Result<Outcome> get_outcome(const Json& json, const std::string& path) {
  auto name = get_string(json, path);
  if (!name) return name.error();
  auto outcome = parse_outcome(name.value());
  if (!outcome) {
    return format_error(path, fmt::format("\"{}\" is not refused, exact, wrong or "
                                          "wrong_valid_layout", name.value()));
  }
  return *outcome;
}

// Corruption old/new values are informational; numbers are kept as their JSON text.
std::string text_of(const Json& json) {
  return json.is_string() ? json.get<std::string>() : json.dump();
}

Result<CorruptionRecord> decode_corruption(const Json& json, const std::string& path) {
  if (!json.is_object()) return format_error(path, "corruption must be an object");
  CorruptionRecord record;
  if (json.contains("kind")) {
    auto kind = get_string(json["kind"], path + ".kind");
    if (!kind) return kind.error();
    record.kind = kind.value();
  }
  for (const char* key : {"rank", "piece"}) {
    if (!json.contains(key) || json[key].is_null()) continue;
    auto value = get_integer(json[key], path + "." + key);
    if (!value) return value.error();
    if (std::string_view(key) == "rank") record.rank = value.value();
    else record.piece = value.value();
  }
  if (json.contains("field")) {
    auto field = get_string(json["field"], path + ".field");
    if (!field) return field.error();
    record.field = field.value();
  }
  if (json.contains("old")) record.old_value = text_of(json["old"]);
  if (json.contains("new")) record.new_value = text_of(json["new"]);
  return record;
}

Status decode_legacy(const Json& json, DType dtype, Case& c) {
  const std::string path = "$.legacy";
  if (!json.is_object()) return format_error(path, "legacy must be an object");
  if (json.contains("expect")) {
    auto expect = get_outcome(json["expect"], path + ".expect");
    if (!expect) return expect.error();
    c.legacy_expect = expect.value();
  }
  if (json.contains("output")) {
    auto output = decode_values(dtype, json["output"], path + ".output");
    if (!output) return output.error();
    c.legacy_output = std::move(output.value());
  }
  return {};
}

Status decode_expectations(const Json& json, Case& c) {
  if (json.contains("expect")) {
    auto expect = get_outcome(json["expect"], "$.expect");
    if (!expect) return expect.error();
    c.expect = expect.value();
  }
  if (json.contains("expect_error")) {
    auto kind = get_kind(json["expect_error"], "$.expect_error");
    if (!kind) return kind.error();
    c.expect_error = kind.value();
  }
  if (json.contains("accept_errors")) {
    const Json& list = json["accept_errors"];
    if (!list.is_array()) return format_error("$.accept_errors", "expected an array of kinds");
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto kind = get_kind(list[i], fmt::format("$.accept_errors[{}]", i));
      if (!kind) return kind.error();
      c.accept_errors.push_back(kind.value());
    }
  }
  return {};
}

// One field of a case file each; a field absent from the file is left as Case has it.
Status decode_name(const Json& value, Case& c) {
  auto name = get_string(value, "$.name");
  if (!name) return name.error();
  c.name = name.value();
  return {};
}

Status decode_truth(const Json& value, Case& c) {
  auto truth = decode_map(value, "$.truth");
  if (!truth) return truth.error();
  c.truth = std::move(truth.value());
  return {};
}

// Resharding (contract 11): the target side. A target map that does not decode is
// refused format like the source map (it is under test too); a target truth that does
// not decode makes the case unusable, as a truth does.
Status decode_target_map(const Json& value, Case& c) {
  auto map = decode_map(value, "$.target_map");
  if (map) {
    c.target_map = std::move(map.value());
  } else {
    c.undecoded_target_map = value;
    c.target_map = Map{};
  }
  return {};
}

Status decode_target_truth(const Json& value, Case& c) {
  auto map = decode_map(value, "$.target_truth");
  if (!map) return map.error();
  c.target_truth = std::move(map.value());
  return {};
}

Status decode_dtype(const Json& value, Case& c) {
  auto name = get_string(value, "$.dtype");
  if (!name) return name.error();
  auto dtype = parse_dtype(name.value());
  if (!dtype) return format_error("$.dtype", fmt::format("expected a dtype, got \"{}\"", name.value()));
  c.dtype = *dtype;
  return {};
}

Status decode_full(const Json& value, Case& c) {
  auto full = decode_values(c.dtype, value, "$.full");
  if (!full) return full.error();
  c.full = std::move(full.value());
  return {};
}

Status decode_case_shards(const Json& value, Case& c) {
  auto shards = decode_shards(c.dtype, value, "$.shards");
  if (!shards) return shards.error();
  c.shards = std::move(shards.value());
  return {};
}

Status decode_scale_power(const Json& value, Case& c) {
  auto power = get_integer(value, "$.scale_power");
  if (!power) return power.error();
  if (power.value() < std::numeric_limits<int>::min() || power.value() > std::numeric_limits<int>::max()) {
    return format_error("$.scale_power", "scale_power does not fit an int");
  }
  c.scale_power = static_cast<int>(power.value());
  return {};
}

// Contract 10: the digest the rebuild is asked to verify.
Status decode_digest(const Json& value, Case& c) {
  auto text = get_string(value, "$.digest");
  if (!text) return text.error();
  auto digest = parse_digest(text.value());
  if (!digest) return format_error("$.digest", "expected a content digest \"0x\" followed by 16 hex digits");
  c.digest = *digest;
  return {};
}

Status decode_digest_state(const Json& value, Case& c) {
  auto state = get_string(value, "$.digest_state");
  if (!state) return state.error();
  if (state.value().empty()) return format_error("$.digest_state", "expected a state name, got the empty string");
  c.digest_state = state.value();
  return {};
}

Status decode_case_ops(const Json& value, Case& c) {
  auto ops = decode_ops(value);
  if (!ops) return ops.error();
  c.ops = ops.value();
  return {};
}

Status decode_case_legacy(const Json& value, Case& c) { return decode_legacy(value, c.dtype, c); }

Status decode_constructor(const Json& value, Case& c) {
  auto constructor = get_string(value, "$.constructor");
  if (!constructor) return constructor.error();
  c.constructor = constructor.value();
  return {};
}

Status decode_case_corruption(const Json& value, Case& c) {
  auto corruption = decode_corruption(value, "$.corruption");
  if (!corruption) return corruption.error();
  c.corruption = std::move(corruption.value());
  return {};
}

// The fields after the map under test, in the order they are read: the dtype before the
// values it types, so that an error names the first field at fault in this order.
struct CaseField {
  const char* key;
  Status (*decode)(const Json& value, Case& c);
};

constexpr CaseField kCaseFields[] = {
    {"truth", decode_truth},
    {"target_map", decode_target_map},
    {"target_truth", decode_target_truth},
    {"dtype", decode_dtype},
    {"full", decode_full},
    {"shards", decode_case_shards},
    {"scale_power", decode_scale_power},
    {"digest", decode_digest},
    {"digest_state", decode_digest_state},
    {"op", decode_case_ops},
};

// After the expectations, which decode_expectations reads together.
constexpr CaseField kCaseRecordFields[] = {
    {"legacy", decode_case_legacy},
    {"constructor", decode_constructor},
    {"corruption", decode_case_corruption},
};

Status decode_fields(const Json& json, std::span<const CaseField> fields, Case& c) {
  for (const CaseField& field : fields) {
    if (!json.contains(field.key)) continue;
    if (Status status = field.decode(json[field.key], c); !status.ok()) return status;
  }
  return {};
}

// The map under test, as JSON or as the text it was read from. One that does not decode
// is kept as given: the case's verdict is then refused format, not an unusable case.
Status decode_map_under_test(const Json& json, Case& c) {
  if (json.contains("map_text")) {
    auto text = get_string(json["map_text"], "$.map_text");
    if (!text) return text.error();
    c.map_text = text.value();
    if (auto map = decode_map_text(*c.map_text)) c.map = std::move(map.value());
    return {};
  }
  if (!json.contains("map")) return format_error("$", "the case has no \"map\"");
  if (auto map = decode_map(json["map"], "$.map")) {
    c.map = std::move(map.value());
  } else {
    c.undecoded_map = json["map"];
  }
  return {};
}

Status check_case_version(const Json& json) {
  if (!json.is_object()) return format_error("$", "a case file must be a JSON object");
  if (!json.contains("shardcheck_case")) return format_error("$", "not a case file, as \"shardcheck_case\" is missing");
  const Json& version = json["shardcheck_case"];
  if (!version.is_number_integer() || version.dump() != std::to_string(kCaseVersion)) {
    return format_error("$.shardcheck_case", fmt::format("case format {} is not supported (this reader knows {})",
                                                         version.dump(), kCaseVersion));
  }
  return {};
}

}  // namespace

Result<Case> decode_case(const Json& json) {
  if (Status status = check_case_version(json); !status.ok()) return status.error();
  Case c;
  if (json.contains("name")) {
    if (Status status = decode_name(json["name"], c); !status.ok()) return status.error();
  }
  if (Status status = decode_map_under_test(json, c); !status.ok()) return status.error();
  if (Status status = decode_fields(json, kCaseFields, c); !status.ok()) return status.error();
  if (c.target_truth && !c.target_map) return format_error("$.target_truth", "a target_truth needs a target_map");
  if (c.ops.has(Op::reshard) && !c.target_map) return format_error("$", "a reshard case needs a \"target_map\"");
  if (Status status = decode_expectations(json, c); !status.ok()) return status.error();
  if (Status status = decode_fields(json, kCaseRecordFields, c); !status.ok()) return status.error();
  return c;
}

Result<Map> decode_map_text(std::string_view text) { return parse_one_map(text, "$.map_text"); }

namespace {

// Where the value of the top-level member `key` of a JSON object lies in `text`, read by
// its syntax alone, so that a value JSON cannot hold (a key given twice, a number out of
// range) still has a place. nullopt when the text is not shaped like an object with that key.
std::optional<std::pair<std::size_t, std::size_t>> member_span(std::string_view text, std::string_view key) {
  const auto members = object_members_by_syntax(text);
  if (!members) return std::nullopt;
  for (const MemberText& m : *members) {
    if (m.name != key) continue;
    const auto start = static_cast<std::size_t>(m.value.data() - text.data());
    return std::make_pair(start, start + m.value.size());
  }
  return std::nullopt;
}

}  // namespace

Status undecoded_map_error(const Case& c) {
  if (Status source = undecoded_source_map_error(c); !source.ok()) return source;
  if (!c.undecoded_target_map) return Status();
  auto map = decode_map(*c.undecoded_target_map, "$.target_map");
  if (!map) return map.error();
  return format_error("$.target_map", "the target map under test was kept undecoded");
}

Status undecoded_source_map_error(const Case& c) {
  if (c.map_text) {
    auto map = parse_one_map(*c.map_text, c.map_text_inline ? "$.map" : "$.map_text");
    if (!map) return map.error();
    return Status();
  }
  if (!c.undecoded_map) return Status();
  auto map = decode_map(*c.undecoded_map, "$.map");
  if (!map) return map.error();
  // Only decode_case fills undecoded_map; a map put there by hand that does decode is
  // still not the one under test.
  return format_error("$.map", "the map under test was kept undecoded");
}

Result<Case> decode_case_text(std::string_view text) {
  auto json = parse_json(text);
  if (json) return decode_case(json.value());
  // The map under test is untrusted input (contract 9): text inside "map" that
  // JSON cannot hold is that map's refusal (format), not an unusable case, when the case
  // file reads once it is set aside.
  const auto span = member_span(text, "map");
  if (!span) return json.error();
  std::string rest(text.substr(0, span->first));
  rest.append("null").append(text.substr(span->second));
  auto without_map = parse_json(rest);
  if (!without_map || without_map.value().contains("map_text")) return json.error();
  Json& root = without_map.value();
  root["map_text"] = std::string(text.substr(span->first, span->second - span->first));
  root.erase("map");
  auto c = decode_case(root);
  if (c) c.value().map_text_inline = true;
  return c;
}

namespace {
Json encode_values(DType dtype, const std::vector<std::uint64_t>& values) {
  Json out = Json::array();
  for (auto bits : values) out.push_back(hex_bits(dtype, bits));
  return out;
}
}  // namespace

Json encode_case(const Case& c) {
  Json out = Json::object();
  out["shardcheck_case"] = kCaseVersion;
  out["name"] = c.name;
  if (c.map_text && c.map_text_inline) out["map"] = nullptr;  // encode_case_text writes the text there
  else if (c.map_text) out["map_text"] = *c.map_text;
  else out["map"] = c.undecoded_map ? *c.undecoded_map : encode_map(c.map, RankOrder::as_given);
  if (c.truth) out["truth"] = encode_map(*c.truth, RankOrder::as_given);
  if (c.undecoded_target_map) {
    out["target_map"] = *c.undecoded_target_map;
  } else if (c.target_map) {
    out["target_map"] = encode_map(*c.target_map, RankOrder::as_given);
  }
  if (c.target_truth) out["target_truth"] = encode_map(*c.target_truth, RankOrder::as_given);
  out["dtype"] = std::string(dtype_name(c.dtype));
  if (c.full) out["full"] = encode_values(c.dtype, *c.full);
  if (c.shards) {
    Json shards = Json::object();
    for (const auto& [rank, values] : *c.shards) {
      shards[std::to_string(rank)] = encode_values(c.dtype, values);
    }
    out["shards"] = std::move(shards);
  }
  out["scale_power"] = c.scale_power;
  if (c.digest) out["digest"] = format_digest(*c.digest);
  if (c.digest_state) out["digest_state"] = *c.digest_state;
  out["op"] = encode_ops(c.ops);
  if (c.expect) out["expect"] = std::string(outcome_name(*c.expect));
  if (c.expect_error) out["expect_error"] = std::string(kind_name(*c.expect_error));
  if (!c.accept_errors.empty()) {
    Json kinds = Json::array();
    for (auto kind : c.accept_errors) kinds.push_back(std::string(kind_name(kind)));
    out["accept_errors"] = std::move(kinds);
  }
  if (c.legacy_expect || c.legacy_output) {
    Json legacy = Json::object();
    if (c.legacy_expect) legacy["expect"] = std::string(outcome_name(*c.legacy_expect));
    if (c.legacy_output) legacy["output"] = encode_values(c.dtype, *c.legacy_output);
    out["legacy"] = std::move(legacy);
  }
  if (!c.constructor.empty()) out["constructor"] = c.constructor;
  if (c.corruption) {
    Json record = Json::object();
    record["kind"] = c.corruption->kind;
    if (c.corruption->rank) record["rank"] = *c.corruption->rank;
    if (c.corruption->piece) record["piece"] = *c.corruption->piece;
    record["field"] = c.corruption->field;
    record["old"] = c.corruption->old_value;
    record["new"] = c.corruption->new_value;
    out["corruption"] = std::move(record);
  }
  return out;
}

std::string encode_case_text(const Case& c) {
  std::string text = encode_case(c).dump(2) + "\n";
  if (c.map_text && c.map_text_inline) {
    // The inline map's own text, as given, in the place its null holds ("map" follows
    // "name", whose string value cannot contain this unescaped line).
    constexpr std::string_view kPlace = "\n  \"map\": null";
    const std::size_t at = text.find(kPlace);
    if (at != std::string::npos) text.replace(at, kPlace.size(), "\n  \"map\": " + *c.map_text);
  }
  return text;
}

}  // namespace shardcheck
