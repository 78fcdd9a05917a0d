#include "shardcheck/json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>

#include "shardcheck/digest.h"

namespace shardcheck {
namespace {

constexpr std::size_t kMaxInputBytes = std::size_t{64} << 20;
constexpr int kMaxDepth = 256;
// Keys and values quoted in messages are cut here: a hostile 1 MiB key must not
// become a 1 MiB error message.
constexpr std::size_t kMaxShown = 48;

// Invalid UTF-8 can reach dump() through Json built in code (or a truncated key);
// replacing it keeps dump() from throwing.
std::string dump_safe(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string quote_text(std::string_view text) {
  const bool cut = text.size() > kMaxShown;
  std::string out = dump_safe(Json(std::string(text.substr(0, kMaxShown))));
  if (cut) out.insert(out.size() - 1, "...");
  return out;
}

// Keys that are plain words read naturally as `.key`; anything that could be
// mistaken for path syntax (dots in parameter names, brackets, quotes) is quoted.
std::string key_segment(std::string_view key) {
  const bool plain = !key.empty() && key.size() <= kMaxShown &&
                     std::all_of(key.begin(), key.end(), [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '_' || c == '-';
                     });
  if (plain) return fmt::format(".{}", key);
  return fmt::format("[{}]", quote_text(key));
}

std::string show(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return fmt::format("the boolean {}", value.get<bool>());
    case Json::value_t::string: return fmt::format("the string {}", quote_text(value.get_ref<const std::string&>()));
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return fmt::format("the number {}", dump_safe(value));
    case Json::value_t::array:
      return fmt::format("an array of {} element{}", value.size(), value.size() == 1 ? "" : "s");
    case Json::value_t::object: return "an object";
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

const Json* member(const Json& object, const char* name) {
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

Result<const Json*> required(const Json& object, const char* name, const Cursor& where) {
  if (const Json* value = member(object, name)) return value;
  return fail(where.key(name), fmt::format("the required key \"{}\" is missing", name));
}

Status expect_object(const Json& value, const Cursor& where) {
  if (value.is_object()) return {};
  return fail(where, fmt::format("expected an object, got {}", show(value)));
}

Result<Index> read_int(const Json& value, const Cursor& where) {
  constexpr auto kMax = std::numeric_limits<Index>::max();
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<Index>();
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(kMax)) return static_cast<Index>(u);
    return fail(where, fmt::format("expected an integer, got {}, which does not fit in a signed 64-bit integer", u));
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!std::isfinite(d) || d != std::trunc(d)) {
      return fail(where, fmt::format("expected an integer, got the number {}", dump_safe(value)));
    }
    // 2^63 is exactly representable; every double below it in magnitude fits.
    if (d >= 9223372036854775808.0 || d < -9223372036854775808.0) {
      return fail(where, fmt::format("expected an integer, got {}, which does not fit in a signed 64-bit integer",
                                     dump_safe(value)));
    }
    return fail(where, fmt::format("expected an integer, got {} written as a floating-point number", dump_safe(value)));
  }
  return fail(where, fmt::format("expected an integer, got {}", show(value)));
}

Result<std::vector<Index>> read_ints(const Json& value, const Cursor& where) {
  if (!value.is_array()) return fail(where, fmt::format("expected an array of integers, got {}", show(value)));
  std::vector<Index> out;
  out.reserve(value.size());  // bounded by the input's length, not by a number in it
  for (std::size_t i = 0; i < value.size(); ++i) {
    auto item = read_int(value[i], where.at(i));
    if (!item) return item.error();
    out.push_back(item.value());
  }
  return out;
}

Result<StridedView> read_view(const Json& value, const Cursor& where) {
  if (!value.is_array() || value.size() != 2) {
    return fail(where, fmt::format("expected [offset, [strides...]], got {}", show(value)));
  }
  auto offset = read_int(value[0], where.at(0));
  if (!offset) return offset.error();
  auto strides = read_ints(value[1], where.at(1));
  if (!strides) return strides.error();
  return StridedView{offset.value(), std::move(strides.value())};
}

Result<double> read_scale(const Json& value, const Cursor& where) {
  if (!value.is_number()) return fail(where, fmt::format("expected a number, got {}", show(value)));
  const double scale = value.get<double>();
  if (!std::isfinite(scale)) return fail(where, "expected a finite number");
  return scale;
}

Result<Piece> decode_piece(const Json& value, const Cursor& where) {
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

  if (const Json* scale = member(value, "scale")) {
    auto decoded = read_scale(*scale, where.key("scale"));
    if (!decoded) return decoded.error();
    piece.scale = decoded.value();
  }
  return piece;
}

// "content_digests": {"<state>": "0x<16 hex digits>"} (contract section 10).
Result<std::map<std::string, std::uint64_t>> read_digests(const Json& value, const Cursor& where) {
  if (!value.is_object()) {
    return fail(where, fmt::format("expected an object of content digests keyed by state, got {}", show(value)));
  }
  std::map<std::string, std::uint64_t> out;
  for (const auto& [state, digest] : value.items()) {
    const Cursor at = where.key(state);
    if (state.empty()) return fail(at, "a content digest needs a state name, got the empty string");
    std::optional<std::uint64_t> parsed;
    if (digest.is_string()) parsed = parse_digest(digest.get_ref<const std::string&>());
    if (!parsed) {
      return fail(at, fmt::format("expected a content digest \"0x\" followed by 16 hex digits, got {}", show(digest)));
    }
    out.emplace(state, *parsed);
  }
  return out;
}

Result<RankEntry> decode_rank(const Json& value, Rank rank, Cursor where) {
  where.rank = rank;
  if (Status bad = expect_object(value, where); !bad.ok()) return bad.error();
  RankEntry entry;
  entry.rank = rank;
  if (const Json* shard = member(value, "shard_shape")) {
    auto extents = read_ints(*shard, where.key("shard_shape"));
    if (!extents) return extents.error();
    entry.shard_shape = std::move(extents.value());
  }
  // Every rank entry lists its pieces, possibly none (contract section 2): a missing
  // list is not read as an empty one.
  auto listed = required(value, "pieces", where);
  if (!listed) return listed.error();
  const Json& pieces = *listed.value();
  const Cursor list = where.key("pieces");
  if (!pieces.is_array()) return fail(list, fmt::format("expected an array of pieces, got {}", show(pieces)));
  entry.pieces.reserve(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    Cursor at = list.at(i);
    at.piece = static_cast<Index>(i);
    auto piece = decode_piece(pieces[i], at);
    if (!piece) return piece.error();
    entry.pieces.push_back(std::move(piece.value()));
  }
  return entry;
}

Result<Rank> rank_from_key(const std::string& key, const Cursor& where) {
  const bool negative = !key.empty() && key[0] == '-';
  const std::string_view digits = negative ? std::string_view(key).substr(1) : std::string_view(key);
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
  const std::string* key = nullptr;
  std::size_t index = 0;
  std::string text() const { return key ? fmt::format("key {}", quote_text(*key)) : fmt::format("entry [{}]", index); }
};

class RankCollector {
 public:
  Status add(Rank rank, Spelling label, const Json& value, const Cursor& where) {
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

Result<std::vector<RankEntry>> decode_ranks(const Json& value, const Cursor& where) {
  RankCollector ranks;
  if (value.is_object()) {
    for (const auto& [key, entry] : value.items()) {
      const Cursor at = where.key(key);
      auto rank = rank_from_key(key, at);
      if (!rank) return rank.error();
      Status added = ranks.add(rank.value(), Spelling{&key}, entry, at);
      if (!added.ok()) return added.error();
    }
    return ranks.take();
  }
  if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      const Cursor at = where.at(i);
      if (Status bad = expect_object(value[i], at); !bad.ok()) return bad.error();
      auto field = required(value[i], "rank", at);
      if (!field) return field.error();
      auto rank = read_int(*field.value(), at.key("rank"));
      if (!rank) return rank.error();
      if (rank.value() < 0) {
        return fail(at.key("rank"), fmt::format("rank ids must be non-negative, got {}", rank.value()));
      }
      Status added = ranks.add(rank.value(), Spelling{nullptr, i}, value[i], at);
      if (!added.ok()) return added.error();
    }
    return ranks.take();
  }
  return fail(where, fmt::format("expected an object keyed by rank id or an array of rank entries, got {}",
                                 show(value)));
}

Result<std::vector<NamedMap>> decode_envelope(const Json& json) {
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
  const Json& list = *params.value();
  if (!list.is_object()) {
    return fail(root.key("params"), fmt::format("expected an object of parameter maps, got {}", show(list)));
  }
  std::vector<NamedMap> out;
  out.reserve(list.size());
  for (const auto& [name, map] : list.items()) {
    out.push_back(NamedMap{name, decode_map(map, root.key("params").key(name).path())});
  }
  return out;
}

// An object with room for `members`: the ordered object is a vector whose members
// (const keys) are copied, values and all, each time it grows.
Json object_for(std::size_t members) {
  Json out = Json::object();
  out.get_ref<Json::object_t&>().reserve(members);
  return out;
}

Json array_for(std::size_t items) {
  Json out = Json::array();
  out.get_ref<Json::array_t&>().reserve(items);
  return out;
}

Json int_array(const std::vector<Index>& values) {
  Json out = array_for(values.size());
  for (Index v : values) out.push_back(v);
  return out;
}

Json encode_view(const StridedView& view) { return Json::array({view.offset, int_array(view.strides)}); }

Json encode_rank_body(const RankEntry& entry) {
  Json out = object_for(2);
  if (entry.shard_shape) out["shard_shape"] = int_array(*entry.shard_shape);
  Json pieces = array_for(entry.pieces.size());
  for (const Piece& piece : entry.pieces) {
    Json p = object_for(5);
    p["shape"] = int_array(piece.shape);
    p["source"] = encode_view(piece.source);
    p["dest"] = encode_view(piece.dest);
    p["locations"] = int_array(piece.locations);
    if (piece.scale != 1.0) p["scale"] = piece.scale;
    pieces.push_back(std::move(p));
  }
  out["pieces"] = std::move(pieces);
  return out;
}

// Tracks the keys of every open object while parsing, because nlohmann keeps only
// the last of two equal keys: {"1": A, "1": B} would silently lose rank 1's A. The path
// of the repeated key is spelled out only when one is found.
class DuplicateKeys {
 public:
  bool on_event(Json::parse_event_t event, const Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start: {
        Frame frame;
        frame.is_array = event == E::array_start;
        frame.place = child_place();
        open_.push_back(std::move(frame));
        break;
      }
      case E::object_end:
      case E::array_end:
        if (!open_.empty()) open_.pop_back();
        break;
      case E::key:
        if (!open_.empty()) {
          Frame& top = open_.back();
          top.last_key = parsed.get<std::string>();
          if (!found_ && !top.keys.insert(top.last_key).second) found_ = path_of_key(top.last_key);
        }
        break;
      case E::value:
        if (!open_.empty() && open_.back().is_array) ++open_.back().count;
        break;
    }
    return true;
  }
  const std::optional<std::string>& found() const { return found_; }

