#include "shardcheck/escape.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

namespace shardcheck::escape {

namespace {

// The length of the valid UTF-8 sequence at text[i] and its code point, or 0.
std::size_t utf8_at(std::string_view text, std::size_t i, std::uint32_t& point) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  std::size_t length = 0;
  std::uint32_t least = 0;
  if (lead < 0x80) {
    point = lead;
    return 1;
  } else if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2, point = lead & 0x1fu, least = 0x80;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3, point = lead & 0x0fu, least = 0x800;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4, point = lead & 0x07u, least = 0x10000;
  } else {
    return 0;
  }
  if (i + length > text.size()) return 0;
  for (std::size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xc0u) != 0x80u) return 0;
    point = (point << 6) | (byte(i + k) & 0x3fu);
  }
  const bool surrogate = point >= 0xd800 && point <= 0xdfff;
  return point < least || point > 0x10ffff || surrogate ? 0 : length;
}

bool is_control(std::uint32_t point) { return point < 0x20 || (point >= 0x7f && point <= 0x9f); }

}  // namespace

std::string markup(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto ch = static_cast<unsigned char>(c);
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') {
          out += "\xEF\xBF\xBD";  // U+FFFD: XML 1.0 has no way to carry these
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string terminal(std::string_view text, Newlines newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t point = 0;
    const std::size_t length = utf8_at(text, i, point);
    const bool kept_newline = newlines == Newlines::keep && text[i] == '\n';
    if (length > 0 && (kept_newline || !is_control(point))) {
      out.append(text, i, length);
      i += length;
      continue;
    }
    // A control character's every byte (C1 controls are two in UTF-8), or one stray byte.
    for (std::size_t k = 0; k < std::max<std::size_t>(length, 1); ++k) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(text[i + k]));
    }
    i += std::max<std::size_t>(length, 1);
  }
  return out;
}

std::string markdown_code(std::string_view text) {
  std::string inner;
  for (const char c : terminal(text)) {
    if (c == '|') inner += '\\';  // GitHub's tables split cells at a pipe, in code spans too
    inner += c;
  }
  std::size_t longest = 0;
  for (std::size_t i = 0, run = 0; i < inner.size(); ++i) {
    run = inner[i] == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  const std::string fence(longest + 1, '`');
  // CommonMark strips one space from each side of a code span, so a span that begins or
  // ends with a backtick is padded to keep it apart from the fence.
  const bool pad = !inner.empty() && (inner.front() == '`' || inner.back() == '`');
  const std::string space = pad ? " " : "";
  return fence + space + inner + space + fence;
}

}  // namespace shardcheck::escape
