"""Resharding from Python (contract 11): shardcheck.plan and shardcheck.reshard give the
target shards bit for bit as rebuild-then-extract does, and refuse with typed MapErrors."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

import shardcheck
from shardcheck import MapError

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

ROOT = Path(__file__).resolve().parents[2]
RESHARD_CASES = sorted((ROOT / "corpus" / "regressions").glob("reshard-*.json"))


def piece(shape, source, source_strides, dest, dest_strides, locations):
    return {"shape": shape, "source": [source, source_strides], "dest": [dest, dest_strides], "locations": locations}


def tp_columns(rows, cols, tp):
    """F (rows, cols) split by columns over tp ranks: rank r holds columns [r w, (r+1) w)."""
    w = cols // tp
    return {
        "logical_shape": [rows, cols],
        "ranks": {
            str(r): {"shard_shape": [rows, w], "pieces": [piece([rows, w], r * w, [cols, 1], 0, [w, 1], [r])]}
            for r in range(tp)
        },
    }


def tp_rows(rows, cols, tp):
    """F (rows, cols) split by rows over tp ranks: rank r holds rows [r h, (r+1) h)."""
    h = rows // tp
    return {
        "logical_shape": [rows, cols],
        "ranks": {
            str(r): {"shard_shape": [h, cols], "pieces": [piece([h, cols], r * h * cols, [cols, 1], 0, [cols, 1], [r])]}
            for r in range(tp)
        },
    }


def replicated(n, holders):
    """F (n,) held whole by every rank in `holders`."""
    return {
        "logical_shape": [n],
        "ranks": {str(r): {"shard_shape": [n], "pieces": [piece([n], 0, [1], 0, [1], list(holders))]} for r in holders},
    }


def random_bits(shape, dtype, seed):
    """Every bit pattern of the dtype is as likely (NaN payloads, -0.0, subnormals): a plan
    copies bits, and nothing may go through a value."""
    dtype = np.dtype(dtype)
    raw = np.random.default_rng(seed).integers(0, 256, size=int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    if dtype == np.bool_:
        raw &= 1
    return raw.view(dtype).reshape(shape)


def shards_of(map, full):
    return {int(rank): shardcheck.extract(map, full, int(rank)) for rank in map["ranks"]}


def through_full(source, target, shards):
    """What reshard must give: rebuild F from the source shards, extract each target rank."""
    full = shardcheck.rebuild(source, shards)
    return {int(rank): shardcheck.extract(target, full, int(rank)) for rank in target["ranks"]}


def assert_same_shards(got, want):
    assert sorted(got) == sorted(want)
    for rank in want:
        assert got[rank].shape == want[rank].shape, rank
        assert got[rank].dtype == want[rank].dtype, rank
        assert got[rank].tobytes() == want[rank].tobytes(), f"target rank {rank} differs"


LAYOUTS = [
    pytest.param(tp_columns(8, 12, 4), tp_rows(8, 12, 2), id="tp4-columns-to-tp2-rows"),
    pytest.param(tp_rows(8, 12, 2), tp_columns(8, 12, 4), id="tp2-rows-to-tp4-columns"),
    pytest.param(tp_columns(8, 12, 1), tp_columns(8, 12, 6), id="tp1-to-tp6-columns"),
    pytest.param(tp_rows(8, 12, 8), tp_rows(8, 12, 4), id="tp8-rows-to-tp4-rows"),
    pytest.param(tp_columns(8, 12, 3), tp_columns(8, 12, 3), id="same-layout"),
]


@pytest.mark.parametrize("source, target", LAYOUTS)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "int64", "bool"])
def test_reshard_is_rebuild_then_extract_bit_for_bit(source, target, dtype):
    full = random_bits((8, 12), dtype, seed=3)
    shards = shards_of(source, full)
    got = shardcheck.reshard(source, target, shards)
    assert_same_shards(got, through_full(source, target, shards))
    assert_same_shards(got, shards_of(target, full))


@pytest.mark.parametrize("path", RESHARD_CASES, ids=lambda p: p.stem)
def test_model_layout_corpus_reshards_as_its_case_expects(path):
    """Each pair of the model-layout corpus: planned and executed bit for bit as
    rebuild-then-extract, or refused with the kind the case names (a bias pre-divided by
    the TP degree has another scale on each side, and a plan may not rescale), where
    rebuild-then-extract is the fallback that still works."""
    case = json.loads(path.read_text(encoding="utf-8"))
    source, target = case["map"], case["target_map"]
    # NumPy has no bfloat16; a plan copies bits, so float16's width stands in for it.
    dtype = {"bfloat16": "float16"}.get(case.get("dtype", "float32"), case.get("dtype", "float32"))
    full = random_bits(source["logical_shape"], dtype, seed=len(path.stem))
    shards = shards_of(source, full)
    fallback = through_full(source, target, shards)
    # Map text, as a case file carries it, and parsed JSON meet the same codec.
    source_text, target_bytes = json.dumps(source), json.dumps(target).encode()
    if case["expect"] == "exact":
        assert_same_shards(shardcheck.reshard(source_text, target_bytes, shards), fallback)
        return
    assert case["expect"] == "refused", case["expect"]
    assert sorted(fallback) == sorted(int(rank) for rank in target["ranks"])
    for call in (lambda: shardcheck.plan(source_text, target_bytes),
                 lambda: shardcheck.reshard(source_text, target_bytes, shards)):
        with pytest.raises(MapError) as e:
            call()
        assert e.value.kind == case["expect_error"]


def test_the_corpus_has_reshard_cases_of_both_outcomes():
    expected = {json.loads(p.read_text(encoding="utf-8"))["expect"] for p in RESHARD_CASES}
    assert len(RESHARD_CASES) >= 12 and expected == {"exact", "refused"}, RESHARD_CASES


def test_plan_is_the_json_form_with_statistics():
    source, target = tp_columns(8, 12, 4), tp_rows(8, 12, 2)
    plan = shardcheck.plan(source, target)
    assert plan["logical_shape"] == [8, 12]
    stats = plan["statistics"]
    assert stats["segments"] == len(plan["segments"]) > 0
    assert stats["elements_moved"] == 96
    # Each source rank's 24 elements are read once; each target rank gets 48.
    assert stats["elements_read_by_source_rank"] == {str(r): 24 for r in range(4)}
    assert sorted(stats["elements_by_rank_pair"]) == [[s, t, 12] for s in range(4) for t in range(2)]
    assert stats["replica_checks"] == 0
    for segment in plan["segments"]:
        assert set(segment) == {"shape", "source", "target"}
        rank, offset, strides = segment["source"]
        assert 0 <= rank < 4 and offset >= 0 and len(strides) == len(segment["shape"])
    # The plan does not depend on the order ranks are listed in.
    reordered = dict(target, ranks=dict(reversed(list(target["ranks"].items()))))
    assert shardcheck.plan(source, reordered) == plan


def test_plan_and_reshard_take_deepspeed_form_and_paths(tmp_path):
    source = {"logical_shape": (8, 12), "ranks": {r: body for r, body in enumerate(tp_columns(8, 12, 4)["ranks"].values())}}
    target_path = tmp_path / "target.json"
    target_path.write_text(json.dumps(tp_rows(8, 12, 2)))
    full = random_bits((8, 12), "float64", seed=5)
    shards = shards_of(tp_columns(8, 12, 4), full)
    assert shardcheck.plan(source, target_path) == shardcheck.plan(tp_columns(8, 12, 4), tp_rows(8, 12, 2))
    assert_same_shards(shardcheck.reshard(source, target_path, shards), shards_of(tp_rows(8, 12, 2), full))


def test_a_corrupt_map_is_refused_with_its_kind_and_which_map():
    good = tp_columns(4, 6, 2)
    bad = tp_columns(4, 6, 2)
    bad["ranks"]["1"]["pieces"][0]["source"][0] = 2  # rank 1's block overlaps rank 0's
    shards = shards_of(good, random_bits((4, 6), "float32", seed=1))
    with pytest.raises(MapError) as alone:
        shardcheck.check(bad)
    for source, target, which in ((bad, good, "source"), (good, bad, "target")):
        for call in (lambda: shardcheck.plan(source, target), lambda: shardcheck.reshard(source, target, shards)):
            with pytest.raises(MapError) as e:
                call()
            # What check says of the map alone, named as the map it is in.
            assert (e.value.kind, e.value.rank, e.value.piece, e.value.address) == (
                alone.value.kind, alone.value.rank, alone.value.piece, alone.value.address)
            assert e.value.kind in shardcheck.KINDS and e.value.kind != "format"
            assert f"in the {which} map" in str(e.value)


def test_a_map_that_is_no_map_is_a_format_error_at_its_path():
    good = tp_columns(4, 6, 2)
    bad = tp_columns(4, 6, 2)
    bad["ranks"]["0"]["pieces"][0]["shape"] = "wide"
    with pytest.raises(MapError) as e:
        shardcheck.plan(good, bad)
    assert e.value.kind == "format"
    assert e.value.path is not None and e.value.path.startswith("$.ranks")
    assert "in the target map" in str(e.value)
    with pytest.raises(MapError) as e:
        shardcheck.reshard("{", good, {})
    assert e.value.kind == "format"
    assert "in the source map" in str(e.value)


def test_different_logical_shapes_are_refused_shape():
    with pytest.raises(MapError) as e:
        shardcheck.plan(tp_columns(4, 6, 2), tp_columns(6, 4, 2))
    assert e.value.kind == "shape"


def test_a_scale_the_target_does_not_share_is_refused_scale():
    source = tp_columns(4, 6, 2)
    target = tp_rows(4, 6, 2)
    target["ranks"]["1"]["pieces"][0]["scale"] = 2.0
    shards = shards_of(source, random_bits((4, 6), "float32", seed=2))
    for call in (lambda: shardcheck.plan(source, target), lambda: shardcheck.reshard(source, target, shards)):
        with pytest.raises(MapError) as e:
            call()
        assert e.value.kind == "scale"
        # The target piece that would hold the element under another scale.
        assert (e.value.rank, e.value.piece, e.value.side) == (1, 0, "full")
        assert 12 <= e.value.address < 24


def test_the_same_scale_on_both_sides_copies_plainly():
    source = tp_columns(4, 6, 2)
    target = tp_rows(4, 6, 2)
    for m in (source, target):
        for body in m["ranks"].values():
            body["pieces"][0]["scale"] = 0.5
    shards = shards_of(tp_columns(4, 6, 2), random_bits((4, 6), "float32", seed=4))
    got = shardcheck.reshard(source, target, shards)
    # A plan never rescales: the target shards hold the source shards' bits, as with no scales.
    assert_same_shards(got, through_full(tp_columns(4, 6, 2), tp_rows(4, 6, 2), shards))
    # An integer dtype cannot hold a scaled piece: refused at execute, as a conversion would.
    int_shards = shards_of(tp_columns(4, 6, 2), random_bits((4, 6), "int32", seed=4))
    with pytest.raises(MapError) as e:
        shardcheck.reshard(source, target, int_shards)
    assert e.value.kind == "scale"


def test_compare_replicas_catches_a_damaged_replica():
    source = replicated(6, holders=[0, 1])
    target = {"logical_shape": [6], "ranks": {
        "0": {"shard_shape": [3], "pieces": [piece([3], 0, [1], 0, [1], [0])]},
        "1": {"shard_shape": [3], "pieces": [piece([3], 3, [1], 0, [1], [1])]},
    }}
    full = random_bits((6,), "float32", seed=6)
    damaged = {0: full.copy(), 1: full.copy()}
    damaged[1].view(np.uint32)[4] ^= 1  # one bit of rank 1's copy of element 4
    # By default the lowest holder alone is read: rank 0's copy, intact.
    assert_same_shards(shardcheck.reshard(source, target, damaged), shards_of(target, full))
    assert shardcheck.plan(source, target)["statistics"]["replica_checks"] == 0
    assert shardcheck.plan(source, target, compare_replicas=True)["statistics"]["replica_checks"] > 0
    with pytest.raises(MapError) as e:
        shardcheck.reshard(source, target, damaged, compare_replicas=True)
    assert e.value.kind == "different_data"
    assert (e.value.rank, e.value.address, e.value.side) == (0, 4, "shard")
    assert "rank 1" in str(e.value)
    # Intact replicas pass the comparison.
    intact = {0: full.copy(), 1: full.copy()}
    assert_same_shards(shardcheck.reshard(source, target, intact, compare_replicas=True), shards_of(target, full))


def test_an_exhausted_segment_budget_is_an_error_not_a_partial_plan():
    source, target = tp_columns(8, 12, 4), tp_rows(8, 12, 2)
    needed = shardcheck.plan(source, target)["statistics"]["segments"]
    shards = shards_of(source, random_bits((8, 12), "float32", seed=8))
    for call in (lambda: shardcheck.plan(source, target, max_segments=1),
                 lambda: shardcheck.reshard(source, target, shards, max_segments=1)):
        with pytest.raises(MapError) as e:
            call()
        assert e.value.kind == "format"
        assert "budget" in str(e.value)
    # A budget the plan fits in is enough.
    big_enough = shardcheck.plan(source, target, max_segments=64)
    assert big_enough["statistics"]["segments"] == needed


def test_budget_and_shards_of_the_wrong_type_are_python_errors():
    source, target = tp_columns(4, 6, 2), tp_rows(4, 6, 2)
    for bad, error in ((0, ValueError), (-3, ValueError), (1 << 63, ValueError), (True, TypeError), ("8", TypeError),
                       (2.0, TypeError)):
        with pytest.raises(error):
            shardcheck.plan(source, target, max_segments=bad)
    with pytest.raises(TypeError):
        shardcheck.reshard(source, target, [np.zeros((4, 3), np.float32)] * 2)
    with pytest.raises(TypeError, match="dtype"):
        shardcheck.reshard(source, target, {})


def test_shards_that_do_not_fit_the_source_map_are_refused_shape():
    source, target = tp_columns(4, 6, 2), tp_rows(4, 6, 2)
    shards = shards_of(source, random_bits((4, 6), "float32", seed=9))
    for broken in (
        {0: shards[0]},                                          # rank 1's shard missing
        {0: shards[0], 1: shards[1].astype(np.float64)},         # another dtype
        {0: shards[0], 1: np.zeros((4, 1), np.float32)},        # too small
        {**shards, 7: shards[1]},                                # a rank the map does not list
    ):
        with pytest.raises(MapError) as e:
            shardcheck.reshard(source, target, broken)
        assert e.value.kind == "shape", broken.keys()


def test_shards_are_read_in_place_and_results_are_new_arrays():
    source, target = tp_columns(4, 6, 2), tp_rows(4, 6, 2)
    shards = shards_of(source, random_bits((4, 6), "float32", seed=10))
    got = shardcheck.reshard(source, target, shards)
    assert [got[r].shape for r in (0, 1)] == [(2, 6), (2, 6)]  # each target rank's shard shape
    for array in got.values():
        assert array.flags.c_contiguous
        assert all(not np.shares_memory(array, s) for s in shards.values())
    view = np.asfortranarray(shards[0])
    with pytest.raises(TypeError, match="C-contiguous"):
        shardcheck.reshard(source, target, {0: view, 1: shards[1]})


@pytest.mark.skipif(torch is None, reason="torch is not importable here")
def test_torch_tensors_in_give_torch_tensors_out_bfloat16_included():
    source, target = tp_columns(4, 6, 2), tp_rows(4, 6, 2)
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6).to(torch.bfloat16)
    shards = {r: full[:, 3 * r:3 * r + 3].contiguous() for r in range(2)}
    got = shardcheck.reshard(source, target, shards)
    assert sorted(got) == [0, 1]
    for rank, tensor in got.items():
        assert isinstance(tensor, torch.Tensor) and tensor.dtype == torch.bfloat16
        assert torch.equal(tensor, full[2 * rank:2 * rank + 2])
    with pytest.raises(TypeError, match="mix"):
        shardcheck.reshard(source, target, {0: shards[0], 1: np.zeros((4, 3), np.float32)})


def python_md_example():
    text = (ROOT / "docs" / "guide" / "python.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "shardcheck.reshard(" in b]
    assert len(blocks) == 1, f"docs/guide/python.md has {len(blocks)} python blocks calling shardcheck.reshard"
    return blocks[0]


def test_the_guides_resharding_example_runs_verbatim(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # its maps are the repository's examples/
    exec(compile(python_md_example(), "docs/guide/python.md", "exec"), {})
    assert "segments" in capsys.readouterr().out


def content_digest(full):
    """digest(F) of contract 10, written out here as the contract gives it: the sum over i
    of the splitmix64 finaliser of i * 0x9E3779B97F4A7C15 + bits(F[i]), mod 2^64."""
    mask = (1 << 64) - 1
    total = 0
    raw = np.ascontiguousarray(full).reshape(-1).view(np.dtype(f"u{full.dtype.itemsize}"))
    for i, bits in enumerate(raw.tolist()):
        x = (i * 0x9E3779B97F4A7C15 + bits) & mask
        x ^= x >> 30
        x = (x * 0xBF58476D1CE4E5B9) & mask
        x ^= x >> 27
        x = (x * 0x94D049BB133111EB) & mask
        x ^= x >> 31
        total = (total + x) & mask
    return total


def recorded(map, value):
    return dict(map, content_digests={"param": f"0x{value:016x}"})


def test_a_digest_closes_a_source_map_of_another_layout():
    full = random_bits((8, 12), "float32", seed=11)
    value = content_digest(full)
    source, target = recorded(tp_columns(8, 12, 3), value), recorded(tp_rows(8, 12, 2), value)
    shards = shards_of(source, full)
    assert_same_shards(shardcheck.reshard(source, target, shards, digest_state="param"), shards_of(target, full))
    # Ranks 0 and 1 trade pieces: a valid map that says each holds the other's columns.
    lying = json.loads(json.dumps(source))
    lying["ranks"]["0"]["pieces"][0]["source"][0], lying["ranks"]["1"]["pieces"][0]["source"][0] = 4, 0
    shardcheck.check(lying)
    silent = shardcheck.reshard(lying, target, shards)
    assert any(not np.array_equal(silent[r], want) for r, want in shards_of(target, full).items())
    with pytest.raises(MapError) as e:
        shardcheck.reshard(lying, target, shards, digest_state="param")
    assert e.value.kind == "digest"
    assert "F as the source shards hold it" in str(e.value)
    assert f"0x{value:016x}" in str(e.value)


def test_digest_records_must_exist_and_agree():
    full = random_bits((8, 12), "float32", seed=12)
    value = content_digest(full)
    source = recorded(tp_columns(8, 12, 3), value)
    shards = shards_of(source, full)
    with pytest.raises(MapError) as e:
        shardcheck.reshard(source, recorded(tp_rows(8, 12, 2), value ^ 1), shards, digest_state="param")
    assert e.value.kind == "digest" and "do not describe one tensor" in str(e.value)
    with pytest.raises(MapError) as e:
        shardcheck.reshard(source, tp_rows(8, 12, 2), shards, digest_state="exp_avg")
    assert e.value.kind == "digest" and "the source map records no content digest" in str(e.value)
    with pytest.raises(TypeError):
        shardcheck.reshard(source, tp_rows(8, 12, 2), shards, digest_state=1)
