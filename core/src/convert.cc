// Long file: rebuild, extract and the guards they share (scales, tiling, scratch, the
// copy paths) are one anonymous namespace, so that no guard is reachable from outside the
// two operations that must run it; a split would export them through a header.
#include "shardcheck/convert.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <stdexcept>

#include <fmt/format.h>

#include "element_types.h"
#include "proven.h"
#include "shardcheck/digest.h"
#include "two_view_walk.h"

namespace shardcheck {

namespace {

// One piece in the strict visiting order (ranks by id, pieces by content), so that
// neither a verdict nor an output depends on the order the map was written in.
struct Visit {
  Rank rank = 0;
  Index written = 0;  // index in the rank's list as written: what errors report
  const Piece* piece = nullptr;
  const Buffer* shard = nullptr;  // rebuild: the rank's supplied shard
  Index numel = 0;
  Index shard_numel = 0;
  Index read_base = 0;  // rebuild: where the rank's shard starts in the read record
  // The piece's scale and whether other ranks hold it too, copied when the visit is
  // made: a wide conversion's passes over thousands of visits then never reach back into
  // the pieces, whose memory the proof has long left.
  double scale = 1.0;
  bool replica = false;
};

struct ShardSpan {
  Rank rank;
  Index base;
  Index numel;
};

// Reused between calls: converting a small map should not allocate records afresh.
struct Scratch {
  std::vector<Visit> visits;
  std::vector<const RankEntry*> ranks;
  std::vector<std::uint32_t> writer;  // per element of F: 0 nobody, else visit + 1
  std::vector<std::uint8_t> seen;     // per shard address: read (rebuild) / written (extract)
  std::vector<ShardSpan> spans;       // rebuild: each supplied shard's part of `seen`
  std::vector<BlockCopy> blocks;
  std::vector<BlockCopy> replica_blocks;
  std::vector<std::size_t> replica_visits;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

Backend& backend_of(const ConvertOptions& options) {
  static const std::unique_ptr<Backend> cpu = make_cpu_backend();
  return options.backend != nullptr ? *options.backend : *cpu;
}

bool is_replica(const Piece& piece) { return piece.locations.size() > 1; }

bool visit_less(const Visit& a, const Visit& b) {
  if (a.rank != b.rank) return a.rank < b.rank;
  if (content_less(*a.piece, *b.piece)) return true;
  if (content_less(*b.piece, *a.piece)) return false;
  return a.written < b.written;
}

PieceAt at(const Visit& v) { return PieceAt{v.rank, v.written, v.piece}; }

using detail::walk;

// The map checks of a conversion, on its threads unless they name their own.
CheckOptions checks_of(const ConvertOptions& options) {
  CheckOptions checks = options.checks;
  if (checks.threads == 0) checks.threads = options.threads;
  return checks;
}

// Memory safety behind check_map: only a planted bug can make these fire, and then
// data must still never be addressed outside a buffer.
Status guard_piece(const Visit& v, Index numel_f, Index shard_numel, Index& numel) {
  const Piece& p = *v.piece;
  const std::size_t n = p.shape.size();
  auto negative = [](std::span<const Index> xs) {
    return std::any_of(xs.begin(), xs.end(), [](Index x) { return x < 0; });
  };
  if (p.source.strides.size() != n || p.dest.strides.size() != n) return fault::piece(PieceFault::axes, at(v));
  if (negative(p.shape)) return fault::piece(PieceFault::negative_extent, at(v));
  if (p.source.offset < 0) return fault::piece(PieceFault::negative_source_offset, at(v));
  if (p.dest.offset < 0) return fault::piece(PieceFault::negative_dest_offset, at(v));
  if (negative(p.source.strides)) return fault::piece(PieceFault::negative_source_stride, at(v));
  if (negative(p.dest.strides)) return fault::piece(PieceFault::negative_dest_stride, at(v));
  auto src = span_facts(p.shape, p.source);
  auto dst = span_facts(p.shape, p.dest);
  if (!src || !dst) return fault::piece(!src ? PieceFault::source_overflow : PieceFault::dest_overflow, at(v));
  numel = src->numel;
  if (src->empty) return {};
  if (src->max_address >= numel_f) return fault::out_of_bounds(at(v), Side::full, src->max_address, numel_f);
  if (dst->max_address >= shard_numel) {
    return fault::out_of_bounds(at(v), Side::shard, dst->max_address, shard_numel);
  }
  return {};
}

// One rank's pieces must hold as many elements as its shard, which also bounds the work
// of walking them: pieces are added one by one, then the rank is closed.
struct RankCount {
  Rank rank = 0;
  Index shard_numel = 0;
  Index total = 0;
  // False when the total overflows: refuse with overflowed(). A bool, because the
  // proof's guards add every piece of a large map.
  bool add(Index numel) { return !__builtin_add_overflow(total, numel, &total); }
  Status overflowed() const { return fault::count(rank, std::nullopt, shard_numel); }
  Status close() const { return total == shard_numel ? Status{} : fault::count(rank, total, shard_numel); }
};

// Guards every visit and counts each rank's pieces (RankCount); `scaled` tells whether
// any piece has a scale. Visits must be grouped by rank.
Status guard_visits(std::vector<Visit>& visits, Index numel_f, bool& scaled) {
  std::size_t begin = 0;
  while (begin < visits.size()) {
    std::size_t end = begin;
    RankCount count{visits[begin].rank, visits[begin].shard_numel};
    for (; end < visits.size() && visits[end].rank == count.rank; ++end) {
      Visit& v = visits[end];
      if (Status e = guard_piece(v, numel_f, v.shard_numel, v.numel); !e.ok()) return e;
      scaled |= v.scale != 1.0;
      if (!count.add(v.numel)) return count.overflowed();
    }
    if (Status e = count.close(); !e.ok()) return e;
    begin = end;
  }
  return {};
}

// Integers cannot be scaled exactly, a scaled map says nothing about how to rescale an
// optimizer state, and the arithmetic type must hold the scale as a normal number
// (contract 1.2).
Status check_scales(std::span<const Visit> visits, DType dtype, int scale_power) {
  for (const Visit& v : visits) {
    if (v.scale == 1.0) continue;
    if (scale_power != 1) return fault::scale_needs_power_one(at(v), scale_power);
    if (!is_floating(dtype)) return fault::scale_on_integer(at(v), dtype);
    if (!scale_fits_arithmetic(dtype, v.scale)) return fault::scale_outside_arithmetic(at(v), dtype);
  }
  return {};
}

// A proven visit's block (wide path): the visit already knows its count and scale, and
// strict conversion scales with power 1 in contract arithmetic (check_scales).
BlockCopy visit_block(const Visit& v, const std::byte* from, const StridedView& from_view, std::byte* to,
                      const StridedView& to_view, bool multiply) {
  BlockCopy b;
  b.shape = &v.piece->shape;
  b.from = from;
  b.from_view = &from_view;
  b.to = to;
  b.to_view = &to_view;
  b.scale = v.scale;
  b.multiply = multiply;
  b.numel = v.numel;
  return b;
}

// Contract 1.2: no element may overflow or flush when it is scaled, since the value could
// not come back and no later error would say so. Judged before any data moves, after
// check_scales, in the strict visiting order and within a piece at the lowest address
// of the result (F for rebuild, the shard for extract), so that the error depends on
// neither the order the map was written in nor a copy's schedule. The backend looks
// (Backend::first_scale_fault), where the data is. `full`: the F an extract reads;
// nullptr for a rebuild, which reads each visit's shard.
Status check_scaled_elements(std::span<const Visit> visits, const Buffer* full, DType dtype, Backend& backend,
                             const Threading& threading) {
  if (!is_floating(dtype)) return {};
  const bool multiply = full != nullptr;
  std::vector<BlockCopy> blocks;
  std::vector<const Visit*> scaled;
  for (const Visit& v : visits) {
    if (v.scale == 1.0 || v.numel == 0) continue;
    blocks.push_back(multiply ? visit_block(v, full->data(), v.piece->source, nullptr, v.piece->dest, true)
                              : visit_block(v, v.shard->data(), v.piece->dest, nullptr, v.piece->source, false));
    scaled.push_back(&v);
  }
  if (blocks.empty()) return {};
  const std::optional<ScaleFaultAt> fault = backend.first_scale_fault(dtype, blocks, threading);
  if (!fault) return {};
  const Visit& v = *scaled[fault->block];
  const std::uint64_t input = backend.element_bits(multiply ? *full : *v.shard, fault->from);
  const std::uint64_t result = detail::with_float_format(dtype, [&]<class Format>() -> std::uint64_t {
    typename Format::Math factor{};
    scaling::arithmetic_factor(v.scale, factor);
    return scaling::scale_element<Format>(static_cast<typename Format::Bits>(input), factor, multiply).bits;
  });
  const Index element = multiply ? fault->from : fault->to;
  const Index shard_address = multiply ? fault->to : fault->from;
  return fault::scaled_out_of_range(at(v), multiply, element, shard_address, dtype, input, result);
}

// Puts the visits (grouped by rank) in the strict visiting order, guards them and
// refuses scales the conversion cannot apply (the recorded path).
Status order_and_guard(std::vector<Visit>& visits, Index numel_f, DType dtype, int scale_power) {
  bool scaled = false;
  std::sort(visits.begin(), visits.end(), visit_less);
  if (Status e = guard_visits(visits, numel_f, scaled); !e.ok()) return e;
  return scaled ? check_scales(visits, dtype, scale_power) : Status{};
}

// Every scaled piece of the map as a visit, in the strict visiting order; with `shards`,
// only the ranks that have one, each visit reading it. Contract 1.2's scale rules judge
// the whole map (section 4: the map is checked whole), whichever rank is converted.
std::vector<Visit> scaled_visits(const Map& map, const ShardSet* shards) {
  std::vector<Visit> visits;
  for (const RankEntry& entry : map.ranks) {
    const Buffer* shard = nullptr;
    if (shards != nullptr) {
      auto it = shards->find(entry.rank);
      if (it == shards->end()) continue;
      shard = &it->second;
    }
    for (std::size_t i = 0; i < entry.pieces.size(); ++i) {
      const Piece& piece = entry.pieces[i];
      if (piece.scale == 1.0) continue;
      visits.push_back(Visit{entry.rank, static_cast<Index>(i), &piece, shard, checked_numel(piece.shape).value_or(0),
                             shard != nullptr ? shard->numel() : 0, 0, piece.scale, is_replica(piece)});
    }
  }
  std::sort(visits.begin(), visits.end(), visit_less);
  return visits;
}

// What an extract owes the scales of the whole map (power, dtype, arithmetic range),
// decided once per call whatever the ranks extracted.
Status extract_scale_refusal(const Map& map, DType dtype, int scale_power) {
  return check_scales(scaled_visits(map, nullptr), dtype, scale_power);
}

std::optional<Index> logical_numel(const Map& map) {
  for (Index e : map.logical_shape) {
    if (e < 0) return std::nullopt;
  }
  return checked_numel(map.logical_shape);
}

std::optional<Index> shard_numel_of(const RankEntry& entry) {
  if (!entry.shard_shape) return std::nullopt;
  for (Index e : *entry.shard_shape) {
    if (e < 0) return std::nullopt;
  }
  return checked_numel(*entry.shard_shape);
}

BlockCopy rebuild_copy(const Visit& v, Buffer& full, int scale_power) {
  return block_of(*v.piece, Direction::rebuild, *v.shard, full, scale_power);
}

// One element of a block, as a block of its own; `views` holds its two views.
struct ElementViews {
  StridedView from;
  StridedView to;
};

BlockCopy single_element(const BlockCopy& block, ElementViews& views, Index from_address, Index to_address) {
  static const Extents kScalar{};
  BlockCopy one = block;
  views = ElementViews{StridedView{from_address, {}}, StridedView{to_address, {}}};
  one.shape = &kScalar;
  one.from_view = &views.from;
  one.to_view = &views.to;
  one.numel = 1;
  return one;
}

Error replica_mismatch(const Visit& first, const Visit& v, const Buffer& full, DType dtype, Index element,
                       Index shard_address, const ConvertOptions& options) {
  Backend& backend = backend_of(options);
  const std::uint64_t held = backend.element_bits(full, element);
  const std::uint64_t theirs =
      apply_scale(dtype, backend.element_bits(*v.shard, shard_address), v.scale, options.scale_power, false);
  const PieceAt earlier = at(first);
  return fault::replicas_differ(at(v), element, shard_address, dtype, theirs, held, &earlier);
}

// Checks the supplied shards against the map: dtype, element count, none missing for a
// rank with pieces, none for a rank the map does not list.
Status check_shards(const std::vector<const RankEntry*>& ranks, const ShardSet& shards, DType dtype,
                    const PlantedBugs& bugs) {
  for (const RankEntry* entry : ranks) {
    auto it = shards.find(entry->rank);
    if (it == shards.end()) {
      if (entry->pieces.empty()) continue;
      return fault::missing_shard(entry->rank, entry->pieces.size());
    }
    const Buffer& shard = it->second;
    auto expected = shard_numel_of(*entry);
    const bool same_type =
        bugs.shard_dtype_by_width ? element_size(shard.dtype()) == element_size(dtype) : shard.dtype() == dtype;
    if (!same_type) return fault::shard_dtype(entry->rank, shard.dtype(), dtype);
    // A rank with no pieces may omit its shard shape: its shard is empty (contract 2, 9).
    if (!expected && entry->pieces.empty() && shard.numel() == 0) continue;
    if (!expected) return fault::shard_without_shape(entry->rank);
    if (shard.numel() != *expected) return fault::shard_numel(entry->rank, shard.numel(), *expected);
  }
  for (const auto& [rank, shard] : shards) {
    if (std::none_of(ranks.begin(), ranks.end(), [&, r = rank](const RankEntry* e) { return e->rank == r; })) {
      return fault::unlisted_shard(rank);
    }
  }
  return {};
}

void sorted_ranks(const Map& map, std::vector<const RankEntry*>& out) {
  out.clear();
  for (const auto& entry : map.ranks) out.push_back(&entry);
  std::sort(out.begin(), out.end(), [](const RankEntry* a, const RankEntry* b) { return a->rank < b->rank; });
}

// Moves one piece into F under the writer record. `fresh` counts the elements no
// earlier piece wrote; they were claimed for this visit during the record pass.
Status move_piece(Scratch& s, std::size_t vi, Index fresh, Buffer& full, DType dtype, const ConvertOptions& options) {
  const Visit& v = s.visits[vi];
  Backend& backend = backend_of(options);
  const BlockCopy block = rebuild_copy(v, full, options.scale_power);
  if (fresh == v.numel) {
    backend.copy_block(dtype, block);
    return {};
  }
  const bool compare = !options.checks.bugs.skip_replica_compare;
  if (fresh == 0) {
    if (!compare) return {};
    auto k = backend.compare_block(dtype, block);
    if (!k) return {};
    const Index element = address_at(v.piece->shape, v.piece->source, *k);
    const Index shard_address = address_at(v.piece->shape, v.piece->dest, *k);
    const Visit& first = s.visits[s.writer[element] - 1];
    return replica_mismatch(first, v, full, dtype, element, shard_address, options);
  }
  // Replicas cut at different boundaries: part of this piece is new, part is a copy
  // of what another piece wrote. Rare, so element by element.
  const auto mine = static_cast<std::uint32_t>(vi + 1);
  Status result;
  walk(v.piece->shape, v.piece->source, v.piece->dest, [&](Index, Index element, Index shard_address) {
    ElementViews views;
    const BlockCopy one = single_element(block, views, shard_address, element);
    if (s.writer[element] == mine) {
      backend.copy_block(dtype, one);
      return false;
    }
    if (!compare || !backend.compare_block(dtype, one)) return false;
    result = replica_mismatch(s.visits[s.writer[element] - 1], v, full, dtype, element, shard_address, options);
    return true;
  });
  return result;
}

// The writer and read records for one piece: claims unwritten elements, and refuses
// a shard address read twice or an element written twice by anything but replicas.
Status record_piece(Scratch& s, std::size_t vi, Index& fresh) {
  const Visit& v = s.visits[vi];
  const auto mine = static_cast<std::uint32_t>(vi + 1);
  Status result;
  fresh = 0;
  walk(v.piece->shape, v.piece->source, v.piece->dest, [&](Index, Index element, Index shard_address) {
    auto& read = s.seen[static_cast<std::size_t>(v.read_base + shard_address)];
    if (read != 0) {
      result = fault::shard_address_twice(at(v), shard_address, nullptr);
      return true;
    }
    read = 1;
    std::uint32_t& writer = s.writer[static_cast<std::size_t>(element)];
    if (writer == 0) {
      writer = mine;
      ++fresh;
      return false;
    }
    const Visit& prior = s.visits[writer - 1];
    if (writer == mine || !prior.replica || !v.replica) {
      const PieceAt earlier = at(prior);
      result = fault::written_twice(at(v), element, &earlier);
      return true;
    }
    return false;
  });
  return result;
}

Status find_unwritten(const Scratch& s, Index numel_f) {
  // Shard addresses first: per-rank tiling (condition 4) comes before coverage (5).
  for (const ShardSpan& span : s.spans) {
    for (Index a = 0; a < span.numel; ++a) {
      if (s.seen[static_cast<std::size_t>(span.base + a)] == 0) return fault::shard_address_uncovered(span.rank, a);
    }
  }
  for (Index element = 0; element < numel_f; ++element) {
    if (s.writer[static_cast<std::size_t>(element)] == 0) return fault::element_uncovered(element);
  }
  return {};
}

// Once check_map has proven conditions 1-6 with every check in place, the records of
// strict rebuild cannot fire: each shard address is read once (condition 4), each
// element of F is written (5) by one single holder or by replicas only (6). What is left
// is moving data and condition 7. A planted bug that disables a check, or another
// backend, keeps the recorded path.
bool wide_allowed(const ConvertOptions& options) {
  if (!options.wide_copies) return false;
  PlantedBugs disabling = options.checks.bugs;
  disabling.skip_digest_compare = false;     // judged after the copy either way
  disabling.box_skips_holder_count = false;  // lives in check_map; conversion trusts it
  if (!(disabling == PlantedBugs{})) return false;
  return backend_of(options).runs_batches();
}

// What check_map leaves a conversion. On the wide path (`wide`): the visits, from the
// proof, in the strict visiting order already with their element counts (and, rebuilding,
// the rank's shard from `shards`; with `only`, that rank's visits alone); `scaled`,
// whether any has a scale; `guard`, the first visit guard_visits would refuse, judged on
// the proof's own facts (bounds, each rank's count), so that a bug in check_map still
// cannot address outside a buffer. Otherwise only check_map's verdict.
struct Checked {
  bool wide = false;
  bool scaled = false;
  Status guard;
};

Status check_for_conversion(const Map& map, const ConvertOptions& options, const ShardSet* shards,
                            std::optional<Rank> only, std::vector<Visit>& visits, Checked& checked) {
  checked.wide = wide_allowed(options);
  if (!checked.wide) return check_map(map, checks_of(options));
  visits.clear();
  const Index numel_f = logical_numel(map).value_or(0);  // read only for a proven map
  std::optional<RankCount> count;
  const Buffer* shard = nullptr;
  Status& guard = checked.guard;
  auto close_rank = [&] {
    if (count && guard.ok()) guard = count->close();
  };
  auto each = [&](const detail::ProvenPiece& p) {
    if (only && p.rank != *only) return;
    if (!count || p.rank != count->rank) {
      close_rank();
      count = RankCount{p.rank, p.shard_numel};
      shard = nullptr;
      if (shards != nullptr) {
        auto it = shards->find(p.rank);
        if (it != shards->end()) shard = &it->second;
      }
    }
    visits.push_back(Visit{p.rank, p.written, p.piece, shard, p.numel, p.shard_numel, 0, p.scale, p.replica});
    checked.scaled |= p.scale != 1.0;
    if (!guard.ok() || p.numel == 0) return;
    if (p.source_max >= numel_f) {
      guard = fault::out_of_bounds(at(visits.back()), Side::full, p.source_max, numel_f);
    } else if (p.dest_max >= p.shard_numel) {
      guard = fault::out_of_bounds(at(visits.back()), Side::shard, p.dest_max, p.shard_numel);
    } else if (!count->add(p.numel)) {
      guard = count->overflowed();
    }
  };
  // By reference: a std::function holding the closure itself would allocate it.
  Status proven = detail::check_map_proving(map, checks_of(options), std::ref(each));
  if (proven.ok()) close_rank();
  return proven;
}

Threading threading_of(const ConvertOptions& options) {
  return Threading{options.threads, options.parallel_min_bytes, options.tile};
}

bool covers(const Piece& piece, Index element) {
  return walk(piece.shape, piece.source, piece.source, [&](Index, Index address, Index) { return address == element; });
}

// Rebuild of a proven map: single holders are copied in any order (their elements are
// disjoint), replica pieces last to first so that every shared element holds its first
// writer's value (the strict visiting order), then every replica piece is compared with
// F. The first mismatch in visiting order, at its lowest row-major index, is exactly the
// error the recorded path reports.
bool digest_asked(const ConvertOptions& options) {
  return (options.expected_digest || options.digest_state) && !options.checks.bugs.skip_digest_compare;
}

// `fused_digest` gets digest(F) when it could be summed during the copy: no replicas
// (each element written once) and contiguous rows of F.
Status wide_rebuild(Scratch& s, Buffer& full, DType dtype, const ConvertOptions& options,
                    std::optional<std::uint64_t>& fused_digest) {
  const Threading threading = threading_of(options);
  Backend& backend = backend_of(options);
  s.blocks.clear();
  s.replica_blocks.clear();
  s.replica_visits.clear();
  for (std::size_t vi = 0; vi < s.visits.size(); ++vi) {
    const Visit& v = s.visits[vi];
    if (v.numel == 0) continue;
    const BlockCopy block = visit_block(v, v.shard->data(), v.piece->dest, full.data(), v.piece->source, false);
    if (v.replica) {
      s.replica_blocks.push_back(block);
      s.replica_visits.push_back(vi);
    } else {
      s.blocks.push_back(block);
    }
  }
  if (s.replica_blocks.empty() && digest_asked(options)) {
    std::uint64_t sum = 0;
    if (backend.copy_blocks(dtype, s.blocks, threading, &sum)) {
      fused_digest = sum;
      return {};
    }
  }
  backend.copy_blocks(dtype, s.blocks, threading);
  if (s.replica_blocks.empty()) return {};
  backend.copy_blocks_first_wins(dtype, s.replica_blocks, threading);
  auto mismatch = backend.compare_blocks(dtype, s.replica_blocks, threading);
  if (!mismatch) return {};
  const Visit& v = s.visits[s.replica_visits[mismatch->block]];
  const Index element = address_at(v.piece->shape, v.piece->source, mismatch->k);
  const Index shard_address = address_at(v.piece->shape, v.piece->dest, mismatch->k);
  // The element's first writer; a mismatch means it is an earlier replica piece.
  const Visit* first = &v;
  for (std::size_t vi : s.replica_visits) {
    if (covers(*s.visits[vi].piece, element)) {
      first = &s.visits[vi];
      break;
    }
  }
  return replica_mismatch(*first, v, full, dtype, element, shard_address, options);
}

Result<Buffer> strict_rebuild(const Map& map, const ShardSet& shards, DType dtype, const ConvertOptions& options,
                              Memory where, std::optional<std::uint64_t>& fused_digest) {
  Scratch& s = scratch();
  Checked checked;
  if (Status e = check_for_conversion(map, options, &shards, std::nullopt, s.visits, checked); !e.ok()) {
    return e.error();
  }
  const bool wide = checked.wide;
  auto numel_f = logical_numel(map);
  if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  sorted_ranks(map, s.ranks);
  if (Status e = check_shards(s.ranks, shards, dtype, options.checks.bugs); !e.ok()) return e.error();

  Index read_total = 0;  // real buffers: their total cannot overflow
  if (wide) {
    for (const auto& [rank, shard] : shards) read_total += shard.numel();
    if (!checked.guard.ok()) return checked.guard.error();
    if (checked.scaled) {
      if (Status e = check_scales(s.visits, dtype, options.scale_power); !e.ok()) return e.error();
    }
  } else {
    s.visits.clear();
    s.spans.clear();
    for (const RankEntry* entry : s.ranks) {
      auto it = shards.find(entry->rank);
      if (it == shards.end()) continue;  // check_shards allowed it: the rank has no pieces
      const Index shard_numel = it->second.numel();
      for (std::size_t i = 0; i < entry->pieces.size(); ++i) {
        const Piece& piece = entry->pieces[i];
        s.visits.push_back(Visit{entry->rank, static_cast<Index>(i), &piece, &it->second, 0, shard_numel, read_total,
                                 piece.scale, is_replica(piece)});
      }
      s.spans.push_back(ShardSpan{entry->rank, read_total, shard_numel});
      read_total += shard_numel;
    }
    if (Status e = order_and_guard(s.visits, *numel_f, dtype, options.scale_power); !e.ok()) return e.error();
  }
  if (Status e = allocation_guard(*numel_f, read_total, options.checks.limits, "F"); !e.ok()) return e.error();
  if (s.visits.size() >= std::numeric_limits<std::uint32_t>::max()) return fault::too_many_pieces();
  Backend& backend = backend_of(options);
  if (Status e = check_scaled_elements(s.visits, nullptr, dtype, backend, threading_of(options)); !e.ok()) {
    return e.error();
  }

  if (wide) {
    Buffer full = backend.allocate(dtype, *numel_f, where);
    if (Status e = wide_rebuild(s, full, dtype, options, fused_digest); !e.ok()) return e.error();
    return full;
  }
  Buffer full = backend.allocate(dtype, *numel_f, where, /*zeroed=*/true);
  if (options.checks.bugs.skip_writer_record) {
    for (const Visit& v : s.visits) backend.copy_block(dtype, rebuild_copy(v, full, options.scale_power));
    return full;
  }
  s.writer.assign(static_cast<std::size_t>(*numel_f), 0);
  s.seen.assign(static_cast<std::size_t>(read_total), 0);
  for (std::size_t vi = 0; vi < s.visits.size(); ++vi) {
    if (s.visits[vi].numel == 0) continue;
    Index fresh = 0;
    if (Status e = record_piece(s, vi, fresh); !e.ok()) return e.error();
    if (Status e = move_piece(s, vi, fresh, full, dtype, options); !e.ok()) return e.error();
  }
  if (Status e = find_unwritten(s, *numel_f); !e.ok()) return e.error();
  return full;
}

// One rank's part of a wide extract: its visits from the proof (check_for_conversion),
// and what the proof's guards and scales said about the whole map.
struct ProvenRank {
  std::span<const Visit> visits;
  const Checked* checked = nullptr;
};

// Extract after check_map: fills every address of `rank`'s shard exactly once.
// `map_scales`: extract_scale_refusal of the map, decided once per call. With
// `proven`, the wide path; with `deferred` as well, it only plans its copies there:
// extract_all moves every shard in one parallel pass.
Result<Buffer> strict_extract_checked(const Map& map, const Buffer& full, Rank rank, Index numel_f,
                                      const ConvertOptions& options, const Status& map_scales,
                                      const ProvenRank* proven, std::vector<BlockCopy>* deferred = nullptr) {
  const RankEntry* entry = map.find_rank(rank);
  if (entry == nullptr || (!entry->shard_shape && !entry->pieces.empty())) return fault::no_shard_to_extract(rank);
  if (full.numel() != numel_f) return fault::full_numel(full.numel(), numel_f);
  // A rank with no pieces may omit its shard shape: its shard is empty (contract 2, 9).
  Backend& backend = backend_of(options);
  if (!entry->shard_shape) return backend.allocate(full.dtype(), 0, full.memory());
  auto shard_numel = shard_numel_of(*entry);
  if (!shard_numel) return fault::bad_shard_shape(rank, *entry->shard_shape);
  const DType dtype = full.dtype();
  Scratch& s = scratch();
  const std::size_t piece_count = proven != nullptr ? proven->visits.size() : entry->pieces.size();
  if (piece_count == 0 && *shard_numel != 0) return fault::shard_address_uncovered(rank, 0);
  if (proven != nullptr) {
    if (!proven->checked->guard.ok()) return proven->checked->guard.error();
  } else {
    s.visits.clear();
    for (std::size_t i = 0; i < entry->pieces.size(); ++i) {
      const Piece& piece = entry->pieces[i];
      s.visits.push_back(
          Visit{rank, static_cast<Index>(i), &piece, nullptr, 0, *shard_numel, 0, piece.scale, is_replica(piece)});
    }
    std::sort(s.visits.begin(), s.visits.end(), visit_less);
    bool scaled = false;
    if (Status e = guard_visits(s.visits, numel_f, scaled); !e.ok()) return e.error();
  }
  if (!map_scales.ok()) return map_scales.error();
  const Index backed =
      checked_mul(numel_f, static_cast<Index>(piece_count)).value_or(std::numeric_limits<Index>::max());
  if (Status e = allocation_guard(*shard_numel, backed, options.checks.limits, "a shard"); !e.ok()) return e.error();
  const std::span<const Visit> visits = proven != nullptr ? proven->visits : std::span<const Visit>(s.visits);
  if (Status e = check_scaled_elements(visits, &full, dtype, backend, threading_of(options)); !e.ok()) {
    return e.error();
  }

  if (proven != nullptr) {
    // Condition 4, proven by check_map: the pieces write every shard address once.
    Buffer shard = backend.allocate(dtype, *shard_numel, full.memory());
    std::vector<BlockCopy>& blocks = deferred != nullptr ? *deferred : s.blocks;
    if (deferred == nullptr) s.blocks.clear();
    for (const Visit& v : proven->visits) {
      if (v.numel == 0) continue;
      blocks.push_back(visit_block(v, full.data(), v.piece->source, shard.data(), v.piece->dest, true));
    }
    if (deferred == nullptr) backend.copy_blocks(dtype, s.blocks, threading_of(options));
    return shard;
  }
  Buffer shard = backend.allocate(dtype, *shard_numel, full.memory(), /*zeroed=*/true);
  s.seen.assign(static_cast<std::size_t>(*shard_numel), 0);
  for (const Visit& v : s.visits) {
    if (v.numel == 0) continue;
    Status twice;
    walk(v.piece->shape, v.piece->source, v.piece->dest, [&](Index, Index, Index address) {
      auto& written = s.seen[static_cast<std::size_t>(address)];
      if (written == 0) {
        written = 1;
        return false;
      }
      twice = fault::shard_address_twice(at(v), address, nullptr);
      return true;
    });
    if (!twice.ok()) return twice.error();
    backend.copy_block(dtype, block_of(*v.piece, Direction::extract, full, shard, options.scale_power));
  }
  auto hole = std::find(s.seen.begin(), s.seen.end(), std::uint8_t{0});
  if (hole != s.seen.end()) return fault::shard_address_uncovered(rank, hole - s.seen.begin());
  return shard;
}

// Contract 10: the last check of a rebuild, on F as rebuilt. `fused` is digest(F)
// when the wide copy summed it while writing; otherwise a pass over F (threads split it).
Status check_digest(const Map& map, const Buffer& full, const ConvertOptions& options,
                    std::optional<std::uint64_t> fused) {
  if (!options.expected_digest && !options.digest_state) return {};
  if (options.checks.bugs.skip_digest_compare) return {};
  std::optional<std::uint64_t> recorded;
  if (options.digest_state) {
    auto it = map.content_digests.find(*options.digest_state);
    if (it == map.content_digests.end()) {
      std::vector<std::string> states;
      for (const auto& [state, value] : map.content_digests) states.push_back(state);
      return fault::digest_not_recorded(*options.digest_state, states);
    }
    recorded = it->second;
  }
  const std::uint64_t actual = fused ? *fused : backend_of(options).digest(full, threading_of(options));
  if (recorded && *recorded != actual) return fault::digest_differs(actual, *recorded, &*options.digest_state);
  if (options.expected_digest && *options.expected_digest != actual) {
    return fault::digest_differs(actual, *options.expected_digest, nullptr);
  }
  return {};
}

// Conversion runs where its inputs are, on a backend that reaches that memory, and leaves
// its result there; the legacy model is host code. A caller's mistake, not the map's:
// std::invalid_argument.
void expect_reached(const Buffer& buffer, std::string_view what, const ConvertOptions& options) {
  if (buffer.memory() != Memory::host && options.policy == Policy::legacy) {
    throw std::invalid_argument(fmt::format("{} is in {} memory, and the legacy model converts host memory only", what,
                                            memory_name(buffer.memory())));
  }
  expect_reaches(backend_of(options), buffer, what);
}

Memory memory_of(const ShardSet& shards, const ConvertOptions& options) {
  std::optional<std::pair<Rank, Memory>> first;
  for (const auto& [rank, shard] : shards) {
    expect_reached(shard, fmt::format("rank {}'s shard", rank), options);
    if (!first) {
      first = {rank, shard.memory()};
    } else if (shard.memory() != first->second) {
      throw std::invalid_argument(
          fmt::format("rank {}'s shard is in {} memory and rank {}'s in {}: a rebuild reads "
                      "shards in one memory",
                      first->first, memory_name(first->second), rank, memory_name(shard.memory())));
    }
  }
  return first ? first->second : Memory::host;
}

}  // namespace

Status rebuild_scale_refusal(const Map& map, const ShardSet& shards, DType dtype, int scale_power) {
  const std::vector<Visit> visits = scaled_visits(map, &shards);
  if (visits.empty()) return {};
  if (Status e = check_scales(visits, dtype, scale_power); !e.ok()) return e;
  return check_scaled_elements(visits, nullptr, dtype, backend_of(ConvertOptions{}), Threading{});
}

Status allocation_guard(Index wanted, Index backed, const CheckLimits& limits, std::string_view what) {
  if (wanted <= std::max(backed, limits.max_walked_addresses)) return {};
  return fault::allocation(what, wanted);
}

std::string_view policy_name(Policy policy) { return policy == Policy::legacy ? "legacy" : "strict"; }

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "strict") return Policy::strict;
  if (name == "legacy") return Policy::legacy;
  return std::nullopt;
}