 private:
  // A value's place in its parent: the key it is under, or its index in an array.
  struct Place {
    std::optional<std::string> key;
    std::size_t index = 0;
  };
  struct Frame {
    Place place;  // of the object or array itself; none for the document
    bool is_array = false;
    std::string last_key{};
    std::size_t count = 0;
    std::unordered_set<std::string> keys{};
  };

  // The place of the value now starting; advances the parent array's index.
  Place child_place() {
    if (open_.empty()) return {};
    Frame& parent = open_.back();
    if (parent.is_array) return Place{std::nullopt, parent.count++};
    return Place{parent.last_key, 0};
  }

  std::string path_of_key(std::string_view key) const {
    std::string path = "$";
    for (std::size_t i = 1; i < open_.size(); ++i) {
      const Place& place = open_[i].place;
      path += place.key ? key_segment(*place.key) : fmt::format("[{}]", place.index);
    }
    return path + key_segment(key);
  }

  std::vector<Frame> open_;
  std::optional<std::string> found_;
};

// Scans brackets outside strings so that deep input is refused before a parser
// (or the destructor of what it built) can recurse that deep.
std::optional<std::size_t> too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// nlohmann's messages read "[json.exception.parse_error.101] parse error at line 1,
// column 4: <what was wrong>; last read: '<input>'". The input it echoes may hold
// control bytes or invalid UTF-8, which must not leak into a message that is later
// printed or written into a case file, so those bytes are escaped.
std::string reason(std::string_view what) {
  if (const auto bracket = what.find("] "); !what.empty() && what[0] == '[' && bracket != std::string_view::npos) {
    what.remove_prefix(bracket + 2);
  }
  if (what.starts_with("parse error")) {
    if (const auto colon = what.find(": "); colon != std::string_view::npos) what.remove_prefix(colon + 2);
  }
  std::string out;
  for (const char c : what.substr(0, 4 * kMaxShown)) {
    const auto byte = static_cast<unsigned char>(c);
    // A double quote too: the echo of broken input must not open a quotation the
    // rest of the message never closes (error.h's grammar reads quotes).
    if (byte < 0x20 || byte >= 0x7f || c == '"') {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  // An error's sentence has no ": " and no trailing period (error.h).
  for (auto colon = out.find(": "); colon != std::string::npos; colon = out.find(": ", colon)) out[colon] = ',';
  while (!out.empty() && (out.back() == '.' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

Result<Json> parse_json(std::string_view text) {
  const Cursor root{"$"};
  if (text.size() > kMaxInputBytes) {
    return fail(root, fmt::format("the input is {} bytes, more than the {} bytes accepted", text.size(),
                                  kMaxInputBytes));
  }
  if (auto at = too_deep_at(text)) {
    return fail(root, fmt::format("invalid JSON at byte {}, nesting deeper than {} levels", *at, kMaxDepth));
  }
  DuplicateKeys duplicates;
  try {
    Json json = Json::parse(
        text.begin(), text.end(),
        [&duplicates](int, Json::parse_event_t event, Json& parsed) { return duplicates.on_event(event, parsed); });
    if (const auto& dup = duplicates.found()) {
      return fail(Cursor{*dup}, "the key appears twice in one object; a JSON object must not repeat a key");
    }
    return json;
  } catch (const Json::parse_error& e) {
    return fail(root, fmt::format("invalid JSON at byte {} ({})", e.byte, reason(e.what())));
  } catch (const Json::exception& e) {
    return fail(root, fmt::format("invalid JSON ({})", reason(e.what())));
  } catch (const std::bad_alloc&) {
    return fail(root, "the input needs more memory to parse than is available");
  }
}

Result<Map> decode_map(const Json& json, const std::string& path) {
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

  if (const Json* digests = member(json, "content_digests")) {
    auto decoded = read_digests(*digests, root.key("content_digests"));
    if (!decoded) return decoded.error();
    map.content_digests = std::move(decoded.value());
  }
  return map;
}

Result<std::vector<NamedMap>> decode_document(const Json& json) {
  const Cursor root{"$"};
  if (json.is_object() && json.contains("logical_shape")) {
    std::vector<NamedMap> out;
    out.push_back(NamedMap{"", decode_map(json, "$")});
    return out;
  }
  if (json.is_object() && (json.contains("version") || json.contains("params"))) return decode_envelope(json);
  return fail(root, fmt::format("expected a map (an object with \"logical_shape\") or an envelope (an object "
                                "with \"version\" and \"params\"), got {}",
                                show(json)));
}

Json encode_map(const Map& map, RankOrder order) {
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

  Json out = object_for(3);
  out["logical_shape"] = int_array(map.logical_shape);
  Json body = object_form ? object_for(ranks.size()) : array_for(ranks.size());
  for (const RankEntry* entry : ranks) {
    if (object_form) {
      body[std::to_string(entry->rank)] = encode_rank_body(*entry);
    } else {
      Json item = object_for(3);
      item["rank"] = entry->rank;
      item.update(encode_rank_body(*entry));
      body.push_back(std::move(item));
    }
  }
  out["ranks"] = std::move(body);
  if (!map.content_digests.empty()) {
    Json digests = Json::object();
    for (const auto& [state, value] : map.content_digests) digests[state] = format_digest(value);
    out["content_digests"] = std::move(digests);
  }
  return out;
}

std::string encode_map_text(const Map& map, RankOrder order) { return dump_safe(encode_map(map, order)); }

}  // namespace shardcheck
