// Typed errors: one table of kinds (contract 3), one builder, one message
// grammar, and one sentence per fault.
//
// Message grammar. Every error reads
//
//     <kind>: <location>: <sentence>
//     <kind>: <sentence>                  (when there is nothing to locate)
//
// <location> is the parts that are known, always in this order, separated by one space:
//
//     rank R                          the rank whose piece list or shard is concerned
//     piece I (<notation>)            the piece's index in that rank's list as written,
//                                     and the piece in contract notation, e.g.
//                                     "piece 0 (P(4) src(0,(1)) dst(0,(1)) loc{0})"
//     F address A | shard address A   the element of F or the shard address concerned
//
// An error that points into the JSON input (kind `format`: decoding, and the structure
// of condition 1) gives its JSON path as the whole location instead, e.g.
// "$.ranks.1.pieces[0].source"; the rank and piece are still in the Error's fields.
// <sentence> is one sentence that starts in lower case, has no trailing period, and has
// no ": " outside double quotes, so the location is everything before the first ": "
// after the kind (a JSON path may quote a key that holds one). Examples:
//
//     count: rank 1: the pieces hold 6 elements but the shard holds 8
//     twice: rank 0 piece 0 (P(2) src(0,(1)) dst(0,(1)) loc{0}) shard address 0: piece 1
//         (P(2) src(2,(1)) dst(0,(1)) loc{0}) also maps to this shard address   (one line)
//     uncovered: F address 7: no piece covers this element of F
//     format: $.ranks.0.pieces[1].dest: the dest offset -1 is negative
//
// Every fault a check or a conversion can report (strict, legacy or the reference
// model) is worded once, by the functions in namespace `fault` below, so the same
// fault reads the same whichever path refused it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "shardcheck/types.h"

namespace shardcheck {

struct Piece;
enum class DType;

// Stable kinds, one row each in error_kinds.def (name, contract section, meaning);
// their names (kind_name) are spelled in CLI output and stored files, so they never change.
enum class ErrorKind {
#define SHARDCHECK_ERROR_KIND(name, contract, sentence) name,
#include "shardcheck/error_kinds.def"
};

// Every kind, in the table's order.
inline constexpr ErrorKind kAllErrorKinds[] = {
#define SHARDCHECK_ERROR_KIND(name, contract, sentence) ErrorKind::name,
#include "shardcheck/error_kinds.def"
};

// The kind's stable name, its contract section and its one-sentence meaning (the table).
std::string_view kind_name(ErrorKind kind);
std::optional<ErrorKind> parse_kind(std::string_view name);
std::string_view kind_contract(ErrorKind kind);
std::string_view kind_meaning(ErrorKind kind);

// Which buffer an `address` refers to.
enum class Side { none, full, shard };

// Where an error points; every part is optional (see the grammar above).
struct Where {
  std::optional<Rank> rank;
  std::optional<Index> piece;      // index in the rank's list as written
  const Piece* content = nullptr;  // the piece itself, for its notation
  Side side = Side::none;
  std::optional<Index> address;
  std::string path;  // JSON path; when set it is the whole location in the message

  static Where in_rank(Rank rank);
  static Where in_piece(Rank rank, Index written, const Piece& piece);
  static Where in_json(std::string path);
  // The same location narrowed to one address of F (Side::full) or of the shard.
  Where at(Side address_side, Index address_value) const;
};

struct Error {
  ErrorKind kind = ErrorKind::format;
  std::optional<Rank> rank;      // the rank whose piece list is concerned
  std::optional<Index> piece;    // index of the piece in that rank's list, as written
  std::optional<Index> address;  // element of F (Side::full) or shard address (Side::shard)
  Side side = Side::none;
  std::string path;      // JSON path for format errors, e.g. "$.ranks.1.pieces[0].source"
  std::string sentence;  // the fault, in one sentence a user can act on
  std::string message;   // "<location>: <sentence>", or the sentence alone

  // "<kind>: <message>"
  std::string to_string() const;
  friend bool operator==(const Error&, const Error&) = default;
};

// The one builder: every error in shardcheck is made here, so every message follows
// the grammar above.
Error make_error(ErrorKind kind, std::string sentence, const Where& where = {});

// The same error (kind and location) with another sentence, e.g. to say which of two
// maps refused.
Error reworded(const Error& error, std::string sentence);

// A value or a typed error. The core returns these; it never throws for bad input.
template <class T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(state_); }
  const T& value() const& { return std::get<0>(state_); }
  T&& value() && { return std::get<0>(std::move(state_)); }
  const Error& error() const { return std::get<1>(state_); }

 private:
  std::variant<T, Error> state_;
};

// The outcome of a check: ok(), or an error(). It has no conversion to bool on purpose:
// "if (check_map(m))" would read as "if the map checks out" and mean the opposite.
class [[nodiscard]] Status {
 public:
  Status() = default;                                // success
  Status(Error error) : error_(std::move(error)) {}  // NOLINT: implicit, so a check can `return make_error(...)`

  bool ok() const { return !error_.has_value(); }
  const Error& error() const& { return *error_; }
  Error&& error() && { return std::move(*error_); }

 private:
  std::optional<Error> error_;
};

// The structural faults of one piece (contract 3, condition 1), in the order
// the checks look for them.
enum class PieceFault {
  axes,  // shape and strides have different lengths
  negative_extent,
  negative_source_offset,
  negative_dest_offset,
  negative_source_stride,
  negative_dest_stride,
  source_overflow,  // element count or last source address beyond 64 bits
  dest_overflow,    // last dest address beyond 64 bits
  no_locations,
  negative_location,
  unsorted_locations,
  bad_scale,  // zero or not finite (kind scale)
};

