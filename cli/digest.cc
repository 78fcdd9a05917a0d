// `shardcheck digest`: the content digest (contract 10) of the tensor a map and
// its shards describe, and each rank's share, so that a producer's recorded value can be
// checked by hand.
//
//   shardcheck digest MAP.json [--dtype D] [--scale-power P] [--state S] [--param NAME] SHARD...
//   shardcheck digest CASE.json [--state S]
//
// A SHARD is a raw little-endian file of the rank's elements, given as RANK=PATH, or as
// PATH alone for the map's ranks with a shard shape in increasing rank order.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <variant>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/case.h"
#include "shardcheck/checks.h"
#include "shardcheck/convert.h"
#include "shardcheck/digest.h"
#include "shardcheck/json.h"

namespace shardcheck::cli {

namespace {

struct DigestArgs {
  std::string path;
  std::vector<std::string> shards;
  std::string dtype = "float32";
  int scale_power = 1;
  std::optional<std::string> state;
  std::optional<std::string> param;
};

struct Usage {
  std::string message;
};

// What the digest is computed from, whichever form the input has.
struct Subject {
  Map map;
  ShardSet shards;
  int scale_power = 1;
  std::optional<std::uint64_t> truth_digest;  // a case with a separate truth map: digest(F)
  std::optional<Error> refused;               // a case whose map under test does not decode
  std::optional<std::uint64_t> case_digest;   // a case's `digest`
  std::optional<std::string> case_state;      // a case's `digest_state`
};

std::optional<Rank> rank_prefix(const std::string& arg, std::string& path) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) return std::nullopt;
  Rank rank = 0;
  for (std::size_t i = 0; i < eq; ++i) {
    if (arg[i] < '0' || arg[i] > '9') return std::nullopt;
    auto next = checked_mul(rank, 10);
    if (next) next = checked_add(*next, arg[i] - '0');
    if (!next) return std::nullopt;
    rank = *next;
  }
  path = arg.substr(eq + 1);
  return rank;
}

// A shard file's bytes: at most the input limit, and no more than one byte past what the
// map's shard for its rank takes (`expected`), so that /dev/zero given as a shard is read
// that far, not to the limit.
Result<Buffer> read_shard(const std::string& path, DType dtype, std::optional<std::uint64_t> expected, Rank rank,
                          std::string& usage) {
  InputRules raw_bytes;  // the input limit of every reader, but no JSON text
  raw_bytes.json = false;
  if (expected && *expected < raw_bytes.max_bytes) {
    raw_bytes.max_bytes = *expected + 1;
    raw_bytes.refuse_past_limit = false;
  }
  FileText file = read_input(path, raw_bytes);
  if (!file.text) {
    usage = file.error;
    return make_error(ErrorKind::format, file.error);
  }
  if (expected && file.text->size() > *expected) {
    usage = fmt::format("{} holds more than the {} bytes of rank {}'s shard", path, *expected, rank);
    return make_error(ErrorKind::format, usage);
  }
  const std::size_t size = element_size(dtype);
  if (file.text->size() % size != 0) {
    usage = fmt::format("{} holds {} bytes, not a whole number of {} elements of {} bytes", path,
                        file.text->size(), dtype_name(dtype), size);
    return make_error(ErrorKind::format, usage);
  }
  Buffer shard(dtype, static_cast<Index>(file.text->size() / size));
  if (!file.text->empty()) std::memcpy(shard.data(), file.text->data(), file.text->size());
  return shard;
}

// The bytes of the shard the map gives `rank`, when it gives one and its size is a number.
std::optional<std::uint64_t> shard_bytes(const Map& map, Rank rank, DType dtype) {
  for (const auto& entry : map.ranks) {
    if (entry.rank != rank || !entry.shard_shape) continue;
    const auto numel = checked_numel(*entry.shard_shape);
    const auto bytes = numel ? checked_mul(*numel, static_cast<Index>(element_size(dtype))) : std::nullopt;
    if (bytes && *bytes >= 0) return static_cast<std::uint64_t>(*bytes);
  }
  return std::nullopt;
}

