// The three parts of check_map share these: the scratch a check fills and the
// passes each part runs. Private to core/src/checks*.cc:
//   checks.cc        preparation, conditions 1-3, and check_map itself
//   checks_runs.cc   the run sweeps: conditions 4-6 on address runs
//   checks_boxes.cc  the box proof: conditions 4-6 on boxes, when every piece is one
#pragma once

#include <sys/mman.h>

#include <cstdint>
#include <limits>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "shardcheck/checks.h"
#include "shardcheck/error.h"
#include "shardcheck/map.h"

namespace shardcheck::check_parts {

// The scratch of a large map is backed by transparent huge pages where the kernel grants
// them on request (THP "madvise" or "always"): a map of 10^6 pieces fills about 200 MB of
// scratch, and faulting it in 4 KiB pages took a third of check_map. Below 4 MiB, or
// where the kernel says no, it is ordinary memory; nothing else differs.
template <class T>
struct LargePages {
  using value_type = T;
  static constexpr std::size_t kHuge = std::size_t{2} << 20;
  static constexpr std::size_t kFrom = std::size_t{4} << 20;
  LargePages() = default;
  template <class U>
  LargePages(const LargePages<U>&) noexcept {}  // NOLINT: rebinding, as allocators do
  static std::size_t rounded(std::size_t n) { return (n * sizeof(T) + kHuge - 1) / kHuge * kHuge; }
  // Through operator new either way, so that whoever counts the heap (bench/heap_counter.cc)
  // still sees the scratch.
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    if (n * sizeof(T) < kFrom) return static_cast<T*>(::operator new(n * sizeof(T)));
    void* p = ::operator new(rounded(n), std::align_val_t{kHuge});
#ifdef MADV_HUGEPAGE
    ::madvise(p, rounded(n), MADV_HUGEPAGE);  // advice only: refused, the pages are small
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kFrom) {
      ::operator delete(p);
    } else {
      ::operator delete(p, std::align_val_t{kHuge});
    }
  }
  template <class U>
  bool operator==(const LargePages<U>&) const noexcept { return true; }
};
template <class T>
using ScratchVector = std::vector<T, LargePages<T>>;

constexpr Index kNoAddress = std::numeric_limits<Index>::max();
constexpr std::uint8_t kNoFault = 0xff;
// Below this many pieces prepare reads them on one thread.
constexpr std::int64_t kParallelPieces = std::int64_t{1} << 15;

// One axis of one view. Not the two-view walk's axis (walk_axis.h): a layout is built
// per view, sorted and merged by its own stride, and the scratch holds up to 63 of these
// per view of every piece, where a second, unused stride would add half again.
struct Axis {
  Index stride;
  Index extent;
};

// A view reduced to what the sweeps need. Its axes of extent > 1, sorted by stride,
// with an axis merged into the next inner one when together they are contiguous; an
// innermost stride-1 axis becomes the run length and the remaining (outer) axes,
// kept in Scratch::axes, enumerate run starts. At most 63 axes have extent > 1
// because the view's numel fits 64 bits.
struct Layout {
  std::int32_t axes_begin = 0;
  std::int32_t axes_count = 0;
  Index run_len = 1;
  Index runs = 1;
  bool unique = true;  // the conservative rule of contract 3.3, as is_unique in map.h
};

// Everything the later conditions need about one piece, computed once. Pieces are
// stored in the global check order: ranks by id, then pieces in content order, so
// "lowest rank, then lowest piece" is simply the lowest position in this vector.
struct PieceInfo {
  const Piece* piece = nullptr;
  Rank rank = 0;
  std::int32_t written = 0;    // index in the rank's list as written (what errors report);
                               // a map has fewer than 2^31 pieces (Run::piece)
  std::int32_t rank_slot = 0;  // dense index of `rank` among the distinct rank ids
  std::int32_t loc_class = 0;  // pieces with equal locations share a class
  std::int32_t owner = 0;      // index into Scratch::ranks
  bool sound = false;          // its addresses can be computed without overflow; only sound
                               // pieces are looked at after condition 1
  // Both views end below INT64_MAX, so "one past the last address" is representable.
  // A view ending at INT64_MAX is out of bounds (condition 2); its runs are only
  // skipped here when the bounds check is planted off.
  bool runs_representable = false;
  bool empty = true;
  bool own_ok = false;        // locations name the listing rank
  bool box = false;           // non-empty, and a box of F and of its shard (BoxScratch)
  bool one_location = false;  // assign_classes groups on it
  Index numel = 0;
  Index src_max = -1;  // the last address each view touches
  Index dst_max = -1;
};
// Memory: a map of 10^7 pieces holds one of these per piece while it is checked.
static_assert(sizeof(PieceInfo) <= 64);

