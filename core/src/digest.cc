#include "shardcheck/digest.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

#include "shardcheck/backend.h"
#include "shardcheck/checks.h"
#include "shardcheck/convert.h"
#include "streaming.h"
#include "two_view_walk.h"

namespace shardcheck {

namespace {

// Elements are read as the low bytes of their integer of the same width.
static_assert(std::endian::native == std::endian::little);

// kLanes 64-bit lanes: four (one 256-bit register) for the baseline and AVX2 kernels, eight
// (one 512-bit register) for AVX-512. GCC and clang lower the lane-wise 64-bit multiply to
// what the target has (AVX2: three 32-bit multiplies per lane pair; AVX-512DQ: vpmullq),
// so the loop below is vectorised on every target.
// (Vector types of a dependent size cannot be alias templates in GCC: one specialisation
// per size.)
template <int kLanes>
struct LanesOf;
template <>
struct LanesOf<4> {
  using type = std::uint64_t __attribute__((vector_size(32)));
};
template <>
struct LanesOf<8> {
  using type = std::uint64_t __attribute__((vector_size(64)));
};
template <int kLanes>
using Lanes = typename LanesOf<kLanes>::type;

// kLanes packed elements of type U, loaded from any alignment.
template <class U, int kLanes>
struct PackedOf;
#define SHARDCHECK_PACKED(U, lanes)                                                  \
  template <>                                                                        \
  struct PackedOf<U, lanes> {                                                        \
    using type = U __attribute__((vector_size(sizeof(U) * (lanes)), aligned(1)));    \
  };
SHARDCHECK_PACKED(std::uint8_t, 4)
SHARDCHECK_PACKED(std::uint16_t, 4)
SHARDCHECK_PACKED(std::uint32_t, 4)
SHARDCHECK_PACKED(std::uint64_t, 4)
SHARDCHECK_PACKED(std::uint8_t, 8)
SHARDCHECK_PACKED(std::uint16_t, 8)
SHARDCHECK_PACKED(std::uint32_t, 8)
SHARDCHECK_PACKED(std::uint64_t, 8)
#undef SHARDCHECK_PACKED

// splitmix64_mix lane-wise. In place: a vector passed by value would change the ABI
// without AVX.
template <int kLanes>
[[gnu::always_inline]] inline void finalise(Lanes<kLanes>& x) {
  x ^= x >> 30;
  x *= kSplitMixMul1;
  x ^= x >> 27;
  x *= kSplitMixMul2;
  x ^= x >> 31;
}

// Adds kLanes elements to x widened to 64-bit lanes. On eight lanes one doubling at a
// time: GCC 12 lowers a 16- or 8-bit to 64-bit __builtin_convertvector there to a scalar
// load and insert per lane (the AVX-512 bfloat16 digest ran at half its float32 speed),
// and each doubling to one vpmovzx. On four lanes (AVX2, baseline) the direct conversion
// is as fast or faster. (By reference, as finalise.)
template <class U, int kLanes>
[[gnu::always_inline]] inline void add_widened(Lanes<kLanes>& x, const typename PackedOf<U, kLanes>::type& packed) {
  if constexpr (sizeof(U) == sizeof(std::uint64_t) || kLanes != 8) {
    x += __builtin_convertvector(packed, Lanes<kLanes>);
  } else {
    using Wider = std::conditional_t<sizeof(U) == 1, std::uint16_t,
                                     std::conditional_t<sizeof(U) == 2, std::uint32_t, std::uint64_t>>;
    const typename PackedOf<Wider, kLanes>::type wider =
        __builtin_convertvector(packed, typename PackedOf<Wider, kLanes>::type);
    add_widened<Wider, kLanes>(x, wider);
  }
}

// Adds kLanes elements from q, s elements apart, widened to 64-bit lanes, to x: one
// vector load and a vector widening when contiguous. (x in place, as finalise.)
template <int kLanes, class U, bool kContiguous>
[[gnu::always_inline]] inline void add_lanes(Lanes<kLanes>& x, const U* q, Index s) {
  if constexpr (kContiguous) {
    typename PackedOf<U, kLanes>::type packed;
    std::memcpy(&packed, q, sizeof packed);
    add_widened<U, kLanes>(x, packed);
  } else {
    for (int i = 0; i < kLanes; ++i) x[i] += q[i * s];
  }
}

// What a kernel does with the elements it sums besides summing them: nothing, or copy
// them to a destination (contiguous), through the caches or around them.
enum class Store { none, cached, streaming };

// Sum of the terms of n elements p[0], p[stride], p[2 * stride], ..., element j taken
// at the key (index * gamma) key + j * key_step. Keys rather than indices: index * gamma
// for consecutive positions is one addition apart, which keeps the multiplies for the
// finaliser. Two accumulators hide the multiply latency. With a store (contiguous
// only), also copies the elements to `to` as they are summed: one pass whose loads from
// memory overlap the arithmetic, where a copy and then a digest of the row take the sum
// of the two (kStore streaming: `to` + 0 is 16-byte aligned).
template <int kLanes, class U, bool kContiguous, Store kStore = Store::none>
[[gnu::always_inline]] inline std::uint64_t sum_terms(const U* p, Index stride, Index n, std::uint64_t key,
                                                      std::uint64_t key_step, U* to = nullptr) {
  static_assert(kStore == Store::none || kContiguous);
  using L = Lanes<kLanes>;
  constexpr std::size_t kStepBytes = 2 * kLanes * sizeof(U);
  // A copying kernel reads rows that may come from several sources in turn (a rebuild
  // reads each shard in stretches), where the hardware prefetcher starts cold at every
  // switch; a copy alone hides that with many loads in flight, the arithmetic here does
  // not: ask for the data 4 KiB ahead (column-split float32 rebuild with digest on one
  // thread, 2 KiB rows from eight shards: 1.4-2.2x -> 1.0-1.1x memcpy; 1 KiB ahead gave
  // 1.2-1.6x, 2 KiB 1.0-1.2x).
  constexpr std::size_t kAheadBytes = 4096;
  const Index s = kContiguous ? 1 : stride;
  L acc0{};
  L acc1{};
  L k0;
  for (int i = 0; i < kLanes; ++i) k0[i] = key + static_cast<std::uint64_t>(i) * key_step;
  L k1 = k0 + kLanes * key_step;
  const std::uint64_t step = 2 * kLanes * key_step;
  Index j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    const U* q = p + j * s;
    if constexpr (kStore != Store::none) {
      // An address, not a pointer past the row: a prefetch never faults.
      __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(q) + kAheadBytes));
    }
    if constexpr (kStore == Store::streaming) {
      detail::stream_block<kStepBytes>(reinterpret_cast<std::byte*>(to + j), reinterpret_cast<const std::byte*>(q));
    } else if constexpr (kStore == Store::cached) {
      std::memcpy(to + j, q, kStepBytes);
    }
    L x0 = k0;
    L x1 = k1;
    add_lanes<kLanes, U, kContiguous>(x0, q, s);
    add_lanes<kLanes, U, kContiguous>(x1, q + kLanes * s, s);
    finalise<kLanes>(x0);
    finalise<kLanes>(x1);
    acc0 += x0;
    acc1 += x1;
    k0 += step;
    k1 += step;
  }
  const L acc = acc0 + acc1;
  std::uint64_t sum = 0;
  for (int i = 0; i < kLanes; ++i) sum += acc[i];
  std::uint64_t k = key + static_cast<std::uint64_t>(j) * key_step;
  for (; j < n; ++j, k += key_step) {
    if constexpr (kStore != Store::none) to[j] = p[j];
    sum += splitmix64_mix(k + p[j * s]);
  }
  return sum;
}

