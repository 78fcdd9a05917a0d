// shardcheck._core: the core's map codec, checks, strict conversion and transfer plans
// (contract 11) for Python.
//
// The Python layer (shardcheck/__init__.py) turns whatever map it is given into JSON
// text, so the core codec is the one validator. Arrays arrive through nanobind's
// ndarray (the buffer protocol for NumPy, DLPack for torch and others) and are read
// in place: a conversion borrows the caller's memory instead of copying it, and the
// result is the core's own buffer handed over without a copy.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "shardcheck/case.h"
#include "shardcheck/checks.h"
#include "shardcheck/convert.h"
#include "shardcheck/dtype.h"
#include "shardcheck/error.h"
#include "shardcheck/gen/case_gen.h"
#include "shardcheck/gen/choice.h"
#include "shardcheck/json.h"
#include "shardcheck/map.h"
#include "shardcheck/oracles/target.h"
#include "shardcheck/oracles/truth.h"
#include "shardcheck/reshard.h"

namespace nb = nanobind;

namespace shardcheck {
namespace {

// A typed error from the core, raised in Python as shardcheck.MapError.
struct MapFailure {
  Error error;
};

// Read-only, any dtype, any device: the checks below give clearer errors than a
// failed overload match would.
using Array = nb::ndarray<nb::ro>;

std::optional<DType> dtype_of(nb::dlpack::dtype t) {
  using Code = nb::dlpack::dtype_code;
  if (t.lanes != 1) return std::nullopt;
  switch (static_cast<Code>(t.code)) {
    case Code::Float:
      if (t.bits == 16) return DType::float16;
      if (t.bits == 32) return DType::float32;
      if (t.bits == 64) return DType::float64;
      return std::nullopt;
    case Code::Bfloat: return t.bits == 16 ? std::optional(DType::bfloat16) : std::nullopt;
    case Code::Int:
      if (t.bits == 8) return DType::int8;
      if (t.bits == 16) return DType::int16;
      if (t.bits == 32) return DType::int32;
      if (t.bits == 64) return DType::int64;
      return std::nullopt;
    case Code::UInt: return t.bits == 8 ? std::optional(DType::uint8) : std::nullopt;
    case Code::Bool: return t.bits == 8 ? std::optional(DType::boolean) : std::nullopt;
    default: return std::nullopt;
  }
}

nb::dlpack::dtype dlpack_of(DType dtype) {
  using Code = nb::dlpack::dtype_code;
  auto make = [](Code code, int bits) {
    return nb::dlpack::dtype{static_cast<std::uint8_t>(code), static_cast<std::uint8_t>(bits), 1};
  };
  switch (dtype) {
    case DType::float16: return make(Code::Float, 16);
    case DType::float32: return make(Code::Float, 32);
    case DType::float64: return make(Code::Float, 64);
    case DType::bfloat16: return make(Code::Bfloat, 16);
    case DType::int8: return make(Code::Int, 8);
    case DType::int16: return make(Code::Int, 16);
    case DType::int32: return make(Code::Int, 32);
    case DType::int64: return make(Code::Int, 64);
    case DType::uint8: return make(Code::UInt, 8);
    case DType::boolean: return make(Code::Bool, 8);
  }
  return make(Code::Float, 32);
}

std::string dtype_text(nb::dlpack::dtype t) {
  static const char* const kCodes[] = {"int", "uint", "float", "opaque handle", "bfloat", "complex", "bool"};
  const char* code = t.code < std::size(kCodes) ? kCodes[t.code] : "unknown";
  return t.lanes == 1 ? fmt::format("{}{}", code, t.bits) : fmt::format("{}{}x{}", code, t.bits, t.lanes);
}

// Whether an array holds 16-bit unsigned integers: NumPy's stand-in for bfloat16 (it has
// no bfloat16), read as bfloat16 bit patterns when the caller names that dtype.
bool is_uint16(nb::dlpack::dtype t) {
  return t.lanes == 1 && t.code == static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt) && t.bits == 16;
}

// A view of the caller's array as a flat row-major buffer, without copying. Only what
// can be read that way in place is accepted; anything else is refused rather than
// copied behind the caller's back. `as_bool`: the array is a uint8 view of a bool
// tensor (torch cannot export bool through DLPack). `bfloat16_bits`: a uint16 array
// holds bfloat16 bit patterns.
Buffer borrow(const Array& a, const std::string& what, bool as_bool = false, bool bfloat16_bits = false) {
  const bool on_cuda = a.device_type() == nb::device::cuda::value;
  if (a.device_type() != nb::device::cpu::value && !on_cuda) {
    throw nb::type_error(
        fmt::format("{} is neither in CPU memory nor on a CUDA device; move it to one (tensor.cpu()).", what).c_str());
  }
  auto dtype = dtype_of(a.dtype());
  if (as_bool && dtype == DType::uint8) dtype = DType::boolean;
  if (bfloat16_bits && is_uint16(a.dtype())) dtype = DType::bfloat16;
  if (!dtype) {
    throw nb::type_error(fmt::format("{} has dtype {}, which shardcheck does not convert (float16/32/64, "
                                     "bfloat16, int8/16/32/64, uint8, bool).",
                                     what, dtype_text(a.dtype()))
                             .c_str());
  }
  bool empty = false;
  for (std::size_t k = 0; k < a.ndim(); ++k) empty = empty || a.shape(k) == 0;
  if (!empty) {
    std::int64_t expected = 1;  // row-major stride, in elements
    for (std::size_t k = a.ndim(); k-- > 0;) {
      if (a.shape(k) != 1 && a.stride(k) != expected) {
        throw nb::type_error(fmt::format("{} is not C-contiguous; shardcheck reads shards and tensors as "
                                         "flat row-major buffers in place and does not copy them: pass "
                                         "np.ascontiguousarray(a) or tensor.contiguous().",
                                         what)
                                 .c_str());
      }
      expected *= static_cast<std::int64_t>(a.shape(k));
    }
  }
  const auto* data = static_cast<const std::byte*>(a.data());
  if (!empty && reinterpret_cast<std::uintptr_t>(data) % element_size(*dtype) != 0) {
    throw nb::type_error(
        fmt::format("{} is not aligned to its element size; pass an aligned copy (a.copy()).", what).c_str());
  }
  if (on_cuda) {
    // Converted where it is, by the CUDA backend (backend_for), and never read here.
    return Buffer::in_device_memory(*dtype, static_cast<Index>(a.size()), const_cast<std::byte*>(data), nullptr);
  }
  return Buffer::borrow(*dtype, static_cast<Index>(a.size()), empty ? nullptr : data);
}

// The backend a conversion of these buffers runs on: the CPU's for host memory, CUDA for
// tensors on a CUDA device (one backend per process; the CUDA runtime's current device,
// which torch sets, is the one it launches on). A wheel built without the toolkit, or a
// machine without a device, says so.
Backend* backend_for(std::initializer_list<const Buffer*> buffers) {
  bool device = false;
  for (const Buffer* b : buffers) device = device || b->memory() == Memory::device;
  if (!device) return nullptr;
  static const std::unique_ptr<Backend> cuda = make_cuda_backend();
  if (cuda) return cuda.get();
  throw nb::type_error(cuda_compiled() ? "CUDA tensors were given, but the CUDA backend finds no device."
                                       : "CUDA tensors were given, but this build of shardcheck has no CUDA backend "
                                         "(build it with the CUDA toolkit: pip install . -C "
                                         "cmake.define.SHARDCHECK_CUDA=ON).");
}

Backend* backend_for(const ShardSet& shards) {
  for (const auto& [rank, shard] : shards) {
    if (shard.memory() == Memory::device) return backend_for({&shard});
  }
  return nullptr;
}

// The map's text where Python holds it, without a copy: a str's UTF-8 (an ASCII str is
// its own UTF-8) or a bytes object's contents. The caller holds the GIL, which keeps it.
std::string_view text_of(nb::handle text) {
  Py_ssize_t size = 0;
  if (PyUnicode_Check(text.ptr())) {
    const char* data = PyUnicode_AsUTF8AndSize(text.ptr(), &size);
    if (data == nullptr) throw nb::python_error();
    return {data, static_cast<std::size_t>(size)};
  }
  char* data = nullptr;
  if (!PyBytes_Check(text.ptr()) || PyBytes_AsStringAndSize(text.ptr(), &data, &size) != 0) {
    throw nb::type_error("The map's text must be str or bytes.");
  }
  return {data, static_cast<std::size_t>(size)};
}

// `max_input_bytes`: the caller's limit, else the core's default.
Map decode(nb::handle text, std::optional<std::uint64_t> max_input_bytes) {
  auto map = parse_map(text_of(text), "$", max_input_bytes.value_or(shardcheck::max_input_bytes()));
  if (!map) throw MapFailure{map.error()};
  return std::move(map).value();
}

// Hands the core's result buffer to Python: the array owns it through a capsule.
// A torch bool result goes out as uint8 and is viewed as bool again; a bfloat16 result
// goes to NumPy as its uint16 bit patterns when the inputs came that way
// (`bfloat16_bits`).
nb::object to_array(Buffer&& result, const Extents& shape, bool torch, int device_id = -1, bool bfloat16_bits = false) {
  const bool on_cuda = result.memory() == Memory::device;
  if (on_cuda && !torch) throw nb::type_error("A result on a CUDA device can only be returned as a torch tensor.");
  auto owned = std::make_unique<Buffer>(std::move(result));
  std::vector<std::size_t> extents(shape.begin(), shape.end());
  const DType dtype = owned->dtype();
  if (!torch && dtype == DType::bfloat16 && !bfloat16_bits) {
    throw nb::type_error("A bfloat16 result can only be returned as a torch tensor (NumPy has no bfloat16).");
  }
  const DType exported = torch && dtype == DType::boolean ? DType::uint8 : dtype;
  void* data = owned->data();
  nb::capsule owner(owned.get(), [](void* p) noexcept { delete static_cast<Buffer*>(p); });
  owned.release();
  if (torch) {
    const int device_type = on_cuda ? nb::device::cuda::value : nb::device::cpu::value;
    nb::object out = nb::cast(nb::ndarray<nb::pytorch>(data, extents.size(), extents.data(), owner, nullptr,
                                                       dlpack_of(exported), device_type, on_cuda ? device_id : 0),
                              nb::rv_policy::reference);
    if (exported != dtype) out = out.attr("view")(nb::module_::import_("torch").attr("bool"));
    return out;
  }
  const nb::dlpack::dtype numpy_dtype =
      dtype == DType::bfloat16 ? nb::dlpack::dtype{static_cast<std::uint8_t>(nb::dlpack::dtype_code::UInt), 16, 1}
                               : dlpack_of(dtype);
  return nb::cast(nb::ndarray<nb::numpy>(data, extents.size(), extents.data(), owner, nullptr, numpy_dtype),
                  nb::rv_policy::reference);
}

// One of a plan's two maps, decoded; a decoding error says which map it is in, as plan()
// words the checks' errors ("in the target map, ...").
Map decode_side(nb::handle text, std::optional<std::uint64_t> max_input_bytes, const char* side) {
  try {
    return decode(text, max_input_bytes);
  } catch (const MapFailure& failure) {
    throw MapFailure{reworded(failure.error, fmt::format("in the {} map, {}", side, failure.error.sentence))};
  }
}

// The caller's shards, borrowed (one per rank), and the dtype a result takes: `dtype_name`
// when given, else the shards' (the conversion refuses shards that disagree with it).
struct BorrowedShards {
  ShardSet set;
  DType dtype = DType::float32;
  int device_id = -1;          // the CUDA device of shards there
  bool bfloat16_bits = false;  // NumPy uint16 shards read as bfloat16 (dtype "bfloat16" named)
};

BorrowedShards borrow_shards(const std::vector<std::tuple<Rank, Array, bool>>& shards,
                             const std::optional<std::string>& dtype_name) {
  BorrowedShards out;
  const bool bfloat16_named = dtype_name && parse_dtype(*dtype_name) == DType::bfloat16;
  for (const auto& [rank, array, as_bool] : shards) {
    const bool bits = bfloat16_named && is_uint16(array.dtype());
    out.bfloat16_bits = out.bfloat16_bits || bits;
    if (!out.set.emplace(rank, borrow(array, fmt::format("The shard of rank {}", rank), as_bool, bits)).second) {
      throw nb::value_error(fmt::format("Two shards were supplied for rank {}.", rank).c_str());
    }
    if (array.device_type() != nb::device::cuda::value) continue;
    if (out.device_id >= 0 && array.device_id() != out.device_id) {
      throw nb::value_error(
          fmt::format("The shards are on CUDA devices {} and {}; a rebuild reads them on one.", out.device_id,
                      array.device_id())
              .c_str());
    }
    out.device_id = array.device_id();
  }
  if (dtype_name) {
    const auto dtype = parse_dtype(*dtype_name);
    if (!dtype) throw nb::type_error(fmt::format("Unknown dtype {:?}.", *dtype_name).c_str());
    out.dtype = *dtype;
  } else if (!out.set.empty()) {
    out.dtype = out.set.begin()->second.dtype();
  } else {
    throw nb::type_error("No shards were supplied, so the result's dtype is unknown; pass dtype=.");
  }
  return out;
}

ReshardOptions reshard_options(bool compare_replicas, Index max_segments) {
  ReshardOptions options;
  options.compare_replicas = compare_replicas;
  options.max_segments = max_segments;
  return options;
}

void py_check(nb::handle text, std::optional<std::uint64_t> max_input_bytes) {
  const Map map = decode(text, max_input_bytes);
  Status status;
  {
    nb::gil_scoped_release release;
    status = check_map(map);
  }
  if (!status.ok()) throw MapFailure{status.error()};
}

nb::object py_rebuild(nb::handle text, const std::vector<std::tuple<Rank, Array, bool>>& shards,
                      int scale_power, const std::optional<std::string>& dtype_name, bool torch,
                      const std::optional<std::string>& digest_state, std::optional<std::uint64_t> max_input_bytes) {
  const Map map = decode(text, max_input_bytes);
  const BorrowedShards in = borrow_shards(shards, dtype_name);
  ConvertOptions options;
  options.scale_power = scale_power;
  options.digest_state = digest_state;
  options.backend = backend_for(in.set);
  std::optional<Result<Buffer>> full;
  {
    nb::gil_scoped_release release;
    full.emplace(rebuild(map, in.set, in.dtype, options));
  }
  if (!*full) throw MapFailure{full->error()};
  return to_array(std::move(*full).value(), map.logical_shape, torch, in.device_id, in.bfloat16_bits);
}

nb::object py_extract(nb::handle text, const Array& full, bool as_bool, Rank rank, int scale_power,
                      bool torch, std::optional<std::uint64_t> max_input_bytes) {
  const Map map = decode(text, max_input_bytes);
  const Buffer in = borrow(full, "The full tensor", as_bool);
  ConvertOptions options;
  options.scale_power = scale_power;
  options.backend = backend_for({&in});
  std::optional<Result<Buffer>> shard;
  {
    nb::gil_scoped_release release;
    shard.emplace(extract(map, in, rank, options));
  }
  if (!*shard) throw MapFailure{shard->error()};
  // A successful extract means the rank is listed with a shard shape.
  return to_array(std::move(*shard).value(), *map.find_rank(rank)->shard_shape, torch, full.device_id());
}

// The plan as `shardcheck plan --json` prints it (plan_to_json), as JSON text.
std::string py_plan(nb::handle source_text, nb::handle target_text, bool compare_replicas, Index max_segments,
                    std::optional<std::uint64_t> max_input_bytes) {
  const Map source = decode_side(source_text, max_input_bytes, "source");
  const Map target = decode_side(target_text, max_input_bytes, "target");
  std::optional<Result<Plan>> made;
  {
    nb::gil_scoped_release release;
    made.emplace(plan(source, target, reshard_options(compare_replicas, max_segments)));
  }
  if (!*made) throw MapFailure{made->error()};
  return plan_to_json(made->value()).dump();
}

// The target shards, {rank: array of its shard shape}, one per target rank with a shard
// shape, through a plan executed on the caller's source shards (read in place).
// With `digest_state`, the source map's content digest for it is verified on both sides
// of the plan (shardcheck::reshard).
nb::dict py_reshard(nb::handle source_text, nb::handle target_text,
                    const std::vector<std::tuple<Rank, Array, bool>>& shards,
                    const std::optional<std::string>& dtype_name, bool torch, bool compare_replicas, Index max_segments,
                    int scale_power, const std::optional<std::string>& digest_state,
                    std::optional<std::uint64_t> max_input_bytes) {
  const Map source = decode_side(source_text, max_input_bytes, "source");
  const Map target = decode_side(target_text, max_input_bytes, "target");
  const BorrowedShards in = borrow_shards(shards, dtype_name);
  ReshardOptions options = reshard_options(compare_replicas, max_segments);
  options.scale_power = scale_power;
  options.digest_state = digest_state;
  std::optional<Result<ShardSet>> out;
  {
    nb::gil_scoped_release release;
    out.emplace(reshard(source, target, in.set, in.dtype, options));
  }
  if (!*out) throw MapFailure{out->error()};
  nb::dict result;
  for (auto& [rank, buffer] : out->value()) {
    // execute writes the shard of every target rank with a shard shape, and only those.
    result[nb::cast(rank)] =
        to_array(std::move(buffer), *target.find_rank(rank)->shard_shape, torch, -1, in.bfloat16_bits);
  }
  return result;
}

// The address a conversion reads an array at: lets the tests see that it is the
// caller's own memory.
std::uintptr_t py_borrowed_address(const Array& a) {
  const Buffer view = borrow(a, "The array");
  return reinterpret_cast<std::uintptr_t>(view.data());
}

// The generators driven from Python (shardcheck.strategies): every question they ask is
// one call of draw(lo, hi), closed range, so that Hypothesis makes each choice and can
// shrink it (towards lo, the generators' simplest answer). An exception raised by draw
// (Hypothesis stopping an overrun test) unwinds through the generator unchanged.
class PythonChoices final : public gen::ChoiceSource {
 public:
  explicit PythonChoices(nb::callable draw) : draw_(std::move(draw)) {}
  Index int_in(Index lo, Index hi) override { return nb::cast<Index>(draw_(lo, hi)); }