// The run layouts of one piece, built only when the run sweeps or condition 3 need them.
struct PieceLayouts {
  Layout src;
  Layout dst;
};

struct RankInfo {
  const RankEntry* entry = nullptr;
  bool shard_sound = false;
  Index shard_numel = 0;
  std::int32_t first = 0;  // its pieces are [first, last) in Scratch::pieces
  std::int32_t last = 0;
  bool box_side = false;         // its pieces' boxes are looked for (prepare)
  std::size_t dst_base = 0;      // its pieces' shard boxes in BoxScratch::dst_lo_hi
  std::size_t strides_base = 0;  // its shard's row-major strides in BoxScratch::shard_strides
};

// A contiguous address interval [start, start + len) written or read by one piece.
struct Run {
  Index start;
  Index len;
  std::int32_t piece;
};

// Reused between calls so that checking a small map allocates nothing once warm: the
// campaign checks hundreds of thousands of maps per second.
struct Scratch {
  ScratchVector<PieceInfo> pieces;
  std::vector<RankInfo> ranks;
  std::vector<std::int32_t> order;
  std::vector<Rank> rank_ids;
  ScratchVector<Run> runs;
  ScratchVector<PieceLayouts> layouts;               // per piece, as `pieces`
  ScratchVector<std::pair<Rank, std::int32_t>> keyed;  // (location, piece)
  ScratchVector<std::uint8_t> faults;                  // per piece: its PieceFault or kNoFault
  bool boxes_looked_for = false;                     // by the last prepare
  std::vector<Axis> axes;                            // outer axes of every Layout
  std::vector<std::pair<Index, std::int32_t>> heap;  // (end, run) of active source runs
  std::vector<std::int32_t> piece_active;
  std::vector<std::int32_t> class_active;
  std::vector<std::int32_t> class_size;
  std::vector<std::int32_t> rank_active;
  std::vector<std::uint32_t> stamp;
  std::vector<Rank> holders;
};

inline Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

inline PieceAt at(const PieceInfo& p) { return PieceAt{p.rank, p.written, p.piece}; }

struct BoxScratch {
  ScratchVector<Index> lo_hi;  // per piece and axis: lo, hi (source side)
  ScratchVector<Index> dst_lo_hi;
  std::vector<std::vector<std::pair<Index, std::int32_t>>> events;  // per level
  std::vector<std::vector<std::int32_t>> active;                    // per level
  std::vector<std::vector<std::int32_t>> slots;                     // per level: a box's place in `active`
  std::vector<std::vector<std::int32_t>> by_start;                  // per level: boxes sorted by start
  Strides full_strides;
  Strides shard_strides;
  std::vector<std::uint32_t> counts;                   // sort_events
  std::vector<std::pair<Index, std::int32_t>> sorted;  // sort_events
};

inline BoxScratch& box_scratch() {
  thread_local BoxScratch b;
  return b;
}

// ---- the passes, in the order check_map runs them -----------------------------------

// checks.cc
// What prepare found besides the pieces in Scratch: the first condition-1 error, and
// F's numel when it is known (later conditions need it).
struct Prepared {
  Status first;
  Index numel_f = 0;
  bool logical_ok = false;
};

// Orders ranks and pieces, fills Scratch and reports the first condition-1 error. With
// `boxes`, also finds each piece's boxes (PieceInfo::box) in the same pass over the map.
Prepared prepare(const Map& map, Scratch& s, bool boxes = false, int threads = 1);
Status check_bounds(const Scratch& s, Index numel_f);  // condition 2
void build_layouts(Scratch& s);                        // the run layouts
std::optional<Index> total_runs(const Scratch& s, bool with_dest, Index limit);
Status check_itself(const Scratch& s);  // condition 3

// checks_runs.cc
Status check_rank_tiling(Scratch& s, const RankInfo& r);  // condition 4, one rank
void assign_classes(Scratch& s);
Status check_full_side(Scratch& s, Index numel_f, const PlantedBugs& bugs);  // conditions 5-6

// checks_boxes.cc
bool all_boxes(const Scratch& s, const Map& map);
bool box_proof(Scratch& s, const Map& map, const PlantedBugs& bugs);

}  // namespace shardcheck::check_parts