using SumFn = std::uint64_t (*)(const std::byte*, Index, Index, std::uint64_t, std::uint64_t);

// A kernel's body, whatever its instruction set: the contiguous loop where it can.
template <int kLanes, class U>
[[gnu::always_inline]] inline std::uint64_t sum_elements(const std::byte* data, Index stride, Index n,
                                                         std::uint64_t key, std::uint64_t step) {
  const auto* p = reinterpret_cast<const U*>(data);
  return stride == 1 ? sum_terms<kLanes, U, true>(p, 1, n, key, step)
                     : sum_terms<kLanes, U, false>(p, stride, n, key, step);
}

using CopyFn = std::uint64_t (*)(const std::byte*, std::byte*, Index, std::uint64_t, std::uint64_t);

// A copying kernel's body: the elements before the first 16-byte aligned destination
// one by one, then whole vectors streamed where a step of the loop is a multiple of 16
// bytes (cached otherwise, and for a destination that is not aligned to its element).
template <int kLanes, class U, bool kStream>
[[gnu::always_inline]] inline std::uint64_t copy_elements(const std::byte* from, std::byte* to_bytes, Index n,
                                                          std::uint64_t key, std::uint64_t step) {
  const auto* p = reinterpret_cast<const U*>(from);
  auto* to = reinterpret_cast<U*>(to_bytes);
  constexpr bool kCanStream = (2 * kLanes * sizeof(U)) % 16 == 0;
  if constexpr (kStream && kCanStream) {
    if (reinterpret_cast<std::uintptr_t>(to) % sizeof(U) == 0) {
      std::uint64_t sum = 0;
      Index j = 0;
      for (; j < n && reinterpret_cast<std::uintptr_t>(to + j) % 16 != 0; ++j, key += step) {
        to[j] = p[j];
        sum += splitmix64_mix(key + p[j]);
      }
      return sum + sum_terms<kLanes, U, true, Store::streaming>(p + j, 1, n - j, key, step, to + j);
    }
  }
  return sum_terms<kLanes, U, true, Store::cached>(p, 1, n, key, step, to);
}

