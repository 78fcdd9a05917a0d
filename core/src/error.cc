#include "shardcheck/error.h"

#include <array>

namespace shardcheck {

namespace {
struct KindName {
  ErrorKind kind;
  std::string_view name;
};
constexpr std::array<KindName, 10> kKindNames{{
    {ErrorKind::count, "count"},
    {ErrorKind::bounds, "bounds"},
    {ErrorKind::itself, "itself"},
    {ErrorKind::twice, "twice"},
    {ErrorKind::uncovered, "uncovered"},
    {ErrorKind::different_data, "different_data"},
    {ErrorKind::holders, "holders"},
    {ErrorKind::scale, "scale"},
    {ErrorKind::shape, "shape"},
    {ErrorKind::format, "format"},
}};
}  // namespace

std::string_view kind_name(ErrorKind kind) {
  for (const auto& entry : kKindNames) {
    if (entry.kind == kind) return entry.name;
  }
  return "format";
}

std::optional<ErrorKind> parse_kind(std::string_view name) {
  for (const auto& entry : kKindNames) {
    if (entry.name == name) return entry.kind;
  }
  return std::nullopt;
}

std::string Error::to_string() const {
  std::string out(kind_name(kind));
  out += ": ";
  out += message;
  return out;
}

Error make_error(ErrorKind kind, std::string message) {
  Error error;
  error.kind = kind;
  error.message = std::move(message);
  return error;
}

}  // namespace shardcheck
