// The JSON codec for DeepSpeed's affine map format (contract 2).
//
// Decoding treats every byte as untrusted: every malformed input is a `format` error
// whose `path` names the offending JSON location; it never throws and never allocates
// in proportion to a number read from the input.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck {

// Object key order is kept as written: the legacy model depends on rank order.
using Json = nlohmann::ordered_json;

inline constexpr int kFormatVersion = 1;

// Parses text to JSON; a syntax error is a `format` error with the byte offset. A key
// repeated in one object is a `format` error too (a Json object would keep one of them).
Result<Json> parse_json(std::string_view text);

// One map. `path` prefixes error paths ("$" at top level).
// Ranks: an object keyed by decimal rank ids ("0" or, after another encoder, any
// canonical non-negative integer key); duplicate ids are a format error.
Result<Map> decode_map(const Json& json, const std::string& path = "$");

// A bare map, or an envelope {"version": 1, "params": {name: map}}. A bare map is
// returned as one entry with an empty name. An envelope's per-parameter maps are
// decoded independently, so one bad parameter does not hide the others: the outer
// Result fails only when the document itself is not a map or an envelope (or its
// version is newer than kFormatVersion).
struct NamedMap {
  std::string name;
  Result<Map> map;
};
Result<std::vector<NamedMap>> decode_document(const Json& json);

// The same from text, with parse_json's errors first: decode_map(parse_json(text)) and
// decode_document(parse_json(text)), answer for answer, without building a Json value
// (a few allocations per document where a Json value makes one per array and object).
Result<Map> parse_map(std::string_view text, const std::string& path = "$");
Result<std::vector<NamedMap>> parse_document(std::string_view text);

// One map from text that holds a bare map or an envelope of exactly one parameter, as a
// reported map arrives (contract 9): an object without "version" is read as a map
// at `path`, anything else as a document.
Result<Map> parse_one_map(std::string_view text, const std::string& path);

// Writes what DeepSpeed writes: ranks sorted by id as string keys, "scale" omitted
// at 1.0, pieces in the order given.
// With RankOrder::as_given the ranks keep the map's order instead (tests use it to
// feed the legacy model both rank orders through the codec).
enum class RankOrder { sorted, as_given };
Json encode_map(const Map& map, RankOrder order = RankOrder::sorted);
std::string encode_map_text(const Map& map, RankOrder order = RankOrder::sorted);  // one line

}  // namespace shardcheck
