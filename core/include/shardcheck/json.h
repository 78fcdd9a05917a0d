// The JSON codec for DeepSpeed's affine map format (contract 2).
//
// Decoding treats every byte as untrusted: every malformed input is a `format` error
// whose `path` names the offending JSON location; it never throws and never allocates
// in proportion to a number read from the input.
#pragma once

#include <cstdint>
#include <functional>
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

// --- how much JSON text a reader accepts ----------------------------------------------
// Text longer than the limit is refused `format` before it is read (check_input_size), so
// a file larger than memory is named as such instead of ending in the out-of-memory
// killer. The default scales with the machine: an eighth of its physical memory, at
// least 64 MiB. Reading a valid map takes about 2.5 times its text (json.cc), reading an
// invalid one up to ten times (the exact reader's tape), so an eighth leaves room.
// Above 4 GiB - 1 no limit is possible: the tape addresses text with 32-bit offsets.
inline constexpr std::uint64_t kMaxInputBytesCeiling = (std::uint64_t{1} << 32) - 1;
std::uint64_t default_max_input_bytes();
// The limit every reader applies unless a caller passes its own: the default until
// set_max_input_bytes (the command line's --max-input-bytes) changes it for the process.
std::uint64_t max_input_bytes();
void set_max_input_bytes(std::uint64_t bytes);  // at most kMaxInputBytesCeiling
// A `format` error at $ naming the limit and how to raise it when `bytes` exceeds `limit`.
Status check_input_size(std::uint64_t bytes, std::uint64_t limit);
// The same refusal for an input read as a stream (a device, a pipe), whose length is
// not known: it was read up to `limit` + 1 bytes and went on.
Status input_past_limit(std::uint64_t limit);

// Parses text to JSON; a syntax error is a `format` error with the byte offset. A key
// repeated in one object is a `format` error too (a Json object would keep one of them).
Result<Json> parse_json(std::string_view text, std::uint64_t max_bytes = max_input_bytes());

// The members of the JSON object that `text` holds, found by its syntax alone (strings,
// brackets, commas), so that a value JSON cannot hold (a key given twice, a number out of
// range) still has a place: each member's name as written (between its quotes, escapes
// kept) and its value's text. nullopt when the text is not shaped like one object.
struct MemberText {
  std::string_view name;
  std::string_view value;
};
std::optional<std::vector<MemberText>> object_members_by_syntax(std::string_view text);

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
Result<Map> parse_map(std::string_view text, const std::string& path = "$",
                      std::uint64_t max_bytes = max_input_bytes());
Result<std::vector<NamedMap>> parse_document(std::string_view text, std::uint64_t max_bytes = max_input_bytes());

// parse_document for a command that reads a large file: `progress` (may be empty) is called
// every 65,536 pieces read and once at the end with the bytes of text read so far and the
// pieces decoded; the reader reads the text front to back and never goes back to what
// it has reported read, unless the text turns out not to be a valid plain document
// (then it is read again from the start, exactly, and no more progress is reported).
// `envelope`: the document was read as an envelope, not as a bare map.
// Unlike parse_document, which answers as decode_document(parse_json(text)) does, it
// judges text inside a map that JSON cannot hold (a key given twice, a number out of
// range, a syntax error its brackets still enclose) as that map's `format` refusal, not
// as an unreadable document: read by its syntax as decode_document reads it, a bare map
// comes back as one entry holding the refusal, and an envelope is read parameter by
// parameter, so one parameter hides no other (its path under "$.params", any byte offset
// counted in the whole text). Text over `max_bytes` is refused whole.
using ReadProgress = std::function<void(std::size_t bytes_read, std::size_t pieces)>;
struct Document {
  std::vector<NamedMap> params;
  bool envelope = false;
};
Result<Document> read_document(std::string_view text, std::uint64_t max_bytes, const ReadProgress& progress);

// One map from text that holds a bare map or an envelope of exactly one parameter, as a
// reported map arrives (contract 9): an object without "version" is read as a map
// at `path`, anything else as a document.
Result<Map> parse_one_map(std::string_view text, const std::string& path,
                          std::uint64_t max_bytes = max_input_bytes());

// Writes what DeepSpeed writes: ranks sorted by id as string keys, "scale" omitted
// at 1.0, pieces in the order given.
// With RankOrder::as_given the ranks keep the map's order instead (tests use it to
// feed the legacy model both rank orders through the codec).
enum class RankOrder { sorted, as_given };
Json encode_map(const Map& map, RankOrder order = RankOrder::sorted);
std::string encode_map_text(const Map& map, RankOrder order = RankOrder::sorted);  // one line

}  // namespace shardcheck
