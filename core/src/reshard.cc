// Transfer plans (contract 11): execution, and reshard() with its digests. plan() is in
// reshard_plan.cc; see reshard.h for the contract of each.
#include "shardcheck/reshard.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "shardcheck/digest.h"
#include "reshard_internal.h"
#include "streaming.h"

namespace shardcheck {

namespace {

// Whether the view of `segment` stays inside a buffer of `numel` elements.
bool inside(const Extents& shape, const StridedView& view, Index numel) {
  for (Index s : view.strides) {
    if (s < 0) return false;
  }
  if (view.offset < 0 || view.strides.size() != shape.size()) return false;
  const auto facts = span_facts(shape, view);
  return facts && (facts->empty || facts->max_address < numel);
}

// Calls fn(from_address, to_address, len, from_step, to_step) for each inner row of the segment.
template <class Fn>
void for_each_row(const Extents& shape, const StridedView& from, const StridedView& to, Fn&& fn) {
  const std::size_t d = shape.size();
  if (checked_numel(shape).value_or(0) == 0) return;
  const Index len = d == 0 ? 1 : shape[d - 1];
  const Index from_step = d == 0 ? 1 : from.strides[d - 1];
  const Index to_step = d == 0 ? 1 : to.strides[d - 1];
  std::vector<Index> index(d > 0 ? d - 1 : 0, 0);
  Index a = from.offset, b = to.offset;
  while (true) {
    fn(a, b, len, from_step, to_step);
    std::size_t k = index.size();
    for (; k-- > 0;) {
      if (++index[k] < shape[k]) {
        a += from.strides[k];
        b += to.strides[k];
        break;
      }
      a -= (shape[k] - 1) * from.strides[k];
      b -= (shape[k] - 1) * to.strides[k];
      index[k] = 0;
    }
    if (k == static_cast<std::size_t>(-1)) return;
  }
}

Status check_sources(const Plan& plan, const ShardSet& sources, DType dtype) {
  for (const auto& [rank, buffer] : sources) {
    const auto it = plan.source_numel.find(rank);
    if (it == plan.source_numel.end()) return fault::unlisted_shard(rank);
    if (buffer.dtype() != dtype) return fault::shard_dtype(rank, buffer.dtype(), dtype);
    if (buffer.numel() != it->second) return fault::shard_numel(rank, buffer.numel(), it->second);
  }
  for (const auto& [rank, numel] : plan.source_numel) {
    if (numel > 0 && !sources.contains(rank)) return fault::missing_source_shard(rank, numel);
  }
  return {};
}

// Contract 1.2's dtype-dependent refusals of scaled pieces, on both maps, as a conversion
// makes them (a plan never scales, but the shards cannot hold such data).
Status check_scales(const Plan& plan, DType dtype) {
  for (const bool in_target : {false, true}) {
    for (const Plan::ScaledPiece& s : plan.scaled_pieces) {
      if (s.in_target != in_target) continue;
      const PieceAt at{s.rank, s.written, &s.piece};
      std::optional<Error> error;
      if (!is_floating(dtype))
        error = fault::scale_on_integer(at, dtype);
      else if (!scale_fits_arithmetic(dtype, s.piece.scale))
        error = fault::scale_outside_arithmetic(at, dtype);
      if (error)
        return reworded(*error, fmt::format("in the {} map, {}", in_target ? "target" : "source", error->sentence));
    }
  }
  return {};
}

// Every view of the plan inside its buffer: a plan is plain data, so execute does not
// take on trust that plan() made it.
Status check_views(const Plan& plan, const ShardSet& sources, const ShardSet& targets) {
  auto numel_of = [](const ShardSet& set, Rank rank) -> Index {
    const auto it = set.find(rank);
    return it == set.end() ? 0 : it->second.numel();
  };
  for (const auto* list : {&plan.segments, &plan.replica_checks}) {
    const bool checks = list == &plan.replica_checks;
    for (const TransferSegment& s : *list) {
      if (!inside(s.shape, s.source, numel_of(sources, s.source_rank))) {
        return make_error(ErrorKind::bounds, "a plan segment reads outside its source shard",
                          Where::in_rank(s.source_rank).at(Side::shard, s.source.offset));
      }
      const Index limit = checks ? numel_of(sources, s.target_rank) : numel_of(targets, s.target_rank);
      if (!inside(s.shape, s.target, limit)) {
        return make_error(ErrorKind::bounds, "a plan segment reaches outside its target shard",
                          Where::in_rank(s.target_rank).at(Side::shard, s.target.offset));
      }
    }
  }
  return {};
}

void copy_row(const std::byte* from, std::byte* to, std::size_t size, Index a, Index b, Index len, Index sa, Index sb,
              bool stream) {
  if (sa == 1 && sb == 1) {
    detail::copy_run(to + b * size, from + a * size, static_cast<std::size_t>(len) * size, stream);
    return;
  }
  for (Index i = 0; i < len; ++i) std::memcpy(to + (b + i * sb) * size, from + (a + i * sa) * size, size);
}

// The copies of a plan, segment by segment in plan order; a plan that moves more than the
// caches hold streams its contiguous rows (streaming.h), as conversion does, and fences
// once at the end. (Copying the rows of the segments that fill one target row together,
// so that the target is written front to back, measured no faster at 4096 x 4096 TP 8 to
// TP 4: 5.2 ms against 5.0 ms.)
void copy_segments(const Plan& plan, const ShardSet& sources, ShardSet& targets, std::size_t size) {
  const bool stream =
      plan.statistics.elements_moved > detail::kStreamTotalBytes / static_cast<std::int64_t>(std::max<std::size_t>(size, 1));
  for (const TransferSegment& s : plan.segments) {
    const std::byte* from = sources.at(s.source_rank).data();
    std::byte* to = targets.at(s.target_rank).data();
    for_each_row(s.shape, s.source, s.target, [&](Index a, Index b, Index len, Index sa, Index sb) {
      copy_row(from, to, size, a, b, len, sa, sb, stream);
    });
  }
  if (stream) detail::stream_fence();
}

// Each replica check (TransferSegment: the holder read, another holder's view of the
// same elements in its own shard of `shards`) bit for bit.
Status compare_replicas(const std::vector<TransferSegment>& checks, const ShardSet& sources, DType dtype) {
  const std::size_t size = element_size(dtype);
  for (const TransferSegment& s : checks) {
    const Buffer& held = sources.at(s.source_rank);
    const Buffer& other = sources.at(s.target_rank);
    std::optional<Error> error;
    for_each_row(s.shape, s.source, s.target, [&](Index a, Index b, Index len, Index sa, Index sb) {
      for (Index i = 0; i < len && !error; ++i) {
        const Index x = a + i * sa, y = b + i * sb;
        if (std::memcmp(held.data() + x * size, other.data() + y * size, size) != 0) {
          error = fault::replica_holders_differ(s.source_rank, x, s.target_rank, y, dtype, held.bits(x), other.bits(y));
        }
      }
    });
    if (error) return *error;
  }
  return {};
}

// Plans execute on host memory: shards in a device's memory are the caller's mistake.
void expect_host(const ShardSet& shards, const char* side) {
  for (const auto& [rank, shard] : shards) {
    if (shard.memory() == Memory::host) continue;
    throw std::invalid_argument(fmt::format("{} rank {}'s shard is in {} memory; transfer plans execute on host memory "
                                            "(copy the shards to the host first)",
                                            side, rank, memory_name(shard.memory())));
  }
}

}  // namespace

Status execute_into(const Plan& plan, const ShardSet& source_shards, ShardSet& target_shards) {
  expect_host(source_shards, "source");
  expect_host(target_shards, "target");
  DType dtype = DType::float32;
  if (!source_shards.empty())
    dtype = source_shards.begin()->second.dtype();
  else if (!target_shards.empty())
    dtype = target_shards.begin()->second.dtype();
  if (Status status = check_sources(plan, source_shards, dtype); !status.ok()) return status;
  for (const auto& [rank, numel] : plan.target_numel) {
    const auto it = target_shards.find(rank);
    if (it == target_shards.end()) {
      return make_error(ErrorKind::shape, fmt::format("no buffer was given for target rank {}'s shard", rank),
                        Where::in_rank(rank));
    }
    if (it->second.dtype() != dtype) return fault::shard_dtype(rank, it->second.dtype(), dtype);
    if (it->second.numel() != numel) return fault::shard_numel(rank, it->second.numel(), numel);
  }
  for (const auto& [rank, buffer] : target_shards) {
    if (!plan.target_numel.contains(rank)) return fault::unlisted_shard(rank);
  }
  if (Status status = check_scales(plan, dtype); !status.ok()) return status;
  if (Status status = check_views(plan, source_shards, target_shards); !status.ok()) return status;
  if (Status status = compare_replicas(plan.replica_checks, source_shards, dtype); !status.ok()) return status;
  copy_segments(plan, source_shards, target_shards, element_size(dtype));
  return {};
}

Result<ShardSet> execute(const Plan& plan, const ShardSet& source_shards, DType dtype) {
  if (Status status = check_sources(plan, source_shards, dtype); !status.ok()) return std::move(status).error();
  ShardSet out;
  // Every address of a target shard is written by exactly one segment (the plan's
  // construction; a wrong plan is what the truth oracle exists to catch).
  for (const auto& [rank, numel] : plan.target_numel) out.emplace(rank, Buffer::uninitialized(dtype, numel));
  if (Status status = execute_into(plan, source_shards, out); !status.ok()) return std::move(status).error();
  return out;
}

namespace {

// A digest a reshard verifies: the source map's record for the state asked for (`state`),
// or the caller's value (nullptr).
struct WantedDigest {
  std::uint64_t value = 0;
  const std::string* state = nullptr;
};

Result<std::vector<WantedDigest>> wanted_digests(const Map& source, const Map& target, const ReshardOptions& options) {
  std::vector<WantedDigest> wanted;
  if (options.digest_state) {
    const std::string& state = *options.digest_state;
    const auto recorded = source.content_digests.find(state);
    if (recorded == source.content_digests.end()) {
      std::vector<std::string> states;
      for (const auto& [name, value] : source.content_digests) states.push_back(name);
      return fault::digest_not_recorded(state, states, "the source map");
    }
    const auto also = target.content_digests.find(state);
    if (also != target.content_digests.end() && also->second != recorded->second) {
      return fault::digest_records_differ(state, recorded->second, also->second);
    }
    wanted.push_back({recorded->second, &state});
  }
  if (options.expected_digest) wanted.push_back({*options.expected_digest, nullptr});
  return wanted;
}

// digest(F) as `shards` hold it through `map`: the shares of contract 10, added up.
Result<std::uint64_t> digest_through(const Map& map, const ShardSet& shards, int scale_power) {
  auto shares = digest_shares(map, shards, scale_power);
  if (!shares) return shares.error();
  std::uint64_t sum = 0;
  for (const auto& [rank, share] : shares.value()) sum += share;
  return sum;
}

Status verify_digest(const Map& map, const ShardSet& shards, int scale_power, const std::vector<WantedDigest>& wanted,
                     fault::Digested digested) {
  auto actual = digest_through(map, shards, scale_power);
  if (!actual) return actual.error();
  for (const WantedDigest& w : wanted) {
    if (w.value != actual.value()) return fault::digest_differs(actual.value(), w.value, w.state, digested);
  }
  return {};
}

// A plan reads a replicated element once and writes it to every target holder, so every
// copy in the target shards must equal its lowest holder's, which is the copy the target
// side's digest counted.
Status verify_target_replicas(const Map& target, const ShardSet& shards, DType dtype, const ReshardOptions& options) {
  auto checks = detail::replica_checks_of(target, options);
  if (!checks) return checks.error();
  Status status = compare_replicas(checks.value(), shards, dtype);
  if (status.ok()) return status;
  const Error& error = status.error();
  return reworded(error, "in the target shards the plan wrote, " + error.sentence);
}

}  // namespace

Result<ShardSet> reshard(const Map& source, const Map& target, const ShardSet& source_shards, DType dtype,
                         const ReshardOptions& options) {
  auto made = plan(source, target, options);
  if (!made) return made.error();
  auto shards = execute(made.value(), source_shards, dtype);
  if (!shards) return shards.error();
  if (!options.expected_digest && !options.digest_state) return shards;
  auto wanted = wanted_digests(source, target, options);
  if (!wanted) return wanted.error();
  // The source side first: a mismatch there is the shards or the source map, and only
  // with that settled does a mismatch on the target side point at the copies.
  if (Status status = verify_digest(source, source_shards, options.scale_power, wanted.value(), fault::Digested::source_shards);
      !status.ok()) {
    return std::move(status).error();
  }
  if (Status status =
          verify_digest(target, shards.value(), options.scale_power, wanted.value(), fault::Digested::target_shards);
      !status.ok()) {
    return std::move(status).error();
  }
  if (Status status = verify_target_replicas(target, shards.value(), dtype, options); !status.ok()) {
    return std::move(status).error();
  }
  return shards;
}

Json plan_to_json(const Plan& plan) {
  auto list = [](const auto& values) {
    Json out = Json::array();
    for (Index v : values) out.push_back(v);
    return out;
  };
  Json segments = Json::array();
  for (const TransferSegment& s : plan.segments) {
    Json segment = Json::object();
    segment["shape"] = list(s.shape);
    segment["source"] = Json::array({s.source_rank, s.source.offset, list(s.source.strides)});
    segment["target"] = Json::array({s.target_rank, s.target.offset, list(s.target.strides)});
    segments.push_back(std::move(segment));
  }
  const PlanStatistics& st = plan.statistics;
  Json read = Json::object();
  for (const auto& [rank, n] : st.elements_read) read[std::to_string(rank)] = n;
  Json pairs = Json::array();
  for (const auto& [pair, n] : st.elements_by_pair) pairs.push_back(Json::array({pair.first, pair.second, n}));
  Json out = Json::object();
  out["logical_shape"] = list(plan.logical_shape);
  out["segments"] = std::move(segments);
  out["statistics"] = {{"segments", st.segments},
                       {"elements_moved", st.elements_moved},
                       {"elements_read_by_source_rank", std::move(read)},
                       {"elements_by_rank_pair", std::move(pairs)},
                       {"replica_checks", st.replica_checks}};
  return out;
}

}  // namespace shardcheck
