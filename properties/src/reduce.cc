#include "shardcheck/reduce.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>

namespace shardcheck::props {

namespace {

// The maps of a case file, each edited alike (reduce.h).
constexpr const char* kMaps[] = {"map", "truth", "target_map", "target_truth"};

// An edit of one map, in place; false when it does not apply to that map.
using MapEdit = std::function<bool(Json& map)>;

// An edit of the whole case file, in place; false when it does not apply. Edits are
// listed as these and applied only when tried: copying the file for every edit up front
// cost a reduction of a 40 KB case with 42 pieces about 25 ms a step, most of its time.
using FileEdit = std::function<bool(Json& file)>;

// The edit on every map it applies to at once (when more than one), then on each alone;
// `also` is done to the file as well (a removed rank's supplied shard goes with it).
void add_map_edit(const Json& file, std::vector<FileEdit>& out, const MapEdit& edit,
                  const std::function<void(Json& file)>& also = {}) {
  out.emplace_back([edit, also](Json& joint) {
    if (also) also(joint);
    int applied = 0;
    for (const char* field : kMaps) {
      if (joint.contains(field) && edit(joint[field])) ++applied;
    }
    return applied >= 2;
  });
  for (const char* field : kMaps) {
    if (!file.contains(field)) continue;
    out.emplace_back([edit, also, field](Json& one) {
      if (also) also(one);
      return edit(one[field]);
    });
  }
}

Json* ranks_of(Json& map) {
  if (!map.is_object()) return nullptr;
  const auto it = map.find("ranks");
  return it != map.end() && it->is_object() ? &*it : nullptr;
}

Json* pieces_of(Json& map, const std::string& rank) {
  Json* ranks = ranks_of(map);
  if (ranks == nullptr || !ranks->contains(rank) || !(*ranks)[rank].is_object()) return nullptr;
  Json& entry = (*ranks)[rank];
  return entry.contains("pieces") && entry["pieces"].is_array() ? &entry["pieces"] : nullptr;
}

bool erase_at(Json& array, std::size_t i) {
  if (!array.is_array() || i >= array.size()) return false;
  array.erase(array.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

// Every rank key and (rank, piece) place of the case's maps, in order.
void places(const Json& file, std::vector<std::string>& ranks,
            std::vector<std::pair<std::string, std::size_t>>& pieces) {
  std::set<std::string> seen_ranks;
  std::set<std::pair<std::string, std::size_t>> seen_pieces;
  for (const char* field : kMaps) {
    if (!file.contains(field)) continue;
    Json map = file[field];
    Json* all = ranks_of(map);
    if (all == nullptr) continue;
    for (const auto& [rank, entry] : all->items()) {
      if (seen_ranks.insert(rank).second) ranks.push_back(rank);
      if (!entry.is_object() || !entry.contains("pieces") || !entry["pieces"].is_array()) continue;
      for (std::size_t i = 0; i < entry["pieces"].size(); ++i) {
        if (seen_pieces.insert({rank, i}).second) pieces.emplace_back(rank, i);
      }
    }
  }
}

void structure_edits(const Json& file, std::vector<FileEdit>& out) {
  std::vector<std::string> ranks;
  std::vector<std::pair<std::string, std::size_t>> pieces;
  places(file, ranks, pieces);
  for (const std::string& rank : ranks) {
    // The rank, and the shard supplied for it.
    add_map_edit(
        file, out,
        [rank](Json& map) {
          Json* all = ranks_of(map);
          return all != nullptr && all->erase(rank) > 0;
        },
        [rank](Json& edited) {
          if (edited.contains("shards") && edited["shards"].is_object()) edited["shards"].erase(rank);
        });
  }
  for (const auto& [rank, index] : pieces) {
    add_map_edit(file, out, [rank = rank, index = index](Json& map) {
      Json* list = pieces_of(map, rank);
      return list != nullptr && erase_at(*list, index);
    });
  }
  for (const auto& [rank, index] : pieces) {
    add_map_edit(file, out, [rank = rank, index = index](Json& map) {
      Json* list = pieces_of(map, rank);
      return list != nullptr && index < list->size() && (*list)[index].is_object() && (*list)[index].erase("scale") > 0;
    });
  }
  for (const std::string& rank : ranks) {
    add_map_edit(file, out, [rank](Json& map) {
      Json* all = ranks_of(map);
      return all != nullptr && all->contains(rank) && (*all)[rank].is_object() && (*all)[rank].erase("shard_shape") > 0;
    });
  }
  add_map_edit(file, out, [](Json& map) { return map.is_object() && map.erase("content_digests") > 0; });
}

// Axis `a` out of a map: its logical shape, every piece's shape and strides, and the shard
// shapes of as many axes as the logical shape.
bool remove_axis(Json& map, std::size_t a) {
  if (!map.is_object() || !map.contains("logical_shape") || !map["logical_shape"].is_array()) return false;
  const std::size_t axes = map["logical_shape"].size();
  if (axes <= 1 || a >= axes) return false;
  erase_at(map["logical_shape"], a);
  Json* all = ranks_of(map);
  if (all == nullptr) return true;
  for (auto& [rank, entry] : all->items()) {
    if (!entry.is_object()) continue;
    if (entry.contains("shard_shape") && entry["shard_shape"].is_array() && entry["shard_shape"].size() == axes) {
      erase_at(entry["shard_shape"], a);
    }
    if (!entry.contains("pieces") || !entry["pieces"].is_array()) continue;
    for (auto& piece : entry["pieces"]) {
      if (!piece.is_object()) continue;
      if (piece.contains("shape")) erase_at(piece["shape"], a);
      for (const char* view : {"source", "dest"}) {
        if (piece.contains(view) && piece[view].is_array() && piece[view].size() == 2) erase_at(piece[view][1], a);
      }
    }
  }
  return true;
}

// Every non-negative integer of a map with its place, once per (place, value).
void integers(const Json& value, const Json::json_pointer& at, std::vector<std::pair<Json::json_pointer, Index>>& out) {
  if (value.is_number_integer() || value.is_number_unsigned()) {
    const auto v = value.is_number_unsigned()
                       ? static_cast<Index>(std::min<std::uint64_t>(value.get<std::uint64_t>(), std::uint64_t{1} << 62))
                       : value.get<Index>();
    if (v > 0) out.emplace_back(at, v);
  } else if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) integers(value[i], at / i, out);
  } else if (value.is_object()) {
    for (const auto& [key, member] : value.items()) integers(member, at / key, out);
  }
}

void number_edits(const Json& file, std::vector<FileEdit>& out) {
  std::vector<std::pair<Json::json_pointer, Index>> found;
  for (const char* field : kMaps) {
    if (file.contains(field)) integers(file[field], Json::json_pointer(), found);
  }
  std::set<std::pair<std::string, Index>> seen;
  for (const auto& [at, value] : found) {
    if (!seen.insert({at.to_string(), value}).second) continue;
    // Down to 0, 1 or half (halving again reaches any smaller value in a few steps).
    std::vector<Index> lower{0, 1, value / 2};
    std::sort(lower.begin(), lower.end());
    lower.erase(std::unique(lower.begin(), lower.end()), lower.end());
    for (Index to : lower) {
      if (to >= value) continue;
      add_map_edit(file, out, [at = at, value = value, to](Json& map) {
        if (!map.contains(at) || !(map[at].is_number_integer() || map[at].is_number_unsigned())) return false;
        if (map[at].is_number_unsigned() ? map[at].get<std::uint64_t>() != static_cast<std::uint64_t>(value)
                                         : map[at].get<Index>() != value) {
          return false;
        }
        map[at] = to;
        return true;
      });
    }
  }
}

// Bits written as "0x..." of the same width, all zero.
bool zero_values(Json& values) {
  if (!values.is_array()) return false;
  bool changed = false;
  for (auto& v : values) {
    if (!v.is_string()) continue;
    const std::string bits = v.get<std::string>();
    if (bits.size() < 3 || bits.rfind("0x", 0) != 0) continue;
    const std::string zero = "0x" + std::string(bits.size() - 2, '0');
    if (bits != zero) {
      v = zero;
      changed = true;
    }
  }
  return changed;
}

void data_edits(const Json& file, std::vector<FileEdit>& out) {
  if (file.contains("full")) {
    out.emplace_back([](Json& edited) { return zero_values(edited["full"]); });
  }
  if (file.contains("shards") && file["shards"].is_object()) {
    for (const auto& [rank, values] : file["shards"].items()) {
      out.emplace_back([rank = rank](Json& edited) { return zero_values(edited["shards"][rank]); });
    }
  }
  if (file.contains("scale_power") && file["scale_power"] != 1) {
    out.emplace_back([](Json& edited) {
      edited["scale_power"] = 1;
      return true;
    });
  }
  if (file.contains("op") && file["op"].is_array() && file["op"].size() > 1) {
    for (const auto& op : file["op"]) {
      out.emplace_back([op](Json& edited) {
        edited["op"] = op;
        return true;
      });
    }
  }
  // Simpler dtypes first; an edit only ever moves up this list, so edits cannot cycle.
  static constexpr const char* kSimpler[] = {"float32", "uint8", "bool",    "int8",     "int16",
                                             "int32",   "int64", "float16", "bfloat16", "float64"};
  if (file.contains("dtype") && file["dtype"].is_string()) {
    const std::string dtype = file["dtype"].get<std::string>();
    for (const char* simpler : kSimpler) {
      if (dtype == simpler) break;
      out.emplace_back([simpler](Json& edited) {
        edited["dtype"] = simpler;
        return true;
      });
    }
  }
}

// The edits of `case_file` in the order they are tried, not yet applied.
std::vector<FileEdit> file_edits(const Json& case_file) {
  std::vector<FileEdit> out;
  if (!case_file.is_object()) return out;
  structure_edits(case_file, out);
  std::size_t axes = 0;
  for (const char* field : kMaps) {
    if (case_file.contains(field) && case_file[field].is_object() && case_file[field].contains("logical_shape") &&
        case_file[field]["logical_shape"].is_array()) {
      axes = std::max(axes, case_file[field]["logical_shape"].size());
    }
  }
  for (std::size_t a = 0; a < axes; ++a) {
    add_map_edit(case_file, out, [a](Json& map) { return remove_axis(map, a); });
  }
  number_edits(case_file, out);
  data_edits(case_file, out);
  return out;
}

// `edit` applied to a copy of `file`, or nullopt when it does not apply.
std::optional<Json> applied(const Json& file, const FileEdit& edit) {
  Json edited = file;
  if (!edit(edited)) return std::nullopt;
  return edited;
}

}  // namespace

std::vector<Json> case_edits(const Json& case_file) {
  std::vector<Json> out;
  for (const FileEdit& edit : file_edits(case_file)) {
    if (auto edited = applied(case_file, edit)) out.push_back(std::move(*edited));
  }
  return out;
}

Reduced reduce_case(const Case& given, const std::function<bool(const Case&)>& shows, const ReduceOptions& options) {
  Reduced result;
  result.reduced = given;
  result.evaluations = 1;
  if (!shows(given)) return result;
  result.shows = true;
  Json current = encode_case(given);
  // A pass tries every edit of the current case; after a kept edit it goes on from the
  // same place in the edits of the new case, and a pass that keeps none ends the search.
  for (;;) {
    bool kept = false;
    std::size_t next = 0;
    for (;;) {
      const std::vector<FileEdit> edits = file_edits(current);
      std::size_t i = next;
      for (; i < edits.size(); ++i) {
        std::optional<Json> text = applied(current, edits[i]);
        if (!text) continue;
        auto edited = decode_case(*text);
        if (!edited) continue;
        if (result.evaluations >= options.max_evaluations) return result;
        ++result.evaluations;
        if (!shows(edited.value())) continue;
        current = std::move(*text);
        result.reduced = std::move(edited).value();
        ++result.steps;
        kept = true;
        break;
      }
      if (i >= edits.size()) break;
      next = i;
    }
    if (!kept) break;
  }
  result.minimal = true;
  return result;
}

Shown shown_by(const Case& c, const EvalOptions& eval) {
  const Evaluation e = evaluate_case(c, eval);
  return Shown{e.finding ? e.finding->signature : std::string(), e.category, e.refusal};
}

std::function<bool(const Case&)> keeps_what_it_shows(Shown shown, EvalOptions eval) {
  return [shown = std::move(shown), eval = std::move(eval)](const Case& c) { return shown_by(c, eval) == shown; };
}

}  // namespace shardcheck::props
