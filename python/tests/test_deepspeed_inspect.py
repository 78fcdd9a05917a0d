"""`shardcheck deepspeed inspect`: small DeepSpeed 0.19.8-layout checkpoints written with
torch.save (a two-layer tensor parallel 2 model with affine maps in
universal_checkpoint_info, an AutoEP layer of ZeRO-3 per-rank files), clean ones rebuilt
bit-exact, planted map corruptions each refused with its kind and a case file that
`shardcheck repro` replays. inspect reads them with shardcheck.torchfile (NumPy arrays
out, no torch); the tests write them with torch."""

import copy
import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from shardcheck import deepspeed_checkpoint as inspect_module
from shardcheck import torchfile
from test_package import command_path

WRITTEN_BY_TORCH = "these tests write their checkpoints with torch.save (inspect reads them without torch; " \
                   "Debian: python3-torch)"
torch = pytest.importorskip("torch", reason=WRITTEN_BY_TORCH)

HIDDEN = 4


def piece(shape, source, source_strides, dest, dest_strides, locations):
    return {"shape": shape, "source": [source, source_strides], "dest": [dest, dest_strides], "locations": locations}


def column_split():
    """[2H, H] split by rows (dimension 0) over 2 ranks: each holds [H, H]."""
    return {"logical_shape": [2 * HIDDEN, HIDDEN], "ranks": {
        str(r): {"shard_shape": [HIDDEN, HIDDEN],
                 "pieces": [piece([HIDDEN, HIDDEN], r * HIDDEN * HIDDEN, [HIDDEN, 1], 0, [HIDDEN, 1], [r])]}
        for r in (0, 1)}}


def row_split():
    """[H, 2H] split by columns (dimension 1): each holds [H, H]."""
    return {"logical_shape": [HIDDEN, 2 * HIDDEN], "ranks": {
        str(r): {"shard_shape": [HIDDEN, HIDDEN],
                 "pieces": [piece([HIDDEN, HIDDEN], r * HIDDEN, [2 * HIDDEN, 1], 0, [HIDDEN, 1], [r])]}
        for r in (0, 1)}}


def replicated():
    return {"logical_shape": [HIDDEN], "ranks": {
        str(r): {"shard_shape": [HIDDEN], "pieces": [piece([HIDDEN], 0, [1], 0, [1], [0, 1])]} for r in (0, 1)}}


PATTERNS = {r"layers\.\d+\.attention\.query_key_value\.weight": column_split,
            r"layers\.\d+\.mlp\.dense_4h_to_h\.weight": row_split,
            r"layers\.\d+\.input_layernorm\.weight": replicated}


def tp2_model():
    generator = torch.Generator().manual_seed(7)
    full = {}
    for layer in (0, 1):
        full[f"layers.{layer}.attention.query_key_value.weight"] = torch.randn(2 * HIDDEN, HIDDEN, generator=generator)
        full[f"layers.{layer}.mlp.dense_4h_to_h.weight"] = torch.randn(HIDDEN, 2 * HIDDEN, generator=generator)
        full[f"layers.{layer}.input_layernorm.weight"] = torch.randn(HIDDEN, generator=generator)
    return full


def save_tp2(folder, maps=None, shard_edit=None):
    """mp_rank_00/01_model_states.pt as DeepSpeed saves them: each TP rank's module state
    dict; rank 0's also holds universal_checkpoint_info with the affine maps."""
    full = tp2_model()
    maps = maps if maps is not None else {pattern: make() for pattern, make in PATTERNS.items()}
    folder.mkdir(parents=True, exist_ok=True)
    for rank in (0, 1):
        module = {}
        for name, tensor in full.items():
            if "query_key_value" in name:
                module[name] = tensor[rank * HIDDEN:(rank + 1) * HIDDEN].clone()
            elif "dense_4h_to_h" in name:
                module[name] = tensor[:, rank * HIDDEN:(rank + 1) * HIDDEN].clone()
            else:
                module[name] = tensor.clone()
        if shard_edit:
            shard_edit(rank, module)
        state = {"module": module, "dp_world_size": 1, "mp_world_size": 2, "ds_version": "0.19.8"}
        if rank == 0:
            state["universal_checkpoint_info"] = {"universal_checkpoint_version": 0.4,
                                                  "affine_map": {"version": 1, "params": maps}}
        torch.save(state, folder / f"mp_rank_{rank:02d}_model_states.pt")
    return full


