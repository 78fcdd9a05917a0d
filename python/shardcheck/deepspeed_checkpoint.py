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

Files are read by ``shardcheck.torchfile``, which runs nothing from them and needs no
torch: tensors come back as NumPy arrays (bfloat16 as ``BFloat16Array``, its bit
patterns), and anything but tensors, containers, strings and numbers is refused, exit
2, naming the file and the global (contract 2). ``--unsafe-load`` is full unpickling with
``torch.load(weights_only=False)``, as DeepSpeed itself loads: it runs code from the file,
so it is only for files you trust. Affine-map patterns are matched with ``re.match``
semantics by the ``regex`` package, each match in at most ``MATCH_TIMEOUT_S`` seconds; a
pattern that does not finish is a refusal in the parameter's row. Text from the
checkpoint (names, patterns, messages) is printed with control characters escaped.
"""

import argparse
import collections
import json
import os
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import regex

import shardcheck
from shardcheck import torchfile
from shardcheck.torchfile import CheckpointError

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
# The most experts an AutoEP placement may declare here (DeepSpeed sets no bound; its
# models have at most thousands). Three integers of metadata could otherwise make inspect
# enumerate 10**15 experts (contract 2: a checkpoint is untrusted).
MAX_EXPERTS = 1 << 20
MODULE_KEY = "module"

_BIT_VIEWS = {"float64": "int64", "float32": "int32", "float16": "int16", "bfloat16": "int16", "int64": "int64",
              "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "uint8"}
# Shards are written into a case file (so that a data-dependent refusal replays) up to this
# many elements per parameter; above it the case holds the map alone.
_MAX_CASE_ELEMENTS = 1 << 16
# Matching one affine-map pattern against one parameter name may take this long (contract
# 2: a pattern from a checkpoint is matched in bounded time, or refused). A pattern that has
# run out of time on MAX_PATTERN_TIMEOUTS names is not tried again: every later name's row
# is then refused, since whether the pattern matches it is unknown.
MATCH_TIMEOUT_S = 1.0
MAX_PATTERN_TIMEOUTS = 5
# A `latest` tag file names a folder: a line of text.
_MAX_LATEST_BYTES = 4096


def default_max_checkpoint_bytes():
    """The most bytes of model-state files one inspect reads (all files together): half of
    this machine's memory, at least 64 MiB. Reading holds every file in memory once."""
    try:
        physical = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        physical = 0
    return max(physical // 2, 64 << 20)


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
    # The source's parts, each shown escaped in the table ("affine_map", then patterns;
    # or "autoep", then the prefix); not part of --json, whose `source` says the same.
    _source_parts: list = field(default_factory=list, repr=False)

    def public(self):
        return {key: value for key, value in self.__dict__.items() if not key.startswith("_")}


def model_files(directory, prefix=MODEL_FILE_PREFIX):
    """ds_to_universal's model-state files: get_files_with_prefix(get_files(dir), 'mp_rank_')
    (with prefix "": every *_model_states.pt, ZeRO-3's zero_pp_rank_R_mp_rank_XX ones too)."""
    found = []
    for root, _, names in os.walk(directory):
        for name in names:
            if name.startswith(prefix) and name.endswith(MODEL_FILE_SUFFIX):
                found.append(os.path.join(root, name))
    return sorted(found)


def _load(path, unsafe, max_bytes):
    """One model-state file, by shardcheck.torchfile (no code from the file runs, no torch
    needed), or with ``unsafe`` by torch.load(weights_only=False), which runs whatever the
    file holds. Either way only a regular file of at most ``max_bytes`` is opened."""
    if not unsafe:
        try:
            return torchfile.load(path, max_bytes=max_bytes)
        except CheckpointError as error:
            raise CheckpointError(f"{error}; pass --unsafe-load only if you trust the file") from None
    torchfile.check_regular(path, max_bytes, what="torch.save file")
    import torch  # only here: --unsafe-load is torch's own full unpickling

    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:
        raise CheckpointError(f"{path}: {type(error).__name__}: {error}") from None


def _read_latest(path):
    """The tag a `latest` file names (a line of text), read bounded like every input."""
    try:
        text = torchfile.read_bounded(path, _MAX_LATEST_BYTES, what="latest tag file")
    except CheckpointError:
        return None
    try:
        return text.decode("utf-8").strip()
    except UnicodeDecodeError:
        return None


def _is_torch_tensor(value):
    torch = sys.modules.get("torch")  # present only after --unsafe-load imported it
    return torch is not None and isinstance(value, torch.Tensor)


def _is_tensor(value):
    return isinstance(value, np.ndarray) or _is_torch_tensor(value)


def _dtype_of(tensor):
    if isinstance(tensor, np.ndarray):
        return torchfile.dtype_name(tensor)
    return "bool" if str(tensor.dtype) == "torch.bool" else str(tensor.dtype).replace("torch.", "")


def _flat(tensor):
    """The tensor as the flat row-major buffer a shard is (no copy where it already is one)."""
    if isinstance(tensor, np.ndarray):
        return np.ascontiguousarray(tensor).reshape(-1)
    return tensor.detach().contiguous().reshape(-1)


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
    _check_expert_count(num_experts)
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
        shown = missing if len(missing) <= 32 else f"{missing[:32]} and {len(missing) - 32} more"
        raise ValueError(f"AutoEP placement descriptor does not cover global expert IDs {shown}.")


def _check_expert_count(num_experts):
    if num_experts > MAX_EXPERTS:
        raise ValueError(f"AutoEP metadata declares {num_experts} experts, more than the {MAX_EXPERTS} shardcheck "
                         f"inspects.")


def _legacy_placement(num_experts, num_local_experts, ep_size):
    """autoep_affine.legacy_uniform_autoep_placement_descriptor (the three values checked to
    be integers first: a list times an integer would be a list that long)."""
    if not all(type(value) is int for value in (num_experts, num_local_experts, ep_size)):
        raise ValueError("Legacy AutoEP metadata must give num_experts, num_local_experts and ep_size as integers.")
    if num_local_experts * ep_size != num_experts:
        raise ValueError(f"Inconsistent legacy AutoEP metadata: num_local_experts ({num_local_experts}) * "
                         f"ep_size ({ep_size}) != num_experts ({num_experts}).")
    _check_expert_count(num_experts)
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
    holders = {expert: [] for expert in range(num_experts)}  # each expert's ranks, ascending
    for rank in sorted(by_rank):
        for expert in by_rank[rank]:  # validated: no expert twice in one rank's list
            holders[expert].append(rank)
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
    name = _dtype_of(tensor)
    flat = _flat(tensor)
    view = _BIT_VIEWS[name]
    width = {"int64": 16, "int32": 8, "int16": 4, "int8": 2, "uint8": 2}[view]
    if isinstance(flat, np.ndarray):
        values = flat.view(np.dtype(view)).tolist()
    else:
        values = flat.view(getattr(sys.modules["torch"], view)).tolist()
    return [f"0x{v & ((1 << (4 * width)) - 1):0{width}x}" for v in values]


def _write_case(cases_dir, report, amap, shards, digest_state=None):
    """A case file for a refused map: the map and (small enough) the shards the checkpoint
    holds, expecting the refusal strict conversion gave; `shardcheck repro FILE --target
    deepspeed` then shows what DeepSpeed does with it. None for a shard that does not fit
    its map (kind shape): a case file cannot hold shards of the wrong size; nor for a map
    JSON cannot hold (bytes, a set, a cycle), which a checkpoint may pickle."""
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
    numel = sum(int(np.prod(t.shape, dtype=object)) for t in shards.values())
    if shards and numel <= _MAX_CASE_ELEMENTS:
        case["shards"] = {str(rank): _bits(t) for rank, t in sorted(shards.items())}
    try:  # a map from the checkpoint may hold what JSON cannot (bytes, sets, cycles): no case file then
        text = json.dumps(case, indent=2)
    except (TypeError, ValueError, RecursionError):
        return ""
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return path


def _judge(report, amap, shards, cases_dir, rebuilt):
    """Checks the map, then rebuilds the parameter from its shards with strict conversion."""
    report.ranks = sorted(shards)
    for rank, tensor in sorted(shards.items()):
        if not _is_tensor(tensor):
            report.verdict, report.kind = "refused", "format"
            report.message = f"rank {rank} holds {type(tensor).__name__} under this name, not a tensor"
            return
    if shards:
        report.dtype = _dtype_of(next(iter(shards.values())))
    digests = amap.get("content_digests") if isinstance(amap, dict) else None
    digest_state = "param" if isinstance(digests, dict) and "param" in digests else None
    # NumPy has no bfloat16: the reader's bfloat16 arrays are uint16 bit patterns, which
    # shardcheck reads as bfloat16 when that dtype is named.
    bits16 = any(isinstance(t, torchfile.BFloat16Array) for t in shards.values())
    try:
        shardcheck.check(amap)
        flat = {rank: _flat(tensor) for rank, tensor in shards.items()}
        full = shardcheck.rebuild(amap, flat, digest_state=digest_state, dtype="bfloat16" if bits16 else None)
        if bits16:
            full = full.view(torchfile.BFloat16Array)
        report.shape = list(full.shape)
        report.verdict = "exact"
        if rebuilt is not None:
            rebuilt[report.name] = full
        report.digest = "verified" if digest_state else ""
    except shardcheck.MapError as error:
        report.verdict, report.kind, report.message = "refused", error.kind, str(error)
        report.case_file = _write_case(cases_dir, report, amap, shards, digest_state)
    except (TypeError, ValueError, RecursionError) as error:
        report.verdict, report.kind, report.message = "refused", "format", str(error)
        report.case_file = _write_case(cases_dir, report, amap if isinstance(amap, dict) else {}, {})


def _affine_params(info, path):
    """The affine-map envelope's {pattern: map}, the envelope checked as DeepSpeed reads it."""
    if not isinstance(info, dict):
        return {}
    affine = info.get(AFFINE_MAP, {})
    if not isinstance(affine, dict):
        raise CheckpointError(f"{path} holds an affine map envelope that is a {type(affine).__name__}, not a dict")
    version = affine.get(AFFINE_MAP_VERSION, AFFINE_MAP_FORMAT_VERSION)
    if type(version) is not int:
        raise CheckpointError(f"{path} records the affine map format version as a {type(version).__name__}, not "
                              f"an integer")
    if version > AFFINE_MAP_FORMAT_VERSION:
        raise CheckpointError(f"the checkpoint records affine map format version {version}, but DeepSpeed 0.19.8 "
                              f"understands up to {AFFINE_MAP_FORMAT_VERSION}")
    params = affine.get(AFFINE_MAP_PARAMS, {})
    if not isinstance(params, dict) or not all(isinstance(pattern, str) for pattern in params):
        raise CheckpointError(f"{path} holds affine map params that are not a dict keyed by patterns")
    return params


def _compile_patterns(params, path):
    """Each envelope pattern compiled by `regex` (re.match's syntax and meaning, plus a
    timeout); a pattern that does not compile makes the envelope unreadable."""
    compiled = {}
    for pattern in params:
        try:
            compiled[pattern] = regex.compile(pattern)
        except (regex.error, ValueError, OverflowError, RecursionError) as error:
            raise CheckpointError(f"{path} holds the affine map pattern {pattern!r}, which does not compile "
                                  f"({error})") from None
    return compiled


class _PatternClock:
    """How often each pattern has run out of time; MAX_PATTERN_TIMEOUTS retires it."""

    def __init__(self):
        self.timeouts = collections.Counter()
        self.first = {}  # pattern -> the first name it ran out of time on

    def match(self, compiled, name):
        """(patterns that match ``name``, [(pattern, why it is undecided for ``name``)])."""
        matched, undecided = [], []
        for pattern, rx in compiled.items():
            if self.timeouts[pattern] >= MAX_PATTERN_TIMEOUTS:
                undecided.append((pattern, f"the affine map pattern {pattern!r} ran out of its {MATCH_TIMEOUT_S:g} s "
                                           f"on {self.timeouts[pattern]} names (the first {self.first[pattern]!r}) "
                                           f"and is not tried again, so whether its map applies to this name is "
                                           f"unknown"))
                continue
            try:
                if rx.match(name, timeout=MATCH_TIMEOUT_S):
                    matched.append(pattern)
            except TimeoutError:
                self.timeouts[pattern] += 1
                self.first.setdefault(pattern, name)
                undecided.append((pattern, f"matching the affine map pattern {pattern!r} against this name did not "
                                           f"finish within {MATCH_TIMEOUT_S:g} s, so whether its map applies is "
                                           f"unknown"))
        return matched, undecided


def _autoep_entries(states):
    """(file, entry) of every AutoEP metadata entry of every model state."""
    for key, state in states.items():
        entries = state.get(AUTOEP_LAYERS_KEY)
        if entries is None:
            entries = state.get(AUTOEP_LAYERS_KEY_LEGACY)
        if not isinstance(entries, (list, tuple)):
            continue
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get(AUTOEP_EXPERT_KEY_PREFIX), str) and \
                    entry.get(AUTOEP_EXPERT_KEY_PREFIX):
                yield key, entry