template <class U>
std::uint64_t sum_generic(const std::byte* data, Index stride, Index n, std::uint64_t key, std::uint64_t step) {
  return sum_elements<4, U>(data, stride, n, key, step);
}
template <class U, bool kStream>
std::uint64_t copy_generic(const std::byte* from, std::byte* to, Index n, std::uint64_t key, std::uint64_t step) {
  return copy_elements<4, U, kStream>(from, to, n, key, step);
}

// One kernel set per instruction set: the same loop compiled for each. The 64-bit lane
// multiply is what decides the speed: AVX2 has none and builds each from three 32x32->64
// products; AVX-512DQ has one (vpmullq), on eight lanes: about three times faster than
// AVX2 on an AMD EPYC (Zen 4), faster than a memcpy of the same bytes.
struct KernelSet {
  const char* name;
  bool (*runs_here)();
  SumFn by_width[4];  // 1, 2, 4, 8 bytes
  CopyFn copying[2][4];  // [streaming][width], as by_width
};

#define SHARDCHECK_DIGEST_KERNELS(name, isa, lanes)                                                  \
  template <class U>                                                                                   \
  [[gnu::target(isa)]] std::uint64_t sum_##name(const std::byte* data, Index stride, Index n,         \
                                                std::uint64_t key, std::uint64_t step) {               \
    return sum_elements<lanes, U>(data, stride, n, key, step);                                         \
  }                                                                                                    \
  template <class U, bool kStream>                                                                     \
  [[gnu::target(isa)]] std::uint64_t copy_##name(const std::byte* from, std::byte* to, Index n,        \
                                                 std::uint64_t key, std::uint64_t step) {              \
    return copy_elements<lanes, U, kStream>(from, to, n, key, step);                                   \
  }

bool always() { return true; }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
SHARDCHECK_DIGEST_KERNELS(avx2, "avx2", 4)
SHARDCHECK_DIGEST_KERNELS(avx512, "avx2,avx512f,avx512dq,avx512vl", 8)
bool has_avx2() { return __builtin_cpu_supports("avx2"); }
bool has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vl");
}
#endif
#undef SHARDCHECK_DIGEST_KERNELS