ShardSet copy_shards_to(Backend& backend, const ShardSet& shards, Memory memory) {
  ShardSet out;
  for (const auto& [rank, shard] : shards) out.emplace(rank, backend.copy_to(shard, memory));
  return out;
}

Result<Buffer> rebuild(const Map& map, const ShardSet& shards, DType dtype, const ConvertOptions& options) {
  const Memory where = memory_of(shards, options);
  if (options.policy == Policy::legacy) return legacy_rebuild(map, shards, dtype, options.scale_power);
  std::optional<std::uint64_t> fused;
  auto full = strict_rebuild(map, shards, dtype, options, where, fused);
  if (!full) return full;
  if (Status e = check_digest(map, full.value(), options, fused); !e.ok()) return e.error();
  return full;
}

Result<Buffer> extract(const Map& map, const Buffer& full, Rank rank, const ConvertOptions& options) {
  expect_reached(full, "F", options);
  if (options.policy == Policy::legacy) return legacy_extract(map, full, rank, options.scale_power);
  Scratch& s = scratch();
  Checked checked;
  if (Status e = check_for_conversion(map, options, nullptr, rank, s.visits, checked); !e.ok()) return e.error();
  auto numel_f = logical_numel(map);
  if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  const Status map_scales = extract_scale_refusal(map, full.dtype(), options.scale_power);
  if (!checked.wide) return strict_extract_checked(map, full, rank, *numel_f, options, map_scales, nullptr);
  const ProvenRank proven{s.visits, &checked};
  return strict_extract_checked(map, full, rank, *numel_f, options, map_scales, &proven);
}