def _module(state, path):
    module = state.get(MODULE_KEY)
    if module is None:
        return {}
    if not isinstance(module, dict) or not all(isinstance(name, str) for name in module):
        raise CheckpointError(f"{path} holds a module state that is not a dict keyed by parameter names")
    return module


def _load_checkpoint(directory, unsafe_load, max_bytes):
    """The model-state files of a checkpoint folder (or of the tag its ``latest`` names),
    read within ``max_bytes`` all together: (folder, {path: state}, {path: module})."""
    if not os.path.isdir(directory):
        raise CheckpointError(f"{directory} is not a directory")
    latest = os.path.join(directory, "latest")
    if os.path.isfile(latest):  # DeepSpeed's save_checkpoint tag file
        tag = _read_latest(latest)
        tagged = os.path.join(directory, tag) if tag else None
        if tagged and os.path.isdir(tagged):
            directory = tagged
    every_file = model_files(directory, prefix="")
    if not every_file:
        raise CheckpointError(f"{directory} holds no *{MODEL_FILE_SUFFIX} files")
    limit = default_max_checkpoint_bytes() if max_bytes is None else max_bytes
    budget = limit
    loaded = {}
    for path in every_file:
        size = torchfile.check_regular(path, None, what="torch.save file")
        if size > budget:
            raise CheckpointError(f"{path} is {size} bytes, more than the {budget} bytes left of the limit of {limit} "
                                  f"bytes for a checkpoint's model-state files (--max-checkpoint-bytes), so it is "
                                  f"not read")
        loaded[path] = _load(path, unsafe_load, budget)
        budget -= size
    for path, state in loaded.items():
        if not isinstance(state, dict):
            raise CheckpointError(f"{path} holds a {type(state).__name__}, not a model-state dict")
    modules = {path: _module(state, path) for path, state in loaded.items()}  # checked once, for every file
    return directory, loaded, modules


