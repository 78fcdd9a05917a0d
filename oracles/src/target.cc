// The built-in targets (shardcheck's strict and legacy policies), the table of named
// targets, the target factory and the protocol's base64.
#include "shardcheck/oracles/target.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "target_exec.h"

namespace shardcheck::oracles {

std::string TargetRefusal::to_string() const {
  if (error) return error->to_string();
  if (kind) return fmt::format("{}: {}{}", kind_name(*kind), type.empty() ? "" : type + ": ", message);
  return fmt::format("unknown ({}): {}", type.empty() ? "no type" : type, message);
}

std::string_view fault_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::crash: return "crash";
    case FaultKind::timeout: return "timeout";
    case FaultKind::garbage: return "garbage";
  }
  return "crash";
}

namespace {

TargetRefusal refusal_of(Error error) {
  TargetRefusal r;
  r.kind = error.kind;
  r.type = std::string(kind_name(error.kind));
  r.message = error.message;
  r.error = std::move(error);
  return r;
}

// A built-in policy. It needs the decoded map; a map that exists only as JSON is
// decoded here, and one that does not decode is refused like any other bad input.
class PolicyTarget final : public Target {
 public:
  PolicyTarget(const ConvertOptions& options, const ReshardOptions& reshard)
      : options_(options), reshard_(reshard), name_(policy_name(options.policy)) {}

  const std::string& name() const override { return name_; }
  bool judges_kinds() const override { return options_.policy == Policy::strict; }
  bool is_legacy_model() const override { return options_.policy == Policy::legacy; }

  TargetResult<Accepted> check(const TargetMap& map) override {
    return with_map(map, [&](const Map& m) -> TargetResult<Accepted> {
      Status status = options_.policy == Policy::legacy ? legacy_check(m) : check_map(m, options_.checks);
      if (!status.ok()) return refusal_of(status.error());
      return Accepted{};
    });
  }

  TargetResult<TensorAnswer> rebuild(const TargetMap& map, const ShardSet& shards, DType dtype,
                               int scale_power, const DigestRequest& digest) override {
    return with_map(map, [&](const Map& m) -> TargetResult<TensorAnswer> {
      ConvertOptions options = options_;
      options.scale_power = scale_power;
      options.expected_digest = digest.expected;
      options.digest_state = digest.state;
      auto result = shardcheck::rebuild(m, shards, dtype, options);
      if (!result) return refusal_of(result.error());
      return std::move(result.value());
    });
  }

  TargetResult<TensorAnswer> extract(const TargetMap& map, const Buffer& full, Rank rank,
                               int scale_power) override {
    return with_map(map, [&](const Map& m) -> TargetResult<TensorAnswer> {
      ConvertOptions options = options_;
      options.scale_power = scale_power;
      auto result = shardcheck::extract(m, full, rank, options);
      if (!result) return refusal_of(result.error());
      return std::move(result.value());
    });
  }

  // The legacy model has no planner (DeepSpeed before the fix had none).
  bool supports(Op op) const override { return op != Op::reshard || options_.policy == Policy::strict; }

  // A plan copies and never rescales (contract 11): the scale power only says which F
  // a digest is of.
  TargetResult<Resharded> reshard(const TargetMap& source, const TargetMap& target, const ShardSet& shards,
                                  DType dtype, int scale_power, const DigestRequest& digest) override {
    if (!supports(Op::reshard)) return unsupported(Op::reshard, name_);
    return with_map(source, [&](const Map& from) -> TargetResult<Resharded> {
      return with_map(target, [&](const Map& to) -> TargetResult<Resharded> {
        ReshardOptions options = reshard_;
        options.checks = options_.checks;
        options.expected_digest = digest.expected;
        options.digest_state = digest.state;
        options.scale_power = scale_power;
        auto result = shardcheck::reshard(from, to, shards, dtype, options);
        if (!result) return refusal_of(result.error());
        return Resharded{std::move(result.value()), std::nullopt};
      });
    });
  }

