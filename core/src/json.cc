// Long file: the map decoder is one set of templates over two kinds of value (nlohmann's
// Json and the tape of json_tape.h), instantiated here for both, and the readers of map
// text beside them use both instantiations.
#include "shardcheck/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "json_tape.h"
#include "shardcheck/digest.h"

namespace shardcheck {
namespace {

using detail::dump_safe;
using detail::JsonKind;
using detail::key_segment;
using detail::quote_text;
using detail::TapeValue;

// The decoder below reads a Json value and a tape value (json_tape.h) through these
// few questions, so both are held to one reading of the format.
JsonKind kind_of(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return JsonKind::null;
    case Json::value_t::boolean: return JsonKind::boolean;
    case Json::value_t::string: return JsonKind::string;
    case Json::value_t::number_integer: return JsonKind::integer;
    case Json::value_t::number_unsigned: return JsonKind::unsigned_integer;
    case Json::value_t::number_float: return JsonKind::floating;
    case Json::value_t::array: return JsonKind::array;
    case Json::value_t::object: return JsonKind::object;
    default: return JsonKind::other;
  }
}
JsonKind kind_of(const TapeValue& value) { return value.kind(); }

std::int64_t as_integer(const Json& value) { return value.get<std::int64_t>(); }
std::int64_t as_integer(const TapeValue& value) { return value.integer(); }
std::uint64_t as_unsigned(const Json& value) { return value.get<std::uint64_t>(); }
std::uint64_t as_unsigned(const TapeValue& value) { return value.unsigned_integer(); }
bool as_boolean(const Json& value) { return value.get<bool>(); }
bool as_boolean(const TapeValue& value) { return value.boolean(); }
std::string_view as_text(const Json& value) { return value.get_ref<const std::string&>(); }
std::string_view as_text(const TapeValue& value) { return value.text(); }

double as_floating(const Json& value) { return value.get<double>(); }
double as_floating(const TapeValue& value) { return value.floating(); }

// Any number as a double, as Json::get<double> converts it.
template <class V>
double as_double(const V& value) {
  switch (kind_of(value)) {
    case JsonKind::integer: return static_cast<double>(as_integer(value));
    case JsonKind::unsigned_integer: return static_cast<double>(as_unsigned(value));
    default: return as_floating(value);
  }
}

// A number as Json::dump writes it.
std::string number_text(const Json& value) { return dump_safe(value); }
std::string number_text(const TapeValue& value) {
  switch (value.kind()) {
    case JsonKind::integer: return fmt::format("{}", value.integer());
    case JsonKind::unsigned_integer: return fmt::format("{}", value.unsigned_integer());
    default: return dump_safe(Json(value.floating()));
  }
}

const Json* member(const Json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}
std::optional<TapeValue> member(const TapeValue& object, const char* name) { return object.member(name); }

// visit(index, element) until it answers false.
template <class Visit>
void for_each_element(const Json& array, Visit&& visit) {
  for (std::size_t i = 0; i < array.size(); ++i) {
    if (!visit(i, array[i])) return;
  }
}
template <class Visit>
void for_each_element(const TapeValue& array, Visit&& visit) {
  array.for_each_element(visit);
}
// visit(key, value) until it answers false.
template <class Visit>
void for_each_member(const Json& object, Visit&& visit) {
  for (const auto& [key, value] : object.items()) {
    if (!visit(std::string_view(key), value)) return;
  }
}
template <class Visit>
void for_each_member(const TapeValue& object, Visit&& visit) {
  object.for_each_member(visit);
}

// A pieces list the reader decoded as it read (JsonTape::parse_taking_pieces), or nullptr.
std::vector<Piece>* taken_pieces(const Json&) { return nullptr; }
std::vector<Piece>* taken_pieces(const TapeValue& array) { return array.taken_pieces(); }

template <class V>
std::string show(const V& value) {
  switch (kind_of(value)) {
    case JsonKind::null: return "null";
    case JsonKind::boolean: return fmt::format("the boolean {}", as_boolean(value));
    case JsonKind::string: return fmt::format("the string {}", quote_text(as_text(value)));
    case JsonKind::integer:
    case JsonKind::unsigned_integer:
    case JsonKind::floating: return fmt::format("the number {}", number_text(value));
    case JsonKind::array:
      return fmt::format("an array of {} element{}", value.size(), value.size() == 1 ? "" : "s");
    case JsonKind::object: return "an object";
    default: return "a value JSON cannot hold";
  }
}

// Where a value is in the document, plus the rank and piece it belongs to once known, so
// a format error carries them in its fields like every other error does. The path is
// spelled out only when an error names it: a map's every number is read through a
// cursor, and formatting a path for each cost more than reading the map. A cursor points
// at the one it came from, which lives further up the call stack.
class Cursor {
 public:
  explicit Cursor(std::string root) : root_(std::move(root)) {}
  Cursor key(std::string_view name) const {
    Cursor c = child();
    c.key_ = name;
    c.is_key_ = true;
    return c;
  }
  Cursor at(std::size_t i) const {
    Cursor c = child();
    c.index_ = i;
    return c;
  }
  std::string path() const {
    if (parent_ == nullptr) return root_;
    return parent_->path() + (is_key_ ? key_segment(key_) : fmt::format("[{}]", index_));
  }