def _affine_reports(directory, loaded, modules, cases_dir, rebuilt):
    """A report for every parameter an affine map pattern of the checkpoint names."""
    # Tensor parallel ranks: the mp_rank_XX files (ZeRO-3's per-rank files are AutoEP's).
    states = {}
    files = model_files(directory)
    rank_modules = {}
    for path in files:
        rank = _rank_of(path, MODEL_FILE_PREFIX)
        if rank in states:
            raise CheckpointError(f"two model-state files for tensor parallel rank {rank}")
        states[rank] = loaded[path]
        rank_modules[rank] = modules[path]
    info = states[_rank_of(files[0], MODEL_FILE_PREFIX)].get(UNIVERSAL_CHECKPOINT_INFO, {}) if files else {}
    affine_params = _affine_params(info, files[0] if files else directory)
    compiled = _compile_patterns(affine_params, files[0] if files else directory)

    reports = []
    names = {}  # every parameter name, in order of first appearance
    for module in rank_modules.values():
        for name in module:
            names.setdefault(name, None)
    clock = _PatternClock()
    for name in names:
        matched, undecided = clock.match(compiled, name)
        if not matched and not undecided:
            continue
        patterns = matched + [pattern for pattern, _ in undecided]
        report = ParamReport(name=name, source=f"affine_map {'|'.join(patterns)}",
                             _source_parts=["affine_map"] + patterns)
        if undecided:
            report.verdict, report.kind = "refused", "format"
            report.message = "; ".join(why for _, why in undecided)
            reports.append(report)
            continue
        if len(matched) > 1:
            report.verdict, report.kind = "refused", "format"
            report.message = f"more than one affine map pattern matches: {matched}"
            reports.append(report)
            continue
        shards = {rank: module[name] for rank, module in rank_modules.items() if name in module}
        _judge(report, affine_params[matched[0]], shards, cases_dir, rebuilt)
        reports.append(report)

    return reports


