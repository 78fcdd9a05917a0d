#include "json_tape.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <unordered_set>

#include <fmt/format.h>

namespace shardcheck::detail {
namespace {

constexpr std::uint64_t kMinDefaultInputBytes = std::uint64_t{64} << 20;
constexpr int kMaxDepth = 256;
// Keys and values quoted in messages are cut here: a hostile 1 MiB key must not
// become a 1 MiB error message.
constexpr std::size_t kMaxShown = 48;

Error format_error(const std::string& path, std::string problem) {
  return make_error(ErrorKind::format, std::move(problem), Where::in_json(path));
}

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



// Builds a tape from nlohmann's SAX events. Repeated keys are looked for as each key
// arrives, so the first one in document order is the one named, as parse_json always did.
class TapeBuilder {
 public:
  // With `taking`, objects in "pieces" arrays are taken off the tape as they close
  // (JsonTape::parse_taking_pieces).
  TapeBuilder(JsonTape& tape, std::size_t text_size, const PieceTaking* taking = nullptr)
      : tape_(tape), taking_(taking) {
    // Unescaping never lengthens a string, so the text of all keys and strings fits in
    // the input's size: views into it stay valid while the tape grows.
    tape_.strings_.reserve(text_size);
    tape_.tokens_.reserve(std::min<std::size_t>(text_size / 2 + 2, 1 << 12));
  }

