#include "shardcheck/map.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <tuple>

#include <fmt/format.h>

namespace shardcheck {

std::optional<SpanFacts> span_facts(const Extents& extents, const StridedView& view) {
  SpanFacts facts;
  auto numel = checked_numel(extents);  // the one rule for counts: a zero extent wins
  if (!numel) return std::nullopt;
  facts.numel = *numel;
  if (*numel == 0) {
    facts.empty = true;
    facts.required_span_size = 0;
    return facts;
  }
  // One pass for the last address, overflow noted rather than tested per axis: check_map
  // and every conversion ask this of each piece's two views.
  Index last = view.offset;
  bool overflow = false;
  for (std::size_t k = 0; k < extents.size() && k < view.strides.size(); ++k) {
    Index step = 0;
    overflow |= __builtin_mul_overflow(extents[k] - 1, view.strides[k], &step);
    overflow |= __builtin_add_overflow(last, step, &last);
  }
  if (overflow) return std::nullopt;
  facts.max_address = last;
  // The last address itself may be INT64_MAX without overflowing anything.
  facts.required_span_size = checked_add(last, 1).value_or(std::numeric_limits<Index>::max());
  return facts;
}

bool is_unique(const Extents& extents, const Strides& strides) {
  std::vector<std::pair<Index, Index>> axes;  // (stride, extent) of axes with extent > 1
  for (std::size_t k = 0; k < extents.size() && k < strides.size(); ++k) {
    if (extents[k] == 0) return true;  // covers nothing
    if (extents[k] > 1) axes.emplace_back(strides[k], extents[k]);
  }
  std::sort(axes.begin(), axes.end());
  Index reach = 0;  // sum (extent-1)*stride of the smaller axes
  for (const auto& [stride, extent] : axes) {
    if (stride == 0) return false;
    if (stride < reach + 1) return false;
    auto step = checked_mul(extent - 1, stride);
    if (!step) return false;
    auto next = checked_add(reach, *step);
    if (!next) return false;
    reach = *next;
  }
  return true;
}

const RankEntry* Map::find_rank(Rank r) const {
  for (const auto& entry : ranks) {
    if (entry.rank == r) return &entry;
  }
  return nullptr;
}

RankEntry* Map::find_rank(Rank r) {
  for (auto& entry : ranks) {
    if (entry.rank == r) return &entry;
  }
  return nullptr;
}

namespace {
void append_int(std::string& out, Index value) {
  const fmt::format_int digits(value);
  out.append(digits.data(), digits.size());
}

void append_ints(std::string& out, std::span<const Index> values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    append_int(out, values[i]);
  }
}

std::string join(std::span<const Index> values) {
  std::string out;
  append_ints(out, values);
  return out;
}
}  // namespace

std::string shape_text(std::span<const Index> values) {
  std::string out = "(";
  append_ints(out, values);
  out += ')';
  return out;
}

// Every refusal names its piece this way, so it is written straight into one string,
// with no formatting pass per field. Spec notation writes a 1-d stride as "(1)", not "(1,)".
std::string describe(const Piece& piece) {
  std::string out = "P(";
  out.reserve(64);
  append_ints(out, piece.shape);
  out += ") src(";
  append_int(out, piece.source.offset);
  out += ",(";
  append_ints(out, piece.source.strides);
  out += ")) dst(";
  append_int(out, piece.dest.offset);
  out += ",(";
  append_ints(out, piece.dest.strides);
  out += ")) loc{";
  append_ints(out, piece.locations);
  out += '}';
  if (piece.scale != 1.0) out += fmt::format(" scale {}", piece.scale);
  return out;
}

std::string describe(const Map& map) {
  std::string out = fmt::format("F ({})", join(map.logical_shape));
  for (const auto& entry : map.ranks) {
    out += fmt::format("\n  r{}", entry.rank);
    if (entry.shard_shape)
      out += fmt::format(" shard ({})", join(*entry.shard_shape));
    else
      out += " shard (missing)";
    out += ":";
    for (const auto& piece : entry.pieces) out += fmt::format(" {};", describe(piece));
  }
  return out;
}

namespace {
// Orders doubles totally (NaN included) by their bits, as IEEE totalOrder does.
std::uint64_t scale_key(double scale) {
  auto bits = std::bit_cast<std::uint64_t>(scale);
  return (bits >> 63) ? ~bits : (bits | (std::uint64_t{1} << 63));
}
}  // namespace

bool content_less(const Piece& x, const Piece& y) {
  if (x.source.offset != y.source.offset) return x.source.offset < y.source.offset;
  if (x.source.strides != y.source.strides) return x.source.strides < y.source.strides;
  if (x.shape != y.shape) return x.shape < y.shape;
  if (x.dest.offset != y.dest.offset) return x.dest.offset < y.dest.offset;
  if (x.dest.strides != y.dest.strides) return x.dest.strides < y.dest.strides;
  if (x.locations != y.locations) return x.locations < y.locations;
  return scale_key(x.scale) < scale_key(y.scale);
}

Index address_at(const Extents& shape, const StridedView& view, Index k) {
  Index address = view.offset;
  for (std::size_t axis = shape.size(); axis-- > 0;) {
    address += (k % shape[axis]) * view.strides[axis];
    k /= shape[axis];
  }
  return address;
}

Map canonical(const Map& map) {
  Map out = map;
  std::sort(out.ranks.begin(), out.ranks.end(), [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; });
  for (auto& entry : out.ranks) {
    std::sort(entry.pieces.begin(), entry.pieces.end(), content_less);
  }
  return out;
}

}  // namespace shardcheck