// One row per instruction set: its summing kernels and its copying ones, by width.
#define SHARDCHECK_KERNEL_SET(label, runs, fn)                                                            \
  {                                                                                                       \
    label, runs, {sum_##fn<std::uint8_t>, sum_##fn<std::uint16_t>, sum_##fn<std::uint32_t>,               \
                  sum_##fn<std::uint64_t>},                                                               \
        {{copy_##fn<std::uint8_t, false>, copy_##fn<std::uint16_t, false>, copy_##fn<std::uint32_t, false>, \
          copy_##fn<std::uint64_t, false>},                                                               \
         {copy_##fn<std::uint8_t, true>, copy_##fn<std::uint16_t, true>, copy_##fn<std::uint32_t, true>,    \
          copy_##fn<std::uint64_t, true>}}                                                                \
  }

// Best first; the last runs everywhere.
constexpr KernelSet kKernelSets[] = {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    SHARDCHECK_KERNEL_SET("avx512", has_avx512, avx512),
    SHARDCHECK_KERNEL_SET("avx2", has_avx2, avx2),
#endif
    SHARDCHECK_KERNEL_SET("baseline", always, generic),
};
#undef SHARDCHECK_KERNEL_SET

const KernelSet& best_kernels() {
  static const KernelSet& best = *std::find_if(std::begin(kKernelSets), std::end(kKernelSets),
                                               [](const KernelSet& k) { return k.runs_here(); });
  return best;
}

// A kernel set's slot for an element width: 1, 2, 4, 8 bytes.
std::size_t width_slot(DType dtype) {
  switch (element_size(dtype)) {
    case 1:
      return 0;
    case 2:
      return 1;
    case 4:
      return 2;
    default:
      return 3;
  }
}

SumFn width_kernel(const KernelSet& set, DType dtype) { return set.by_width[width_slot(dtype)]; }

SumFn kernel_for(DType dtype) { return width_kernel(best_kernels(), dtype); }

CopyFn copying_kernel(const KernelSet& set, DType dtype, bool streaming) {
  return set.copying[streaming ? 1 : 0][width_slot(dtype)];
}

std::uint64_t key_of(Index index) { return static_cast<std::uint64_t>(index) * kDigestGamma; }

// The elements of one block: shape, its positions in F (source view) and where its
// values are read (data, through data_view, in elements of `dtype`).
struct Block {
  const Extents* shape = nullptr;
  const StridedView* source = nullptr;
  const std::byte* data = nullptr;
  StridedView data_view;
};

// Calls fn(source address, data address, n, source step, data step) for each run of the
// innermost axis, in row-major order. The caller has checked the views.
template <class Fn>
void for_each_row(const Extents& shape, const StridedView& src, const StridedView& dat, Fn&& fn) {
  if (detail::has_zero_extent(shape)) return;
  const std::size_t d = shape.size();
  if (d == 0) {
    fn(src.offset, dat.offset, Index{1}, Index{0}, Index{1});
    return;
  }
  std::array<detail::WalkAxis, 64> axes;
  const int outer = detail::outer_axes(shape, src, dat, d - 1, axes);
  detail::TwoViewWalk rows(axes.data(), outer, src.offset, dat.offset);
  do {
    fn(rows.from(), rows.to(), shape[d - 1], src.strides[d - 1], dat.strides[d - 1]);
  } while (rows.next());
}

std::uint64_t block_terms(DType dtype, const Block& b) {
  const SumFn sum = kernel_for(dtype);
  const auto size = static_cast<Index>(element_size(dtype));
  std::uint64_t total = 0;
  for_each_row(*b.shape, *b.source, b.data_view, [&](Index s, Index at, Index n, Index s_step, Index d_step) {
    // A zero data stride only happens on an axis of extent 1 in a checked map.
    total += sum(b.data + at * size, d_step == 0 ? 1 : d_step, n, key_of(s), key_of(s_step));
  });
  return total;
}

// Element by element, skipping (and claiming) elements of F already counted: for replica
// pieces of one rank whose source spans overlap, which a valid map allows.
std::uint64_t block_terms_once(DType dtype, const Block& b, std::vector<std::uint8_t>& claimed) {
  const auto size = static_cast<Index>(element_size(dtype));
  std::uint64_t total = 0;
  for_each_row(*b.shape, *b.source, b.data_view, [&](Index s, Index at, Index n, Index s_step, Index d_step) {
    for (Index j = 0; j < n; ++j) {
      const Index element = s + j * s_step;
      auto& mark = claimed[static_cast<std::size_t>(element)];
      if (mark != 0) continue;
      mark = 1;
      std::uint64_t bits = 0;
      std::memcpy(&bits, b.data + (at + j * d_step) * size, static_cast<std::size_t>(size));
      total += digest_term(static_cast<std::uint64_t>(element), bits);
    }
  });
  return total;
}

// The shards against the map, as rebuild checks them: one dtype, one shard per rank with
// pieces, each of the map's size, none for a rank the map does not list.
Result<DType> check_share_shards(const Map& map, const ShardSet& shards) {
  std::optional<DType> dtype;
  for (const auto& [rank, shard] : shards) {
    if (dtype && shard.dtype() != *dtype) return fault::shard_dtype(rank, shard.dtype(), *dtype);
    dtype = shard.dtype();
    const RankEntry* entry = map.find_rank(rank);
    if (entry == nullptr) return fault::unlisted_shard(rank);
    if (!entry->shard_shape) {
      if (shard.numel() != 0) return fault::shard_without_shape(rank);
      continue;
    }
    const Index numel = checked_numel(*entry->shard_shape).value_or(-1);  // checked by check_map
    if (shard.numel() != numel) return fault::shard_numel(rank, shard.numel(), numel);
  }
  for (const RankEntry& entry : map.ranks) {
    if (!entry.pieces.empty() && shards.find(entry.rank) == shards.end()) {
      return fault::missing_shard(entry.rank, entry.pieces.size());
    }
  }
  return dtype.value_or(DType::float32);
}

bool spans_overlap(std::vector<std::pair<Index, Index>>& spans) {
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first <= spans[i - 1].second) return true;
  }
  return false;
}

}  // namespace

std::uint64_t digest_elements(DType dtype, const std::byte* data, Index count, Index first_index) {
  if (count <= 0) return 0;
  return kernel_for(dtype)(data, 1, count, key_of(first_index), kDigestGamma);
}

std::uint64_t detail::copy_digesting(DType dtype, const std::byte* from, std::byte* to, Index count,
                                     Index first_index, bool streaming) {
  if (count <= 0) return 0;
  return copying_kernel(best_kernels(), dtype, streaming)(from, to, count, key_of(first_index), kDigestGamma);
}

std::vector<std::string> detail::digest_kernels_here() {
  std::vector<std::string> names;
  for (const KernelSet& set : kKernelSets) {
    if (set.runs_here()) names.emplace_back(set.name);
  }
  return names;
}

std::string detail::digest_kernel_chosen() { return best_kernels().name; }

std::optional<std::uint64_t> detail::digest_elements_with(std::string_view kernel, DType dtype, const std::byte* data,
                                                          Index count, Index first_index) {
  for (const KernelSet& set : kKernelSets) {
    if (kernel != set.name || !set.runs_here()) continue;
    return count <= 0 ? 0 : width_kernel(set, dtype)(data, 1, count, key_of(first_index), kDigestGamma);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> detail::copy_digesting_with(std::string_view kernel, DType dtype, const std::byte* from,
                                                         std::byte* to, Index count, Index first_index,
                                                         bool streaming) {
  for (const KernelSet& set : kKernelSets) {
    if (kernel != set.name || !set.runs_here()) continue;
    return count <= 0 ? 0 : copying_kernel(set, dtype, streaming)(from, to, count, key_of(first_index), kDigestGamma);
  }
  return std::nullopt;
}

std::uint64_t digest(const Buffer& full) { return digest_elements(full.dtype(), full.data(), full.numel(), 0); }

Result<std::map<Rank, std::uint64_t>> digest_shares(const Map& map, const ShardSet& shards, int scale_power) {
  if (Status e = check_map(map); !e.ok()) return e.error();
  auto dtype = check_share_shards(map, shards);
  if (!dtype) return dtype.error();
  if (Status e = rebuild_scale_refusal(map, shards, dtype.value(), scale_power); !e.ok()) return e.error();
  const Index numel_f = checked_numel(map.logical_shape).value_or(0);  // checked by check_map

  const std::unique_ptr<Backend> backend = make_cpu_backend();
  std::map<Rank, std::uint64_t> shares;
  std::vector<const Piece*> counted;
  std::vector<std::pair<Index, Index>> replica_spans;
  std::vector<std::uint8_t> claimed;
  Buffer unscaled;
  for (const auto& [rank, shard] : shards) {
    std::uint64_t share = 0;
    const RankEntry* entry = map.find_rank(rank);
    counted.clear();
    replica_spans.clear();
    for (const Piece& piece : entry->pieces) {
      if (*std::min_element(piece.locations.begin(), piece.locations.end()) != rank) continue;
      auto span = span_facts(piece.shape, piece.source);
      if (span->empty) continue;
      counted.push_back(&piece);
      if (piece.locations.size() > 1) replica_spans.emplace_back(piece.source.offset, span->max_address);
    }
    // Only replicas may cover an element twice within one rank; when their spans are
    // disjoint no element can be counted twice and the fast path is exact.
    const bool dedupe = spans_overlap(replica_spans);
    if (dedupe) claimed.assign(static_cast<std::size_t>(numel_f), 0);
    for (const Piece* piece : counted) {
      Block block{&piece->shape, &piece->source, shard.data(), piece->dest};
      if (piece->scale != 1.0) {
        // Unscaled by the same backend copy rebuild uses, so the share digests the very
        // bits rebuild writes into F.
        const Index numel = span_facts(piece->shape, piece->source)->numel;
        unscaled = Buffer(dtype.value(), numel);
        BlockCopy copy = block_of(*piece, Direction::rebuild, shard, unscaled, scale_power);
        const StridedView packed{0, row_major_strides(piece->shape)};
        copy.to_view = &packed;
        backend->copy_block(dtype.value(), copy);
        block.data = unscaled.data();
        block.data_view = packed;
      }
      share += dedupe && piece->locations.size() > 1 ? block_terms_once(dtype.value(), block, claimed)
                                                     : block_terms(dtype.value(), block);
    }
    shares[rank] = share;
  }
  return shares;
}

std::string format_digest(std::uint64_t digest) { return fmt::format("0x{:016x}", digest); }

std::optional<std::uint64_t> parse_digest(std::string_view text) {
  if (text.size() != 18 || text[0] != '0' || text[1] != 'x') return std::nullopt;
  std::uint64_t value = 0;
  const char* first = text.data() + 2;
  const char* last = text.data() + text.size();
  if (!std::all_of(first, last,
                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); })) {
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(first, last, value, 16);
  if (ec != std::errc() || end != last) return std::nullopt;
  return value;
}

}  // namespace shardcheck