  // Each answers false once taking has stopped (no event arrives from nlohmann's parser
  // then: it never takes).
  bool null() {
    push(JsonKind::null);
    return !stopped_;
  }
  bool boolean(bool value) {
    push(JsonKind::boolean).boolean = value;
    return !stopped_;
  }
  bool number_integer(Json::number_integer_t value) {
    push(JsonKind::integer).integer = value;
    return !stopped_;
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    push(JsonKind::unsigned_integer).unsigned_integer = value;
    return !stopped_;
  }
  bool number_float(Json::number_float_t value, const Json::string_t&) {
    push(JsonKind::floating).floating = value;
    return !stopped_;
  }
  bool string(Json::string_t& value) {
    JsonToken& token = push(JsonKind::string);
    token.text = store(value);
    return !stopped_;
  }
  bool binary(Json::binary_t&) { return true; }  // JSON text holds none
  bool start_object(std::size_t) {
    open(JsonKind::object);
    return !stopped_;
  }
  bool start_array(std::size_t) {
    open(JsonKind::array);
    return !stopped_;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(Json::string_t& name) {
    Frame& frame = open_.back();
    ++tape_.tokens_[frame.at].count;
    JsonToken token{};
    token.kind = JsonKind::string;
    token.is_key = true;
    token.text = store(name);
    token.end = static_cast<std::uint32_t>(tape_.tokens_.size() + 1);
    frame.last_key = static_cast<std::uint32_t>(tape_.tokens_.size());
    tape_.tokens_.push_back(token);
    if (!duplicate_) check_repeated(frame);
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const Json::exception& e) {
    if (const auto* syntax = dynamic_cast<const Json::parse_error*>(&e)) {
      error_byte_ = syntax->byte;
      error_ = format_error("$", fmt::format("invalid JSON at byte {} ({})", syntax->byte, reason(syntax->what())));
    } else {
      error_ = format_error("$", fmt::format("invalid JSON ({})", reason(e.what())));
    }
    return false;
  }

  // The reader's place in the text, for PieceTaking::progress.
  void follow(const char* const* position, const char* begin) {
    position_ = position;
    begin_ = begin;
  }
  // Every piece taken, and the last progress reported.
  bool all_taken() {
    if (stopped_) return false;
    if (taking_->progress) taking_->progress(static_cast<std::size_t>(*position_ - begin_), pieces_taken_);
    return true;
  }

  // The byte a syntax error was found at (1 is the first), when it was one.
  std::optional<std::size_t> error_byte() const { return error_byte_; }

  Status result() {
    if (error_) return *error_;
    if (duplicate_) return format_error(*duplicate_, "the key appears twice in one object; a JSON object must not repeat a key");
    return {};
  }

 private:
  // An open array or object: its token, and for an object the keys seen so far (in
  // keys_ from keys_begin on; a large object also hashes them).
  struct Frame {
    std::uint32_t at = 0;
    std::uint32_t last_key = 0;
    std::size_t keys_begin = 0;
    std::unique_ptr<std::unordered_set<std::string_view>> hashed{};
    std::size_t strings_at = 0;          // strings_'s size when it opened
    std::vector<Piece>* taken = nullptr;  // where its elements go, in a "pieces" array taken
  };
  static constexpr std::size_t kLinearKeys = 16;

  std::string_view text_of(std::uint32_t token) const {
    const auto& t = tape_.tokens_[token].text;
    return std::string_view(tape_.strings_).substr(t.offset, t.length);
  }

  decltype(JsonToken::text) store(const std::string& text) {
    decltype(JsonToken::text) out{};
    out.offset = static_cast<std::uint32_t>(tape_.strings_.size());
    out.length = static_cast<std::uint32_t>(text.size());
    tape_.strings_.append(text);
    return out;
  }

  JsonToken& push(JsonKind kind) {
    if (!open_.empty() && tape_.tokens_[open_.back().at].kind == JsonKind::array) {
      ++tape_.tokens_[open_.back().at].count;
      // A pieces list is taken whole or not at all: anything but an object in it is an
      // error the exact reader is to name.
      if (open_.back().taken != nullptr && kind != JsonKind::object) stopped_ = true;
    }
    JsonToken token{};
    token.kind = kind;
    token.end = static_cast<std::uint32_t>(tape_.tokens_.size() + 1);
    tape_.tokens_.push_back(token);
    return tape_.tokens_.back();
  }

  void open(JsonKind kind) {
    const bool pieces_list = taking_ != nullptr && kind == JsonKind::array && !open_.empty() &&
                             tape_.tokens_[open_.back().at].kind == JsonKind::object &&
                             text_of(open_.back().last_key) == "pieces";
    push(kind);
    Frame frame;
    frame.at = static_cast<std::uint32_t>(tape_.tokens_.size() - 1);
    frame.keys_begin = keys_.size();
    frame.strings_at = tape_.strings_.size();
    if (pieces_list) {
      // A node: the address stays. A list left at this token by an array inside a piece
      // taken before (under an unknown key) is stale.
      frame.taken = &tape_.taken_[frame.at];
      frame.taken->clear();
    }
    open_.push_back(std::move(frame));
  }

  bool close() {
    Frame& frame = open_.back();
    tape_.tokens_[frame.at].end = static_cast<std::uint32_t>(tape_.tokens_.size());
    keys_.resize(frame.keys_begin);
    const std::uint32_t at = frame.at;
    const std::size_t strings_at = frame.strings_at;
    open_.pop_back();
    if (!open_.empty() && open_.back().taken != nullptr) take(at, strings_at);
    return !stopped_;
  }

  // A piece closed in a pieces list: decoded, then its tokens and text dropped.
  void take(std::uint32_t at, std::size_t strings_at) {
    std::optional<Piece> piece = taking_->decode(TapeValue(&tape_, at));
    if (!piece) {
      stopped_ = true;
      return;
    }
    open_.back().taken->push_back(std::move(*piece));
    tape_.tokens_.resize(at);
    tape_.strings_.resize(strings_at);
    if (++pieces_taken_ % PieceTaking::kProgressPieces == 0 && taking_->progress) {
      taking_->progress(static_cast<std::size_t>(*position_ - begin_), pieces_taken_);
    }
  }

  void check_repeated(Frame& frame) {
    const std::string_view name = text_of(frame.last_key);
    bool seen = false;
    if (frame.hashed) {
      seen = !frame.hashed->insert(name).second;
    } else {
      for (std::size_t k = frame.keys_begin; k < keys_.size() && !seen; ++k) seen = text_of(keys_[k]) == name;
      if (keys_.size() - frame.keys_begin >= kLinearKeys) {
        frame.hashed = std::make_unique<std::unordered_set<std::string_view>>();
        for (std::size_t k = frame.keys_begin; k < keys_.size(); ++k) frame.hashed->insert(text_of(keys_[k]));
        frame.hashed->insert(name);
      }
    }
    if (seen) duplicate_ = path_of_key(name);
    else if (!frame.hashed) keys_.push_back(frame.last_key);
  }

  // "$", then for each open container below the document its place in its parent (the
  // key it is under or its index), then the repeated key.
  std::string path_of_key(std::string_view name) const {
    std::string path = "$";
    for (std::size_t i = 1; i < open_.size(); ++i) {
      const Frame& parent = open_[i - 1];
      if (tape_.tokens_[parent.at].kind == JsonKind::object) {
        path += key_segment(text_of(parent.last_key));
      } else {
        path += fmt::format("[{}]", tape_.tokens_[parent.at].count - 1);
      }
    }
    return path + key_segment(name);
  }

  JsonTape& tape_;
  const PieceTaking* taking_;
  bool stopped_ = false;  // taking gave up: the text is the exact reader's
  std::size_t pieces_taken_ = 0;
  const char* const* position_ = nullptr;
  const char* begin_ = nullptr;
  std::vector<Frame> open_;
  std::vector<std::uint32_t> keys_;
  std::optional<Error> error_;
  std::optional<std::size_t> error_byte_;
  std::optional<std::string> duplicate_;
};

// A reader for the plain JSON this project writes and most maps are: ASCII strings
// without escapes, integers that fit 64 bits, finite numbers. It feeds the builder the
// events nlohmann's parser would, and gives up at the first byte it does not read as
// plain (anything else, including every error); the caller then parses the text with
// nlohmann, whose answer, and error wording, is the one that counts. The lexer of the
// latter copies each number into a string and converts it with strtoull or strtod; this
// one converts in place.
class PlainReader {
 public:
  PlainReader(std::string_view text, TapeBuilder& builder) : p_(text.data()), end_(text.data() + text.size()), out_(builder) {}

