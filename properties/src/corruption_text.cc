// The rows that leave the map alone: a replica copy damaged in the shards the truth map
// wrote, and edits of the map's JSON text, the form a converter really reads. Every text
// edit but one turns the text into something the codec must refuse (format): a number
// that is not an integer (n.7, n.0), a number in a string, a number beyond int64 (1e300,
// 2^63, 2^64 - 1), a number with a leading zero (07), a repeated key
// (README and contract "stricter": any key repeated within one object is format), a cut
// document, a rank id of -1 or -2^63, an envelope version of 0, a content digest cut short,
// and the JSON supersets lenient readers take (a trailing comma, a comment, single quotes,
// NaN or Infinity, a leading +).
// Writing 0 as -0 is neutral: JSON's -0 is the integer 0. Edits are made on each form a
// reader meets: the object form, the array form, a one-parameter envelope.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "corruption_edits.h"
#include "shardcheck/json.h"

namespace shardcheck::gen::detail {

namespace {

// JSON pointers of the values a walk meets: integers (optionally only zeros), objects.
// Every value of the document in visiting order, each with the place it sits in, so that
// a JSON pointer (a vector of strings) is built only for the one value an edit picks.
struct Place {
  std::int32_t parent;   // index into Places::all, -1 for the document
  std::string_view key;  // in the parent object (the document's own key storage)
  std::size_t index;     // in the parent array
  bool keyed;
};
struct Places {
  std::vector<Place> all;
  std::vector<std::int32_t> integers, zeros, objects;  // -1: the document itself
};

void collect(const Json& value, std::int32_t self, Places& places) {
  if (value.is_number_integer()) {
    places.integers.push_back(self);
    if (value.get<Index>() == 0) places.zeros.push_back(self);
  } else if (value.is_object()) {
    if (!value.empty()) places.objects.push_back(self);
    for (auto it = value.begin(); it != value.end(); ++it) {
      places.all.push_back(Place{self, it.key(), 0, true});
      collect(it.value(), static_cast<std::int32_t>(places.all.size()) - 1, places);
    }
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) {
      places.all.push_back(Place{self, {}, i, false});
      collect(value[i], static_cast<std::int32_t>(places.all.size()) - 1, places);
    }
  }
}

Json::json_pointer pointer_of(const Places& places, std::int32_t at) {
  if (at < 0) return Json::json_pointer();
  const Place& place = places.all[static_cast<std::size_t>(at)];
  const Json::json_pointer parent = pointer_of(places, place.parent);
  return place.keyed ? parent / std::string(place.key) : parent / place.index;
}

// A placeholder string that the encoder writes quoted and that no map contains.
constexpr std::string_view kMark = "@@shardcheck-edit@@";

std::string replace_mark(std::string text, std::string_view with) {
  const std::string quoted = fmt::format("\"{}\"", kMark);
  const auto at = text.find(quoted);
  if (at != std::string::npos) text.replace(at, quoted.size(), with);
  return text;
}

}  // namespace

void replica_flip(Edit& e, Site site) {
  const RankEntry& entry = e.map.ranks[site.rank];
  const Piece& piece = entry.pieces[site.piece];
  const Index numel = checked_numel(piece.shape).value_or(1);
  // Half the flips land where a walk that stops one short, or starts one late, misses
  // them: the copy's first element, its last, or the last of a row (the piece's last
  // axis). A replica check that skips a row's last element passes every uniform flip but
  // one in a row's length.
  Index element = 0;
  if (e.c.coin()) {
    const Index row = piece.shape.empty() ? 1 : std::max<Index>(piece.shape.back(), 1);
    switch (e.c.below(3)) {
      case 0: element = 0; break;
      case 1: element = numel - 1; break;
      default: element = static_cast<Index>(e.c.below(static_cast<std::size_t>(numel / row))) * row + row - 1; break;
    }
  } else {
    element = static_cast<Index>(e.c.below(static_cast<std::size_t>(numel)));
  }
  e.record.field = fmt::format("shard_data[{}]", element);
  e.record.old_value = "as the truth map wrote it";
  e.record.new_value = "sign bit flipped";
  e.out->replica_flip = ReplicaFlip{entry.rank, static_cast<Index>(site.piece), element};
}

