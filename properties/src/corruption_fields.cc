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
std::string list_text(const std::vector<Index>& values) {
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
std::size_t axis_where(ChoiceSource& c, const std::vector<Index>& v, Keep keep) {
  std::size_t count = 0;
  for (Index x : v) count += keep(x);
  std::size_t want = c.below(count);
  for (std::size_t k = 0; k < v.size(); ++k) {
    if (keep(v[k]) && want-- == 0) return k;
  }
  return 0;
}

std::size_t nonzero_axis(ChoiceSource& c, const std::vector<Index>& v) {
  return axis_where(c, v, [](Index x) { return x != 0; });
}

// Two axes with different values (the piece fits only if v has two), so a swap or a
// copy always changes something.
struct TwoAxes {
  std::size_t a, b;
};
TwoAxes two_axes(ChoiceSource& c, const std::vector<Index>& v) {
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
Rank outside_rank(const Map& map, const std::vector<Rank>& locations, ChoiceSource& c) {
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

void edit_offset(Edit& e, Kind kind, Site site, bool source) {
  auto& entry = e.map.ranks[site.rank];
  Piece& piece = entry.pieces[site.piece];
  StridedView& view = source ? piece.source : piece.dest;
  std::string field = source ? "source.offset" : "dest.offset";
  // Kinds come in the same order on both sides, so one offset from the first kind does.
  auto step = static_cast<int>(kind) -
              static_cast<int>(source ? Kind::source_offset_inc : Kind::dest_offset_inc);
  Index value = 0;
  switch (step) {
    case 0:
      value = saturating_add(view.offset, 1);
      break;
    case 1:
      value = saturating_add(view.offset, -1);
      break;
    case 2:
    case 3: {
      Index stride = view.strides[nonzero_axis(e.c, view.strides)];
      if (step == 3) stride = stride == std::numeric_limits<Index>::min() ? 0 : -stride;
      value = saturating_add(view.offset, stride);
      break;
    }
    case 4:
      value = 0;
      break;
    case 5: {
      // Another piece anywhere in the map with a different offset (one exists, or the
      // piece would not fit): counting pass, then the chosen one.
      auto offset_of = [&](const Piece& p) { return source ? p.source.offset : p.dest.offset; };
      std::size_t count = 0;
      for (const auto& other : e.map.ranks) {
        for (const auto& p : other.pieces) count += offset_of(p) != view.offset;
      }
      std::size_t want = e.c.below(count);
      value = view.offset;
      for (const auto& other : e.map.ranks) {
        for (const auto& p : other.pieces) {
          if (offset_of(p) != view.offset && want-- == 0) value = offset_of(p);
        }
      }
      break;
    }
    default:
      value = source ? buffer_end(&e.map.logical_shape)
                     : buffer_end(entry.shard_shape ? &*entry.shard_shape : nullptr);
      break;
  }
  set_index(e.record, std::move(field), view.offset, value);
}

void edit_stride(Edit& e, Kind kind, Site site, bool source) {
  Piece& piece = e.map.ranks[site.rank].pieces[site.piece];
  Strides& strides = source ? piece.source.strides : piece.dest.strides;
  std::string_view side = source ? "source.strides" : "dest.strides";
  auto step = static_cast<int>(kind) -
              static_cast<int>(source ? Kind::source_stride_inc : Kind::dest_stride_inc);
  if (step == 3) {
    auto [a, b] = two_axes(e.c, strides);
    e.record.field = field_swap(side, a, b);
    e.record.old_value = list_text(strides);
    std::swap(strides[a], strides[b]);
    e.record.new_value = list_text(strides);
    return;
  }
  if (step == 4) {
    auto [a, b] = two_axes(e.c, strides);
    set_index(e.record, field_at(side, a), strides[a], strides[b]);
    return;
  }
  std::size_t k = step == 2 ? nonzero_axis(e.c, strides) : e.c.below(strides.size());
  Index value = step == 0   ? saturating_add(strides[k], 1)
                : step == 1 ? saturating_add(strides[k], -1)
                            : 0;
  set_index(e.record, field_at(side, k), strides[k], value);
}

void edit_shape(Edit& e, Kind kind, Site site) {
  Extents& shape = e.map.ranks[site.rank].pieces[site.piece].shape;
  if (kind == Kind::shape_swap) {
    auto [a, b] = two_axes(e.c, shape);
    e.record.field = field_swap("shape", a, b);
    e.record.old_value = list_text(shape);
    std::swap(shape[a], shape[b]);
    e.record.new_value = list_text(shape);
    return;
  }
  std::size_t k = kind == Kind::shape_zero ? nonzero_axis(e.c, shape) : e.c.below(shape.size());
  Index value = kind == Kind::shape_inc   ? saturating_add(shape[k], 1)
                : kind == Kind::shape_dec ? saturating_add(shape[k], -1)
                                          : 0;
  set_index(e.record, field_at("shape", k), shape[k], value);
}

void edit_locations(Edit& e, Kind kind, Site site) {
  std::vector<Rank>& loc = e.map.ranks[site.rank].pieces[site.piece].locations;
  e.record.field = "locations";
  e.record.old_value = list_text(loc);
  switch (kind) {
    case Kind::locations_drop:
      loc.erase(loc.begin() + static_cast<std::ptrdiff_t>(e.c.below(loc.size())));
      break;
    case Kind::locations_add:
      loc.push_back(outside_rank(e.map, loc, e.c));
      break;
    case Kind::locations_replace: {
      std::size_t i = e.c.below(loc.size());
      loc[i] = outside_rank(e.map, loc, e.c);
      break;
    }
    default:
      loc.clear();
      break;
  }
  // Locations are written sorted; a corruption changes the set, not the encoding.
  std::sort(loc.begin(), loc.end());
  e.record.new_value = list_text(loc);
}

}  // namespace

void edit_piece_field(Edit& e, Kind kind, Site site) {
  e.record.rank = e.map.ranks[site.rank].rank;
  e.record.piece = static_cast<Index>(site.piece);
  if (kind <= Kind::shape_swap) return edit_shape(e, kind, site);
  if (kind <= Kind::source_offset_past_end) return edit_offset(e, kind, site, true);
  if (kind <= Kind::dest_offset_past_end) return edit_offset(e, kind, site, false);
  if (kind <= Kind::source_stride_copy) return edit_stride(e, kind, site, true);
  if (kind <= Kind::dest_stride_copy) return edit_stride(e, kind, site, false);
  if (kind <= Kind::locations_empty) return edit_locations(e, kind, site);
  static constexpr double kScales[] = {0.0, 0.5, 2.0, -1.0};
  double& scale = e.map.ranks[site.rank].pieces[site.piece].scale;
  e.record.field = "scale";
  e.record.old_value = fmt::format("{}", scale);
  scale = kScales[static_cast<int>(kind) - static_cast<int>(Kind::scale_zero)];
  e.record.new_value = fmt::format("{}", scale);
}

void edit_shard_shape(Edit& e, Kind kind, std::size_t rank_pos) {
  auto& entry = e.map.ranks[rank_pos];
  Extents& shape = *entry.shard_shape;
  std::size_t k = e.c.below(shape.size());
  e.record.rank = entry.rank;
  set_index(e.record, field_at("shard_shape", k), shape[k],
            saturating_add(shape[k], kind == Kind::shard_shape_inc ? 1 : -1));
}

}  // namespace shardcheck::gen::detail