// One piece as an error names it: its rank, its index as written, and the piece.
struct PieceAt {
  Rank rank = 0;
  Index written = 0;
  const Piece* piece = nullptr;
};

// Every fault that checks, conversion (strict and legacy) and the reference model
// report, each worded once.
namespace fault {

// Condition 1: structure (located by JSON path).
Error piece(PieceFault which, const PieceAt& at);
Error bad_logical_shape(const Extents& shape);  // a negative extent, or beyond 64 bits
Error negative_rank_id(Rank rank);
Error duplicate_rank(Rank rank);
Error bad_shard_shape(Rank rank, const Extents& shape);  // a negative extent, or beyond 64 bits
Error missing_shard_shape(Rank rank);

// Condition 2: `address` is the last address the view reaches, `numel` the buffer's size.
Error out_of_bounds(const PieceAt& at, Side side, Index address, Index numel);

// Condition 3 (`side`: which view), and torch's refusal of a write through a zero stride.
Error overlaps_itself(const PieceAt& at, Side side);
Error zero_stride_write(const PieceAt& at, Side side, std::size_t axis);

// Condition 4. `pieces_numel` nullopt: the pieces' sizes add up beyond 64 bits.
Error count(Rank rank, std::optional<Index> pieces_numel, Index shard_numel);
// `other`: the next piece mapping to the same address; itself when its dest view
// overlaps itself; nullptr when the caller did not record which piece it was.
Error shard_address_twice(const PieceAt& at, Index address, const PieceAt* other);
Error shard_address_uncovered(Rank rank, Index address);

// Condition 5.
Error element_uncovered(Index element);

// Condition 6.
Error not_own_rank(const PieceAt& at);
Error holders(const PieceAt& at, Index element, std::span<const Rank> holder_ranks);
Error claimed_twice(const PieceAt& at, Index element, const PieceAt& other);

// Condition 7 and the writer record of rebuild.
// `earlier`: the piece that wrote the element first, nullptr when not recorded.
Error replicas_differ(const PieceAt& at, Index element, Index shard_address, DType dtype, std::uint64_t unscaled,
                      std::uint64_t held, const PieceAt* earlier);
Error written_twice(const PieceAt& at, Index element, const PieceAt* earlier);
// The legacy model's replica comparison (contract 4.1): torch.equal between the replica,
// unscaled as DeepSpeed unscales it (`compared`, already spelled), and what F holds at that
// element, which an earlier write left there or, where nothing wrote it, the poison.
Error replica_differs_from_full(const PieceAt& at, Index element, Index shard_address, std::string_view compared,
                                DType dtype, std::uint64_t held);

// Scaling (contract 1.2).
Error scale_needs_power_one(const PieceAt& at, int scale_power);
Error scale_on_integer(const PieceAt& at, DType dtype);
// The scale is zero, subnormal or not finite once rounded to the dtype's arithmetic type.
Error scale_outside_arithmetic(const PieceAt& at, DType dtype);
// Scaling one element overflows to infinity or flushes to zero. Rebuild (`multiply`
// false) names the element of F it was to become, extract the shard address.
Error scaled_out_of_range(const PieceAt& at, bool multiply, Index element, Index shard_address, DType dtype,
                          std::uint64_t input, std::uint64_t result);

// The buffers a conversion is given.
Error missing_shard(Rank rank, std::size_t pieces);
// Resharding: a plan knows each source shard's size, not its pieces.
Error missing_source_shard(Rank rank, Index numel);
Error no_shards();  // a rebuild given no shard at all
Error shard_dtype(Rank rank, DType got, DType wanted);
Error shard_numel(Rank rank, Index got, Index wanted);
Error shard_without_shape(Rank rank);
Error unlisted_shard(Rank rank);
Error full_numel(Index got, Index wanted);
Error no_shard_to_extract(Rank rank);

// Contract 10: F against a content digest. `state`: the map's record for that state was
// compared; nullptr: the value the caller gave. `digested` says which F: as rebuilt, or,
// in a reshard, as the source shards hold it before the copy or the target shards after.
enum class Digested { rebuilt_f, source_shards, target_shards };
Error digest_differs(std::uint64_t actual, std::uint64_t expected, const std::string* state,
                     Digested digested = Digested::rebuilt_f);
// `recorder` names the map ("the map", in a reshard "the source map").
Error digest_not_recorded(const std::string& state, const std::vector<std::string>& recorded_states,
                          std::string_view recorder = "the map");
// A reshard's two maps record different digests for one state: they cannot both describe
// the tensor the shards hold.
Error digest_records_differ(const std::string& state, std::uint64_t source, std::uint64_t target);

// An implementation under test refused in its own words (`type`, `message`), and its
// refusal maps to `kind`; the message is quoted so that it cannot break the grammar.
Error foreign_refusal(ErrorKind kind, std::string_view type, std::string_view message);

// Resharding (contract 11). The two maps describe different logical shapes (kind shape);
// a target piece whose element is held under another scale in the source (kind scale:
// a plan copies, it never rescales); a plan past its budget (kind format); two holders of
// one replicated source element that differ (kind different_data, both shard addresses).
Error reshard_shapes_differ(const Extents& source, const Extents& target);
Error reshard_scales_differ(const PieceAt& target_at, Index element, double source_scale);
Error plan_over_budget(Index max_segments);
Error replica_holders_differ(Rank rank, Index address, Rank other_rank, Index other_address, DType dtype,
                             std::uint64_t held, std::uint64_t other);

// Resource limits on untrusted maps.
Error too_large_to_verify(Index max_runs);
Error too_large_for_reference(Index max_elements);
Error allocation(std::string_view what, Index wanted);
Error too_many_pieces();

}  // namespace fault

}  // namespace shardcheck