  bool read() {
    if (!value(0)) return false;
    skip_space();
    return p_ == end_;
  }
  // Where it is: moves as it reads.
  const char* const* position() const { return &p_; }

 private:
  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }
  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }
  // The text of a string with no escape and no byte outside printable ASCII.
  bool plain_string(std::string& into) {
    ++p_;  // the opening quote
    const char* start = p_;
    while (p_ != end_ && *p_ != '"') {
      const auto byte = static_cast<unsigned char>(*p_);
      if (byte < 0x20 || byte > 0x7e || byte == '\\') return false;
      ++p_;
    }
    if (p_ == end_) return false;
    into.assign(start, p_);
    ++p_;
    return true;
  }
  bool number() {
    const char* start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
    if (*p_ == '0' && p_ + 1 != end_ && p_[1] >= '0' && p_[1] <= '9') return false;  // a leading zero
    std::uint64_t magnitude = 0;
    bool overflow = false;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') {
      const auto digit = static_cast<std::uint64_t>(*p_ - '0');
      overflow = overflow || magnitude > (std::numeric_limits<std::uint64_t>::max() - digit) / 10;
      magnitude = magnitude * 10 + digit;
      ++p_;
    }
    const bool fraction = p_ != end_ && *p_ == '.';
    const bool exponent = p_ != end_ && (*p_ == 'e' || *p_ == 'E');
    if (!fraction && !exponent) {
      if (overflow) return false;  // nlohmann reads it as a floating-point number
      if (!negative) return out_.number_unsigned(magnitude);
      constexpr auto kMinMagnitude = std::uint64_t{1} << 63;
      if (magnitude > kMinMagnitude) return false;
      return out_.number_integer(magnitude == kMinMagnitude ? std::numeric_limits<std::int64_t>::min()
                                                            : -static_cast<std::int64_t>(magnitude));
    }
    if (fraction) {
      ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || *p_ < '0' || *p_ > '9') return false;
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    double value = 0;
    const auto [ptr, ec] = std::from_chars(start, p_, value);
    if (ec != std::errc() || ptr != p_ || !std::isfinite(value)) return false;
    return out_.number_float(value, scratch_);
  }
  // The members or elements of a container, each read by `item`, up to `close`.
  template <class Item>
  bool items(char close, Item&& item) {
    skip_space();
    if (p_ != end_ && *p_ == close) {
      ++p_;
      return true;
    }
    while (true) {
      if (!item()) return false;
      skip_space();
      if (p_ == end_) return false;
      if (*p_ == close) {
        ++p_;
        return true;
      }
      if (*p_ != ',') return false;
      ++p_;
    }
  }
  // Past kMaxDepth the text is nlohmann's to refuse (with too_deep_at's error).
  bool value(int depth) {
    if (depth >= kMaxDepth) return false;
    skip_space();
    if (p_ == end_) return false;
    switch (*p_) {
      case '{':
        ++p_;
        if (!out_.start_object(0)) return false;
        return items('}', [&] {
          skip_space();
          if (p_ == end_ || *p_ != '"' || !plain_string(scratch_)) return false;
          out_.key(scratch_);
          skip_space();
          if (p_ == end_ || *p_ != ':') return false;
          ++p_;
          return value(depth + 1);
        }) && out_.end_object();
      case '[':
        ++p_;
        if (!out_.start_array(0)) return false;
        return items(']', [&] { return value(depth + 1); }) && out_.end_array();
      case '"':
        if (!plain_string(scratch_)) return false;
        return out_.string(scratch_);
      case 't': return literal("true") && out_.boolean(true);
      case 'f': return literal("false") && out_.boolean(false);
      case 'n': return literal("null") && out_.null();
      default: return number();
    }
  }

  const char* p_;
  const char* end_;
  TapeBuilder& out_;
  std::string scratch_;
};

