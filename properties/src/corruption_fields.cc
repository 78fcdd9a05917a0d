// Edits of one field of one piece, and of one rank's shard shape.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "corruption_edits.h"

namespace shardcheck::gen::detail {

Index saturating_add(Index a, Index b) {
  if (auto sum = checked_add(a, b)) return *sum;
  return b > 0 ? std::numeric_limits<Index>::max() : std::numeric_limits<Index>::min();
}

// Record text is built on every corrupted case, so it avoids fmt's parsing.
std::string list_text(std::span<const Index> values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(values[i]);
  }
  out += ']';
  return out;
}

std::string field_at(std::string_view name, std::size_t k) {
  std::string out(name);
  out.append("[").append(std::to_string(k)).append("]");
  return out;
}

std::string field_swap(std::string_view name, std::size_t a, std::size_t b) {
  std::string out(name);
  out.append("[").append(std::to_string(a)).append("<->").append(std::to_string(b)).append("]");
  return out;
}

namespace {

// An axis k of v with keep(v[k]), chosen uniformly; callers know one exists.
template <class Keep>
std::size_t axis_where(ChoiceSource& c, std::span<const Index> v, Keep keep) {
  std::size_t count = 0;
  for (Index x : v) count += keep(x);
  std::size_t want = c.below(count);
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (keep(v[k]) && want-- == 0) return k;
  }
  return 0;
}

std::size_t nonzero_axis(ChoiceSource& c, std::span<const Index> v) {
  return axis_where(c, v, [](Index x) { return x != 0; });
}

// Two axes with different values (the piece fits only if v has two), so a swap or a
// copy always changes something.
struct TwoAxes {
  std::size_t a, b;
};
TwoAxes two_axes(ChoiceSource& c, std::span<const Index> v) {
  std::size_t a = c.below(v.size());
  std::size_t b = axis_where(c, v, [&](Index x) { return x != v[a]; });
  return {a, b};
}

void set_index(CorruptionRecord& rec, std::string field, Index& slot, Index value) {
  rec.field = std::move(field);
  rec.old_value = std::to_string(slot);
  rec.new_value = std::to_string(value);
  slot = value;
}

// numel of a buffer: where "past the end" points. Saturates for absurd shapes.
Index buffer_end(const Extents* shape) {
  if (!shape) return 0;
  auto n = checked_numel(*shape);
  return n ? *n : std::numeric_limits<Index>::max();
}

// A rank that is not in `locations`: an existing rank when there is one (and usually),
// otherwise a fresh id past every rank of the map, a phantom holder.
Rank outside_rank(const Map& map, std::span<const Rank> locations, ChoiceSource& c) {
  auto absent = [&](Rank r) {
    return std::find(locations.begin(), locations.end(), r) == locations.end();
  };
  std::size_t candidates = 0;
  Rank highest = -1;
  for (const auto& entry : map.ranks) {
    candidates += absent(entry.rank);
    highest = std::max(highest, entry.rank);
  }
  for (Rank r : locations) highest = std::max(highest, r);
  if (candidates > 0 && !c.chance(1, 4)) {
    std::size_t want = c.below(candidates);
    for (const auto& entry : map.ranks) {
      if (absent(entry.rank) && want-- == 0) return entry.rank;
    }
  }
  return saturating_add(highest, 1);
}

StridedView& view_of(Edit& e, Site site, bool source) {
  Piece& piece = e.map.ranks[site.rank].pieces[site.piece];
  return source ? piece.source : piece.dest;
}

std::string_view offset_name(bool source) { return source ? "source.offset" : "dest.offset"; }

// Locations are written sorted; a corruption changes the set, not the encoding.
template <class Change>
void edit_locations(Edit& e, Site site, Change change) {
  RankList& loc = e.map.ranks[site.rank].pieces[site.piece].locations;
  e.record.field = "locations";
  e.record.old_value = list_text(loc);
  change(loc);
  std::sort(loc.begin(), loc.end());
  e.record.new_value = list_text(loc);
}

}  // namespace

void axis_add(Edit& e, Extents& v, std::string_view name, Index delta) {
  std::size_t k = e.c.below(v.size());
  set_index(e.record, field_at(name, k), v[k], saturating_add(v[k], delta));
}

void axis_set(Edit& e, Extents& v, std::string_view name, Index value) {
  std::size_t k = axis_where(e.c, v, [value](Index x) { return x != value; });
  set_index(e.record, field_at(name, k), v[k], value);
}

void axis_zero_beside_huge(Edit& e, Piece& piece) {
  std::size_t k = axis_where(e.c, piece.shape, [](Index x) { return x != 0; });
  e.record.field = "shape";
  e.record.old_value = list_text(piece.shape);
  piece.shape[k] = 0;
  // In front: a product taken in order then overflows before it meets the 0.
  for (int extra = 0; extra < 2; ++extra) {
    piece.shape.insert(piece.shape.begin(), Index{1} << 62);
    piece.source.strides.insert(piece.source.strides.begin(), 1);
    piece.dest.strides.insert(piece.dest.strides.begin(), 1);
  }
  e.record.new_value = list_text(piece.shape);
}

void spanned_axis_set(Edit& e, const Extents& shape, Strides& v, std::string_view name,
                      Index value) {
  std::size_t count = 0;
  for (std::size_t k = 0; k < v.size(); ++k) count += spans_other_than(shape, v, value, k);
  std::size_t want = e.c.below(count);
  std::size_t k = 0;
  for (; k < v.size(); ++k) {
    if (spans_other_than(shape, v, value, k) && want-- == 0) break;
  }
  set_index(e.record, field_at(name, k), v[k], value);
}

