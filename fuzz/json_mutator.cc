#include "json_mutator.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "shardcheck/json.h"
#include "shardcheck/splitmix.h"

namespace shardcheck::fuzz {

namespace {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() { return splitmix64_next(state_); }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
  bool one_in(std::size_t n) { return below(n) == 0; }
  bool coin() { return (next() & 1) != 0; }

 private:
  std::uint64_t state_;
};

struct Node {
  Json* value;
  Json* parent;  // nullptr for the root
  std::string key;  // the key in an object parent
};

void collect(Json& value, Json* parent, std::string key, std::vector<Node>& out) {
  out.push_back(Node{&value, parent, std::move(key)});
  if (value.is_array()) {
    for (auto& item : value) collect(item, &value, {}, out);
  } else if (value.is_object()) {
    for (auto& [k, item] : value.items()) collect(item, &value, k, out);
  }
}

std::vector<std::int64_t> integers_in(const std::vector<Node>& nodes) {
  std::vector<std::int64_t> out;
  for (const Node& n : nodes) {
    if (n.value->is_number_integer()) out.push_back(n.value->get<std::int64_t>());
  }
  return out;
}

// Saturating: the mutator itself must not overflow on the huge numbers it plants.
std::int64_t add_sat(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return b > 0 ? std::numeric_limits<std::int64_t>::max()
                                                     : std::numeric_limits<std::int64_t>::min();
  return r;
}

void mutate_integer(Json& value, const std::vector<std::int64_t>& pool, Rng& rng) {
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > std::numeric_limits<std::int64_t>::max()) {
    value = rng.below(17);
    return;
  }
  const std::int64_t v = value.get<std::int64_t>();
  // Mostly small, in-range edits (they keep the document a map and probe the
  // boundaries the checks care about); rarely the values that stress overflow and
  // negative-number handling.
  switch (rng.below(12)) {
    case 0: case 1: value = add_sat(v, 1); break;
    case 2: case 3: value = v > 0 ? v - 1 : v + 1; break;
    case 4: value = 0; break;
    case 5: value = add_sat(v, v); break;
    case 6: value = v / 2; break;
    case 7: case 8: value = pool.empty() ? 1 : pool[rng.below(pool.size())]; break;
    case 9: value = static_cast<std::int64_t>(rng.below(17)); break;
    case 10: {
      static constexpr std::int64_t kBig[] = {std::int64_t{1} << 31, std::int64_t{1} << 32,
                                              std::int64_t{1} << 62,
                                              std::numeric_limits<std::int64_t>::max(), -1};
      value = kBig[rng.below(std::size(kBig))];
      break;
    }
    default:
      if (rng.one_in(8)) {
        value = std::numeric_limits<std::uint64_t>::max();
      } else {
        value = add_sat(v, static_cast<std::int64_t>(rng.below(8)) + 2);
      }
  }
}

void mutate_float(Json& value, Rng& rng) {
  static constexpr double kScales[] = {1.0, 2.0, 0.5, 0.25, 4.0, 3.0, 0.1, 0.0, -1.0, 1e308, 5e-324};
  value = kScales[rng.below(std::size(kScales))];
}

void mutate_array(Json& array, const std::vector<std::int64_t>& pool, Rng& rng) {
  const std::size_t n = array.size();
  if (n == 0) {
    array.push_back(pool.empty() ? Json(0) : Json(pool[rng.below(pool.size())]));
    return;
  }
  switch (rng.below(5)) {
    case 0: array.erase(array.begin() + static_cast<std::ptrdiff_t>(rng.below(n))); break;
    case 1: array.push_back(Json(array[rng.below(n)])); break;
    case 2: {
      std::size_t a = rng.below(n), b = rng.below(n);
      std::swap(array[a], array[b]);
      break;
    }
    case 3: array.insert(array.begin() + static_cast<std::ptrdiff_t>(rng.below(n + 1)), Json(array[rng.below(n)])); break;
    default: std::reverse(array.begin(), array.end());
  }
}

// Rank-level edits on a "ranks" object: add a rank (a copy under a new id), drop one,
// relabel one, or move a piece between two ranks.
void mutate_ranks(Json& ranks, Rng& rng) {
  std::vector<std::string> keys;
  for (auto& [k, v] : ranks.items()) keys.push_back(k);
  const std::string new_key = std::to_string(rng.below(12));
  if (keys.empty()) {
    ranks[new_key] = Json{{"shard_shape", Json::array({0})}, {"pieces", Json::array()}};
    return;
  }
  const std::string& from = keys[rng.below(keys.size())];
  switch (rng.below(4)) {
    case 0:
      if (!ranks.contains(new_key)) ranks[new_key] = Json(ranks[from]);
      break;
    case 1: ranks.erase(from); break;
    case 2:
      if (!ranks.contains(new_key)) {
        Json moved = std::move(ranks[from]);
        ranks.erase(from);
        ranks[new_key] = std::move(moved);
      }
      break;
    default: {
      const std::string& to = keys[rng.below(keys.size())];
      Json& source = ranks[from];
      if (!source.is_object() || !ranks[to].is_object()) break;
      if (!source.contains("pieces") || !source["pieces"].is_array() || source["pieces"].empty()) break;
      Json& pieces = source["pieces"];
      const auto at = pieces.begin() + static_cast<std::ptrdiff_t>(rng.below(pieces.size()));
      Json piece = *at;
      if (!rng.one_in(3)) pieces.erase(at);  // a move; otherwise a copy
      Json& target = ranks[to]["pieces"];
      if (target.is_array()) target.push_back(std::move(piece));
    }
  }
}

