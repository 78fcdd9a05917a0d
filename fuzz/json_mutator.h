// The structure-aware mutator behind map_json's LLVMFuzzerCustomMutator: parse the
// input, edit one number, array or object the way the spec's corruption catalogue
// does (+-1, 0, another field's value, past the end; drop, duplicate or move an entry;
// add or drop a rank), and serialise again. Kept apart from libFuzzer so the tests can
// measure it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace shardcheck::fuzz {

// std::nullopt when `text` is not JSON (the caller falls back to byte mutations).
// Deterministic in (text, seed).
std::optional<std::string> mutate_json(std::string_view text, std::uint64_t seed);

}  // namespace shardcheck::fuzz
