// The corruption catalogue of contract 7: one field of one piece, or one
// structural edit, at a time. Values may be negative or out of range on purpose (the
// checks must refuse them); the generator's own arithmetic never overflows.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/map.h"

namespace shardcheck::gen {

// One element of one replica's copy whose bits the producer's shards get wrong: the
// piece rank.pieces[piece] (as written), its element number `element` in row-major
// order of the piece's shape.
struct ReplicaFlip {
  Rank rank = 0;
  Index piece = 0;
  Index element = 0;
};

struct Corrupted {
  Map map;
  CorruptionRecord record;
  // A shard_data row leaves the map alone and names the copy to damage in the shards
  // the truth map wrote: strict rebuild must refuse different_data.
  std::optional<ReplicaFlip> replica_flip;
  // A map_text row: the map under test is this JSON text (the map encoded, then
  // edited). `map` is what the text means when the edit is neutral (text_neutral), and
  // strict must then read exactly it; otherwise strict must refuse the text (format).
  std::optional<std::string> map_text;
  bool text_neutral = false;
};

// The record kind of an uncorrupted case; not one of corruption_kinds().
inline constexpr std::string_view kNoCorruption = "none";

// Every kind corrupt() can produce, in a stable order (table rows of the campaign).
std::span<const std::string_view> corruption_kinds();

// What a kind edits: one piece (a field of it, or the whole piece), one rank entry's
// shard shape, the list of ranks, or the content digests the producer recorded beside
// the map (contract 10). The record names the piece for `piece`, the rank for
// `shard_shape`, the rank added or dropped for `ranks`, and no rank for
// `content_digests` (its field is "content_digests.<state>").
enum class CorruptionTarget { piece, shard_shape, ranks, content_digests, shard_data, map_text };

struct CorruptionKind {
  std::string_view name;
  CorruptionTarget target;
};

// The catalogue's rows, in corruption_kinds() order.
std::span<const CorruptionKind> corruption_catalogue();

// Applies one corruption to a copy of `map`, chosen by `choices`. Works on any map,
// valid or not. A kind that cannot apply (no piece, no axis, one rank) falls back
// deterministically to the next applicable kind in corruption_kinds() order; adding
// an empty rank always applies, so this never fails. The record names the rank id and
// the piece index as written after the edit (for delete_piece: where it was). The
// kinds that damage the recorded content digests are drawn only for a map that records
// one.
Corrupted corrupt(const Map& map, ChoiceSource& choices);

// Which rows of the catalogue can edit `map` (corruption_kinds() order): a row that
// cannot falls back to the next one that can, in that order, cyclically. With the rows
// corrupt() draws uniformly (all, or all but the content_digests rows for a map without
// a recorded digest), this says how often each kind comes up for the map.
std::vector<bool> applicable_corruptions(const Map& map);

// The same with the kind fixed by name, falling back the same way when it cannot apply
// (an unknown name starts the lap at the first kind). For tests and targeted campaigns.
Corrupted corrupt_with(const Map& map, std::string_view kind, ChoiceSource& choices);

}  // namespace shardcheck::gen
