"""``shardcheck deepspeed inspect CHECKPOINT_DIR``: the affine maps inside a DeepSpeed
0.19.8 checkpoint, checked by shardcheck's core and used to rebuild every parameter they
describe with strict conversion (docs/deepspeed-inspect.md).

What is read, as ``deepspeed/checkpoint/ds_to_universal.py`` reads it:

- the model-state files: every file below the folder whose name starts with ``mp_rank_``
  and ends with ``_model_states.pt`` (``MODEL_FILE_PREFIX``, ``MODEL_FILE_SUFFIX``), in
  sorted order; the first holds ``universal_checkpoint_info`` (DeepSpeed's
  ``get_checkpoint_info`` reads ``mp_rank_files[0]``), and file ``mp_rank_XX`` holds tensor
  parallel rank XX's tensors under ``module``;
- ``universal_checkpoint_info["affine_map"]``: ``{"version": 1, "params": {PATTERN:
  map}}``; a parameter takes the one map whose pattern ``re.match``-es its name (two
  matches are an error, as in ``merge_tp_slices``);
- AutoEP metadata, ``ds_autoep_layers`` (or the legacy ``autoep_layers``) in a model
  state: per layer ``expert_key_prefix``, ``num_experts``, ``ep_size``, an
  ``expert_placement`` descriptor (or the legacy ``num_local_experts``, lowered to the
  uniform placement), optionally a serialized ``affine_map``; an entry with ``ep_rank``
  (ZeRO-3 partition-native metadata) says which EP rank's packed experts
  ``PREFIX.w1|w2|w3`` its file holds. The placement is validated as
  ``autoep_affine.validate_autoep_placement_descriptor`` does and lowered as
  ``autoep_placement_to_affine_map`` does.

torch is imported only here, when a checkpoint is read, with ``weights_only=True``
(``--unsafe-load`` allows full unpickling, which DeepSpeed itself uses, for checkpoints
that pickle other objects: only for files you trust).
"""

import argparse
import json
import os
import pickle
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Optional

import shardcheck

# DeepSpeed 0.19.8, deepspeed/checkpoint/constants.py.
MODEL_FILE_PREFIX = "mp_rank_"
MODEL_FILE_SUFFIX = "_model_states.pt"
UNIVERSAL_CHECKPOINT_INFO = "universal_checkpoint_info"
AFFINE_MAP = "affine_map"
AFFINE_MAP_VERSION = "version"
AFFINE_MAP_PARAMS = "params"
AFFINE_MAP_FORMAT_VERSION = 1  # deepspeed/checkpoint/affine.py
AUTOEP_LAYERS_KEY = "ds_autoep_layers"
AUTOEP_LAYERS_KEY_LEGACY = "autoep_layers"
AUTOEP_EXPERT_KEY_PREFIX = "expert_key_prefix"
AUTOEP_NUM_EXPERTS = "num_experts"
AUTOEP_NUM_LOCAL_EXPERTS = "num_local_experts"
AUTOEP_EP_SIZE = "ep_size"
AUTOEP_EXPERT_PLACEMENT = "expert_placement"
AUTOEP_PARAM_EP_RANK = "ep_rank"
AUTOEP_PLACEMENT_VERSION_KEY = "version"
AUTOEP_PLACEMENT_VERSION = 1
AUTOEP_PLACEMENT_NUM_EXPERTS = "num_experts"
AUTOEP_PLACEMENT_EP_SIZE = "ep_size"
AUTOEP_PLACEMENT_RANKS = "ranks"
AUTOEP_PLACEMENT_RANK = "rank"
AUTOEP_PLACEMENT_EXPERTS = "experts"
AUTOEP_EXPERT_WEIGHTS = ("w1", "w2", "w3")  # ds_to_universal._autoep_expert_param_info
MODULE_KEY = "module"

