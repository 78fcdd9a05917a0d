#include "shardcheck/error.h"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "shardcheck/dtype.h"
#include "shardcheck/map.h"

namespace shardcheck {

namespace {
struct KindRow {
  ErrorKind kind;
  std::string_view name;
  std::string_view contract;
  std::string_view meaning;
};
constexpr KindRow kKindRows[] = {
#define SHARDCHECK_ERROR_KIND(name, contract, sentence) {ErrorKind::name, #name, contract, sentence},
#include "shardcheck/error_kinds.def"
};
static_assert(std::size(kKindRows) == std::size(kAllErrorKinds));

const KindRow& kind_row(ErrorKind kind) {
  for (const auto& row : kKindRows) {
    if (row.kind == kind) return row;
  }
  return kKindRows[static_cast<std::size_t>(ErrorKind::format)];
}

std::string location_text(const Where& where) {
  if (!where.path.empty()) return where.path;
  std::string out;
  auto part = [&out](const std::string& text) {
    if (!out.empty()) out += ' ';
    out += text;
  };
  if (where.rank) part(fmt::format("rank {}", *where.rank));
  if (where.piece) {
    part(fmt::format("piece {}", *where.piece));
    if (where.content != nullptr) out += fmt::format(" ({})", describe(*where.content));
  }
  if (where.address && where.side != Side::none) {
    part(fmt::format("{} address {}", where.side == Side::full ? "F" : "shard", *where.address));
  }
  return out;
}
}  // namespace

std::string_view kind_name(ErrorKind kind) { return kind_row(kind).name; }
std::string_view kind_contract(ErrorKind kind) { return kind_row(kind).contract; }
std::string_view kind_meaning(ErrorKind kind) { return kind_row(kind).meaning; }

std::optional<ErrorKind> parse_kind(std::string_view name) {
  for (const auto& row : kKindRows) {
    if (row.name == name) return row.kind;
  }
  return std::nullopt;
}

Where Where::in_rank(Rank rank) {
  Where where;
  where.rank = rank;
  return where;
}

Where Where::in_piece(Rank rank, Index written, const Piece& piece) {
  Where where;
  where.rank = rank;
  where.piece = written;
  where.content = &piece;
  return where;
}

Where Where::in_json(std::string path) {
  Where where;
  where.path = std::move(path);
  return where;
}

Where Where::at(Side address_side, Index address_value) const {
  Where where = *this;
  where.side = address_side;
  where.address = address_value;
  return where;
}

std::string Error::to_string() const {
  std::string out(kind_name(kind));
  out += ": ";
  out += message;
  return out;
}

Error make_error(ErrorKind kind, std::string sentence, const Where& where) {
  Error error;
  error.kind = kind;
  error.rank = where.rank;
  error.piece = where.piece;
  error.address = where.address;
  error.side = where.side;
  error.path = where.path;
  const std::string location = location_text(where);
  error.message = location.empty() ? sentence : location + ": " + sentence;
  error.sentence = std::move(sentence);
  return error;
}

Error reworded(const Error& error, std::string sentence) {
  Error out = error;
  out.message.resize(out.message.size() - std::min(out.message.size(), out.sentence.size()));
  out.message += sentence;
  out.sentence = std::move(sentence);
  return out;
}

// ---- the faults ----------------------------------------------------------------------

namespace fault {
namespace {

std::string list_text(std::span<const Index> values) { return fmt::format("{}", fmt::join(values, ",")); }
std::string ranks_text(std::span<const Rank> ranks) { return fmt::format("{{{}}}", list_text(ranks)); }

Where where_of(const PieceAt& at) { return Where::in_piece(at.rank, at.written, *at.piece); }

std::string piece_name(const PieceAt& at) { return fmt::format("piece {} ({})", at.written, describe(*at.piece)); }

std::string rank_path(Rank rank) { return fmt::format("$.ranks.{}", rank); }

// The JSON path of a piece's field, with the rank and piece kept in the error's fields.
Where piece_field(const PieceAt& at, std::string_view field) {
  Where where = Where::in_json(fmt::format("{}.pieces[{}]{}", rank_path(at.rank), at.written, field));
  where.rank = at.rank;
  where.piece = at.written;
  return where;
}

std::string_view view_name(Side side) { return side == Side::full ? "source" : "dest"; }

// A shape that failed its check: says which of the two ways it failed.
std::string shape_fault(std::string_view what, const Extents& shape) {
  const bool negative = std::any_of(shape.begin(), shape.end(), [](Index e) { return e < 0; });
  return negative ? fmt::format("the {} {} has a negative extent", what, shape_text(shape))
                  : fmt::format("the {} {} has more elements than fit in 64 bits", what, shape_text(shape));
}

}  // namespace

Error piece(PieceFault which, const PieceAt& at) {
  const Piece& p = *at.piece;
  auto format = [&](std::string_view field, std::string sentence) {
    return make_error(ErrorKind::format, std::move(sentence), piece_field(at, field));
  };
  switch (which) {
    case PieceFault::axes:
      return format("", fmt::format("the shape has {} axes but the source strides have {} and the dest strides {}",
                                    p.shape.size(), p.source.strides.size(), p.dest.strides.size()));
    case PieceFault::negative_extent:
      return format(".shape", fmt::format("the shape {} has a negative extent", shape_text(p.shape)));
    case PieceFault::negative_source_offset:
      return format(".source", fmt::format("the source offset {} is negative", p.source.offset));
    case PieceFault::negative_dest_offset:
      return format(".dest", fmt::format("the dest offset {} is negative", p.dest.offset));
    case PieceFault::negative_source_stride:
      return format(".source",
                    fmt::format("the source strides {} include a negative stride", shape_text(p.source.strides)));
    case PieceFault::negative_dest_stride:
      return format(".dest", fmt::format("the dest strides {} include a negative stride", shape_text(p.dest.strides)));
    case PieceFault::source_overflow:
      return format(".source", "the source view's element count or last address does not fit in 64 bits");
    case PieceFault::dest_overflow:
      return format(".dest", "the dest view's last address does not fit in 64 bits");
    case PieceFault::no_locations:
      return format(".locations", "the locations are empty; a piece needs at least one holder");
    case PieceFault::negative_location:
      return format(".locations", fmt::format("the locations {} name a negative rank", ranks_text(p.locations)));
    case PieceFault::unsorted_locations:
      return format(".locations", fmt::format("the locations {} are not strictly increasing (unsorted or repeated)",
                                              ranks_text(p.locations)));
    case PieceFault::bad_scale:
      return make_error(ErrorKind::scale, fmt::format("the scale {} is not a finite non-zero number", p.scale),
                        piece_field(at, ".scale"));
  }
  return format("", "the piece is malformed");
}

Error bad_logical_shape(const Extents& shape) {
  return make_error(ErrorKind::format, shape_fault("logical shape", shape), Where::in_json("$.logical_shape"));
}

Error negative_rank_id(Rank rank) {
  Where where = Where::in_json(rank_path(rank));
  where.rank = rank;
  return make_error(ErrorKind::format, fmt::format("the rank id {} is negative", rank), where);
}

Error duplicate_rank(Rank rank) {
  Where where = Where::in_json(rank_path(rank));
  where.rank = rank;
  return make_error(ErrorKind::format, fmt::format("rank {} is listed more than once", rank), where);
}

Error bad_shard_shape(Rank rank, const Extents& shape) {
  Where where = Where::in_json(rank_path(rank) + ".shard_shape");
  where.rank = rank;
  return make_error(ErrorKind::format, shape_fault("shard shape", shape), where);
}

Error missing_shard_shape(Rank rank) {
  Where where = Where::in_json(rank_path(rank) + ".shard_shape");
  where.rank = rank;
  return make_error(ErrorKind::format, "the rank lists pieces but has no shard_shape", where);
}

Error out_of_bounds(const PieceAt& at, Side side, Index address, Index numel) {
  const std::string sentence =
      side == Side::full ? fmt::format("the source view reaches past the end of F, which has {} elements", numel)
                         : fmt::format("the dest view reaches past the end of the shard, which has {} elements", numel);
  return make_error(ErrorKind::bounds, sentence, where_of(at).at(side, address));
}

Error overlaps_itself(const PieceAt& at, Side side) {
  Where where = where_of(at);
  where.side = side;
  return make_error(ErrorKind::itself,
                    fmt::format("the {} view may touch one address twice (a zero stride, or strides that are "
                                "not nested; the rule is conservative)",
                                view_name(side)),
                    where);
}

Error zero_stride_write(const PieceAt& at, Side side, std::size_t axis) {
  Where where = where_of(at);
  where.side = side;
  return make_error(ErrorKind::itself,
                    fmt::format("the {} view writes through a zero stride on axis {} of extent {}", view_name(side),
                                axis, at.piece->shape[axis]),
                    where);
}

Error count(Rank rank, std::optional<Index> pieces_numel, Index shard_numel) {
  const std::string held = pieces_numel ? std::to_string(*pieces_numel) : std::string("more than 2^63");
  return make_error(ErrorKind::count,
                    fmt::format("the pieces hold {} elements but the shard holds {}", held, shard_numel),
                    Where::in_rank(rank));
}

Error shard_address_twice(const PieceAt& at, Index address, const PieceAt* other) {
  std::string sentence;
  if (other == nullptr) {
    sentence = "another piece already maps to this shard address";
  } else if (other->piece == at.piece) {
    sentence = "the dest view maps to this shard address more than once";
  } else {
    sentence = fmt::format("{} also maps to this shard address", piece_name(*other));
  }
  return make_error(ErrorKind::twice, sentence, where_of(at).at(Side::shard, address));
}

Error shard_address_uncovered(Rank rank, Index address) {
  return make_error(ErrorKind::uncovered, "no piece of this rank maps to this shard address",
                    Where::in_rank(rank).at(Side::shard, address));
}

Error element_uncovered(Index element) {
  return make_error(ErrorKind::uncovered, "no piece covers this element of F", Where{}.at(Side::full, element));
}

Error not_own_rank(const PieceAt& at) {
  return make_error(ErrorKind::holders,
                    fmt::format("the locations {} do not name rank {}, which lists the piece",
                                ranks_text(at.piece->locations), at.rank),
                    where_of(at));
}

Error holders(const PieceAt& at, Index element, std::span<const Rank> holder_ranks) {
  return make_error(ErrorKind::holders,
                    fmt::format("the locations {} disagree with the ranks {} that list pieces covering this element",
                                ranks_text(at.piece->locations), ranks_text(holder_ranks)),
                    where_of(at).at(Side::full, element));
}

Error claimed_twice(const PieceAt& at, Index element, const PieceAt& other) {
  return make_error(
      ErrorKind::twice,
      fmt::format("rank {} {} also claims this element as its only holder", other.rank, piece_name(other)),
      where_of(at).at(Side::full, element));
}

Error replicas_differ(const PieceAt& at, Index element, Index shard_address, DType dtype, std::uint64_t unscaled,
                      std::uint64_t held, const PieceAt* earlier) {
  const std::string writer =
      earlier != nullptr ? fmt::format("rank {} {}", earlier->rank, piece_name(*earlier)) : "an earlier piece";
  return make_error(ErrorKind::different_data,
                    fmt::format("this replica holds {} at shard address {} (after unscaling) but {} wrote {} here",
                                format_element(dtype, unscaled), shard_address, writer, format_element(dtype, held)),
                    where_of(at).at(Side::full, element));
}

Error replica_differs_from_full(const PieceAt& at, Index element, Index shard_address, std::string_view compared,
                                DType dtype, std::uint64_t held) {
  return make_error(ErrorKind::different_data,
                    fmt::format("this replica holds {} at shard address {} (after unscaling) but F holds {} here, "
                                "written earlier or, where nothing wrote it, the poison",
                                compared, shard_address, format_element(dtype, held)),
                    where_of(at).at(Side::full, element));
}

Error written_twice(const PieceAt& at, Index element, const PieceAt* earlier) {
  const std::string writer =
      earlier != nullptr ? fmt::format("rank {} {}", earlier->rank, piece_name(*earlier)) : "an earlier piece";
  return make_error(
      ErrorKind::twice,
      fmt::format("{} already wrote this element of F, and only replicas may write an element twice", writer),
      where_of(at).at(Side::full, element));
}

Error scale_needs_power_one(const PieceAt& at, int scale_power) {
  return make_error(ErrorKind::scale,
                    fmt::format("the piece has scale {} but scale_power is {}; a scaled map can only convert a "
                                "parameter (scale_power 1)",
                                at.piece->scale, scale_power),
                    where_of(at));
}

Error scale_on_integer(const PieceAt& at, DType dtype) {
  return make_error(ErrorKind::scale,
                    fmt::format("the piece has scale {} but the dtype {} is not floating point and cannot be scaled",
                                at.piece->scale, dtype_name(dtype)),
                    where_of(at));
}

Error scale_outside_arithmetic(const PieceAt& at, DType dtype) {
  return make_error(ErrorKind::scale,
                    fmt::format("the piece has scale {} which is zero, subnormal or not finite in the {} arithmetic "
                                "that scales {} data",
                                at.piece->scale, dtype == DType::float64 ? "float64" : "float32", dtype_name(dtype)),
                    where_of(at));
}

Error scaled_out_of_range(const PieceAt& at, bool multiply, Index element, Index shard_address, DType dtype,
                          std::uint64_t input, std::uint64_t result) {
  const bool overflow = bits_to_double(dtype, input) != 0.0 && bits_to_double(dtype, result) != 0.0;
  const std::string sentence =
      fmt::format("{} {} ({} address {}) by the scale {} {} to {}, a value that cannot be scaled back",
                  multiply ? "multiplying" : "dividing", format_element(dtype, input), multiply ? "F" : "shard",
                  multiply ? element : shard_address, at.piece->scale, overflow ? "overflows" : "flushes",
                  format_element(dtype, result));
  return make_error(ErrorKind::scale, sentence,
                    multiply ? where_of(at).at(Side::shard, shard_address) : where_of(at).at(Side::full, element));
}

Error missing_shard(Rank rank, std::size_t pieces) {
  return make_error(ErrorKind::shape, fmt::format("no shard was supplied for this rank, which lists {} pieces", pieces),
                    Where::in_rank(rank));
}

Error missing_source_shard(Rank rank, Index numel) {
  return make_error(ErrorKind::shape,
                    fmt::format("no shard was supplied for this source rank, whose shard holds {} elements", numel),
                    Where::in_rank(rank));
}

Error no_shards() { return make_error(ErrorKind::shape, "no shard was supplied, so there is nothing to rebuild from"); }

Error shard_dtype(Rank rank, DType got, DType wanted) {
  return make_error(ErrorKind::shape,
                    fmt::format("the shard supplied for this rank has dtype {} but the conversion is for {}",
                                dtype_name(got), dtype_name(wanted)),
                    Where::in_rank(rank));
}

Error shard_numel(Rank rank, Index got, Index wanted) {
  return make_error(
      ErrorKind::shape,
      fmt::format("the shard supplied for this rank has {} elements but its shard shape holds {}", got, wanted),
      Where::in_rank(rank));
}

Error shard_without_shape(Rank rank) {
  return make_error(ErrorKind::shape, "a shard was supplied for this rank but the map gives it no shard shape",
                    Where::in_rank(rank));
}

Error unlisted_shard(Rank rank) {
  return make_error(ErrorKind::shape, "a shard was supplied for this rank, which the map does not list",
                    Where::in_rank(rank));
}

Error full_numel(Index got, Index wanted) {
  return make_error(ErrorKind::shape,
                    fmt::format("the supplied F has {} elements but the logical shape holds {}", got, wanted));
}

Error no_shard_to_extract(Rank rank) {
  return make_error(ErrorKind::format,
                    "the map does not list this rank with a shard shape, so it has no shard to extract",
                    Where::in_rank(rank));
}

Error reshard_shapes_differ(const Extents& source, const Extents& target) {
  return make_error(ErrorKind::shape,
                    fmt::format("the source map's logical shape {} and the target map's {} differ, so no plan "
                                "can move one parameter between them",
                                shape_text(source), shape_text(target)));
}

Error reshard_scales_differ(const PieceAt& target_at, Index element, double source_scale) {
  return make_error(ErrorKind::scale,
                    fmt::format("the target piece has scale {} but the source holds this element with scale {}; a "
                                "transfer plan copies and may not rescale (rebuild, then extract)",
                                target_at.piece->scale, source_scale),
                    where_of(target_at).at(Side::full, element));
}

Error plan_over_budget(Index max_segments) {
  return make_error(ErrorKind::format,
                    fmt::format("the transfer plan needs more than {} address runs or segments, its budget; no "
                                "partial plan is returned",
                                max_segments));
}

Error replica_holders_differ(Rank rank, Index address, Rank other_rank, Index other_address, DType dtype,
                             std::uint64_t held, std::uint64_t other) {
  return make_error(ErrorKind::different_data,
                    fmt::format("this replica holds {} but rank {} holds {} for the same element at shard address {}",
                                format_element(dtype, held), other_rank, format_element(dtype, other), other_address),
                    Where::in_rank(rank).at(Side::shard, address));
}

Error too_large_to_verify(Index max_runs) {
  return make_error(ErrorKind::format,
                    fmt::format("the map is too large to verify, as it needs more than {} address runs", max_runs));
}

Error too_large_for_reference(Index max_elements) {
  return make_error(ErrorKind::format,
                    fmt::format("the map is too large for the reference model (more than {} elements in F, a "
                                "shard, or all pieces together)",
                                max_elements));
}

namespace {
// State names come from untrusted maps and case files: shown in double quotes, cut short,
// with quotes, backslashes and control characters replaced, so a sentence stays one line
// and its grammar holds whatever the name.
std::string state_text(std::string_view state) {
  constexpr std::size_t kShown = 48;
  std::string out = "\"";
  for (char c : state.substr(0, kShown)) {
    const auto byte = static_cast<unsigned char>(c);
    out += (byte < 0x20 || byte == 0x7f || c == '"' || c == '\\') ? '?' : c;
  }
  if (state.size() > kShown) out += "...";
  return out + "\"";
}
}  // namespace

Error digest_differs(std::uint64_t actual, std::uint64_t expected, const std::string* state, Digested digested) {
  // In a reshard the record is the source map's (the target map's must agree with it).
  const std::string_view recorder = digested == Digested::rebuilt_f ? "the map" : "the source map";
  const std::string against =
      state != nullptr ? fmt::format("{} records 0x{:016x} for state {}", recorder, expected, state_text(*state))
                       : fmt::format("the expected digest is 0x{:016x}", expected);
  std::string_view which = "the rebuilt F";
  std::string_view why = "the shards do not hold the tensor the producer digested, or the map describes another layout";
  switch (digested) {
    case Digested::rebuilt_f: break;
    case Digested::source_shards:
      which = "F as the source shards hold it";
      why = "the shards do not hold the tensor the producer digested, or the source map describes another layout";
      break;
    case Digested::target_shards:
      // The source side matched, so the copies themselves went wrong.
      which = "F as the plan wrote it into the target shards";
      why = "the plan moved elements to the wrong places";
      break;
  }
  return make_error(ErrorKind::digest,
                    fmt::format("{} has content digest 0x{:016x} but {}; {}", which, actual, against, why));
}

Error digest_records_differ(const std::string& state, std::uint64_t source, std::uint64_t target) {
  return make_error(ErrorKind::digest,
                    fmt::format("the source map records content digest 0x{:016x} for state {} but the target map "
                                "records 0x{:016x}; the two maps do not describe one tensor",
                                source, state_text(state), target));
}

Error digest_not_recorded(const std::string& state, const std::vector<std::string>& recorded_states,
                          std::string_view recorder) {
  constexpr std::size_t kListed = 4;
  std::vector<std::string> shown;
  for (const std::string& name : recorded_states) {
    if (shown.size() == kListed) {
      shown.emplace_back("...");
      break;
    }
    shown.push_back(state_text(name));
  }
  return make_error(ErrorKind::digest,
                    fmt::format("{} records no content digest for state {} ({}), so F cannot be verified as "
                                "asked",
                                recorder, state_text(state),
                                shown.empty() ? std::string("it records none")
                                              : fmt::format("it records {}", fmt::join(shown, ", "))));
}

Error foreign_refusal(ErrorKind kind, std::string_view type, std::string_view message) {
  std::string quoted(message);
  std::replace(quoted.begin(), quoted.end(), '"', '\'');
  std::replace(quoted.begin(), quoted.end(), '\n', ' ');
  return make_error(kind, fmt::format("the implementation under test refused with {} \"{}\"",
                                      type.empty() ? std::string_view("an error") : type, quoted));
}

Error allocation(std::string_view what, Index wanted) {
  return make_error(ErrorKind::format,
                    fmt::format("the map asks for {} of {} elements, more than the data supplied can account for; "
                                "refusing to allocate it",
                                what, wanted));
}

Error too_many_pieces() {
  return make_error(ErrorKind::format, "the map has more pieces than a conversion can record");
}

}  // namespace fault

}  // namespace shardcheck