def test_a_clean_tp2_checkpoint_rebuilds_bit_exact(tmp_path):
    full = save_tp2(tmp_path / "ckpt")
    rebuilt = {}
    reports = inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"), rebuilt=rebuilt)
    assert sorted(r.name for r in reports) == sorted(full)
    assert all(r.verdict == "exact" for r in reports), [(r.name, r.message) for r in reports]
    for name, tensor in full.items():
        assert isinstance(rebuilt[name], np.ndarray) and rebuilt[name].dtype == np.float32, name
        assert rebuilt[name].shape == tuple(tensor.shape), name
        assert np.array_equal(rebuilt[name].view(np.int32), tensor.numpy().view(np.int32)), name
    assert not (tmp_path / "cases").exists()


def test_deepspeed_reads_the_same_maps(tmp_path):
    """The maps as written are DeepSpeed's own format: its from_dict reads them and rebuilds
    the same tensors (skipped without the sdist)."""
    import shardcheck.deepspeed

    try:
        affine = shardcheck.deepspeed.load_affine()
    except FileNotFoundError as missing:
        pytest.skip(f"DeepSpeed's sdist is not here ({missing})")
    full = save_tp2(tmp_path / "ckpt")
    name = "layers.1.mlp.dense_4h_to_h.weight"
    states = [torchfile.load(tmp_path / "ckpt" / f"mp_rank_{r:02d}_model_states.pt") for r in (0, 1)]
    amap = affine.ParamAffineMap.from_dict(row_split())
    shards = {r: torch.from_numpy(np.array(states[r]["module"][name])).reshape(-1) for r in (0, 1)}
    assert torch.equal(amap.rebuild(shards), full[name])


def corrupt_map(pattern, edit):
    maps = {p: make() for p, make in PATTERNS.items()}
    edit(maps[pattern])
    return maps


QKV, FC2, NORM = list(PATTERNS)


@pytest.mark.parametrize("label, maps, shard_edit, kind, names", [
    ("overlapping rows", corrupt_map(QKV, lambda m: m["ranks"]["1"]["pieces"][0]["source"].__setitem__(0, 8)),
     None, "uncovered", {"layers.0.attention.query_key_value.weight", "layers.1.attention.query_key_value.weight"}),
    ("a stride past the end", corrupt_map(FC2, lambda m: m["ranks"]["0"]["pieces"][0]["source"][1].__setitem__(0, 16)),
     None, "bounds", {"layers.0.mlp.dense_4h_to_h.weight", "layers.1.mlp.dense_4h_to_h.weight"}),
    ("a replica named on one rank only", corrupt_map(NORM, lambda m: m["ranks"]["1"]["pieces"][0].__setitem__(
        "locations", [1])), None, "holders",
     {"layers.0.input_layernorm.weight", "layers.1.input_layernorm.weight"}),
    ("replicas that disagree", None,
     lambda rank, module: rank == 1 and module["layers.1.input_layernorm.weight"].add_(1.0),
     "different_data", {"layers.1.input_layernorm.weight"}),
    ("a truncated shard", None,
     lambda rank, module: rank == 1 and module.__setitem__("layers.0.mlp.dense_4h_to_h.weight",
                                                           module["layers.0.mlp.dense_4h_to_h.weight"][:2].clone()),
     "shape", {"layers.0.mlp.dense_4h_to_h.weight"}),
    ("a content digest that does not match", corrupt_map(NORM, lambda m: m.__setitem__(
        "content_digests", {"param": "0x0000000000000001"})), None, "digest",
     {"layers.0.input_layernorm.weight", "layers.1.input_layernorm.weight"}),
])
def test_every_planted_corruption_is_refused(tmp_path, label, maps, shard_edit, kind, names):
    save_tp2(tmp_path / "ckpt", maps=maps, shard_edit=shard_edit)
    reports = inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))
    refused = {r.name: r for r in reports if r.verdict != "exact"}
    assert set(refused) == names, (label, {r.name: r.message for r in reports})
    for report in refused.values():
        assert report.kind == kind, (label, report.message)
        if kind == "shape":  # a case file cannot hold a shard of the wrong size
            assert report.case_file == ""
            continue
        case = json.loads(open(report.case_file).read())
        assert case["expect"] == "refused" and case["expect_error"] == kind
        # The case replays: strict refuses it with that kind, as it expects (exit 0).
        replay = subprocess.run([str(command_path()), "repro", report.case_file], capture_output=True, text=True,
                                timeout=60)
        assert replay.returncode == 0 and f"refused {kind}" in replay.stdout, replay.stdout + replay.stderr
    assert all(r.verdict == "exact" for r in reports if r.name not in names)