 private:
  nb::callable draw_;
};

std::string py_generate_case(nb::callable draw, Index max_elements, int max_dims, int max_extent, int max_tp,
                             double corrupt_probability, bool allow_scale_power, bool record_digest,
                             bool adversarial_data) {
  gen::CaseOptions options;
  options.layout.max_elements = max_elements;
  options.layout.max_dims = max_dims;
  options.layout.max_extent = max_extent;
  options.layout.max_tp = max_tp;
  options.corrupt_probability = corrupt_probability;
  options.allow_scale_power = allow_scale_power;
  options.record_digest = record_digest;
  options.adversarial_data = adversarial_data;
  PythonChoices choices(std::move(draw));
  return encode_case_text(gen::generate_case(choices, options));
}

// A Python rebuild/extract judged by the truth oracle as any implementation under test.
// The bridge (shardcheck.testing) turns raw bytes into the caller's arrays and answers
// ("ok", dtype, bytes), ("refused", type, message, kind or None), ("garbage", reason,
// detail) or ("crash", reason, detail) when an isolated call's process died. It reads
// the map itself (JSON text, parsed by Python), as an exec target
// does, so a map shardcheck's decoder refuses is still the implementation's to judge.
class PythonTarget final : public oracles::Target {
 public:
  PythonTarget(nb::callable bridge, std::string name) : bridge_(std::move(bridge)), name_(std::move(name)) {}
  const std::string& name() const override { return name_; }
  bool reads_map_itself() const override { return true; }
  // The truth oracle never asks for a check on its own; conversions check what they need.
  oracles::TargetResult<oracles::Accepted> check(const oracles::TargetMap&) override { return oracles::Accepted{}; }

