// Transfer plans (contract 11): execution through a backend, and reshard() with its
// digests. plan() is in reshard_plan.cc; see reshard.h for the contract of each.
#include "shardcheck/reshard.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "reshard_internal.h"
#include "shardcheck/digest.h"

namespace shardcheck {

namespace {

// The CPU backend keeps no state between calls (its scratch is per thread), so one serves
// every caller that names no backend.
Backend& backend_or_cpu(Backend* backend) {
  static const std::unique_ptr<Backend> cpu = make_cpu_backend();
  return backend != nullptr ? *backend : *cpu;
}

// Whether the view of `segment` stays inside a buffer of `numel` elements.
bool inside(const Extents& shape, const StridedView& view, Index numel) {
  for (Index s : view.strides) {
    if (s < 0) return false;
  }
  if (view.offset < 0 || view.strides.size() != shape.size()) return false;
  const auto facts = span_facts(shape, view);
  return facts && (facts->empty || facts->max_address < numel);
}

// A plan runs where its shards are, on a backend that reaches that memory, and in one
// memory: the device code has no copy between a host buffer and a device's (CUDA's
// batches reach device memory only). Anything else is a caller's mistake, not the plan's:
// std::invalid_argument, as for a conversion. With no shard at all, the memory the
// backend's results go to by default (host where it reaches it).
Memory memory_of(Backend& backend, const ShardSet& sources, const ShardSet* targets) {
  std::optional<std::pair<std::string, Memory>> first;
  auto visit = [&](const ShardSet& shards, const char* side) {
    for (const auto& [rank, shard] : shards) {
      std::string what = fmt::format("{} rank {}'s shard", side, rank);
      expect_reaches(backend, shard, what);
      if (!first) {
        first = {std::move(what), shard.memory()};
      } else if (shard.memory() != first->second) {
        throw std::invalid_argument(fmt::format("{} is in {} memory and {} in {}: a plan executes in one memory",
                                                first->first, memory_name(first->second), what,
                                                memory_name(shard.memory())));
      }
    }
  };
  visit(sources, "source");
  if (targets != nullptr) visit(*targets, "target");
  if (first) return first->second;
  return backend.reaches(Memory::host) ? Memory::host : Memory::device;
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

Status check_targets(const Plan& plan, const ShardSet& targets, DType dtype) {
  for (const auto& [rank, numel] : plan.target_numel) {
    const auto it = targets.find(rank);
    if (it == targets.end()) {
      return make_error(ErrorKind::shape, fmt::format("no buffer was given for target rank {}'s shard", rank),
                        Where::in_rank(rank));
    }
    if (it->second.dtype() != dtype) return fault::shard_dtype(rank, it->second.dtype(), dtype);
    if (it->second.numel() != numel) return fault::shard_numel(rank, it->second.numel(), numel);
  }
  for (const auto& [rank, buffer] : targets) {
    if (!plan.target_numel.contains(rank)) return fault::unlisted_shard(rank);
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

// A segment as the backends' block: its shape through its two views, bits unchanged
// (scale 1: a plan never rescales). Views checked (check_views): its numel fits.
BlockCopy segment_block(const TransferSegment& s) {
  BlockCopy block;
  block.shape = &s.shape;
  block.from_view = &s.source;
  block.to_view = &s.target;
  block.numel = checked_numel(s.shape).value_or(0);
  return block;
}

// The copies of a plan as one batch (Backend::copy_blocks): the backend chooses the order,
// the threads and whether rows stream around the caches, since the segments of a plan
// write disjoint target addresses. Empty segments move nothing, and their ranks need no
// shard (check_views lets them name one that has none).
void copy_segments(const Plan& plan, const ShardSet& sources, ShardSet& targets, DType dtype, Backend& backend,
                   const Threading& threading) {
  std::vector<BlockCopy> blocks;
  blocks.reserve(plan.segments.size());
  for (const TransferSegment& s : plan.segments) {
    BlockCopy block = segment_block(s);
    if (block.numel == 0) continue;
    block.from = sources.at(s.source_rank).data();
    block.to = targets.at(s.target_rank).data();
    blocks.push_back(block);
  }
  backend.copy_blocks(dtype, blocks, threading);
}

// Each replica check (TransferSegment: the holder read, another holder's view of the same
// elements in its own shard of `shards`) bit for bit on the backend, where the shards are.
// The first mismatch in (check, row-major index) order is refused, naming both holders,
// their addresses and their bits (read through the backend: device memory included).
Status compare_replicas(const std::vector<TransferSegment>& checks, const ShardSet& shards, DType dtype,
                        Backend& backend, const Threading& threading) {
  std::vector<BlockCopy> blocks;
  std::vector<const TransferSegment*> compared;
  for (const TransferSegment& s : checks) {
    BlockCopy block = segment_block(s);
    if (block.numel == 0) continue;
    block.from = shards.at(s.source_rank).data();
    // compare_blocks only reads its destination; the other holder's shard is an input
    // and may be borrowed read-only, so its const data() is the one taken.
    block.to = const_cast<std::byte*>(shards.at(s.target_rank).data());
    blocks.push_back(block);
    compared.push_back(&s);
  }
  if (blocks.empty()) return {};
  const std::optional<BlockMismatch> mismatch = backend.compare_blocks(dtype, blocks, threading);
  if (!mismatch) return {};
  const TransferSegment& s = *compared[mismatch->block];
  const Index held = address_at(s.shape, s.source, mismatch->k);
  const Index other = address_at(s.shape, s.target, mismatch->k);
  return fault::replica_holders_differ(s.source_rank, held, s.target_rank, other, dtype,
                                       backend.element_bits(shards.at(s.source_rank), held),
                                       backend.element_bits(shards.at(s.target_rank), other));
}

}  // namespace

Status execute_into(const Plan& plan, const ShardSet& source_shards, ShardSet& target_shards, Backend* backend,
                    const Threading& threading) {
  Backend& on = backend_or_cpu(backend);
  memory_of(on, source_shards, &target_shards);  // for its refusals: the shards stay where they are
  DType dtype = DType::float32;
  if (!source_shards.empty())
    dtype = source_shards.begin()->second.dtype();
  else if (!target_shards.empty())
    dtype = target_shards.begin()->second.dtype();
  if (Status status = check_sources(plan, source_shards, dtype); !status.ok()) return status;
  if (Status status = check_targets(plan, target_shards, dtype); !status.ok()) return status;
  if (Status status = check_scales(plan, dtype); !status.ok()) return status;
  if (Status status = check_views(plan, source_shards, target_shards); !status.ok()) return status;
  if (Status status = compare_replicas(plan.replica_checks, source_shards, dtype, on, threading); !status.ok()) {
    return status;
  }
  copy_segments(plan, source_shards, target_shards, dtype, on, threading);
  return {};
}

Result<ShardSet> execute(const Plan& plan, const ShardSet& source_shards, DType dtype, Backend* backend,
                         const Threading& threading) {
  Backend& on = backend_or_cpu(backend);
  const Memory where = memory_of(on, source_shards, nullptr);
  if (Status status = check_sources(plan, source_shards, dtype); !status.ok()) return std::move(status).error();
  ShardSet out;
  // Every address of a target shard is written by exactly one segment (the plan's
  // construction; a wrong plan is what the truth oracle exists to catch).
  for (const auto& [rank, numel] : plan.target_numel) out.emplace(rank, on.allocate(dtype, numel, where));
  if (Status status = execute_into(plan, source_shards, out, &on, threading); !status.ok()) {
    return std::move(status).error();
  }
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
// digest_shares reads shards on the host, so shards in a device's memory are copied to
// the host first, one side at a time (a digest is asked for rarely, and the copy costs
// what the shares' own pass over the data does).
Result<std::uint64_t> digest_through(const Map& map, const ShardSet& shards, int scale_power, Backend& backend) {
  const bool on_host = std::all_of(shards.begin(), shards.end(),
                                   [](const auto& entry) { return entry.second.memory() == Memory::host; });
  const ShardSet copies = on_host ? ShardSet{} : copy_shards_to(backend, shards, Memory::host);
  auto shares = digest_shares(map, on_host ? shards : copies, scale_power);
  if (!shares) return shares.error();
  std::uint64_t sum = 0;
  for (const auto& [rank, share] : shares.value()) sum += share;
  return sum;
}

Status verify_digest(const Map& map, const ShardSet& shards, int scale_power, const std::vector<WantedDigest>& wanted,
                     fault::Digested digested, Backend& backend) {
  auto actual = digest_through(map, shards, scale_power, backend);
  if (!actual) return actual.error();
  for (const WantedDigest& w : wanted) {
    if (w.value != actual.value()) return fault::digest_differs(actual.value(), w.value, w.state, digested);
  }
  return {};
}

// A plan reads a replicated element once and writes it to every target holder, so every
// copy in the target shards must equal its lowest holder's, which is the copy the target
// side's digest counted.
Status verify_target_replicas(const Map& target, const ShardSet& shards, DType dtype, const ReshardOptions& options,
                              Backend& backend) {
  auto checks = detail::replica_checks_of(target, options);
  if (!checks) return checks.error();
  Status status = compare_replicas(checks.value(), shards, dtype, backend, options.threading);
  if (status.ok()) return status;
  const Error& error = status.error();
  return reworded(error, "in the target shards the plan wrote, " + error.sentence);
}

// The checks of contract 10 after the copy: the source side first, since a mismatch there
// is the shards or the source map, and only with that settled does a mismatch on the
// target side point at the copies.
Status verify_digests(const Map& source, const Map& target, const ShardSet& source_shards, const ShardSet& written,
                      DType dtype, const ReshardOptions& options, Backend& backend) {
  auto wanted = wanted_digests(source, target, options);
  if (!wanted) return wanted.error();
  if (Status status = verify_digest(source, source_shards, options.scale_power, wanted.value(),
                                    fault::Digested::source_shards, backend);
      !status.ok()) {
    return status;
  }
  if (Status status =
          verify_digest(target, written, options.scale_power, wanted.value(), fault::Digested::target_shards, backend);
      !status.ok()) {
    return status;
  }
  return verify_target_replicas(target, written, dtype, options, backend);
}

}  // namespace

Result<ShardSet> reshard(const Map& source, const Map& target, const ShardSet& source_shards, DType dtype,
                         const ReshardOptions& options) {
  auto made = plan(source, target, options);
  if (!made) return made.error();
  Backend& backend = backend_or_cpu(options.backend);
  auto shards = execute(made.value(), source_shards, dtype, &backend, options.threading);
  if (!shards) return shards.error();
  if (!options.expected_digest && !options.digest_state) return shards;
  if (Status status = verify_digests(source, target, source_shards, shards.value(), dtype, options, backend);
      !status.ok()) {
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