 private:
  template <class Fn>
  auto with_map(const TargetMap& map, Fn&& fn) -> decltype(fn(std::declval<const Map&>())) {
    if (map.map != nullptr) return fn(*map.map);
    if (map.text != nullptr) {
      auto decoded = parse_one_map(*map.text, "$.map_text");
      if (!decoded) return refusal_of(decoded.error());
      return fn(decoded.value());
    }
    if (map.json == nullptr) return refusal_of(make_error(ErrorKind::format, "no map was given"));
    auto decoded = decode_map(*map.json);
    if (!decoded) return refusal_of(decoded.error());
    return fn(decoded.value());
  }

  ConvertOptions options_;
  ReshardOptions reshard_;
  std::string name_;
};

constexpr NamedTarget kNamedTargets[] = {
    {"strict", Policy::strict, "", "shardcheck's strict policy: refused or bit-exact (contract 4)"},
    {"legacy", Policy::legacy, "", "DeepSpeed before the fix, as shardcheck models it (contract 4.1)"},
    {"deepspeed", std::nullopt, "adapters/deepspeed/serve.py",
     "DeepSpeed's released deepspeed/checkpoint/affine.py (contract 4.2), loaded by path from its sdist"},
    {"dcp", std::nullopt, "adapters/dcp/serve.py",
     "PyTorch Distributed Checkpoint's own save and load of maps whose pieces are boxes (torch 2: scripts/torch2-env.sh)"},
    {"megatron", std::nullopt, "adapters/megatron/serve.py",
     "Megatron-Core's validate_sharding_integrity, torch_dist save and refit planner (torch 2: scripts/torch2-env.sh)"},
    {"deepspeed-restore", std::nullopt, "adapters/deepspeed/restore.py",
     "DeepSpeed's universal checkpoint restore (load_hp_checkpoint_state) as extract: its map path, its silent "
     "legacy fallback, its scale power per optimizer state"},
    {"deepspeed-convert", std::nullopt, "adapters/deepspeed/convert.py",
     "DeepSpeed's ds_to_universal.merge_tp_slices as rebuild: TP slices merged through the map per optimizer state"},
};

constexpr std::string_view kExecPrefix = "exec:";

}  // namespace

TargetResult<Resharded> Target::reshard(const TargetMap&, const TargetMap&, const ShardSet&, DType, int,
                                        const DigestRequest&) {
  return unsupported(Op::reshard, name());
}

TargetRefusal unsupported(Op op, const std::string& target_name) {
  TargetRefusal r;
  r.type = std::string(kUnsupportedType);
  r.message = fmt::format("{} does not implement {}", target_name, op_name(op));
  return r;
}

std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           std::string_view("-_./:=,+").find(ch) != std::string_view::npos;
  });
  if (plain) return text;
  std::string out = "'";
  for (char ch : text) {
    if (ch == '\'') out += "'\\''";
    else out += ch;
  }
  return out + "'";
}

std::unique_ptr<Target> make_policy_target(const ConvertOptions& options, const ReshardOptions& reshard) {
  return std::make_unique<PolicyTarget>(options, reshard);
}

std::span<const NamedTarget> named_targets() { return kNamedTargets; }

namespace {
// $SHARDCHECK_<NAME>_<WHAT>, NAME upper case with '-' as '_' (a valid variable name).
const char* target_variable(const NamedTarget& target, std::string_view what) {
  std::string variable = "SHARDCHECK_";
  for (char ch : target.name) {
    variable += ch == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  }
  variable += '_';
  variable += what;
  const char* value = std::getenv(variable.c_str());
  return value != nullptr && *value != '\0' ? value : nullptr;
}
}  // namespace