  oracles::TargetResult<oracles::TensorAnswer> rebuild(const oracles::TargetMap& map, const ShardSet& shards, DType dtype,
                                        int scale_power, const oracles::DigestRequest&) override {
    nb::list items;
    for (const auto& [rank, shard] : shards) items.append(nb::make_tuple(rank, bytes_of(shard)));
    return answer(bridge_("rebuild", text_of(map), std::string(dtype_name(dtype)), scale_power, items, nb::none(),
                          nb::none()),
                  dtype);
  }

  oracles::TargetResult<oracles::TensorAnswer> extract(const oracles::TargetMap& map, const Buffer& full, Rank rank,
                                        int scale_power) override {
    // F in the map's logical shape when that fits, as a caller holds it; flat otherwise.
    std::vector<Index> shape{full.numel()};
    if (map.map != nullptr && checked_numel(map.map->logical_shape) == full.numel()) {
      shape.assign(map.map->logical_shape.begin(), map.map->logical_shape.end());
    }
    return answer(bridge_("extract", text_of(map), std::string(dtype_name(full.dtype())), scale_power, bytes_of(full),
                          nb::cast(shape), rank),
                  full.dtype());
  }

 private:
  static nb::bytes bytes_of(const Buffer& buffer) { return nb::bytes(buffer.data(), buffer.size_bytes()); }