std::variant<Subject, Usage> from_map(const DigestArgs& args, const Json& json) {
  auto document = decode_document(json);
  if (!document) return Usage{document.error().to_string()};
  const auto& params = document.value();
  const NamedMap* chosen = nullptr;
  if (args.param) {
    for (const auto& p : params) {
      if (p.name == *args.param) chosen = &p;
    }
    if (chosen == nullptr) return Usage{fmt::format("the envelope has no parameter \"{}\"", *args.param)};
  } else if (params.size() == 1) {
    chosen = &params.front();
  } else {
    return Usage{"the envelope holds several parameters; name one with --param"};
  }
  Subject subject;
  if (!chosen->map) return Usage{chosen->map.error().to_string()};
  subject.map = chosen->map.value();
  subject.scale_power = args.scale_power;
  auto dtype = parse_dtype(args.dtype);
  if (!dtype) return Usage{fmt::format("unknown dtype \"{}\"", args.dtype)};

  std::vector<Rank> in_order;
  for (const auto& entry : subject.map.ranks) {
    if (entry.shard_shape) in_order.push_back(entry.rank);
  }
  std::sort(in_order.begin(), in_order.end());
  std::size_t positional = 0;
  bool named = false;
  for (const std::string& arg : args.shards) {
    std::string path = arg;
    std::optional<Rank> rank = rank_prefix(arg, path);
    if (rank) {
      named = true;
    } else {
      if (positional == in_order.size()) {
        return Usage{fmt::format("more shard files than the map's {} ranks with a shard", in_order.size())};
      }
      rank = in_order[positional++];
    }
    if (named && positional > 0) return Usage{"give every shard as RANK=PATH, or none"};
    std::string problem;
    auto shard = read_shard(path, *dtype, shard_bytes(subject.map, *rank, *dtype), *rank, problem);
    if (!shard) return Usage{problem};
    if (!subject.shards.emplace(*rank, std::move(shard.value())).second) {
      return Usage{fmt::format("two shard files for rank {}", *rank)};
    }
  }
  return subject;
}

std::variant<Subject, Usage> from_case(const DigestArgs& args, const Json& json) {
  if (!args.shards.empty()) return Usage{"a case file carries its own shards; give no shard files"};
  auto decoded = decode_case(json);
  if (!decoded) return Usage{decoded.error().to_string()};
  const Case& c = decoded.value();
  Subject subject;
  subject.map = c.map;
  subject.scale_power = c.scale_power;
  subject.case_digest = c.digest;
  subject.case_state = c.digest_state;
  if (Status undecoded = undecoded_map_error(c); !undecoded.ok()) {
    subject.refused = undecoded.error();
    return subject;
  }
  if (c.shards) {
    for (const auto& [rank, values] : *c.shards) {
      Buffer shard(c.dtype, static_cast<Index>(values.size()));
      for (std::size_t i = 0; i < values.size(); ++i) shard.set_bits(static_cast<Index>(i), values[i]);
      subject.shards.emplace(rank, std::move(shard));
    }
    return subject;
  }
  // As the truth oracle writes them: F (given, or markers) extracted through the truth map.
  // A map alone that is invalid is refused by the shares themselves.
  const Map& truth = c.truth_map();
  if (Status e = check_map(truth); !e.ok()) {
    if (!c.truth) return subject;
    return Usage{"the truth map is refused: " + e.error().to_string()};
  }
  const Index numel = checked_numel(truth.logical_shape).value_or(0);
  constexpr Index kMaxElements = Index{1} << 26;
  if (numel > kMaxElements) return Usage{fmt::format("F holds {} elements, more than {}", numel, kMaxElements)};
  Buffer full = marker_buffer(c.dtype, numel);
  if (c.full) {
    if (static_cast<Index>(c.full->size()) != numel) {
      return Usage{fmt::format("the case's full tensor has {} values but F holds {}", c.full->size(), numel)};
    }
    for (Index i = 0; i < numel; ++i) full.set_bits(i, (*c.full)[static_cast<std::size_t>(i)]);
  }
  ConvertOptions options;
  options.scale_power = c.scale_power;
  auto shards = extract_all(truth, full, options);
  if (!shards) return Usage{"the truth map cannot write the shards: " + shards.error().to_string()};
  subject.shards = std::move(shards.value());
  if (c.truth) subject.truth_digest = digest(full);
  return subject;
}