  std::optional<Rank> rank{};
  std::optional<Index> piece{};

 private:
  Cursor child() const {
    Cursor c{std::string()};
    c.parent_ = this;
    c.rank = rank;
    c.piece = piece;
    return c;
  }
  const Cursor* parent_ = nullptr;
  std::string root_;
  std::string_view key_;
  std::size_t index_ = 0;
  bool is_key_ = false;
};

Error fail(const Cursor& cursor, std::string problem) {
  Where where = Where::in_json(cursor.path());
  where.rank = cursor.rank;
  where.piece = cursor.piece;
  return make_error(ErrorKind::format, std::move(problem), where);
}

// The member `name`, or a format error naming it as missing.
template <class V>
auto required(const V& object, const char* name, const Cursor& where) -> Result<decltype(member(object, name))> {
  if (auto value = member(object, name)) return value;
  return fail(where.key(name), fmt::format("the required key \"{}\" is missing", name));
}

template <class V>
Status expect_object(const V& value, const Cursor& where) {
  if (kind_of(value) == JsonKind::object) return {};
  return fail(where, fmt::format("expected an object, got {}", show(value)));
}

template <class V>
Result<Index> read_int(const V& value, const Cursor& where) {
  constexpr auto kMax = std::numeric_limits<Index>::max();
  switch (kind_of(value)) {
    case JsonKind::integer: return as_integer(value);
    case JsonKind::unsigned_integer: {
      const auto u = as_unsigned(value);
      if (u <= static_cast<std::uint64_t>(kMax)) return static_cast<Index>(u);
      return fail(where, fmt::format("expected an integer, got {}, which does not fit in a signed 64-bit integer", u));
    }
    case JsonKind::floating: {
      const double d = as_floating(value);
      if (!std::isfinite(d) || d != std::trunc(d)) {
        return fail(where, fmt::format("expected an integer, got the number {}", number_text(value)));
      }
      // 2^63 is exactly representable; every double below it in magnitude fits.
      if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
        return fail(where, fmt::format("expected an integer, got {}, which does not fit in a signed 64-bit integer",
                                       number_text(value)));
      }
      return fail(where,
                  fmt::format("expected an integer, got {} written as a floating-point number", number_text(value)));
    }
    default: return fail(where, fmt::format("expected an integer, got {}", show(value)));
  }
}

template <class V>
Result<Extents> read_ints(const V& value, const Cursor& where) {
  if (kind_of(value) != JsonKind::array) {
    return fail(where, fmt::format("expected an array of integers, got {}", show(value)));
  }
  Extents out;
  out.reserve(value.size());  // bounded by the input's length, not by a number in it
  std::optional<Error> error;
  for_each_element(value, [&](std::size_t i, const auto& item) {
    auto read = read_int(item, where.at(i));
    if (!read) error = read.error();
    else out.push_back(read.value());
    return !error;
  });
  if (error) return *error;
  return out;
}

template <class V>
Result<StridedView> read_view(const V& value, const Cursor& where) {
  if (kind_of(value) != JsonKind::array || value.size() != 2) {
    return fail(where, fmt::format("expected [offset, [strides...]], got {}", show(value)));
  }
  std::optional<Result<Index>> offset;
  std::optional<Result<Extents>> strides;
  for_each_element(value, [&](std::size_t i, const auto& item) {
    if (i == 0) offset = read_int(item, where.at(0));
    else strides = read_ints(item, where.at(1));
    return offset->ok();
  });
  if (!offset->ok()) return offset->error();
  if (!strides->ok()) return strides->error();
  return StridedView{offset->value(), std::move(strides->value())};
}