  static std::string text_of(const oracles::TargetMap& map) {
    if (map.text != nullptr) return *map.text;
    if (map.json != nullptr) return map.json->dump();
    if (map.map != nullptr) return encode_map_text(*map.map, RankOrder::as_given);
    return "null";
  }

  static oracles::TargetResult<oracles::TensorAnswer> answer(nb::handle reply, DType dtype) {
    auto fields = nb::cast<nb::tuple>(reply);
    const auto tag = nb::cast<std::string>(fields[0]);
    if (tag == "refused") {
      oracles::TargetRefusal refusal;
      refusal.type = nb::cast<std::string>(fields[1]);
      refusal.message = nb::cast<std::string>(fields[2]);
      if (!fields[3].is_none()) refusal.kind = parse_kind(nb::cast<std::string>(fields[3]));
      return refusal;
    }
    if (tag != "ok") {
      const auto kind = tag == "crash" ? oracles::FaultKind::crash : oracles::FaultKind::garbage;
      return oracles::TargetFault{kind, nb::cast<std::string>(fields[1]),
                                  nb::cast<std::string>(fields[2])};
    }
    const auto name = nb::cast<std::string>(fields[1]);
    if (name != dtype_name(dtype)) {
      return oracles::TargetFault{oracles::FaultKind::garbage, "wrong-dtype",
                                  fmt::format("a result of {} where {} was given", name, dtype_name(dtype))};
    }
    const auto data = nb::cast<nb::bytes>(fields[2]);
    const std::size_t size = element_size(dtype);
    if (data.size() % size != 0) {
      return oracles::TargetFault{oracles::FaultKind::garbage, "bad-data",
                                  fmt::format("{} result bytes, not whole elements of {}", data.size(), name)};
    }
    Buffer buffer(dtype, static_cast<Index>(data.size() / size));
    if (data.size() != 0) std::memcpy(buffer.data(), data.c_str(), data.size());
    return buffer;
  }