def _autoep_reports(loaded, modules, cases_dir, rebuilt):
    """A report for every expert weight an AutoEP placement describes."""
    reports = []
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
                ep_rank = other.get(AUTOEP_PARAM_EP_RANK, 0)
                if type(ep_rank) is not int:
                    raise CheckpointError(f"{path} gives the AutoEP layer {prefix!r} the ep_rank "
                                          f"{type(ep_rank).__name__}, not an integer")
                by_ep_rank[ep_rank] = modules[path]
        for weight in AUTOEP_EXPERT_WEIGHTS:
            name = f"{prefix}.{weight}"
            shards = {ep: module[name] for ep, module in by_ep_rank.items() if name in module}
            if not shards:
                continue
            report = ParamReport(name=name, source=f"autoep {prefix}", _source_parts=["autoep", prefix])
            if not all(_is_tensor(t) for t in shards.values()):
                _judge(report, {}, shards, cases_dir, rebuilt)  # refused: not a tensor
                reports.append(report)
                continue
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
            except (ValueError, KeyError, TypeError, RecursionError) as error:
                report.verdict, report.kind, report.message = "refused", "placement", str(error)
                reports.append(report)
                continue
            _judge(report, amap, shards, cases_dir, rebuilt)
            reports.append(report)
    return reports


