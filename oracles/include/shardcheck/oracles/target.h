// Implementations under test. Every case can be judged against any implementation of
// the contract, not only shardcheck's own: one interface (check, rebuild, extract), three
// kinds of target behind it.
//
//   strict          shardcheck's strict policy (the default)
//   legacy          shardcheck's model of DeepSpeed before the fix (contract 4.1)
//   exec:COMMAND    any program speaking the JSON-lines protocol of docs/protocol.md on
//                   its stdin/stdout; the process is kept alive across requests
//   deepspeed       exec: of adapters/deepspeed/serve.py, DeepSpeed's own module
//
// An exec target that crashes, hangs past its timeout or answers something that is not a
// well-formed response yields a TargetFault: the harness counts it as a finding, never as
// a pass, and starts a fresh process for the next request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "shardcheck/case.h"
#include "shardcheck/convert.h"
#include "shardcheck/json.h"
#include "shardcheck/reshard.h"

namespace shardcheck::oracles {

// What an implementation declined with before it fell back on another path: a documented
// slower one (DeepSpeed's UnsupportedLayoutError, whose fallback is rebuild then extract),
// or one it takes saying nothing (DeepSpeed's restore cutting the legacy chunk of F when
// the map does not list the rank), as its adapter reports it: a type and a text. What the
// fallback returns, or refuses, is what a caller gets.
struct Declined {
  std::string type;
  std::string message;
};

// A refusal in the implementation's own words. `kind` is shardcheck's kind when the
// target's error maps to one (built-ins always; exec targets through the response's
// `kind` field or the target's table of error texts), std::nullopt for "unknown".
// The error type of a refusal that says the target does not implement what was asked:
// an operation it does not serve (unsupported()), or, from an exec target, a case beyond
// what the implementation can express (docs/protocol.md, "Refusals").
inline constexpr std::string_view kUnsupportedType = "unsupported";

struct TargetRefusal {
  std::optional<ErrorKind> kind;
  std::string type;     // the implementation's error type, e.g. "ValueError"
  std::string message;  // its text
  std::optional<Error> error;  // built-ins: the full typed error
  std::optional<Declined> fallback;  // a refusal by the fallback it took (see Declined)
  // "<kind>: <message>" or "unknown (<type>): <message>"
  std::string to_string() const;
};

enum class FaultKind { crash, timeout, garbage };
std::string_view fault_name(FaultKind kind);  // "crash" | "timeout" | "garbage"

struct TargetFault {
  FaultKind kind = FaultKind::crash;
  std::string reason;  // short and stable (signatures): "exit-1", "signal-11", "not-json", ...
  std::string detail;  // for people: what came back, the tail of the target's stderr
};

template <class T>
using TargetResult = std::variant<T, TargetRefusal, TargetFault>;

struct Accepted {};  // a check that passed

// A rebuild's F or an extract's shard, and, where the implementation did not convert
// through the map but fell back on another path, what it declined (judged like any
// answer: it is what a caller gets; counted apart).
struct TensorAnswer {
  TensorAnswer(Buffer tensor) : tensor(std::move(tensor)) {}  // NOLINT: an answer is its tensor
  Buffer tensor;
  std::optional<Declined> fallback;
};

// A reshard's answer: the target shards, and where the implementation declined to plan
// the layout and made them by its documented fallback instead, what it declined with. A
// caller uses what the fallback returns, so it is judged like any answer, and counted
// apart.
struct Resharded {
  ShardSet shards;
  std::optional<Declined> fallback;
};

// The map under test as handed to an implementation (contract 9: as the case holds it).
// `map`: decoded, when it decodes. `json`: the JSON as written, where the case keeps it
// (an exec target then sends those exact bytes, so rank keys such as "1" and "01" reach it
// unchanged). `text`: the map's text, where the case holds text ("map_text", or an inline
// map JSON could not hold): an exec target sends it as `map_text` and reads it itself.
// Without `json` or `text` the map is encoded in its own rank and piece order.
struct TargetMap {
  const Map* map = nullptr;
  const Json* json = nullptr;
  const std::string* text = nullptr;
};

// The content digest (contract 10) a rebuild or a reshard is asked to verify: a value the
// caller has, and/or the state whose record in the (source) map's content_digests counts.
// Empty: no digest is asked for. A target may ignore it; the truth oracle then judges what
// it returns by that digest itself (docs/protocol.md, "rebuild" and "reshard").
struct DigestRequest {
  std::optional<std::uint64_t> expected;
  std::optional<std::string> state;
  bool empty() const { return !expected && !state; }
};

class Target {
 public:
  virtual ~Target() = default;
  // "strict", "legacy", "deepspeed", "exec:..."
  virtual const std::string& name() const = 0;
  // Whether the case's kinds (expect_error, accept_errors) are judged, or only the verdict.
  virtual bool judges_kinds() const { return false; }
  // The legacy model is judged against a case's `legacy` expectations, not the contract's.
  virtual bool is_legacy_model() const { return false; }
  // Whether it reads the map itself (an exec target: DeepSpeed decodes the JSON with its
  // own from_dict), so that a map shardcheck's decoder refuses is still its to judge.
  // The built-in policies read maps with shardcheck's decoder.
  virtual bool reads_map_itself() const { return false; }