  nb::callable bridge_;
  std::string name_;
};

// Runs one case file through an oracle ("truth" or "same-map") with the Python
// implementation; `op` overrides the case's operation ("rebuild", "extract", "both")
// where the caller supplied only one of them. The outcome as outcome_to_json writes it,
// as JSON text.
std::string py_judge(const std::string& case_text, nb::callable bridge, const std::string& name,
                     const std::optional<std::string>& op, const std::string& oracle_name) {
  const auto oracle = oracles::parse_oracle_kind(oracle_name);
  if (!oracle) throw nb::value_error(fmt::format("Unknown oracle {:?}.", oracle_name).c_str());
  auto decoded = decode_case_text(case_text);
  if (!decoded) throw nb::value_error(("Not a case file: " + decoded.error().to_string()).c_str());
  Case c = std::move(decoded).value();
  if (op) {
    if (*op == "rebuild") c.ops = {Op::rebuild};
    else if (*op == "extract") c.ops = {Op::extract};
    else if (*op == "both") c.ops = {Op::rebuild, Op::extract};
    else throw nb::value_error(fmt::format("Unknown op {:?}.", *op).c_str());
  }
  PythonTarget target(std::move(bridge), name);
  auto outcome = oracles::run_case(c, target, *oracle);
  if (!outcome) throw nb::value_error(("The case is unusable: " + outcome.error().to_string()).c_str());
  return oracles::outcome_to_json(c, outcome.value()).dump();
}

nb::object optional_int(const std::optional<std::int64_t>& v) { return v ? nb::cast(*v) : nb::none(); }

void raise_map_error(const Error& e) {
  nb::object cls = nb::module_::import_("shardcheck").attr("MapError");
  const char* side = e.side == Side::full ? "full" : e.side == Side::shard ? "shard" : nullptr;
  nb::object exc = cls(e.message, nb::arg("kind") = std::string(kind_name(e.kind)),
                       nb::arg("rank") = optional_int(e.rank), nb::arg("piece") = optional_int(e.piece),
                       nb::arg("address") = optional_int(e.address),
                       nb::arg("side") = side != nullptr ? nb::object(nb::str(side)) : nb::none(),
                       nb::arg("path") = e.path.empty() ? nb::none() : nb::object(nb::str(e.path.c_str())));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace
}  // namespace shardcheck

NB_MODULE(_core, m) {
  using namespace shardcheck;
  m.doc() = "shardcheck's C++ core; use the functions of the shardcheck package instead.";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const MapFailure& failure) {
      raise_map_error(failure.error);
    }
  });

  m.def("check", &py_check, nb::arg("text"), nb::arg("max_input_bytes").none() = nb::none());
  m.def("rebuild", &py_rebuild, nb::arg("text"), nb::arg("shards"), nb::arg("scale_power"), nb::arg("dtype").none(),
        nb::arg("torch"), nb::arg("digest_state").none() = nb::none(),
        nb::arg("max_input_bytes").none() = nb::none());
  m.def("extract", &py_extract, nb::arg("text"), nb::arg("full"), nb::arg("as_bool"), nb::arg("rank"),
        nb::arg("scale_power"), nb::arg("torch"), nb::arg("max_input_bytes").none() = nb::none());
  m.def("plan", &py_plan, nb::arg("source_text"), nb::arg("target_text"), nb::arg("compare_replicas"),
        nb::arg("max_segments"), nb::arg("max_input_bytes").none() = nb::none());
  m.def("reshard", &py_reshard, nb::arg("source_text"), nb::arg("target_text"), nb::arg("shards"),
        nb::arg("dtype").none(), nb::arg("torch"), nb::arg("compare_replicas"), nb::arg("max_segments"),
        nb::arg("scale_power") = 1, nb::arg("digest_state").none() = nb::none(),
        nb::arg("max_input_bytes").none() = nb::none());
  m.def("default_max_segments", [] { return ReshardOptions{}.max_segments; });
  m.def("default_max_input_bytes", &default_max_input_bytes);
  m.def("generate_case", &py_generate_case, nb::arg("draw"), nb::arg("max_elements"), nb::arg("max_dims"),
        nb::arg("max_extent"), nb::arg("max_tp"), nb::arg("corrupt_probability"), nb::arg("allow_scale_power"),
        nb::arg("record_digest"), nb::arg("adversarial_data"));
  m.def("judge", &py_judge, nb::arg("case_text"), nb::arg("bridge"), nb::arg("name"), nb::arg("op").none(),
        nb::arg("oracle"));
  m.def("_borrowed_address", &py_borrowed_address, nb::arg("array"));
  m.def("kind_names", [] {
    std::vector<std::string> names;
    for (ErrorKind k : kAllErrorKinds) names.emplace_back(kind_name(k));
    return names;
  });
  m.def("dtype_names", [] {
    std::vector<std::string> names;
    for (DType d : kAllDTypes) names.emplace_back(dtype_name(d));
    return names;
  });
}
