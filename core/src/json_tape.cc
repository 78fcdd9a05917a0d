#include "json_tape.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <new>
#include <unordered_set>

#include <fmt/format.h>

namespace shardcheck::detail {
namespace {

constexpr std::size_t kMaxInputBytes = std::size_t{64} << 20;
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
  TapeBuilder(JsonTape& tape, std::size_t text_size) : tape_(tape) {
    // Unescaping never lengthens a string, so the text of all keys and strings fits in
    // the input's size: views into it stay valid while the tape grows.
    tape_.strings_.reserve(text_size);
    tape_.tokens_.reserve(std::min<std::size_t>(text_size / 2 + 2, 1 << 12));
  }

  bool null() {
    push(JsonKind::null);
    return true;
  }
  bool boolean(bool value) {
    push(JsonKind::boolean).boolean = value;
    return true;
  }
  bool number_integer(Json::number_integer_t value) {
    push(JsonKind::integer).integer = value;
    return true;
  }
  bool number_unsigned(Json::number_unsigned_t value) {
    push(JsonKind::unsigned_integer).unsigned_integer = value;
    return true;
  }
  bool number_float(Json::number_float_t value, const Json::string_t&) {
    push(JsonKind::floating).floating = value;
    return true;
  }
  bool string(Json::string_t& value) {
    JsonToken& token = push(JsonKind::string);
    token.text = store(value);
    return true;
  }
  bool binary(Json::binary_t&) { return true; }  // JSON text holds none
  bool start_object(std::size_t) {
    open(JsonKind::object);
    return true;
  }
  bool start_array(std::size_t) {
    open(JsonKind::array);
    return true;
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
      error_ = format_error("$", fmt::format("invalid JSON at byte {} ({})", syntax->byte, reason(syntax->what())));
    } else {
      error_ = format_error("$", fmt::format("invalid JSON ({})", reason(e.what())));
    }
    return false;
  }

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
    }
    JsonToken token{};
    token.kind = kind;
    token.end = static_cast<std::uint32_t>(tape_.tokens_.size() + 1);
    tape_.tokens_.push_back(token);
    return tape_.tokens_.back();
  }

  void open(JsonKind kind) {
    push(kind);
    Frame frame;
    frame.at = static_cast<std::uint32_t>(tape_.tokens_.size() - 1);
    frame.keys_begin = keys_.size();
    open_.push_back(std::move(frame));
  }

  bool close() {
    Frame& frame = open_.back();
    tape_.tokens_[frame.at].end = static_cast<std::uint32_t>(tape_.tokens_.size());
    keys_.resize(frame.keys_begin);
    open_.pop_back();
    return true;
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
  std::vector<Frame> open_;
  std::vector<std::uint32_t> keys_;
  std::optional<Error> error_;
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
        out_.start_object(0);
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
        out_.start_array(0);
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

std::optional<TapeValue> TapeValue::member(std::string_view name) const {
  std::optional<TapeValue> found;
  for_each_member([&](std::string_view key, const TapeValue& value) {
    if (key == name) found = value;
    return !found;
  });
  return found;
}

Status JsonTape::parse(std::string_view text, Reader reader) {
  tokens_.clear();
  strings_.clear();
  if (text.size() > kMaxInputBytes) {
    return format_error("$", fmt::format("the input is {} bytes, more than the {} bytes accepted", text.size(),
                                  kMaxInputBytes));
  }
  try {
    // Text the plain reader reads whole nests no deeper than kMaxDepth.
    if (reader == Reader::plain_first) {
      TapeBuilder builder(*this, text.size());
      if (PlainReader(text, builder).read()) return builder.result();
      tokens_.clear();
      strings_.clear();
    }
    if (auto at = too_deep_at(text)) {
      return format_error("$", fmt::format("invalid JSON at byte {}, nesting deeper than {} levels", *at, kMaxDepth));
    }
    TapeBuilder builder(*this, text.size());
    Json::sax_parse(text.begin(), text.end(), &builder);
    return builder.result();
  } catch (const std::bad_alloc&) {
    return format_error("$", "the input needs more memory to parse than is available");
  }
}


}  // namespace shardcheck::detail