template <class V>
Result<double> read_scale(const V& value, const Cursor& where) {
  const JsonKind kind = kind_of(value);
  if (kind != JsonKind::integer && kind != JsonKind::unsigned_integer && kind != JsonKind::floating) {
    return fail(where, fmt::format("expected a number, got {}", show(value)));
  }
  const double scale = as_double(value);
  if (!std::isfinite(scale)) return fail(where, "expected a finite number");
  return scale;
}

template <class V>
Result<Piece> decode_piece(const V& value, const Cursor& where) {
  if (Status bad = expect_object(value, where); !bad.ok()) return bad.error();
  Piece piece;
  auto shape = required(value, "shape", where);
  if (!shape) return shape.error();
  auto extents = read_ints(*shape.value(), where.key("shape"));
  if (!extents) return extents.error();
  piece.shape = std::move(extents.value());

  for (auto [name, view] : {std::pair{"source", &piece.source}, std::pair{"dest", &piece.dest}}) {
    auto field = required(value, name, where);
    if (!field) return field.error();
    auto decoded = read_view(*field.value(), where.key(name));
    if (!decoded) return decoded.error();
    *view = std::move(decoded.value());
  }

  auto locations = required(value, "locations", where);
  if (!locations) return locations.error();
  auto ranks = read_ints(*locations.value(), where.key("locations"));
  if (!ranks) return ranks.error();
  piece.locations = std::move(ranks.value());

  if (auto scale = member(value, "scale")) {
    auto decoded = read_scale(*scale, where.key("scale"));
    if (!decoded) return decoded.error();
    piece.scale = decoded.value();
  }
  return piece;
}

// "content_digests": {"<state>": "0x<16 hex digits>"} (contract 10).
template <class V>
Result<std::map<std::string, std::uint64_t>> read_digests(const V& value, const Cursor& where) {
  if (kind_of(value) != JsonKind::object) {
    return fail(where, fmt::format("expected an object of content digests keyed by state, got {}", show(value)));
  }
  std::map<std::string, std::uint64_t> out;
  std::optional<Error> error;
  for_each_member(value, [&](std::string_view state, const auto& digest) {
    const Cursor at = where.key(state);
    if (state.empty()) {
      error = fail(at, "a content digest needs a state name, got the empty string");
      return false;
    }
    std::optional<std::uint64_t> parsed;
    if (kind_of(digest) == JsonKind::string) parsed = parse_digest(std::string(as_text(digest)));
    if (!parsed) {
      error = fail(at, fmt::format("expected a content digest \"0x\" followed by 16 hex digits, got {}", show(digest)));
      return false;
    }
    out.emplace(state, *parsed);
    return true;
  });
  if (error) return *error;
  return out;
}

template <class V>
Result<RankEntry> decode_rank(const V& value, Rank rank, Cursor where) {
  where.rank = rank;
  if (Status bad = expect_object(value, where); !bad.ok()) return bad.error();
  RankEntry entry;
  entry.rank = rank;
  if (auto shard = member(value, "shard_shape")) {
    auto extents = read_ints(*shard, where.key("shard_shape"));
    if (!extents) return extents.error();
    entry.shard_shape = std::move(extents.value());
  }
  // Every rank entry lists its pieces, possibly none (contract 2): a missing
  // list is not read as an empty one.
  auto listed = required(value, "pieces", where);
  if (!listed) return listed.error();
  const auto& pieces = *listed.value();
  const Cursor list = where.key("pieces");
  if (kind_of(pieces) != JsonKind::array) {
    return fail(list, fmt::format("expected an array of pieces, got {}", show(pieces)));
  }
  if (std::vector<Piece>* taken = taken_pieces(pieces)) {
    entry.pieces = std::move(*taken);  // every one decoded as decode_piece below decodes it
    return entry;
  }
  entry.pieces.reserve(pieces.size());
  std::optional<Error> error;
  for_each_element(pieces, [&](std::size_t i, const auto& item) {
    Cursor at = list.at(i);
    at.piece = static_cast<Index>(i);
    auto piece = decode_piece(item, at);
    if (!piece) error = piece.error();
    else entry.pieces.push_back(std::move(piece.value()));
    return !error;
  });
  if (error) return *error;
  return entry;
}