void axes_swap(Edit& e, Extents& v, std::string_view name) {
  auto [a, b] = two_axes(e.c, v);
  e.record.field = field_swap(name, a, b);
  e.record.old_value = list_text(v);
  std::swap(v[a], v[b]);
  e.record.new_value = list_text(v);
}

void axis_copy(Edit& e, Extents& v, std::string_view name) {
  auto [a, b] = two_axes(e.c, v);
  set_index(e.record, field_at(name, a), v[a], v[b]);
}

void offset_add(Edit& e, Site site, bool source, Index delta) {
  StridedView& view = view_of(e, site, source);
  set_index(e.record, std::string(offset_name(source)), view.offset,
            saturating_add(view.offset, delta));
}

void offset_add_stride(Edit& e, Site site, bool source, Index sign) {
  StridedView& view = view_of(e, site, source);
  Index stride = view.strides[nonzero_axis(e.c, view.strides)];
  if (sign < 0) stride = stride == std::numeric_limits<Index>::min() ? 0 : -stride;
  set_index(e.record, std::string(offset_name(source)), view.offset,
            saturating_add(view.offset, stride));
}

void offset_set(Edit& e, Site site, bool source, Index value) {
  StridedView& view = view_of(e, site, source);
  set_index(e.record, std::string(offset_name(source)), view.offset, value);
}

void offset_set_other(Edit& e, Site site, bool source) {
  StridedView& view = view_of(e, site, source);
  // Another piece anywhere in the map with a different offset (one exists, or the
  // piece would not fit): counting pass, then the chosen one.
  auto offset_of = [&](const Piece& p) { return source ? p.source.offset : p.dest.offset; };
  std::size_t count = 0;
  for (const auto& other : e.map.ranks) {
    for (const auto& p : other.pieces) count += offset_of(p) != view.offset;
  }
  std::size_t want = e.c.below(count);
  Index value = view.offset;
  for (const auto& other : e.map.ranks) {
    for (const auto& p : other.pieces) {
      if (offset_of(p) != view.offset && want-- == 0) value = offset_of(p);
    }
  }
  set_index(e.record, std::string(offset_name(source)), view.offset, value);
}

void offset_set_past_end(Edit& e, Site site, bool source) {
  const auto& entry = e.map.ranks[site.rank];
  Index value = source ? buffer_end(&e.map.logical_shape)
                       : buffer_end(entry.shard_shape ? &*entry.shard_shape : nullptr);
  StridedView& view = view_of(e, site, source);
  // An empty piece a constructor placed last is already there: one further is past it too.
  if (view.offset == value && value < std::numeric_limits<Index>::max()) ++value;
  set_index(e.record, std::string(offset_name(source)), view.offset, value);
}

void offset_set_last_address(Edit& e, Site site, bool source) {
  const Piece& piece = e.map.ranks[site.rank].pieces[site.piece];
  constexpr Index kMax = std::numeric_limits<Index>::max();
  Index below = 0;
  if (!e.c.coin()) {
    switch (e.c.below(3)) {
      case 0: below = 1; break;
      case 1: below = 2; break;
      default: below = e.c.between(3, 4096); break;
    }
  }
  const Index last = kMax - below;
  StridedView& view = view_of(e, site, source);
  // The view's span past its offset, when it has one that fits.
  Index span = 0;
  bool fits = true;
  for (std::size_t k = 0; k < piece.shape.size() && k < view.strides.size(); ++k) {
    if (piece.shape[k] <= 0) continue;
    auto step = checked_mul(piece.shape[k] - 1, view.strides[k]);
    auto sum = step ? checked_add(span, *step) : std::nullopt;
    if (!sum || view.strides[k] < 0) {
      fits = false;
      break;
    }
    span = *sum;
  }
  const Index offset = fits && span <= last ? last - span : last;
  set_index(e.record, std::string(offset_name(source)), view.offset, offset);
  e.record.new_value += fmt::format(" (last address 2^63-1-{})", below);
}

void scale_set(Edit& e, Site site, double value) {
  double& scale = e.map.ranks[site.rank].pieces[site.piece].scale;
  e.record.field = "scale";
  e.record.old_value = fmt::format("{}", scale);
  scale = value;
  e.record.new_value = fmt::format("{}", scale);
}

void location_drop(Edit& e, Site site) {
  edit_locations(e, site, [&](RankList& loc) {
    loc.erase(loc.begin() + static_cast<std::ptrdiff_t>(e.c.below(loc.size())));
  });
}

void location_add(Edit& e, Site site) {
  // Now and then the rank added is one already listed: locations must not repeat a rank.
  edit_locations(e, site, [&](RankList& loc) {
    loc.push_back(!loc.empty() && e.c.chance(1, 8) ? loc[e.c.below(loc.size())] : outside_rank(e.map, loc, e.c));
  });
}

void location_replace(Edit& e, Site site) {
  edit_locations(e, site, [&](RankList& loc) {
    std::size_t i = e.c.below(loc.size());
    loc[i] = outside_rank(e.map, loc, e.c);
  });
}

void locations_clear(Edit& e, Site site) {
  edit_locations(e, site, [](RankList& loc) { loc.clear(); });
}

}  // namespace shardcheck::gen::detail