namespace {

// The name under which an envelope made here holds the map.
constexpr std::string_view kParam = "param";

// The map a document holds: itself, or the one parameter of an envelope made here.
Json& map_in(Json& document) {
  return document.contains("params") ? document["params"][std::string(kParam)] : document;
}

// The forms a reader meets besides the one the encoder writes (contract section 2): the
// ranks as an array of entries that carry their "rank", and a one-parameter envelope.
Json in_form(Json json, std::size_t form) {
  if (form == 2 && json.contains("ranks") && json["ranks"].is_object()) {
    Json entries = Json::array();
    for (const auto& [key, body] : json["ranks"].items()) {
      Json entry = Json::object();
      entry["rank"] = std::stoll(key);
      entry.update(body);
      entries.push_back(std::move(entry));
    }
    json["ranks"] = std::move(entries);
  }
  if (form == 3) {
    Json envelope = Json::object();
    envelope["version"] = kFormatVersion;
    envelope["params"] = Json::object();
    envelope["params"][std::string(kParam)] = std::move(json);
    return envelope;
  }
  return json;
}

// A number one below its least value, where the codec has one: a rank id of -1 (as an
// object key or an entry's "rank") or an envelope version of 0. Empty: no such site.
std::string below_minimum(Json& json, Edit& e) {
  Json& map = map_in(json);
  std::vector<std::string> sites;
  if (json.contains("version")) sites.emplace_back("version");
  if (map.contains("ranks") && !map["ranks"].empty()) sites.emplace_back("rank");
  if (sites.empty()) return {};
  const std::string site = sites[e.c.below(sites.size())];
  if (site == "version") {
    e.record.field = "map_text/version";
    e.record.old_value = std::to_string(kFormatVersion);
    json["version"] = 0;
    e.record.new_value = "0";
    return json.dump();
  }
  Json& ranks = map["ranks"];
  const std::size_t k = e.c.below(ranks.size());
  // Half the time the least int64 instead of -1: a reader that gets its one magnitude
  // without a positive twin wrong reads a huge rank id, which no check refuses.
  const bool least = e.c.coin();
  const Index below = least ? std::numeric_limits<Index>::min() : -1;
  if (ranks.is_array()) {
    e.record.field = fmt::format("map_text/ranks/{}/rank", k);
    e.record.old_value = ranks[k]["rank"].dump();
    ranks[k]["rank"] = below;
  } else {
    Json renamed = Json::object();
    std::size_t i = 0;
    for (auto& [key, body] : ranks.items()) {
      if (i++ == k) {
        e.record.field = "map_text/ranks/" + key;
        e.record.old_value = fmt::format("key \"{}\"", key);
        renamed[std::to_string(below)] = std::move(body);
      } else {
        renamed[key] = std::move(body);
      }
    }
    ranks = std::move(renamed);
  }
  e.record.new_value = std::to_string(below);
  return json.dump();
}

// A content digest cut short: "0x" and fewer than 16 hex digits.
std::string short_digest(Json& json, Edit& e) {
  Json& map = map_in(json);
  if (!map.contains("content_digests") || map["content_digests"].empty()) return {};
  Json& digests = map["content_digests"];
  auto it = std::next(digests.begin(), static_cast<std::ptrdiff_t>(e.c.below(digests.size())));
  const std::string whole = it->get<std::string>();
  const std::string cut = whole.substr(0, 3 + e.c.below(whole.size() - 3));
  e.record.field = "map_text/content_digests/" + it.key();
  e.record.old_value = whole;
  e.record.new_value = cut;
  *it = cut;
  return json.dump();
}

// Where a lenient edit can go in a compact JSON text: each closing ] or } of a
// non-empty container, each place just after a separator (, : [ {), and each string
// (its opening and closing quote).
struct Lexed {
  std::vector<std::size_t> closers, after_separators;
  std::vector<std::pair<std::size_t, std::size_t>> strings;
};

Lexed lex(std::string_view text) {
  Lexed out;
  char previous = 0;  // the last byte outside a string, or '"' after one
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (ch == '"') {
      const std::size_t open = i;
      for (++i; i < text.size() && text[i] != '"'; ++i) i += text[i] == '\\';
      out.strings.emplace_back(open, i);
      previous = '"';
      continue;
    }
    if ((ch == ']' || ch == '}') && previous != '[' && previous != '{') out.closers.push_back(i);
    if (ch == ',' || ch == ':' || ch == '[' || ch == '{') out.after_separators.push_back(i + 1);
    previous = ch;
  }
  return out;
}