  // Conditions 1-6 on the map alone.
  virtual TargetResult<Accepted> check(const TargetMap& map) = 0;
  // F from the shards (flat, one per rank), all of `dtype`.
  virtual TargetResult<TensorAnswer> rebuild(const TargetMap& map, const ShardSet& shards, DType dtype,
                                       int scale_power, const DigestRequest& digest) = 0;
  // After a fork, in the child: let go of any process without signalling or waiting for
  // it (it is the parent's). The next request starts a process of the child's own.
  virtual void detach() {}

  // The shard of `rank` from F (flat).
  virtual TargetResult<TensorAnswer> extract(const TargetMap& map, const Buffer& full, Rank rank,
                                       int scale_power) = 0;

  // The operations it implements (as a cryptofuzz module declares its operations): the
  // oracle runs only these and reports the others as unsupported, so a new operation
  // breaks no target. Check, rebuild and extract are every target's; reshard is declared.
  virtual bool supports(Op op) const { return op == Op::rebuild || op == Op::extract; }
  // Contract 11: the target map's shards (one per rank with a shard shape) from the
  // source map's shards, through a transfer plan. The default answers "unsupported".
  virtual TargetResult<Resharded> reshard(const TargetMap& source, const TargetMap& target, const ShardSet& shards,
                                          DType dtype, int scale_power, const DigestRequest& digest);
};

// What a target answers for an operation it does not declare.
TargetRefusal unsupported(Op op, const std::string& target_name);

struct TargetOptions {
  double timeout_seconds = 10.0;          // per request, before the process counts as hung
  double startup_timeout_seconds = 120.0;  // start and handshake (imports can be slow)
  ConvertOptions convert;                 // built-ins: backend and planted bugs
  ReshardOptions reshard;                 // strict: how plans are made (budget, planted planner bugs)
};

// `text` as one word of a POSIX shell command: as it is when it holds only letters,
// digits and -_./:=,+, else single-quoted.
std::string shell_word(const std::string& text);

// A target from its name, or an error sentence. An exec target is started and
// handshaken here, so a command that cannot run is reported once, up front.
struct MadeTarget {
  std::unique_ptr<Target> target;
  std::string error;
};
MadeTarget make_target(std::string_view spec, const TargetOptions& options = {});

// A built-in policy as a target (no process, never fails to start).
std::unique_ptr<Target> make_policy_target(const ConvertOptions& options, const ReshardOptions& reshard = {});

// The named implementations, one row each (a new one is a row here and, for an exec
// target, its adapter script): the built-in policies, and adapters that serve another
// implementation over the protocol (docs/protocol.md). An adapter's refusals name their
// kind themselves (the protocol's `kind` field).
struct NamedTarget {
  std::string_view name;
  std::optional<Policy> policy;  // a built-in policy, or
  std::string_view adapter;      // the adapter script, relative to the repository
  std::string_view doc;
};
std::span<const NamedTarget> named_targets();

// The command an adapter runs: $SHARDCHECK_<NAME>_COMMAND (NAME upper case, '-' as '_'),
// else an interpreter on the adapter script (found relative to the working directory,
// else in the source tree shardcheck was built from): $SHARDCHECK_<NAME>_PYTHON, else
// $SHARDCHECK_TARGET_PYTHON, else /usr/bin/python3.
std::string adapter_command(const NamedTarget& target);
// The interpreter of that command: $SHARDCHECK_<NAME>_PYTHON, else
// $SHARDCHECK_TARGET_PYTHON, else /usr/bin/python3.
std::string adapter_python(const NamedTarget& target);

// Base64 (RFC 4648, with padding) for the protocol's tensor bytes.
std::string base64_encode(const std::byte* data, std::size_t size);
std::optional<std::vector<std::byte>> base64_decode(std::string_view text);

}  // namespace shardcheck::oracles