def test_two_matching_patterns_are_refused(tmp_path):
    maps = {p: make() for p, make in PATTERNS.items()}
    maps[r"layers\.0\..*norm.*"] = replicated()
    save_tp2(tmp_path / "ckpt", maps=maps)
    reports = {r.name: r for r in inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))}
    assert reports["layers.0.input_layernorm.weight"].verdict == "refused"
    assert "more than one" in reports["layers.0.input_layernorm.weight"].message
    assert reports["layers.1.input_layernorm.weight"].verdict == "exact"


NUM_EXPERTS, EXPERT_SHAPE = 4, [3, 2]


def placement(experts_by_rank):
    return {"version": 1, "num_experts": NUM_EXPERTS, "ep_size": len(experts_by_rank),
            "ranks": [{"rank": r, "experts": list(e)} for r, e in enumerate(experts_by_rank)]}


def save_autoep(folder, descriptor, experts_by_rank, entry_edit=None, tensor_edit=None):
    """ZeRO-3 AutoEP: one model-state file per EP rank holding its packed local experts
    (PREFIX.w1) and the layer's metadata with its ep_rank."""
    full = torch.randn([NUM_EXPERTS] + EXPERT_SHAPE, generator=torch.Generator().manual_seed(3))
    folder.mkdir(parents=True, exist_ok=True)
    for rank, experts in enumerate(experts_by_rank):
        local = torch.stack([full[e] for e in experts]) if experts else torch.empty([0] + EXPERT_SHAPE)
        entry = {"expert_key_prefix": "layers.0.moe.experts", "num_experts": NUM_EXPERTS, "ep_size": 2,
                 "expert_placement": copy.deepcopy(descriptor), "ep_rank": rank,
                 "checkpoint_format": "zero3_partitioned", "checkpoint_format_version": 1}
        if entry_edit:
            entry_edit(rank, entry)
        module = {"layers.0.moe.experts.w1": local}
        if tensor_edit:
            tensor_edit(rank, module)
        torch.save({"module": module, "ds_autoep_layers": [entry]},
                   folder / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
    return full


def test_an_autoep_layer_rebuilds_bit_exact(tmp_path):
    # A non-contiguous placement: rank 0 holds experts 0 and 3, rank 1 experts 1 and 2.
    experts = [[0, 3], [1, 2]]
    full = save_autoep(tmp_path / "ckpt", placement(experts), experts)
    rebuilt = {}
    (report,) = inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"), rebuilt=rebuilt)
    assert report.verdict == "exact", report.message
    assert report.source == "autoep layers.0.moe.experts" and report.ranks == [0, 1]
    out = rebuilt["layers.0.moe.experts.w1"]
    assert out.shape == tuple(full.shape) and out.dtype == np.float32
    assert np.array_equal(out.view(np.int32), full.numpy().view(np.int32))


def test_the_placement_lowering_is_deepspeeds(tmp_path):
    import shardcheck.deepspeed

    try:
        root = shardcheck.deepspeed.find_sdist()
    except FileNotFoundError as missing:
        pytest.skip(f"DeepSpeed's sdist is not here ({missing})")
    # autoep_affine.py imports deepspeed.checkpoint.* absolutely: read its lowering's source
    # instead of importing it, and compare piece for piece on the cases that differ.
    source = open(f"{root}/deepspeed/checkpoint/autoep_affine.py").read()
    assert "def _pieces_for_rank" in source and "len(holders[current_expert]) == 1" in source
    lowered = inspect_module.placement_to_map(placement([[0, 1], [2, 3]]), [NUM_EXPERTS] + EXPERT_SHAPE)
    assert [len(r["pieces"]) for r in lowered["ranks"].values()] == [1, 1]  # runs joined
    lowered = inspect_module.placement_to_map(placement([[0, 3], [1, 2]]), [NUM_EXPERTS] + EXPERT_SHAPE)
    assert [len(r["pieces"]) for r in lowered["ranks"].values()] == [2, 1]


@pytest.mark.parametrize("label, experts, descriptor_experts, entry_edit, tensor_edit, kind", [
    ("an expert held by no rank", [[0, 1], [2, 3]], [[0, 1], [2, 2]], None, None, "placement"),
    ("an expert outside the range", [[0, 1], [2, 3]], [[0, 1], [2, 7]], None, None, "placement"),
    ("a serialized map that is not the placement's", [[0, 1], [2, 3]], [[0, 1], [2, 3]],
     lambda rank, entry: entry.__setitem__("affine_map", inspect_module.placement_to_map(
         placement([[0, 2], [1, 3]]), [NUM_EXPERTS] + EXPERT_SHAPE)), None, "placement"),
    ("a packed tensor of the wrong size", [[0, 1], [2, 3]], [[0, 1], [2, 3]], None,
     lambda rank, module: rank == 1 and module.__setitem__("layers.0.moe.experts.w1",
                                                           module["layers.0.moe.experts.w1"][:1].clone()), "shape"),
])
def test_autoep_corruptions_are_refused(tmp_path, label, experts, descriptor_experts, entry_edit, tensor_edit, kind):
    save_autoep(tmp_path / "ckpt", placement(descriptor_experts), experts, entry_edit, tensor_edit)
    (report,) = inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))
    assert report.verdict == "refused" and report.kind == kind, (label, report.message)