// One function per map_text row (corruptions.def), each returning the edited text, or
// nothing where the map offers the edit no place (text_edit then cuts the text instead).

// A place of `from` (integers, zeros or objects), drawn.
Json::json_pointer pick(Edit& e, const Places& places, const std::vector<std::int32_t>& from) {
  return pointer_of(places, from[e.c.below(from.size())]);
}

std::string number_not_an_integer(Edit& e, Json& json, const Places& places, Op op) {
  std::string text;
  const auto& integers = places.integers;
  if (op == Op::text_huge && e.c.chance(1, 4)) {
    text = below_minimum(json, e);
    if (!text.empty()) return text;
  }
  if (integers.empty()) return text;  // empty: cut instead
  const auto at = pick(e, places, integers);
  const Index old = json[at].get<Index>();
  e.record.field = "map_text" + at.to_string();
  e.record.old_value = std::to_string(old);
  // An integral float (n.0) is as much "not an integer" as n.7, and past INT64_MAX a
  // number may still parse as an unsigned integer: each must be refused too.
  if (op == Op::text_fraction) json[at] = static_cast<double>(old) + (e.c.chance(1, 3) ? 0.0 : 0.7);
  if (op == Op::text_quote) json[at] = std::to_string(old);
  if (op == Op::text_huge) {
    switch (e.c.below(3)) {
      case 0: json[at] = 1e300; break;
      case 1: json[at] = std::uint64_t{1} << 63; break;
      default: json[at] = ~std::uint64_t{0}; break;
    }
  }
  text = json.dump();
  e.record.new_value = json[at].dump();
  return text;
}

std::string key_twice(Edit& e, Json& json, const Places& places) {
  std::string text;
  const auto& objects = places.objects;
  if (objects.empty()) return text;
  const auto at = pick(e, places, objects);
  Json& object = json[at];
  auto it = std::next(object.begin(), static_cast<std::ptrdiff_t>(e.c.below(object.size())));
  const std::string key = it.key();
  const Json copy = it.value();
  object[std::string(kMark)] = copy;
  text = replace_mark(json.dump(), Json(key).dump());
  e.record.field = "map_text" + (at / key).to_string();
  e.record.old_value = "once";
  e.record.new_value = "twice";
  return text;
}

std::string negative_zero(Edit& e, Json& json, const Places& places) {
  std::string text;
  const auto& zeros = places.zeros;
  if (zeros.empty()) return text;
  const auto at = pick(e, places, zeros);
  json[at] = std::string(kMark);
  text = replace_mark(json.dump(), "-0");
  e.record.field = "map_text" + at.to_string();
  e.record.old_value = "0";
  e.record.new_value = "-0";
  e.out->text_neutral = true;
  return text;
}

std::string leading_zero(Edit& e, Json& json, const Places& places) {
  std::string text;
  const auto& integers = places.integers;
  // JSON writes no leading zero (RFC 8259, section 6): 07, 00 and -03 are not
  // numbers, and a reader that takes them for 7, 0 and -3 reads a map from text
  // that every other JSON reader refuses.
  if (integers.empty()) return text;
  const auto at = pick(e, places, integers);
  std::string written = json[at].dump();
  written.insert(written.starts_with('-') ? 1 : 0, "0");
  e.record.field = "map_text" + at.to_string();
  e.record.old_value = json[at].dump();
  e.record.new_value = written;
  json[at] = std::string(kMark);
  text = replace_mark(json.dump(), written);
  return text;
}

std::string cut_after_digest(Edit& e, Json& json) {
  std::string text;
  if (e.c.chance(1, 2)) text = short_digest(json, e);
  return text;
}

