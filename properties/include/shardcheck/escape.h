// Text from outside (an implementation's error type and message, a target's command, a
// case file's name, a parameter name) written where it could be read as something else:
// one escaping function per medium, every report shardcheck writes going through them.
#pragma once

#include <string>
#include <string_view>

namespace shardcheck::escape {

// HTML and XML (report.html, JUnit): & < > " ' escaped, and the control characters XML
// 1.0 forbids replaced by U+FFFD.
std::string markup(std::string_view text);

// A terminal or a plain text file (stdout, stderr, table.txt): every control character
// (C0, DEL, C1) and every byte that is not part of valid UTF-8 shown as \xNN, so that
// text can neither recolour a terminal, set its title nor move its cursor. A single-line
// field (a table cell, a signature) escapes newlines too; a message block keeps them.
enum class Newlines { escape, keep };
std::string terminal(std::string_view text, Newlines newlines = Newlines::escape);

// Markdown (a GitHub job summary): the text as one code span that is safe inside a table
// cell: terminal()'s escapes (no newline can end the row), `|` as `\|`, and a fence of
// backticks longer than any run inside it. HTML inside a code span is shown, not read.
std::string markdown_code(std::string_view text);

}  // namespace shardcheck::escape