Result<Rank> rank_from_key(std::string_view key, const Cursor& where) {
  const bool negative = !key.empty() && key[0] == '-';
  const std::string_view digits = negative ? key.substr(1) : key;
  const bool all_digits = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                         [](char c) { return c >= '0' && c <= '9'; });
  if (!all_digits) return fail(where, fmt::format("expected a decimal rank id as the key, got {}", quote_text(key)));
  if (negative) return fail(where, fmt::format("rank ids must be non-negative, got {}", quote_text(key)));
  Rank rank = 0;
  for (char c : digits) {
    auto next = checked_mul(rank, 10);
    if (next) next = checked_add(*next, c - '0');
    if (!next) return fail(where, fmt::format("rank id {} does not fit in a signed 64-bit integer", quote_text(key)));
    rank = *next;
  }
  return rank;
}

// Collects rank entries and refuses a rank id seen twice, naming both spellings
// ("1" and "01" are the same rank).
// How a rank id was written: an object key, or the index of an array entry. Spelled
// out only for the error.
struct Spelling {
  std::optional<std::string_view> key;
  std::size_t index = 0;
  std::string text() const { return key ? fmt::format("key {}", quote_text(*key)) : fmt::format("entry [{}]", index); }
};

class RankCollector {
 public:
  template <class V>
  Status add(Rank rank, Spelling label, const V& value, const Cursor& where) {
    auto [it, fresh] = seen_.emplace(rank, label);
    if (!fresh) {
      Cursor at = where;
      at.rank = rank;
      return fail(at, fmt::format("this rank id appears twice, as {} and as {}", it->second.text(), label.text()));
    }
    auto entry = decode_rank(value, rank, where);
    if (!entry) return entry.error();
    ranks_.push_back(std::move(entry.value()));
    return {};
  }
  std::vector<RankEntry> take() { return std::move(ranks_); }

 private:
  std::map<Rank, Spelling> seen_;
  std::vector<RankEntry> ranks_;
};

template <class V>
Result<std::vector<RankEntry>> decode_ranks(const V& value, const Cursor& where) {
  RankCollector ranks;
  std::optional<Error> error;
  if (kind_of(value) == JsonKind::object) {
    for_each_member(value, [&](std::string_view key, const auto& entry) {
      const Cursor at = where.key(key);
      auto rank = rank_from_key(key, at);
      if (!rank) {
        error = rank.error();
        return false;
      }
      Status added = ranks.add(rank.value(), Spelling{key}, entry, at);
      if (!added.ok()) error = std::move(added).error();
      return !error;
    });
    if (error) return *error;
    return ranks.take();
  }
  if (kind_of(value) == JsonKind::array) {
    for_each_element(value, [&](std::size_t i, const auto& item) {
      Status added = [&]() -> Status {
        const Cursor at = where.at(i);
        if (Status bad = expect_object(item, at); !bad.ok()) return bad;
        auto field = required(item, "rank", at);
        if (!field) return field.error();
        auto rank = read_int(*field.value(), at.key("rank"));
        if (!rank) return rank.error();
        if (rank.value() < 0) {
          return fail(at.key("rank"), fmt::format("rank ids must be non-negative, got {}", rank.value()));
        }
        return ranks.add(rank.value(), Spelling{std::nullopt, i}, item, at);
      }();
      if (!added.ok()) error = std::move(added).error();
      return !error;
    });
    if (error) return *error;
    return ranks.take();
  }
  return fail(where, fmt::format("expected an object keyed by rank id or an array of rank entries, got {}",
                                 show(value)));
}

template <class V>
Result<Map> decode_map_of(const V& json, const std::string& path) {
  const Cursor root{path};
  if (Status bad = expect_object(json, root); !bad.ok()) return bad.error();
  Map map;
  auto shape = required(json, "logical_shape", root);
  if (!shape) return shape.error();
  auto extents = read_ints(*shape.value(), root.key("logical_shape"));
  if (!extents) return extents.error();
  map.logical_shape = std::move(extents.value());

  auto ranks_field = required(json, "ranks", root);
  if (!ranks_field) return ranks_field.error();
  auto ranks = decode_ranks(*ranks_field.value(), root.key("ranks"));
  if (!ranks) return ranks.error();
  map.ranks = std::move(ranks.value());

  if (auto digests = member(json, "content_digests")) {
    auto decoded = read_digests(*digests, root.key("content_digests"));
    if (!decoded) return decoded.error();
    map.content_digests = std::move(decoded.value());
  }
  return map;
}