int run_digest(const DigestArgs& args) {
  const std::optional<Json> json = read_json_file(args.path);
  if (!json) return kExitUsage;
  const bool is_case = json->is_object() && json->contains("shardcheck_case");
  auto subject = is_case ? from_case(args, *json) : from_map(args, *json);
  if (auto* usage = std::get_if<Usage>(&subject)) {
    fmt::print(stderr, "shardcheck: {}: {}\n", args.path, usage->message);
    return kExitUsage;
  }
  const Subject& s = std::get<Subject>(subject);
  if (s.refused) {
    fmt::print("refused {}\n", s.refused->to_string());
    return kExitFound;
  }
  auto shares = digest_shares(s.map, s.shards, s.scale_power);
  if (!shares) {
    fmt::print("refused {}\n", shares.error().to_string());
    return kExitFound;
  }
  std::uint64_t total = 0;
  for (const auto& [rank, share] : shares.value()) total += share;
  fmt::print("digest {}\n", format_digest(total));
  for (const auto& [rank, share] : shares.value()) fmt::print("rank {} share {}\n", rank, format_digest(share));
  if (s.truth_digest && *s.truth_digest != total) {
    fmt::print("truth digest {} (F as the truth map wrote it; the map under test describes another tensor)\n",
               format_digest(*s.truth_digest));
  }
  int exit_code = kExitOk;
  auto compare = [&](const std::string& label, std::uint64_t recorded) {
    const bool same = recorded == total;
    fmt::print("recorded {} {} {}\n", label, format_digest(recorded), same ? "matches" : "DIFFERS");
    if (!same) exit_code = kExitFound;
  };
  std::vector<std::string> states;
  if (args.state) states.push_back(*args.state);
  if (s.case_state && s.case_state != args.state) states.push_back(*s.case_state);
  for (const std::string& state : states) {
    auto it = s.map.content_digests.find(state);
    if (it == s.map.content_digests.end()) {
      fmt::print("recorded {}: none\n", state);
      exit_code = kExitFound;
    } else {
      compare(state, it->second);
    }
  }
  if (s.case_digest) compare("digest", *s.case_digest);
  return exit_code;
}

}  // namespace

void register_digest(CLI::App& app, RunState& state) {
  auto args = std::make_shared<DigestArgs>();
  CLI::App* sub = app.add_subcommand(
      "digest", "Print the content digest of F and each rank's share, from a map and its shards or a case file");
  sub->add_option("input", args->path, "map JSON (bare or envelope) or case file")->required();
  sub->add_option("shards", args->shards, "raw little-endian shard files: RANK=PATH, or PATH in rank order");
  sub->add_option("--dtype", args->dtype, "element type of the shard files (default float32)");
  add_int_option(sub, "--scale-power", args->scale_power, std::numeric_limits<int>::min(),
                 std::numeric_limits<int>::max(), "p of contract section 1.2 (default 1)");
  sub->add_option("--state", args->state, "compare with the map's content_digests entry for this state");
  sub->add_option("--param", args->param, "the parameter of an envelope");
  add_max_input_bytes_option(sub);
  sub->callback([args, &state] { state.exit_code = run_digest(*args); });
}

}  // namespace shardcheck::cli