Result<ShardSet> extract_all(const Map& map, const Buffer& full, const ConvertOptions& options) {
  expect_reached(full, "F", options);
  const bool strict = options.policy == Policy::strict;
  Scratch& s = scratch();
  Checked checked;
  std::optional<Index> numel_f;
  if (strict) {
    if (Status e = check_for_conversion(map, options, nullptr, std::nullopt, s.visits, checked); !e.ok()) {
      return e.error();
    }
    numel_f = logical_numel(map);
    if (!numel_f) return fault::bad_logical_shape(map.logical_shape);
  }
  const Status map_scales = strict ? extract_scale_refusal(map, full.dtype(), options.scale_power) : Status{};
  std::vector<Rank> ranks;
  for (const auto& entry : map.ranks) {
    if (entry.shard_shape) ranks.push_back(entry.rank);
  }
  std::sort(ranks.begin(), ranks.end());
  ShardSet out;
  // A shard's storage keeps its address when the buffer moves into `out`.
  std::vector<BlockCopy> deferred;
  const bool wide = checked.wide;  // strict only: legacy leaves it false
  if (wide) deferred.reserve(s.visits.size());
  // The proof lists visits by rank id, as `ranks` goes.
  std::size_t next = 0;
  for (Rank rank : ranks) {
    auto shard = [&]() -> Result<Buffer> {
      if (!strict) return legacy_extract(map, full, rank, options.scale_power);
      if (!wide) return strict_extract_checked(map, full, rank, *numel_f, options, map_scales, nullptr);
      const std::size_t first = next;
      while (next < s.visits.size() && s.visits[next].rank == rank) ++next;
      const ProvenRank proven{std::span<const Visit>(s.visits).subspan(first, next - first), &checked};
      return strict_extract_checked(map, full, rank, *numel_f, options, map_scales, &proven, &deferred);
    }();
    if (!shard) return shard.error();
    out.insert_or_assign(rank, std::move(shard).value());
  }
  if (wide) backend_of(options).copy_blocks(full.dtype(), deferred, threading_of(options));
  return out;
}

}  // namespace shardcheck