std::string adapter_command(const NamedTarget& target) {
  if (const char* command = target_variable(target, "COMMAND")) return command;
  namespace fs = std::filesystem;
  const fs::path relative(target.adapter);
  fs::path script = relative;
  std::error_code ec;
#ifdef SHARDCHECK_SOURCE_TREE
  if (!fs::exists(script, ec)) script = fs::path(SHARDCHECK_SOURCE_TREE) / relative;
#endif
  // exec: the interpreter takes the shell's place, so it is the process the harness
  // watches, signals and outlives.
  return "exec " + shell_word(adapter_python(target)) + " " + shell_word(script.string());
}

std::string adapter_python(const NamedTarget& target) {
  // A torch 2 environment for every adapter: scripts/torch2-env.sh.
  if (const char* chosen = target_variable(target, "PYTHON")) return chosen;
  if (const char* every = std::getenv("SHARDCHECK_TARGET_PYTHON"); every != nullptr && *every != '\0') return every;
  return "/usr/bin/python3";
}

MadeTarget make_target(std::string_view spec, const TargetOptions& options) {
  MadeTarget made;
  std::string command;
  const auto row = std::find_if(std::begin(kNamedTargets), std::end(kNamedTargets),
                                [&](const NamedTarget& t) { return t.name == spec; });
  if (row != std::end(kNamedTargets) && row->policy) {
    ConvertOptions convert = options.convert;
    convert.policy = *row->policy;
    made.target = make_policy_target(convert, options.reshard);
    return made;
  }
  if (row != std::end(kNamedTargets)) {
    command = adapter_command(*row);
  } else if (spec.substr(0, kExecPrefix.size()) == kExecPrefix) {
    command = std::string(spec.substr(kExecPrefix.size()));
    if (command.empty()) {
      made.error = "exec: needs a command, e.g. exec:'python3 my_impl.py'";
      return made;
    }
  } else {
    std::string names;
    for (const NamedTarget& t : kNamedTargets) names += std::string(t.name) + ", ";
    made.error = fmt::format("unknown target '{}' ({}or exec:COMMAND)", spec, names);
    return made;
  }
  auto target = std::make_unique<ExecTarget>(std::string(spec), command, options);
  if (std::string error = target->start(); !error.empty()) {
    made.error = fmt::format("target {} did not start: {}", spec, error);
    return made;
  }
  made.target = std::move(target);
  return made;
}

namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
  if (ch >= '0' && ch <= '9') return ch - '0' + 52;
  if (ch == '+') return 62;
  if (ch == '/') return 63;
  return -1;
}

}  // namespace

std::string base64_encode(const std::byte* data, std::size_t size) {
  std::string out;
  out.reserve((size + 2) / 3 * 4);
  std::size_t i = 0;
  auto at = [&](std::size_t k) { return static_cast<std::uint32_t>(std::to_integer<unsigned char>(data[k])); };
  for (; i + 3 <= size; i += 3) {
    const std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (size - i == 1) {
    const std::uint32_t v = at(i) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (size - i == 2) {
    const std::uint32_t v = (at(i) << 16) | (at(i + 1) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::vector<std::byte>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::vector<std::byte> out;
  out.reserve(text.size() / 4 * 3);
  for (std::size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int s[4];
    int padding = 0;
    for (int k = 0; k < 4; ++k) {
      const char ch = text[i + k];
      if (ch == '=' && last && k >= 2) {
        s[k] = 0;
        ++padding;
        continue;
      }
      if (padding > 0) return std::nullopt;  // data after padding
      s[k] = sextet(ch);
      if (s[k] < 0) return std::nullopt;
    }
    const std::uint32_t v = (static_cast<std::uint32_t>(s[0]) << 18) | (static_cast<std::uint32_t>(s[1]) << 12) |
                            (static_cast<std::uint32_t>(s[2]) << 6) | static_cast<std::uint32_t>(s[3]);
    out.push_back(static_cast<std::byte>((v >> 16) & 0xff));
    if (padding < 2) out.push_back(static_cast<std::byte>((v >> 8) & 0xff));
    if (padding < 1) out.push_back(static_cast<std::byte>(v & 0xff));
  }
  return out;
}

}  // namespace shardcheck::oracles