template <class V>
Result<std::vector<NamedMap>> decode_envelope(const V& json) {
  const Cursor root{"$"};
  auto version_field = required(json, "version", root);
  if (!version_field) return version_field.error();
  auto version = read_int(*version_field.value(), root.key("version"));
  if (!version) return version.error();
  if (version.value() > kFormatVersion) {
    return fail(root.key("version"),
                fmt::format("format version {} is newer than supported (this reader understands up to {})",
                            version.value(), kFormatVersion));
  }
  if (version.value() < 1) {
    return fail(root.key("version"), fmt::format("format version {} does not exist; versions start at 1",
                                                 version.value()));
  }
  auto params = required(json, "params", root);
  if (!params) return params.error();
  const auto& list = *params.value();
  if (kind_of(list) != JsonKind::object) {
    return fail(root.key("params"), fmt::format("expected an object of parameter maps, got {}", show(list)));
  }
  std::vector<NamedMap> out;
  out.reserve(list.size());
  for_each_member(list, [&](std::string_view name, const auto& map) {
    out.push_back(NamedMap{std::string(name), decode_map_of(map, root.key("params").key(name).path())});
    return true;
  });
  return out;
}

template <class V>
Result<std::vector<NamedMap>> decode_document_of(const V& json) {
  const Cursor root{"$"};
  const bool object = kind_of(json) == JsonKind::object;
  if (object && member(json, "logical_shape")) {
    std::vector<NamedMap> out;
    out.push_back(NamedMap{"", decode_map_of(json, "$")});
    return out;
  }
  if (object && (member(json, "version") || member(json, "params"))) return decode_envelope(json);
  return fail(root, fmt::format("expected a map (an object with \"logical_shape\") or an envelope (an object "
                                "with \"version\" and \"params\"), got {}",
                                show(json)));
}

}  // namespace


namespace {

// The Json value of a tape (which holds no repeated key, so members are appended as read).
Json to_json(const TapeValue& value) {
  switch (value.kind()) {
    case JsonKind::null: return Json(nullptr);
    case JsonKind::boolean: return Json(value.boolean());
    case JsonKind::integer: return Json(value.integer());
    case JsonKind::unsigned_integer: return Json(value.unsigned_integer());
    case JsonKind::floating: return Json(value.floating());
    case JsonKind::string: return Json(std::string(value.text()));
    case JsonKind::array: {
      Json out = Json::array();
      auto& items = out.get_ref<Json::array_t&>();
      items.reserve(value.size());
      value.for_each_element([&](std::size_t, const TapeValue& item) {
        items.push_back(to_json(item));
        return true;
      });
      return out;
    }
    default: {
      Json out = Json::object();
      // ordered_map's own insert searches its members for the key, quadratic in their
      // number; its vector base appends.
      auto& members = static_cast<std::vector<Json::object_t::value_type>&>(out.get_ref<Json::object_t&>());
      members.reserve(value.size());
      value.for_each_member([&](std::string_view key, const TapeValue& item) {
        members.emplace_back(std::string(key), to_json(item));
        return true;
      });
      return out;
    }
  }
}

}  // namespace

Result<Json> parse_json(std::string_view text, std::uint64_t max_bytes) {
  detail::JsonTape tape;
  // nlohmann's parser alone: what parse_map and parse_document must agree with, and the
  // tests and the map_json fuzz target hold them to it.
  if (Status bad = tape.parse(text, detail::JsonTape::Reader::nlohmann_only, max_bytes); !bad.ok()) {
    return std::move(bad).error();
  }
  return to_json(tape.root());
}

Result<Map> decode_map(const Json& json, const std::string& path) { return decode_map_of(json, path); }

Result<std::vector<NamedMap>> decode_document(const Json& json) { return decode_document_of(json); }