@pytest.mark.parametrize("label, edit, message", [
    ("10**12 experts", lambda rank, entry: entry["expert_placement"].__setitem__("num_experts", 10 ** 12),
     "declares 1000000000000 experts, more than the 1048576"),
    ("legacy, 10**12 experts", lambda rank, entry: entry.update(
        {"expert_placement": None, "num_experts": 10 ** 12, "num_local_experts": 10 ** 6, "ep_size": 10 ** 6}),
     "declares 1000000000000 experts"),
    ("legacy, a list times 10**9", lambda rank, entry: entry.update(
        {"expert_placement": None, "num_experts": [0] * 1000, "num_local_experts": [0], "ep_size": 10 ** 9}),
     "as integers"),
])
def test_autoep_metadata_cannot_make_inspect_enumerate_without_bound(tmp_path, label, edit, message):
    """Three integers of AutoEP metadata (contract 2: untrusted) are refused `placement`
    at once rather than enumerated: a placement of more than MAX_EXPERTS experts, and
    legacy values that are not integers (a list times 10**9 would be 10**12 items)."""
    save_autoep(tmp_path / "ckpt", placement([[0, 1], [2, 3]]), [[0, 1], [2, 3]], entry_edit=edit)
    started = time.monotonic()
    (report,) = inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))
    assert time.monotonic() - started < 10, label
    assert report.verdict == "refused" and report.kind == "placement" and message in report.message, report.message