std::string_view TapeValue::text() const {
  const auto& t = token().text;
  return std::string_view(tape_->strings_).substr(t.offset, t.length);
}

const JsonToken& TapeValue::token() const { return tape_->tokens_[at_]; }
std::uint32_t TapeValue::end_of(std::uint32_t i) const { return tape_->tokens_[i].end; }

std::vector<Piece>* TapeValue::taken_pieces() const {
  if (tape_->taken_.empty()) return nullptr;
  const auto it = tape_->taken_.find(at_);
  return it == tape_->taken_.end() ? nullptr : &it->second;
}

std::optional<TapeValue> TapeValue::member(std::string_view name) const {
  std::optional<TapeValue> found;
  for_each_member([&](std::string_view key, const TapeValue& value) {
    if (key == name) found = value;
    return !found;
  });
  return found;
}

void JsonTape::clear() {
  tokens_.clear();
  strings_.clear();
  taken_.clear();
}

bool JsonTape::parse_taking_pieces(std::string_view text, const PieceTaking& taking) {
  clear();
  try {
    TapeBuilder builder(*this, text.size(), &taking);
    PlainReader reader(text, builder);
    builder.follow(reader.position(), text.data());
    if (reader.read() && builder.all_taken() && builder.result().ok()) return true;
  } catch (const std::bad_alloc&) {
    // parse() says so, or reads it in less.
  }
  clear();
  return false;
}

Status JsonTape::parse(std::string_view text, Reader reader, std::uint64_t max_bytes) {
  clear();
  if (Status bad = check_input_size(text.size(), std::min(max_bytes, kMaxInputBytesCeiling)); !bad.ok()) return bad;
  try {
    // Text the plain reader reads whole nests no deeper than kMaxDepth.
    if (reader == Reader::plain_first) {
      TapeBuilder builder(*this, text.size());
      if (PlainReader(text, builder).read()) return builder.result();
      tokens_.clear();
      strings_.clear();
    }
    // nlohmann's lexer takes a NUL byte for the end of its input (C strings end so), which
    // would read a document followed or cut short by NULs as whole. JSON text cannot hold
    // a NUL (contract 2): the text before the first one is read, and the NUL is the error
    // unless that text fails before its end.
    const std::size_t nul = text.find('\0');
    const std::string_view readable = text.substr(0, nul);
    if (auto at = too_deep_at(readable)) {
      return format_error("$", fmt::format("invalid JSON at byte {}, nesting deeper than {} levels", *at, kMaxDepth));
    }
    TapeBuilder builder(*this, readable.size());
    Json::sax_parse(readable.begin(), readable.end(), &builder);
    if (nul == std::string_view::npos || (builder.error_byte() && *builder.error_byte() <= nul)) {
      return builder.result();
    }
    tokens_.clear();
    strings_.clear();
    return format_error("$", fmt::format("invalid JSON at byte {} (a NUL byte, which JSON text cannot hold)", nul + 1));
  } catch (const std::bad_alloc&) {
    return format_error("$", "the input needs more memory to parse than is available");
  }
}


}  // namespace shardcheck::detail

namespace shardcheck {

namespace {
// 0 until set: the default is computed when first asked for.
std::atomic<std::uint64_t> configured_max_input_bytes{0};
}  // namespace

std::uint64_t default_max_input_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return detail::kMinDefaultInputBytes;
  const std::uint64_t physical = static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
  return std::clamp(physical / 8, detail::kMinDefaultInputBytes, kMaxInputBytesCeiling);
}

std::uint64_t max_input_bytes() {
  const std::uint64_t set = configured_max_input_bytes.load(std::memory_order_relaxed);
  return set != 0 ? set : default_max_input_bytes();
}

void set_max_input_bytes(std::uint64_t bytes) {
  configured_max_input_bytes.store(std::clamp<std::uint64_t>(bytes, 1, kMaxInputBytesCeiling),
                                   std::memory_order_relaxed);
}

namespace {
constexpr std::string_view kRaisingTheLimit =
    "(by default an eighth of this machine's memory; --max-input-bytes on the command line or max_input_bytes= in "
    "Python raises it)";
}  // namespace

Status check_input_size(std::uint64_t bytes, std::uint64_t limit) {
  if (bytes <= limit) return {};
  return detail::format_error(
      "$", fmt::format("the input is {} bytes, more than the limit of {} bytes {}", bytes, limit, kRaisingTheLimit));
}

Status input_past_limit(std::uint64_t limit) {
  return detail::format_error("$",
                              fmt::format("the input goes on past the limit of {} bytes {}", limit, kRaisingTheLimit));
}

}  // namespace shardcheck