_BIT_VIEWS = {"float64": "int64", "float32": "int32", "float16": "int16", "bfloat16": "int16", "int64": "int64",
              "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "uint8"}
# Shards are written into a case file (so that a data-dependent refusal replays) up to this
# many elements per parameter; above it the case holds the map alone.
_MAX_CASE_ELEMENTS = 1 << 16


@dataclass
class ParamReport:
    """One parameter's row: where its map came from, and what strict conversion says."""

    name: str
    source: str  # "affine_map PATTERN" or "autoep PREFIX"
    shape: Optional[list] = None
    dtype: str = ""
    ranks: list = field(default_factory=list)
    verdict: str = ""  # exact, refused, missing
    kind: str = ""
    message: str = ""
    digest: str = ""  # verified, or empty
    case_file: str = ""


class CheckpointError(Exception):
    """The checkpoint cannot be read as DeepSpeed 0.19.8 writes it."""


def model_files(directory, prefix=MODEL_FILE_PREFIX):
    """ds_to_universal's model-state files: get_files_with_prefix(get_files(dir), 'mp_rank_')
    (with prefix "": every *_model_states.pt, ZeRO-3's zero_pp_rank_R_mp_rank_XX ones too)."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            if name.startswith(prefix) and name.endswith(MODEL_FILE_SUFFIX):
                found.append(os.path.join(root, name))
    return sorted(found)


class _TensorsOnlyUnpickler(pickle.Unpickler):
    """What weights_only=True allows (tensors, storages, containers, numbers, strings), for
    a torch whose own weights_only unpickler cannot read what DeepSpeed writes (torch
    1.13's refuses every float, universal_checkpoint_version among them)."""

    ALLOWED = {("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"),
               ("torch._utils", "_rebuild_parameter"), ("torch._tensor", "_rebuild_from_type_v2"),
               ("torch", "Size"), ("torch", "device"), ("torch.serialization", "_get_layout"),
               ("torch", "strided"), ("torch._utils", "_rebuild_parameter_with_state")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED or (module == "torch" and name.endswith("Storage")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not a tensor, a container or a number")


_tensors_only = types.SimpleNamespace(Unpickler=_TensorsOnlyUnpickler, __name__="shardcheck_tensors_only",
                                      load=lambda f, **kw: _TensorsOnlyUnpickler(f, **kw).load())


def _load(path, unsafe):
    """torch.load as ds_to_universal does, but with weights_only where the torch allows it:
    torch's own weights_only unpickler, else one as strict (tensors, containers, numbers,
    strings), else (--unsafe-load only) full unpickling."""
    import torch

    if unsafe:
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as error:
            raise CheckpointError(f"{path}: {type(error).__name__}: {error}") from None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:
        pass
    try:
        return torch.load(path, map_location="cpu", weights_only=False, pickle_module=_tensors_only)
    except Exception as error:
        raise CheckpointError(
            f"{path} holds more than tensors, containers and numbers ({type(error).__name__}: "
            f"{str(error).splitlines()[0] if str(error) else ''}); if you trust the file, pass --unsafe-load") from None


def _rank_of(path, prefix):
    match = re.search(re.escape(prefix) + r"(\d+)", os.path.basename(path))
    return int(match.group(1)) if match else None


def _validate_placement(descriptor):
    """autoep_affine.validate_autoep_placement_descriptor, word for word in effect."""
    if not isinstance(descriptor, dict):
        raise ValueError("AutoEP placement descriptor must be a dict.")
    if descriptor.get(AUTOEP_PLACEMENT_VERSION_KEY) != AUTOEP_PLACEMENT_VERSION:
        raise ValueError(f"Unsupported AutoEP placement descriptor version "
                         f"{descriptor.get(AUTOEP_PLACEMENT_VERSION_KEY)!r}; expected {AUTOEP_PLACEMENT_VERSION}.")

    def positive(value, name):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name} must be a positive integer; got {value!r}.")
        return value

    num_experts = positive(descriptor.get(AUTOEP_PLACEMENT_NUM_EXPERTS), AUTOEP_PLACEMENT_NUM_EXPERTS)
    ep_size = positive(descriptor.get(AUTOEP_PLACEMENT_EP_SIZE), AUTOEP_PLACEMENT_EP_SIZE)
    ranks = descriptor.get(AUTOEP_PLACEMENT_RANKS)
    if not isinstance(ranks, list) or len(ranks) != ep_size:
        raise ValueError(f"AutoEP placement descriptor must list exactly {ep_size} rank entries.")
    seen, covered = set(), set()
    for entry in ranks:
        rank = entry.get(AUTOEP_PLACEMENT_RANK) if isinstance(entry, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < ep_size:
            raise ValueError(f"AutoEP placement rank {rank!r} is outside [0, {ep_size}).")
        if rank in seen:
            raise ValueError(f"AutoEP placement rank {rank} appears more than once.")
        seen.add(rank)
        experts = entry.get(AUTOEP_PLACEMENT_EXPERTS)
        if not isinstance(experts, list):
            raise ValueError(f"Experts for AutoEP placement rank {rank} must be a list.")
        if len(set(experts)) != len(experts):
            raise ValueError(f"AutoEP placement rank {rank} contains a duplicate expert ID.")
        for expert in experts:
            if not isinstance(expert, int) or isinstance(expert, bool) or not 0 <= expert < num_experts:
                raise ValueError(f"AutoEP placement expert ID {expert!r} on rank {rank} is outside [0, {num_experts}).")
            covered.add(expert)
    missing = sorted(set(range(num_experts)) - covered)
    if missing:
        raise ValueError(f"AutoEP placement descriptor does not cover global expert IDs {missing}.")


def _legacy_placement(num_experts, num_local_experts, ep_size):
    """autoep_affine.legacy_uniform_autoep_placement_descriptor."""
    if num_local_experts * ep_size != num_experts:
        raise ValueError(f"Inconsistent legacy AutoEP metadata: num_local_experts ({num_local_experts}) * "
                         f"ep_size ({ep_size}) != num_experts ({num_experts}).")
    ranks = [{AUTOEP_PLACEMENT_RANK: r, AUTOEP_PLACEMENT_EXPERTS: list(range(r * num_local_experts,
                                                                             (r + 1) * num_local_experts))}
             for r in range(ep_size)]
    return {AUTOEP_PLACEMENT_VERSION_KEY: AUTOEP_PLACEMENT_VERSION, AUTOEP_PLACEMENT_NUM_EXPERTS: num_experts,
            AUTOEP_PLACEMENT_EP_SIZE: ep_size, AUTOEP_PLACEMENT_RANKS: ranks}


def _strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return list(reversed(strides))


def placement_to_map(descriptor, logical_shape):
    """autoep_affine.autoep_placement_to_affine_map, as a map dict: runs of consecutive
    experts held by one rank alone become one piece; every other expert its own piece,
    listing every rank that holds it."""
    logical_shape = [int(e) for e in logical_shape]
    num_experts = descriptor[AUTOEP_PLACEMENT_NUM_EXPERTS]
    if not logical_shape or logical_shape[0] != num_experts:
        raise ValueError(f"Expert parameter logical shape must start with num_experts ({num_experts}); "
                         f"got {tuple(logical_shape)}.")
    by_rank = {e[AUTOEP_PLACEMENT_RANK]: e[AUTOEP_PLACEMENT_EXPERTS] for e in descriptor[AUTOEP_PLACEMENT_RANKS]}
    holders = {expert: sorted(r for r, experts in by_rank.items() if expert in experts) for expert in range(num_experts)}
    expert_shape = logical_shape[1:]
    expert_numel = 1
    for extent in expert_shape:
        expert_numel *= extent
    ranks = {}
    for rank in range(descriptor[AUTOEP_PLACEMENT_EP_SIZE]):
        experts = by_rank[rank]
        shard_shape = [len(experts)] + expert_shape
        pieces, start = [], 0
        for local in range(1, len(experts) + 1):
            at_end = local == len(experts)
            if not at_end:
                previous, current = experts[local - 1], experts[local]
                joined = current == previous + 1 and holders[current] == holders[previous] and len(holders[current]) == 1
            if at_end or not joined:
                first = experts[start]
                pieces.append({"shape": [local - start] + expert_shape,
                               "source": [first * expert_numel, _strides(logical_shape)],
                               "dest": [start * expert_numel, _strides(shard_shape)],
                               "locations": holders[first]})
                start = local
        ranks[str(rank)] = {"shard_shape": shard_shape, "pieces": pieces}
    return {"logical_shape": logical_shape, "ranks": ranks}


def _bits(tensor):
    import torch

    flat = tensor.detach().contiguous().reshape(-1)
    name = "bool" if flat.dtype == torch.bool else str(flat.dtype).replace("torch.", "")
    width = {"int64": 16, "int32": 8, "int16": 4, "int8": 2, "uint8": 2}[_BIT_VIEWS[name]]
    values = flat.view(getattr(torch, _BIT_VIEWS[name])).tolist()
    return [f"0x{v & ((1 << (4 * width)) - 1):0{width}x}" for v in values]


def _write_case(cases_dir, report, amap, shards, digest_state=None):
    """A case file for a refused map: the map and (small enough) the shards the checkpoint
    holds, expecting the refusal strict conversion gave; `shardcheck repro FILE --target
    deepspeed` then shows what DeepSpeed does with it. None for a shard that does not fit
    its map (kind shape): a case file cannot hold shards of the wrong size."""
    if report.kind == "shape":
        return ""
    os.makedirs(cases_dir, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.name).strip("_") or "param"
    path = os.path.join(cases_dir, f"{safe}.json")
    case = {
        "shardcheck_case": 1,
        "name": f"deepspeed-inspect-{safe}",
        "comment": f"shardcheck deepspeed inspect: parameter {report.name} ({report.source}) is refused "
                   f"{report.kind}: {report.message}",
        "map": amap,
        "dtype": report.dtype or "float32",
        "op": "rebuild",
        "expect": "refused",
        "expect_error": report.kind,
    }
    if digest_state:
        case["digest_state"] = digest_state
    numel = sum(int(t.numel()) for t in shards.values())
    if shards and numel <= _MAX_CASE_ELEMENTS:
        case["shards"] = {str(rank): _bits(t) for rank, t in sorted(shards.items())}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(case, f, indent=2)
        f.write("\n")
    return path


def _judge(report, amap, shards, cases_dir, rebuilt):
    """Checks the map, then rebuilds the parameter from its shards with strict conversion."""
    report.ranks = sorted(shards)
    if shards:
        first = next(iter(shards.values()))
        report.dtype = "bool" if str(first.dtype) == "torch.bool" else str(first.dtype).replace("torch.", "")
    digest_state = "param" if isinstance(amap, dict) and "param" in (amap.get("content_digests") or {}) else None
    try:
        shardcheck.check(amap)
        flat = {rank: tensor.detach().contiguous().reshape(-1) for rank, tensor in shards.items()}
        full = shardcheck.rebuild(amap, flat, digest_state=digest_state)
        report.shape = list(full.shape)
        report.verdict = "exact"
        if rebuilt is not None:
            rebuilt[report.name] = full
        report.digest = "verified" if digest_state else ""
    except shardcheck.MapError as error:
        report.verdict, report.kind, report.message = "refused", error.kind, str(error)
        report.case_file = _write_case(cases_dir, report, amap, shards, digest_state)
    except (TypeError, ValueError) as error:
        report.verdict, report.kind, report.message = "refused", "format", str(error)
        report.case_file = _write_case(cases_dir, report, amap if isinstance(amap, dict) else {}, {})


def _affine_params(info):
    affine = info.get(AFFINE_MAP, {}) if isinstance(info, dict) else {}
    version = affine.get(AFFINE_MAP_VERSION, AFFINE_MAP_FORMAT_VERSION)
    if version > AFFINE_MAP_FORMAT_VERSION:
        raise CheckpointError(f"the checkpoint records affine map format version {version}, but DeepSpeed 0.19.8 "
                              f"understands up to {AFFINE_MAP_FORMAT_VERSION}")
    return affine.get(AFFINE_MAP_PARAMS, {})


def _autoep_entries(states):
    """(file, entry) of every AutoEP metadata entry of every model state."""
    for key, state in states.items():
        entries = state.get(AUTOEP_LAYERS_KEY)
        if entries is None:
            entries = state.get(AUTOEP_LAYERS_KEY_LEGACY)
        for entry in entries or []:
            if isinstance(entry, dict) and entry.get(AUTOEP_EXPERT_KEY_PREFIX):
                yield key, entry


def inspect(directory, cases_dir="shardcheck-inspect", unsafe_load=False, rebuilt=None):
    """Every parameter an affine map or an AutoEP placement describes, judged: a list of
    ParamReport. ``rebuilt``, a dict, receives each exactly rebuilt tensor by name.
    Raises CheckpointError when the checkpoint cannot be read."""
    if not os.path.isdir(directory):
        raise CheckpointError(f"{directory} is not a directory")
    latest = os.path.join(directory, "latest")
    if os.path.isfile(latest):  # DeepSpeed's save_checkpoint tag file
        with open(latest, encoding="utf-8") as f:
            tagged = os.path.join(directory, f.read().strip())
        if os.path.isdir(tagged):
            directory = tagged
    every_file = model_files(directory, prefix="")
    if not every_file:
        raise CheckpointError(f"{directory} holds no *{MODEL_FILE_SUFFIX} files")
    loaded = {path: _load(path, unsafe_load) for path in every_file}
    for path, state in loaded.items():
        if not isinstance(state, dict):
            raise CheckpointError(f"{path} holds a {type(state).__name__}, not a model-state dict")
    # Tensor parallel ranks: the mp_rank_XX files (ZeRO-3's per-rank files are AutoEP's).
    states = {}
    files = model_files(directory)
    for path in files:
        rank = _rank_of(path, MODEL_FILE_PREFIX)
        if rank in states:
            raise CheckpointError(f"two model-state files for tensor parallel rank {rank}")
        states[rank] = loaded[path]
    info = states[_rank_of(files[0], MODEL_FILE_PREFIX)].get(UNIVERSAL_CHECKPOINT_INFO, {}) if files else {}
    affine_params = _affine_params(info)

    reports = []
    names = []
    for state in states.values():
        for name in (state.get(MODULE_KEY) or {}):
            if name not in names:
                names.append(name)
    for name in names:
        matched = [pattern for pattern in affine_params if re.match(pattern, name)]
        if not matched:
            continue
        report = ParamReport(name=name, source=f"affine_map {'|'.join(matched)}")
        if len(matched) > 1:
            report.verdict, report.kind = "refused", "format"
            report.message = f"more than one affine map pattern matches: {matched}"
            reports.append(report)
            continue
        shards = {rank: state[MODULE_KEY][name] for rank, state in states.items() if name in (state.get(MODULE_KEY) or {})}
        _judge(report, affine_params[matched[0]], shards, cases_dir, rebuilt)
        reports.append(report)

    judged_prefixes = set()
    for _, entry in _autoep_entries(loaded):
        prefix = entry[AUTOEP_EXPERT_KEY_PREFIX]
        if prefix in judged_prefixes:
            continue  # judged once, with every EP rank's tensors
        judged_prefixes.add(prefix)
        # The packed local experts per EP rank: an entry's ep_rank names its file's EP rank
        # (a file without one holds EP rank 0's).
        by_ep_rank = {}
        for path, other in _autoep_entries(loaded):
            if other.get(AUTOEP_EXPERT_KEY_PREFIX) == prefix:
                by_ep_rank[int(other.get(AUTOEP_PARAM_EP_RANK, 0))] = loaded[path].get(MODULE_KEY) or {}
        for weight in AUTOEP_EXPERT_WEIGHTS:
            name = f"{prefix}.{weight}"
            shards = {ep: module[name] for ep, module in by_ep_rank.items() if name in module}
            if not shards:
                continue
            report = ParamReport(name=name, source=f"autoep {prefix}")
            try:
                placement = entry.get(AUTOEP_EXPERT_PLACEMENT)
                if placement is None:
                    placement = _legacy_placement(entry.get(AUTOEP_NUM_EXPERTS), entry.get(AUTOEP_NUM_LOCAL_EXPERTS),
                                                  entry.get(AUTOEP_EP_SIZE))
                _validate_placement(placement)
                expert_shape = list(next(iter(shards.values())).shape[1:])
                lowered = placement_to_map(placement, [placement[AUTOEP_PLACEMENT_NUM_EXPERTS]] + expert_shape)
                amap = entry.get(AFFINE_MAP)
                if amap is None:
                    amap = lowered
                elif json.loads(json.dumps(amap)) != json.loads(json.dumps(lowered)):
                    # As autoep_metadata_to_affine_map: a serialized map must be the placement's.
                    raise ValueError("AutoEP affine map disagrees with the expert placement descriptor.")
            except (ValueError, KeyError, TypeError) as error:
                report.verdict, report.kind, report.message = "refused", "placement", str(error)
                reports.append(report)
                continue
            _judge(report, amap, shards, cases_dir, rebuilt)
            reports.append(report)
    return reports


def format_table(reports):
    rows = [("parameter", "map", "shape", "dtype", "ranks", "verdict")]
    for r in reports:
        verdict = r.verdict if r.verdict == "exact" else f"{r.verdict} {r.kind}"
        if r.digest:
            verdict += ", digest verified"
        rows.append((r.name, r.source, "x".join(map(str, r.shape)) if r.shape else "-", r.dtype or "-",
                     ",".join(map(str, r.ranks)) or "-", verdict))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="shardcheck deepspeed",
        description="DeepSpeed 0.19.8 checkpoints: check every affine map and AutoEP placement with shardcheck's "
                    "core and rebuild every parameter they describe with strict conversion.")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect_parser = sub.add_parser("inspect", help="check and rebuild the mapped parameters of a checkpoint folder")
    inspect_parser.add_argument("checkpoint", help="the checkpoint folder (or its parent holding `latest`)")
    inspect_parser.add_argument("--cases", default="shardcheck-inspect",
                                help="folder for a case file per refused map (default shardcheck-inspect)")
    inspect_parser.add_argument("--json", action="store_true", help="print one JSON object per parameter")
    inspect_parser.add_argument("--unsafe-load", action="store_true",
                                help="torch.load with weights_only=False (full unpickling: trusted files only)")
    args = parser.parse_args(argv)
    try:
        reports = inspect(args.checkpoint, args.cases, args.unsafe_load)
    except CheckpointError as error:
        print(f"shardcheck deepspeed inspect: {error}", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"shardcheck deepspeed inspect: {error} (reading a checkpoint needs torch)", file=sys.stderr)
        return 2
    if args.json:
        for r in reports:
            print(json.dumps(r.__dict__))
    else:
        sys.stdout.write(format_table(reports))
        for r in reports:
            if r.verdict != "exact":
                print(f"{r.name}: {r.kind}: {r.message}" + (f" -> {r.case_file}" if r.case_file else ""))
    refused = [r for r in reports if r.verdict != "exact"]
    if not reports:
        print("verdict: nothing to inspect, exit 1: no parameter matches an affine map or an AutoEP layer")
        return 1
    if refused:
        print(f"verdict: FAIL, exit 1: {len(refused)} of {len(reports)} parameters refused")
        return 1
    print(f"verdict: PASS, exit 0: {len(reports)} parameters rebuilt exactly")
    return 0


if __name__ == "__main__":
    sys.exit(main())