std::string trailing_bytes(Edit& e, const Json& json) {
  std::string text;
  // A complete document and then more: JSON allows whitespace after the value and
  // nothing else, so each of these must be refused (format), never read as the map.
  const std::string whole = json.dump();
  constexpr std::string_view kTails[] = {"}", "]", "x", "0", ",", "null"};
  const std::string space = e.c.coin() ? "" : std::string(e.c.coin() ? " " : "\n");
  const std::size_t which = e.c.below(std::size(kTails) + 1);
  const std::string tail = which == std::size(kTails) ? whole : std::string(kTails[which]);
  text = whole + space + tail;
  e.record.field = "map_text";
  e.record.old_value = fmt::format("{} bytes", whole.size());
  e.record.new_value = which == std::size(kTails) ? std::string("the document twice")
                                                  : Json(space + tail).dump() + " after it";
  return text;
}

std::string lenient_syntax(Edit& e, Json& json, const Places& places) {
  std::string text;
  const auto& integers = places.integers;
  // What lenient readers take and JSON (RFC 8259) does not: a reader that accepts any
  // of these reads a map from text that the contract's plain reader refuses (format),
  // so two tools disagree on whether the checkpoint is readable at all.
  const std::size_t variant = e.c.below(5);
  e.record.field = "map_text";
  if ((variant == 3 || variant == 4) && !integers.empty()) {
    const auto at = pick(e, places, integers);
    const std::string old = json[at].dump();
    const std::string written = variant == 4 ? "+" + old
                                : old.starts_with('-') ? "-Infinity"
                                                       : std::string(e.c.coin() ? "NaN" : "Infinity");
    e.record.field += at.to_string();
    e.record.old_value = old;
    e.record.new_value = written;
    json[at] = std::string(kMark);
    text = replace_mark(json.dump(), written);
    return text;
  }
  const std::string whole = json.dump();
  const Lexed lexed = lex(whole);
  e.record.old_value = fmt::format("{} bytes of JSON", whole.size());
  if (variant == 1 && !lexed.after_separators.empty()) {
    const std::size_t at = lexed.after_separators[e.c.below(lexed.after_separators.size())];
    const std::string comment = e.c.coin() ? "/* shardcheck */" : "// shardcheck\n";
    text = whole.substr(0, at) + comment + whole.substr(at);
    e.record.new_value = fmt::format("comment {} at byte {}", Json(comment).dump(), at);
  } else if (variant == 2 && !lexed.strings.empty()) {
    const auto [open, close] = lexed.strings[e.c.below(lexed.strings.size())];
    text = whole;
    text[open] = '\'';
    text[close] = '\'';
    e.record.new_value = "single-quoted " + text.substr(open, close + 1 - open);
  } else if (!lexed.closers.empty()) {
    // A comma before a closing bracket or brace (and the fallback of the others).
    const std::size_t at = lexed.closers[e.c.below(lexed.closers.size())];
    text = whole.substr(0, at) + "," + whole.substr(at);
    e.record.new_value = fmt::format("trailing comma before {} at byte {}", whole[at], at);
  }
  return text;
}

std::string edited_text(Edit& e, Json& json, const Places& places, Op op) {
  switch (op) {
    case Op::text_fraction:
    case Op::text_quote:
    case Op::text_huge: return number_not_an_integer(e, json, places, op);
    case Op::text_duplicate_key: return key_twice(e, json, places);
    case Op::text_negative_zero: return negative_zero(e, json, places);
    case Op::text_leading_zero: return leading_zero(e, json, places);
    case Op::text_truncate: return cut_after_digest(e, json);
    case Op::text_trailing: return trailing_bytes(e, json);
    case Op::text_lenient: return lenient_syntax(e, json, places);
    default: return {};
  }
}

}  // namespace

void text_edit(Edit& e, Op op) {
  // Half the edits are made on the object form as the encoder writes it, a quarter on
  // the array form, a quarter inside an envelope.
  Json json = in_form(encode_map(e.map, RankOrder::as_given), e.c.below(4));
  Places places;
  collect(json, -1, places);
  e.out->text_neutral = false;
  std::string text = edited_text(e, json, places, op);
  if (text.empty()) {
    // A cut document (or an edit with no site to take): any proper prefix of an
    // object's text is not JSON.
    const std::string whole = json.dump();
    const std::size_t length = e.c.below(whole.size());
    text = whole.substr(0, length);
    e.record.field = "map_text";
    e.record.old_value = fmt::format("{} bytes", whole.size());
    e.record.new_value = fmt::format("cut at {}", length);
    e.out->text_neutral = false;
  }
  e.out->map_text = std::move(text);
}

}  // namespace shardcheck::gen::detail