def test_a_map_json_cannot_hold_is_refused_without_a_case_file(tmp_path):
    """A checkpoint may pickle bytes or a set inside a map: refused format (the codec never
    sees it), and no case file, instead of a traceback while writing one."""
    maps = {pattern: make() for pattern, make in PATTERNS.items()}
    maps[NORM]["logical_shape"] = b"\x04"
    maps[QKV]["ranks"]["0"]["pieces"][0]["locations"] = {0}
    save_tp2(tmp_path / "ckpt", maps=maps)
    reports = {r.name: r for r in inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))}
    odd = [r for r in reports.values() if "norm" in r.name or "query_key_value" in r.name]
    assert len(odd) == 4 and all(r.kind == "format" and r.case_file == "" for r in odd), odd
    assert not (tmp_path / "cases").exists() or not list((tmp_path / "cases").iterdir())


def test_the_command_line_prints_the_table_and_the_verdict(tmp_path):
    save_tp2(tmp_path / "ckpt", maps=corrupt_map(QKV, lambda m: m["ranks"]["1"]["pieces"][0]["source"].__setitem__(0, 8)))
    run = subprocess.run([str(command_path()), "deepspeed", "inspect", str(tmp_path / "ckpt"), "--cases",
                          str(tmp_path / "cases")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["parameter", "map", "shape", "dtype", "ranks", "verdict"]
    assert re.search(r"layers\.0\.mlp\.dense_4h_to_h\.weight .* 4x8 +float32 +0,1 +exact", run.stdout)
    assert "refused uncovered" in run.stdout
    assert lines[-1] == "verdict: FAIL, exit 1: 2 of 6 parameters refused"
    assert len(list((tmp_path / "cases").glob("*.json"))) == 2
    clean = tmp_path / "clean"
    save_tp2(clean)
    run = subprocess.run([str(command_path()), "deepspeed", "inspect", str(clean), "--json"], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 6 and all(r["verdict"] == "exact" for r in rows)


def test_a_recorded_content_digest_is_verified(tmp_path):
    """A map that records content_digests["param"] (contract 10) is rebuilt verifying it:
    the right value (computed by `shardcheck digest` from the same map and shards) passes."""
    full = tp2_model()
    name = "layers.0.input_layernorm.weight"
    (tmp_path / "map.json").write_text(json.dumps(replicated()))
    (tmp_path / "shard.bin").write_bytes(full[name].numpy().tobytes())
    digest = subprocess.run([str(command_path()), "digest", str(tmp_path / "map.json"), f"0={tmp_path / 'shard.bin'}",
                             f"1={tmp_path / 'shard.bin'}"], capture_output=True, text=True, timeout=60)
    assert digest.returncode == 0, digest.stderr
    value = digest.stdout.split()[1]
    maps = corrupt_map(NORM, lambda m: m.__setitem__("content_digests", {"param": value}))
    save_tp2(tmp_path / "ckpt", maps=maps)
    reports = {r.name: r for r in inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))}
    assert reports[name].verdict == "exact" and reports[name].digest == "verified", reports[name].message
    # The pattern's one map (and its one digest) also applies to layer 1, whose norm differs.
    assert reports["layers.1.input_layernorm.weight"].kind == "digest"
    others = [r for n, r in reports.items() if "input_layernorm" not in n]
    assert all(r.verdict == "exact" and r.digest == "" for r in others)


BLOCK_TORCH = ("import sys; sys.modules['torch'] = None; from shardcheck.__main__ import run; "
               "sys.exit(run(sys.argv[1:]))")


def test_the_same_table_verdicts_and_case_files_with_torch_without_it_and_with_torch_load(tmp_path):
    """inspect needs no torch: run where `import torch` fails, it prints the same table and
    writes the same case files as with torch installed, and as --unsafe-load (torch.load)
    does; --json the same objects. A bfloat16 checkpoint too."""
    folders = {"fp32": tmp_path / "fp32", "bf16": tmp_path / "bf16"}
    overlap = corrupt_map(QKV, lambda m: m["ranks"]["1"]["pieces"][0]["source"].__setitem__(0, 8))
    save_tp2(folders["fp32"], maps=overlap,
             shard_edit=lambda rank, module: rank == 1 and module["layers.1.input_layernorm.weight"].add_(1.0))

    def to_bf16(rank, module):
        for name in module:
            module[name] = module[name].to(torch.bfloat16)
        if rank == 1:
            module["layers.0.input_layernorm.weight"].add_(1.0)
    save_tp2(folders["bf16"], shard_edit=to_bf16)
    for label, folder in folders.items():
        outputs = {}
        for how, head, extra in (("with torch", [sys.executable, "-m", "shardcheck"], []),
                                 ("without torch", [sys.executable, "-c", BLOCK_TORCH], []),
                                 ("torch.load", [sys.executable, "-m", "shardcheck"], ["--unsafe-load"])):
            cases = tmp_path / f"cases-{label}-{how.replace(' ', '-')}"
            runs = [subprocess.run(head + ["deepspeed", "inspect", str(folder), "--cases", str(cases)] + extra + json,
                                   capture_output=True, text=True, timeout=120) for json in ([], ["--json"])]
            assert [r.returncode for r in runs] == [1, 1], (label, how, runs[0].stdout + runs[0].stderr)
            files = {p.name: p.read_text() for p in sorted(cases.glob("*.json"))}
            outputs[how] = ([r.stdout.replace(str(cases), "CASES") for r in runs], files)
        assert outputs["with torch"] == outputs["without torch"] == outputs["torch.load"], label
        table, files = outputs["without torch"]
        assert "refused different_data" in table[0] and files, label
        if label == "bf16":
            rows = [json.loads(line) for line in table[1].splitlines() if line.startswith("{")]
            assert {r["dtype"] for r in rows} == {"bfloat16"} and sum(r["verdict"] == "exact" for r in rows) == 5
            case = json.loads(next(iter(files.values())))
            assert case["dtype"] == "bfloat16" and all(len(v) == 6 for s in case["shards"].values() for v in s)


def test_bfloat16_rebuilt_bit_exact_without_torch(tmp_path):
    full = save_tp2(tmp_path / "ckpt", shard_edit=lambda rank, module: module.update(
        {name: tensor.to(torch.bfloat16) for name, tensor in module.items()}))
    rebuilt = {}
    reports = inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"), rebuilt=rebuilt)
    assert len(reports) == 6 and all(r.verdict == "exact" and r.dtype == "bfloat16" for r in reports)
    for name, tensor in full.items():
        bits = tensor.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        assert isinstance(rebuilt[name], torchfile.BFloat16Array) and np.array_equal(rebuilt[name], bits), name


def test_a_pattern_is_matched_in_bounded_time_or_refused(tmp_path, monkeypatch):
    """Contract 2: (a+)+$ against 'a'*40 + '!' (2**40 steps for Python's re) finishes at
    once; (a|a)*$ runs out of its 1 s and that parameter's row is refused format, naming
    the pattern and the limit. A pattern out of time on MAX_PATTERN_TIMEOUTS names is not
    tried again: every later name is refused, since whether it applies is unknown."""
    evil = "a" * 40 + "!"
    maps = {pattern: make() for pattern, make in PATTERNS.items()}
    maps.update({"(a+)+$": replicated(), "(a|a)*$": replicated()})
    save_tp2(tmp_path / "ckpt", maps=maps,
             shard_edit=lambda rank, module: module.__setitem__(evil, torch.ones(HIDDEN)))
    started = time.monotonic()
    reports = {r.name: r for r in inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))}
    assert time.monotonic() - started < 10
    assert reports[evil].verdict == "refused" and reports[evil].kind == "format"
    assert reports[evil].message == ("matching the affine map pattern '(a|a)*$' against this name did not finish "
                                     "within 1 s, so whether its map applies is unknown")
    assert all(r.verdict == "exact" for name, r in reports.items() if name != evil), reports
    monkeypatch.setattr(inspect_module, "MATCH_TIMEOUT_S", 0.05)
    monkeypatch.setattr(inspect_module, "MAX_PATTERN_TIMEOUTS", 2)
    evils = ["a" * n + "!" for n in (30, 31, 32)]

    def evils_first(rank, module):  # the module's names in this order: 3 evil ones, then the model's
        model = dict(module)
        module.clear()
        module.update({e: torch.ones(HIDDEN) for e in evils}, **model)
    save_tp2(tmp_path / "more", maps={"(a|a)*$": replicated()}, shard_edit=evils_first)
    reports = inspect_module.inspect(str(tmp_path / "more"), str(tmp_path / "cases"))
    assert [r.name for r in reports] == evils + list(tp2_model()) and all(r.kind == "format" for r in reports)
    assert all("did not finish within 0.05 s" in r.message for r in reports[:2])
    assert all("ran out of its 0.05 s on 2 names (the first 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!') and is not tried "
               "again" in r.message for r in reports[2:])


