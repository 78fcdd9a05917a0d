// Edits of the content digests recorded beside a map (contract section 10): a record
// that no longer matches the tensor, a missing record, a record under another state.
// Each must be refused by a rebuild asked to verify the state, never accepted.
#include <fmt/format.h>

#include <array>
#include <iterator>
#include <string_view>

#include "corruption_edits.h"
#include "shardcheck/digest.h"

namespace shardcheck::gen::detail {

namespace {

// One recorded state, uniform over the map's records (it has at least one).
std::map<std::string, std::uint64_t>::iterator pick(Edit& e) {
  auto& digests = e.map.content_digests;
  return std::next(digests.begin(), static_cast<std::ptrdiff_t>(e.c.below(digests.size())));
}

}  // namespace

void digest_flip_bit(Edit& e) {
  auto it = pick(e);
  const std::size_t bit = e.c.below(64);
  e.record.field = fmt::format("content_digests.{}", it->first);
  e.record.old_value = format_digest(it->second);
  it->second ^= std::uint64_t{1} << bit;
  e.record.new_value = format_digest(it->second);
}

void digest_drop(Edit& e) {
  auto it = pick(e);
  e.record.field = fmt::format("content_digests.{}", it->first);
  e.record.old_value = format_digest(it->second);
  e.record.new_value = "(missing)";
  e.map.content_digests.erase(it);
}

void digest_to_other_state(Edit& e) {
  // The states a checkpoint records for one parameter; the record moves to one that is
  // not its own (replacing that state's record, if the map has one).
  constexpr std::array<std::string_view, 3> kStates{"param", "exp_avg", "exp_avg_sq"};
  auto it = pick(e);
  const std::string from = it->first;
  std::array<std::string_view, kStates.size()> others{};
  std::size_t n = 0;
  for (std::string_view state : kStates) {
    if (state != from) others[n++] = state;
  }
  const std::string to(others[e.c.below(n)]);
  const std::uint64_t value = it->second;
  e.map.content_digests.erase(it);
  e.map.content_digests[to] = value;
  e.record.field = fmt::format("content_digests.{}", from);
  e.record.old_value = from;
  e.record.new_value = to;
}

}  // namespace shardcheck::gen::detail