void mutate_value(Json& value, const std::string& key, const std::vector<std::int64_t>& pool, Rng& rng);

// A piece list: drop, duplicate or reorder pieces; never a non-object entry.
void mutate_pieces(Json& pieces, Rng& rng) {
  const std::size_t n = pieces.size();
  if (n == 0) return;
  const auto at = pieces.begin() + static_cast<std::ptrdiff_t>(rng.below(n));
  switch (rng.below(3)) {
    case 0: pieces.erase(at); break;
    case 1: pieces.push_back(Json(*at)); break;
    default: std::swap(*at, pieces[rng.below(n)]);
  }
}

// A piece gains, loses or changes its scale; a rank entry or a map edits one of its
// own fields; any other object (an envelope) rarely loses a key, which the decoder
// must refuse.
void mutate_object(Json& object, const std::vector<std::int64_t>& pool, Rng& rng) {
  if (object.contains("shape")) {
    if (object.contains("scale") && rng.coin()) {
      object.erase("scale");
    } else {
      mutate_float(object["scale"], rng);
    }
    return;
  }
  for (const char* field : {"shard_shape", "logical_shape"}) {
    if (object.contains(field) && (!object.contains("pieces") || rng.coin())) {
      mutate_value(object[field], field, pool, rng);
      return;
    }
  }
  if (object.contains("pieces")) {
    mutate_value(object["pieces"], "pieces", pool, rng);
    return;
  }
  if (object.empty() || !rng.one_in(8)) return;
  auto it = object.begin();
  std::advance(it, static_cast<std::ptrdiff_t>(rng.below(object.size())));
  object.erase(it);
}

void mutate_value(Json& value, const std::string& key, const std::vector<std::int64_t>& pool, Rng& rng) {
  if (value.is_number_integer()) {
    mutate_integer(value, pool, rng);
  } else if (value.is_number_float()) {
    mutate_float(value, rng);
  } else if (value.is_array()) {
    if (key == "pieces") {
      mutate_pieces(value, rng);
    } else if ((key == "source" || key == "dest") && value.size() == 2) {
      // [offset, [strides...]]: edit the offset or the strides, keep the pair.
      if (rng.coin()) {
        mutate_value(value[0], {}, pool, rng);
      } else {
        mutate_value(value[1], "strides", pool, rng);
      }
    } else {
      mutate_array(value, pool, rng);
    }
  } else if (value.is_object()) {
    if (key == "ranks") {
      mutate_ranks(value, rng);
    } else {
      mutate_object(value, pool, rng);
    }
  } else {
    value = rng.coin() ? Json(0) : Json("0");
  }
}

Node pick_node(std::vector<Node>& nodes, Rng& rng) {
  // Integers dominate a map, so rank- and piece-level edits are drawn on purpose now
  // and then instead of waiting for a uniform pick to land on them.
  const std::size_t want = rng.below(8);
  if (want < 2) {
    std::vector<std::size_t> hits;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const Node& n = nodes[i];
      if (!n.value->is_object()) continue;
      if ((want == 0 && n.key == "ranks") || (want == 1 && n.value->contains("shape"))) hits.push_back(i);
    }
    if (!hits.empty()) return nodes[hits[rng.below(hits.size())]];
  }
  return nodes[rng.below(nodes.size())];
}

}  // namespace

std::optional<std::string> mutate_json(std::string_view text, std::uint64_t seed) {
  auto parsed = parse_json(text);
  if (!parsed) return std::nullopt;
  Json document = std::move(parsed.value());
  Rng rng(seed);
  const Json original = document;
  const int edits = 1 + (rng.one_in(4) ? 1 : 0) + (rng.one_in(16) ? 1 : 0);
  // Some edits change nothing (a swap of equal values, an empty list); a few more
  // tries make nearly every mutant new.
  for (int e = 0, tries = 0; e < edits && tries < 16; ++tries) {
    // Collected afresh each time: an edit may invalidate every pointer into the tree.
    std::vector<Node> nodes;
    collect(document, nullptr, {}, nodes);
    const std::vector<std::int64_t> pool = integers_in(nodes);
    Node node = pick_node(nodes, rng);
    mutate_value(*node.value, node.key, pool, rng);
    if (e > 0 || document != original) ++e;
  }
  return document.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace shardcheck::fuzz