namespace {

// Reads text onto a tape for the decoder. A valid map is read with its pieces taken off
// the tape as they close, so that neither its tokens (about twenty per piece) nor a
// second copy of its pieces are ever held whole; anything else (an error anywhere, text
// that is not plain) is read again exactly, so every answer is parse()'s.
Status read_tape(detail::JsonTape& tape, std::string_view text, std::uint64_t max_bytes,
                 const ReadProgress& progress = {}) {
  if (Status bad = check_input_size(text.size(), std::min(max_bytes, kMaxInputBytesCeiling)); !bad.ok()) return bad;
  static const Cursor kAnywhere{"$"};  // names nothing: a piece that fails is read again
  detail::PieceTaking taking;
  taking.decode = [](const TapeValue& value) -> std::optional<Piece> {
    auto piece = decode_piece(value, kAnywhere);
    if (!piece) return std::nullopt;
    return std::move(piece.value());
  };
  taking.progress = progress;
  if (tape.parse_taking_pieces(text, taking)) return {};
  return tape.parse(text, detail::JsonTape::Reader::plain_first, max_bytes);
}

}  // namespace

std::optional<std::vector<MemberText>> object_members_by_syntax(std::string_view text) {
  std::size_t i = 0;
  auto skip_space = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  };
  auto skip_string = [&]() -> bool {  // at '"': to just past the closing quote
    for (++i; i < text.size(); ++i) {
      if (text[i] == '\\') ++i;
      else if (text[i] == '"') return ++i, true;
    }
    return false;
  };
  // To the end of one value: past a string, past a closed bracket, or to the ',' or '}'
  // that ends a scalar.
  auto skip_value = [&]() -> bool {
    int depth = 0;
    while (i < text.size()) {
      const char ch = text[i];
      if (ch == '"') {
        if (!skip_string()) return false;
        if (depth == 0) return true;
        continue;
      }
      if (ch == '{' || ch == '[') ++depth;
      if (ch == '}' || ch == ']') {
        if (depth == 0) return true;  // the end of the enclosing object
        if (--depth == 0) return ++i, true;
      }
      if (ch == ',' && depth == 0) return true;
      ++i;
    }
    return depth == 0;
  };
  std::vector<MemberText> members;
  skip_space();
  if (i >= text.size() || text[i] != '{') return std::nullopt;
  ++i;
  skip_space();
  if (i < text.size() && text[i] == '}') {
    ++i;
  } else {
    while (true) {
      skip_space();
      if (i >= text.size() || text[i] != '"') return std::nullopt;
      const std::size_t name_start = i + 1;
      if (!skip_string()) return std::nullopt;
      const std::string_view name = text.substr(name_start, i - 1 - name_start);
      skip_space();
      if (i >= text.size() || text[i] != ':') return std::nullopt;
      ++i;
      skip_space();
      const std::size_t start = i;
      if (!skip_value()) return std::nullopt;
      std::size_t end = i;
      while (end > start && (text[end - 1] == ' ' || text[end - 1] == '\n' || text[end - 1] == '\r' ||
                             text[end - 1] == '\t')) {
        --end;
      }
      if (end == start) return std::nullopt;
      members.push_back(MemberText{name, text.substr(start, end - start)});
      skip_space();
      if (i < text.size() && text[i] == ',') {
        ++i;
        continue;
      }
      if (i < text.size() && text[i] == '}') {
        ++i;
        break;
      }
      return std::nullopt;
    }
  }
  skip_space();
  if (i != text.size()) return std::nullopt;
  return members;
}

