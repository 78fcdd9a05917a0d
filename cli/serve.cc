// `shardcheck serve-protocol` (hidden): shardcheck's strict policy as an implementation
// under test, answering the JSON-lines protocol of docs/protocol.md on stdin/stdout.
//
// It is the far end of the campaign's loopback target: a share of a default campaign's
// cases go to `exec:exec shardcheck serve-protocol` instead of the in-process policy, so
// that the protocol codec (oracles/src/target_exec.cc on the harness's side, this file
// on the implementation's) carries real traffic, and any difference between the answer
// that crossed the codec and the policy's own is judged like any target's. One process
// per campaign worker, kept for the worker's life.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "shardcheck/digest.h"
#include "shardcheck/json.h"
#include "shardcheck/oracles/target.h"

namespace shardcheck::cli {

namespace {

constexpr int kProtocolVersion = 1;

Json tensor_json(const Buffer& buffer) {
  Json out = Json::object();
  out["dtype"] = std::string(dtype_name(buffer.dtype()));
  out["shape"] = Json::array({buffer.numel()});
  out["data"] = oracles::base64_encode(buffer.data(), buffer.size_bytes());
  return out;
}

// A request the harness never sends (it is the only client): an error sentence.
struct BadRequest {
  std::string what;
};

// TENSOR of docs/protocol.md: dtype, shape, base64 data of exactly prod(shape) elements.
Buffer tensor_from(const Json& json) {
  if (!json.is_object()) throw BadRequest{"a tensor that is not an object"};
  const auto dtype = parse_dtype(json.at("dtype").get<std::string>());
  if (!dtype) throw BadRequest{"a tensor of an unknown dtype"};
  Index numel = 1;
  for (const auto& extent : json.at("shape")) {
    const auto product = checked_mul(numel, extent.get<Index>());
    if (!product || extent.get<Index>() < 0) throw BadRequest{"a tensor shape out of range"};
    numel = *product;
  }
  const auto bytes = oracles::base64_decode(json.at("data").get_ref<const std::string&>());
  const auto size = static_cast<std::size_t>(element_size(*dtype));
  if (!bytes || numel > static_cast<Index>(bytes->size() / size) || bytes->size() != static_cast<std::size_t>(numel) * size) {
    throw BadRequest{"tensor data that does not match its shape"};
  }
  Buffer buffer(*dtype, numel);
  if (!bytes->empty()) std::memcpy(buffer.data(), bytes->data(), bytes->size());
  return buffer;
}

Json refusal_json(const oracles::TargetRefusal& refusal) {
  Json error = Json::object();
  error["type"] = refusal.type.empty() ? std::string("ShardcheckError") : refusal.type;
  error["message"] = refusal.message;
  if (refusal.kind) error["kind"] = std::string(kind_name(*refusal.kind));
  return Json{{"ok", false}, {"error", std::move(error)}};
}

template <class T>
Json answer_of(oracles::TargetResult<T> result) {
  if (auto* refusal = std::get_if<oracles::TargetRefusal>(&result)) return refusal_json(*refusal);
  if (auto* fault = std::get_if<oracles::TargetFault>(&result)) {
    // The in-process policy never faults; say so rather than answer something.
    throw BadRequest{"the policy faulted: " + fault->reason};
  }
  if constexpr (std::is_same_v<T, oracles::TensorAnswer>) {
    return Json{{"ok", true}, {"result", tensor_json(std::get<oracles::TensorAnswer>(result).tensor)}};
  } else {
    static_assert(std::is_same_v<T, oracles::Accepted>, "an answer with a result must send it");
    return Json{{"ok", true}};
  }
}

Json answer(oracles::Target& target, const Json& request) {
  const std::string op = request.at("op").get<std::string>();
  if (op == "hello") {
    if (request.value("protocol", 0) != kProtocolVersion) throw BadRequest{"another protocol version"};
    return Json{{"ok", true}, {"protocol", kProtocolVersion},
                {"implementation", "shardcheck " SHARDCHECK_VERSION " strict policy (loopback)"}};
  }
  if (op != "check" && op != "rebuild" && op != "extract") {
    return Json{{"ok", false}, {"error", {{"type", "UnsupportedOperation"}, {"message", "no such op: " + op}}}};
  }
  // The map as the request holds it, JSON (`map`) or text (`map_text`): the policy
  // decodes it (a map that does not decode is refused `format`, as in process).
  std::string map_text;
  const Json* map_json = nullptr;
  if (request.contains("map_text")) map_text = request.at("map_text").get<std::string>();
  else map_json = &request.at("map");
  const oracles::TargetMap map{nullptr, map_json, map_json == nullptr ? &map_text : nullptr};
  if (op == "check") return answer_of(target.check(map));
  const auto dtype = parse_dtype(request.at("dtype").get<std::string>());
  if (!dtype) throw BadRequest{"an unknown dtype"};
  const int scale_power = request.at("scale_power").get<int>();
  if (op == "rebuild") {
    ShardSet shards;
    for (const auto& [key, tensor] : request.at("shards").items()) {
      shards.emplace(static_cast<Rank>(std::stoll(key)), tensor_from(tensor));
    }
    oracles::DigestRequest digest;
    if (request.contains("digest")) {
      const auto value = parse_digest(request["digest"].get<std::string>());
      if (!value) throw BadRequest{"a digest that is not 16 hex digits"};
      digest.expected = *value;
    }
    if (request.contains("digest_state")) digest.state = request["digest_state"].get<std::string>();
    return answer_of(target.rebuild(map, shards, *dtype, scale_power, digest));
  }
  const Buffer full = tensor_from(request.at("full"));
  if (full.dtype() != *dtype) throw BadRequest{"a full tensor of another dtype"};
  return answer_of(target.extract(map, full, request.at("rank").get<Rank>(), scale_power));
}

int serve_protocol() {
  std::ios::sync_with_stdio(false);
  ConvertOptions strict;
  strict.policy = Policy::strict;
  // One case at a time per process: the campaign's workers already use the cores.
  strict.threads = 1;
  auto target = oracles::make_policy_target(strict);
  std::string line;
  while (std::getline(std::cin, line)) {
    // nlohmann reads a NUL byte as the end of its input; JSON text cannot hold one.
    Json request = line.find('\0') == std::string::npos ? Json::parse(line, nullptr, false) : Json(Json::value_t::discarded);
    Json response;
    try {
      if (request.is_discarded() || !request.is_object()) throw BadRequest{"a line that is not a JSON object"};
      response = answer(*target, request);
      response["id"] = request.at("id");
    } catch (const BadRequest& bad) {
      std::fprintf(stderr, "shardcheck serve-protocol: %s\n", bad.what.c_str());
      return kExitUsage;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "shardcheck serve-protocol: a malformed request: %s\n", e.what());
      return kExitUsage;
    }
    std::cout << response.dump(-1, ' ', false, Json::error_handler_t::replace) << '\n' << std::flush;
  }
  return kExitOk;
}

}  // namespace

void register_serve_protocol(CLI::App& app, RunState& state) {
  CLI::App* sub = app.add_subcommand("serve-protocol", "The strict policy as a protocol target (docs/protocol.md)");
  sub->group("");  // hidden: the campaign's loopback target starts it
  sub->callback([&state] { state.exit_code = serve_protocol(); });
}

}  // namespace shardcheck::cli