def inspect(directory, cases_dir="shardcheck-inspect", unsafe_load=False, rebuilt=None, max_bytes=None):
    """Every parameter an affine map or an AutoEP placement describes, judged: a list of
    ParamReport. ``rebuilt``, a dict, receives each exactly rebuilt tensor by name (NumPy
    arrays, bfloat16 ones as BFloat16Array; torch tensors with ``unsafe_load``).
    ``max_bytes``: the most bytes of model-state files read, all together (default
    default_max_checkpoint_bytes()). Raises CheckpointError when the checkpoint cannot be
    read."""
    directory, loaded, modules = _load_checkpoint(directory, unsafe_load, max_bytes)
    return (_affine_reports(directory, loaded, modules, cases_dir, rebuilt)
            + _autoep_reports(loaded, modules, cases_dir, rebuilt))


# Characters shown as escapes when text from a checkpoint is printed: the table's and the
# lines' own separators, Markdown's and HTML's, besides every control and format character.
_SHOWN_AS_ESCAPES = {"|": "\\x7c", "`": "\\x60", "<": "\\x3c", ">": "\\x3e", "&": "\\x26",
                     "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNPRINTED_CATEGORIES = ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp")


def shown(text, cell=False):
    """Text from a checkpoint (a parameter name, a pattern, a message) as inspect prints
    it: control and format characters (line breaks, terminal escapes, bidirectional
    overrides), `|`, backticks and HTML's `<`, `>` and `&` as Python-style escapes (\\n,
    \\x1b, \\x7c, \\u202e), so that it can neither end a line nor recolour a terminal nor
    open markup. ``cell``: a table cell, where spaces are escaped too, so that the columns
    stay whitespace-separated."""
    out = []
    for char in str(text):
        if char in _SHOWN_AS_ESCAPES:
            out.append(_SHOWN_AS_ESCAPES[char])
            continue
        category = unicodedata.category(char)
        if category in _UNPRINTED_CATEGORIES or (cell and category == "Zs"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000
                       else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


def format_table(reports):
    rows = [("parameter", "map", "shape", "dtype", "ranks", "verdict")]
    for r in reports:
        verdict = r.verdict if r.verdict == "exact" else f"{r.verdict} {r.kind}"
        if r.digest:
            verdict += ", digest verified"
        parts = r._source_parts or [r.source]
        source = parts[0] + (" " + "|".join(shown(part, cell=True) for part in parts[1:]) if parts[1:] else "")
        rows.append((shown(r.name, cell=True), source, "x".join(map(str, r.shape)) if r.shape else "-",
                     shown(r.dtype, cell=True) or "-", ",".join(map(str, r.ranks)) or "-", verdict))
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
    inspect_parser.add_argument("--max-checkpoint-bytes", type=int, default=None, metavar="N",
                                help="the most bytes of model-state files read, all files together (default half "
                                     "of this machine's memory, at least 64 MiB)")
    inspect_parser.add_argument("--unsafe-load", action="store_true",
                                help="full unpickling with torch.load(weights_only=False): runs code from the file; "
                                     "only for files you trust (needs torch). Without it, files are read by "
                                     "shardcheck's own reader, which runs nothing from them and refuses anything but "
                                     "tensors, containers, strings and numbers")
    args = parser.parse_args(argv)
    if args.max_checkpoint_bytes is not None and args.max_checkpoint_bytes < 1:
        parser.error("--max-checkpoint-bytes must be at least 1")
    try:
        reports = inspect(args.checkpoint, args.cases, args.unsafe_load, max_bytes=args.max_checkpoint_bytes)
    except CheckpointError as error:
        print(f"shardcheck deepspeed inspect: {shown(error)}", file=sys.stderr)
        return 2
    except ImportError as error:
        print(f"shardcheck deepspeed inspect: {shown(error)} (--unsafe-load needs torch)", file=sys.stderr)
        return 2
    if args.json:
        for r in reports:
            print(json.dumps(r.public()))
    else:
        sys.stdout.write(format_table(reports))
        for r in reports:
            if r.verdict != "exact":
                print(f"{shown(r.name)}: {r.kind}: {shown(r.message)}" +
                      (f" -> {shown(r.case_file)}" if r.case_file else ""))
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