namespace {

// Read alone, a parameter's map is "$" and its bytes count from its own first: its
// error moves to `where`, at `offset` in the whole text.
Error placed(const Error& e, const std::string& where, std::size_t offset) {
  std::string sentence = e.sentence;
  static constexpr std::string_view kAtByte = "at byte ";
  if (const auto at = sentence.find(kAtByte); at != std::string::npos) {
    const std::size_t digits = at + kAtByte.size();
    std::size_t end = digits;
    while (end < sentence.size() && sentence[end] >= '0' && sentence[end] <= '9') ++end;
    std::uint64_t byte = 0;
    if (end > digits && std::from_chars(sentence.data() + digits, sentence.data() + end, byte).ec == std::errc()) {
      sentence.replace(digits, end - digits, std::to_string(byte + offset));
    }
  }
  return make_error(e.kind, std::move(sentence), Where::in_json(where + e.path.substr(e.path.empty() ? 0 : 1)));
}

// A document whose text JSON cannot hold as a whole (`whole`: the error reading it),
// read by its syntax as decode_document would read it: a bare map's such text is that
// map's refusal, and an envelope is read parameter by parameter, so that one parameter
// hides no other. nullopt where `whole` stands: text over the limit or not shaped like a
// map or an envelope, or a fault outside the parameters' maps (the envelope's own
// members, a parameter named twice). An envelope that reads without its parameters but is
// refused (a newer version) gets that refusal.
std::optional<Result<Document>> document_by_syntax(std::string_view text, std::uint64_t max_bytes, const Error& whole) {
  if (!check_input_size(text.size(), std::min(max_bytes, kMaxInputBytesCeiling)).ok()) return std::nullopt;
  const auto top = object_members_by_syntax(text);
  if (!top) return std::nullopt;
  auto named = [&](std::string_view key) {
    return std::count_if(top->begin(), top->end(), [&](const MemberText& m) { return m.name == key; });
  };
  if (named("logical_shape") > 0) {  // a map, as decode_document reads it first
    std::vector<NamedMap> one;
    one.push_back(NamedMap{"", Result<Map>(whole)});
    return Document{std::move(one), false};
  }
  if (named("params") != 1) return std::nullopt;
  const MemberText& params =
      *std::find_if(top->begin(), top->end(), [](const MemberText& m) { return m.name == "params"; });
  const std::size_t params_at = static_cast<std::size_t>(params.value.data() - text.data());
  std::string shell(text.substr(0, params_at));
  shell.append("{}").append(text.substr(params_at + params.value.size()));
  detail::JsonTape shell_tape;
  if (!read_tape(shell_tape, shell, max_bytes).ok()) return std::nullopt;
  if (auto envelope = decode_document_of(shell_tape.root()); !envelope) return envelope.error();
  const auto members = object_members_by_syntax(params.value);
  if (!members) return std::nullopt;
  Document out{{}, true};
  std::unordered_set<std::string> names;
  for (const MemberText& m : *members) {
    auto decoded = parse_json(fmt::format("\"{}\"", m.name));
    if (!decoded || !decoded.value().is_string()) return std::nullopt;
    std::string name = decoded.value().get<std::string>();
    if (!names.insert(name).second) return std::nullopt;
    const std::string where = Cursor{"$"}.key("params").key(name).path();
    detail::JsonTape tape;
    Status read = read_tape(tape, m.value, max_bytes);
    Result<Map> map = read.ok() ? decode_map_of(tape.root(), where)
                                : Result<Map>(placed(read.error(), where,
                                                     static_cast<std::size_t>(m.value.data() - text.data())));
    out.params.push_back(NamedMap{std::move(name), std::move(map)});
  }
  return out;
}

}  // namespace

Result<Map> parse_map(std::string_view text, const std::string& path, std::uint64_t max_bytes) {
  detail::JsonTape tape;
  if (Status bad = read_tape(tape, text, max_bytes); !bad.ok()) return std::move(bad).error();
  return decode_map_of(tape.root(), path);
}

Result<std::vector<NamedMap>> parse_document(std::string_view text, std::uint64_t max_bytes) {
  detail::JsonTape tape;
  if (Status bad = read_tape(tape, text, max_bytes); !bad.ok()) return std::move(bad).error();
  return decode_document_of(tape.root());
}

Result<Document> read_document(std::string_view text, std::uint64_t max_bytes, const ReadProgress& progress) {
  detail::JsonTape tape;
  if (Status bad = read_tape(tape, text, max_bytes, progress); !bad.ok()) {
    if (auto by_syntax = document_by_syntax(text, max_bytes, bad.error())) return std::move(*by_syntax);
    return std::move(bad).error();
  }
  auto params = decode_document_of(tape.root());
  if (!params) return params.error();
  const TapeValue root = tape.root();
  return Document{std::move(params.value()), !root.member("logical_shape").has_value()};
}

Result<Map> parse_one_map(std::string_view text, const std::string& path, std::uint64_t max_bytes) {
  detail::JsonTape tape;
  if (Status bad = read_tape(tape, text, max_bytes); !bad.ok()) return std::move(bad).error();
  const detail::TapeValue root = tape.root();
  if (root.kind() != JsonKind::object || !root.member("version")) return decode_map_of(root, path);
  auto params = decode_document_of(root);
  if (!params) return params.error();
  if (params.value().size() != 1) {
    return fail(Cursor{path + ".params"}, fmt::format("a map text holds one parameter's map, but this envelope "
                                                      "holds {}",
                                                      params.value().size()));
  }
  return std::move(params.value().front().map);
}

