// A parsed JSON document as one flat list of tokens, for the map decoder.
//
// A Json value allocates for every array, object and long string it holds, and frees
// them all again when it goes; a map of a few dozen pieces is hundreds of allocations.
// The tape holds the same document in two buffers (tokens, and the text of keys and
// strings). A small reader for plain JSON fills it where it can and nlohmann's parser
// where it cannot (json_tape.cc); the decoder (json.cc) reads it through the same
// questions it asks of a Json value. Parse errors, the depth limit and repeated keys are
// found exactly as parse_json finds them, in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "shardcheck/json.h"

namespace shardcheck::detail {

// How the codec spells JSON in its messages. Json::dump, with invalid UTF-8 replaced
// (it can reach dump() through a Json value built in code, or a truncated key).
std::string dump_safe(const Json& value);
// A key or value quoted, cut after a few dozen bytes: a hostile 1 MiB key must not
// become a 1 MiB error message.
std::string quote_text(std::string_view text);
// A key as a path segment: `.key` for a plain word, `["..."]` for anything else.
std::string key_segment(std::string_view key);

// `other` is what a Json value built in code may hold besides (binary, discarded).
enum class JsonKind : std::uint8_t { null, boolean, integer, unsigned_integer, floating, string, array, object, other };

struct JsonToken {
  JsonKind kind = JsonKind::null;
  bool is_key = false;  // a member's key, followed by its value
  bool boolean = false;
  std::uint32_t count = 0;  // elements of an array, members of an object
  std::uint32_t end = 0;    // the token after this value and everything inside it
  union {
    std::int64_t integer;
    std::uint64_t unsigned_integer;
    double floating;
    struct {
      std::uint32_t offset;
      std::uint32_t length;
    } text;
  };
};

class JsonTape;

// One value on a tape: a small handle, copied freely while the tape lives.
class TapeValue {
 public:
  TapeValue(const JsonTape* tape, std::uint32_t at) : tape_(tape), at_(at) {}

  JsonKind kind() const { return token().kind; }
  std::size_t size() const { return token().count; }
  std::int64_t integer() const { return token().integer; }
  std::uint64_t unsigned_integer() const { return token().unsigned_integer; }
  double floating() const { return token().floating; }
  bool boolean() const { return token().boolean; }
  std::string_view text() const;

  // The pieces JsonTape::parse_taking_pieces took off the tape from this array, moved
  // out to the caller (each list is read once); nullptr for any other value.
  std::vector<Piece>* taken_pieces() const;

  // The member named `name` of an object (the first, were it repeated).
  std::optional<TapeValue> member(std::string_view name) const;

  // Elements of an array in order: visit(index, value) until it answers false.
  template <class Visit>
  void for_each_element(Visit&& visit) const {
    std::uint32_t i = at_ + 1;
    for (std::size_t n = 0; n < size(); ++n) {
      if (!visit(n, TapeValue(tape_, i))) return;
      i = end_of(i);
    }
  }
  // Members of an object in order: visit(key, value) until it answers false.
  template <class Visit>
  void for_each_member(Visit&& visit) const {
    std::uint32_t i = at_ + 1;
    for (std::size_t n = 0; n < size(); ++n) {
      if (!visit(TapeValue(tape_, i).text(), TapeValue(tape_, i + 1))) return;
      i = end_of(i + 1);
    }
  }

 private:
  const JsonToken& token() const;
  std::uint32_t end_of(std::uint32_t i) const;
  const JsonTape* tape_;
  std::uint32_t at_;
};

// How JsonTape::parse_taking_pieces reads the pieces of a map as they close.
struct PieceTaking {
  // One piece object, complete on the tape; nothing when it does not decode.
  std::function<std::optional<Piece>(const TapeValue&)> decode;
  // Called every kProgressPieces pieces, and once at the end, with the bytes of text read
  // so far and the pieces taken: a caller may show progress, or give back the memory of
  // text it no longer needs (the reader never goes back). May be empty.
  std::function<void(std::size_t bytes_read, std::size_t pieces)> progress;
  static constexpr std::size_t kProgressPieces = std::size_t{1} << 16;
};

class JsonTape {
 public:
  // Reads `text`; the errors are parse_json's, word for word. plain_first tries the
  // project's own reader for plain JSON first and falls back to nlohmann's parser on the
  // first byte it does not read as plain; nlohmann_only is the reference for it.
  enum class Reader { plain_first, nlohmann_only };
  Status parse(std::string_view text, Reader reader, std::uint64_t max_bytes);
  // A large map without its tokens: the project's plain reader alone, and every object
  // in an array under the key "pieces" handed to `taking.decode` as it closes, then
  // dropped from the tape (its array keeps its token and count; the pieces are kept by
  // that token, TapeValue::taken_pieces). The tape then holds a few tokens per rank, not
  // twenty per piece. True when the text read whole as plain JSON, with no repeated key,
  // and every such object decoded: the tape is then parse()'s but for the pieces lists.
  // False when it needs parse(), whose errors count: text that is not plain, any error,
  // a piece that does not decode. The caller checks the input's size first.
  bool parse_taking_pieces(std::string_view text, const PieceTaking& taking);
  TapeValue root() const { return TapeValue(this, 0); }

 private:
  friend class TapeValue;
  friend class TapeBuilder;
  void clear();
  std::vector<JsonToken> tokens_;
  std::string strings_;
  // parse_taking_pieces's pieces, by the token of their array; moved out as decoded.
  mutable std::unordered_map<std::uint32_t, std::vector<Piece>> taken_;
};

}  // namespace shardcheck::detail