def test_text_from_the_checkpoint_is_escaped_in_the_table_and_lines(tmp_path):
    """A parameter name or pattern with line breaks, `|`, backticks, HTML or terminal escapes
    neither splits nor recolours inspect's output: control characters show as escapes
    (\\n, \\x1b), separators as \\x7c and the like; --json stays JSON with the name as it is."""
    name = "layers.9.norm\n\x1b[31mRED|`code`<b>&\u202e\r\tx y"
    maps = {pattern: make() for pattern, make in PATTERNS.items()}
    broken = replicated()
    broken["ranks"]["1"]["pieces"][0]["locations"] = [1]  # refused holders: a message line too
    maps["(?s)layers\\.9\\.norm.*"] = broken
    save_tp2(tmp_path / "ckpt", maps=maps,
             shard_edit=lambda rank, module: module.__setitem__(name, torch.ones(HIDDEN)))
    run = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", str(tmp_path / "ckpt"),
                          "--cases", str(tmp_path / "cases")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 1 + 7 + 1 + 1  # header, 7 rows, one refused line, the verdict
    shown = "layers.9.norm\\n\\x1b[31mRED\\x7c\\x60code\\x60\\x3cb\\x3e\\x26\\u202e\\r\\tx\\x20y"
    row = next(line for line in lines if line.startswith(shown))
    assert row.split()[1:] == ["affine_map", "(?s)layers\\.9\\.norm.*", "-", "float32", "0,1", "refused", "holders"]
    assert lines[-2].startswith(shown.replace("\\x20", " ") + ": holders: ")
    ours = run.stdout.replace(" -> ", " ")  # the line's own arrow to the case file
    for bad in ("\x1b", "\u202e", "\r", "\t", "|", "`", "<", ">", "&"):
        assert bad not in ours, repr(bad)
    rows = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", str(tmp_path / "ckpt"),
                           "--cases", str(tmp_path / "cases"), "--json"], capture_output=True, text=True, timeout=120)
    parsed = [json.loads(line) for line in rows.stdout.splitlines() if line.startswith("{")]
    assert len(parsed) == 7 and name in [r["name"] for r in parsed]


def test_latest_names_the_tag_folder_and_is_read_bounded(tmp_path):
    save_tp2(tmp_path / "ckpt" / "global_step3")
    (tmp_path / "ckpt" / "latest").write_text("global_step3\n")
    assert len(inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))) == 6
    (tmp_path / "ckpt" / "latest").unlink()
    os.mkfifo(tmp_path / "ckpt" / "latest")  # not a file: never opened (a plain open would block)
    assert len(inspect_module.inspect(str(tmp_path / "ckpt"), str(tmp_path / "cases"))) == 6  # found by the walk
    assert inspect_module._read_latest("/dev/zero") is None  # more than a tag's 4096 bytes: not a tag