namespace {

// The text writer appends to one buffer; Json builds the same document only when a
// caller wants a value (encode_map), by reading this text back.
class MapWriter {
 public:
  void integer(Index value) {
    const fmt::format_int digits(value);
    out_.append(digits.data(), digits.data() + digits.size());
  }
  void ints(std::span<const Index> values) {
    out_.push_back('[');
    for (std::size_t i = 0; i < values.size(); ++i) {
      if (i > 0) out_.push_back(',');
      integer(values[i]);
    }
    out_.push_back(']');
  }
  void view(const StridedView& view) {
    out_.push_back('[');
    integer(view.offset);
    out_.push_back(',');
    ints(view.strides);
    out_.push_back(']');
  }
  // A string as Json::dump writes it (escapes, and invalid UTF-8 replaced).
  void string(std::string_view text) { raw(dump_safe(Json(std::string(text)))); }
  void key(std::string_view name) {
    string(name);
    out_.push_back(':');
  }
  void raw(std::string_view text) { out_.append(text.data(), text.data() + text.size()); }
  void rank_body(const RankEntry& entry) {
    if (entry.shard_shape) {
      raw("\"shard_shape\":");
      ints(*entry.shard_shape);
      out_.push_back(',');
    }
    raw("\"pieces\":[");
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      const Piece& piece = entry.pieces[i];
      raw(i > 0 ? ",{\"shape\":" : "{\"shape\":");
      ints(piece.shape);
      raw(",\"source\":");
      view(piece.source);
      raw(",\"dest\":");
      view(piece.dest);
      raw(",\"locations\":");
      ints(piece.locations);
      if (piece.scale != 1.0) {
        raw(",\"scale\":");
        raw(dump_safe(Json(piece.scale)));  // Json's shortest round-trip form
      }
      out_.push_back('}');
    }
    raw("]}");
  }
  std::string take() { return fmt::to_string(out_); }

 private:
  fmt::memory_buffer out_;
};

}  // namespace

std::string encode_map_text(const Map& map, RankOrder order) {
  std::vector<const RankEntry*> ranks;
  ranks.reserve(map.ranks.size());
  for (const RankEntry& entry : map.ranks) ranks.push_back(&entry);
  if (order == RankOrder::sorted) {
    std::stable_sort(ranks.begin(), ranks.end(),
                     [](const RankEntry* a, const RankEntry* b) { return a->rank < b->rank; });
  }

  // An object cannot hold a rank id twice or a negative one; rather than let the
  // object silently drop a rank, such a map is written in the array form, which
  // decode_map then refuses with an error that names the problem.
  std::unordered_set<Rank> ids;
  const bool object_form = std::all_of(ranks.begin(), ranks.end(), [&ids](const RankEntry* entry) {
    return entry->rank >= 0 && ids.insert(entry->rank).second;
  });

  MapWriter out;
  out.raw("{\"logical_shape\":");
  out.ints(map.logical_shape);
  out.raw(object_form ? ",\"ranks\":{" : ",\"ranks\":[");
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out.raw(",");
    out.raw(object_form ? "\"" : "{\"rank\":");
    out.integer(ranks[i]->rank);
    out.raw(object_form ? "\":{" : ",");
    out.rank_body(*ranks[i]);
  }
  out.raw(object_form ? "}" : "]");
  if (!map.content_digests.empty()) {
    out.raw(",\"content_digests\":{");
    bool first = true;
    for (const auto& [state, value] : map.content_digests) {
      if (!first) out.raw(",");
      first = false;
      out.key(state);
      out.string(format_digest(value));
    }
    out.raw("}");
  }
  out.raw("}");
  return out.take();
}

// The writer's text read back through a tape: the plain reader reads all of it (the
// writer writes plain JSON) without nlohmann's allocation per value, and the value is
// built by appending members. The text is this program's own, so no input limit applies
// but the tape's own ceiling; past it Json::parse reads it, as before.
Json encode_map(const Map& map, RankOrder order) {
  const std::string text = encode_map_text(map, order);
  detail::JsonTape tape;
  if (!tape.parse(text, detail::JsonTape::Reader::plain_first, kMaxInputBytesCeiling).ok()) return Json::parse(text);
  return to_json(tape.root());
}

}  // namespace shardcheck
