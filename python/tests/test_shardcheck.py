"""The Python module: conversion bit-exact, refusals typed, arrays read in place."""

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import shardcheck
from shardcheck import MapError

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not importable here")


def column_split():
    """Contract 2's example: F (4, 6) split by columns into (4, 4) and (4, 2)."""
    return {
        "logical_shape": [4, 6],
        "ranks": {
            "0": {
                "shard_shape": [4, 4],
                "pieces": [{"shape": [4, 4], "source": [0, [6, 1]], "dest": [0, [4, 1]], "locations": [0]}],
            },
            "1": {
                "shard_shape": [4, 2],
                "pieces": [{"shape": [4, 2], "source": [4, [6, 1]], "dest": [0, [2, 1]], "locations": [1]}],
            },
        },
    }


def deepspeed_form(map_json):
    """What DeepSpeed's ParamAffineMap.to_dict() returns: integer rank keys, tuples."""
    out = {"logical_shape": tuple(map_json["logical_shape"]), "ranks": {}}
    for rank, body in map_json["ranks"].items():
        out["ranks"][int(rank)] = {
            "shard_shape": tuple(body["shard_shape"]),
            "pieces": [
                {
                    "shape": tuple(p["shape"]),
                    "source": (p["source"][0], tuple(p["source"][1])),
                    "dest": (p["dest"][0], tuple(p["dest"][1])),
                    "locations": tuple(p["locations"]),
                }
                for p in body["pieces"]
            ],
        }
    return out


def fused_qkv_collision():
    """Contract 6, case 6: the TP2 sub_param_map((2,8),(4,4),[[2,2],[2,2]],1)
    with rank 0's second piece moved to dest 0, a collision in strided destinations."""
    def piece(src, dst, rank):
        return {"shape": [2, 2], "source": [src, [8, 1]], "dest": [dst, [4, 1]], "locations": [rank]}

    return {
        "logical_shape": [2, 8],
        "ranks": {
            "0": {"shard_shape": [2, 4], "pieces": [piece(0, 0, 0), piece(4, 0, 0)]},
            "1": {"shard_shape": [2, 4], "pieces": [piece(2, 0, 1), piece(6, 2, 1)]},
        },
    }


def odd_float32(shape):
    """float32 values whose bits a value-level conversion would not keep: NaN payloads,
    a signalling NaN, -0.0, subnormals."""
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2**32, size=int(np.prod(shape)), dtype=np.uint64).astype(np.uint32)
    bits[:4] = [0x7FC00001, 0x7F800001, 0x80000000, 0x00000001]
    return bits.view(np.float32).reshape(shape)


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_rebuild_column_split_is_bit_exact():
    full = odd_float32((4, 6))
    shards = {0: np.ascontiguousarray(full[:, :4]), 1: np.ascontiguousarray(full[:, 4:])}
    rebuilt = shardcheck.rebuild(column_split(), shards)
    assert isinstance(rebuilt, np.ndarray)
    assert same_bits(rebuilt, full)
    assert rebuilt.flags.writeable


def test_extract_gives_each_rank_its_block():
    full = odd_float32((4, 6))
    for rank, block in ((0, full[:, :4]), (1, full[:, 4:])):
        shard = shardcheck.extract(column_split(), full, rank)
        assert shard.shape == block.shape
        assert same_bits(shard, np.ascontiguousarray(block))


def test_check_accepts_a_valid_map():
    assert shardcheck.check(column_split()) is None


def test_corrupted_map_is_refused_with_kind_rank_piece_address():
    bad = fused_qkv_collision()
    with pytest.raises(MapError) as caught:
        shardcheck.check(bad)
    e = caught.value
    # The two pieces meet at shard address 0; the first in content order is reported.
    assert (e.kind, e.rank, e.piece, e.address, e.side) == ("twice", 0, 0, 0, "shard")
    assert "rank 0" in str(e)
    # Conversion refuses the same way, whatever data comes with it.
    shards = {0: np.zeros((2, 4), np.float32), 1: np.zeros((2, 4), np.float32)}
    with pytest.raises(MapError) as again:
        shardcheck.rebuild(bad, shards)
    assert (again.value.kind, again.value.rank, again.value.piece) == ("twice", 0, 0)
    with pytest.raises(MapError) as extracting:
        shardcheck.extract(bad, np.zeros((2, 8), np.float32), 1)  # rank 1's own pieces are fine
    assert (extracting.value.kind, extracting.value.rank) == ("twice", 0)


def test_two_ranks_claiming_one_block_are_refused():
    # Contract 6, case 1: rank 1's piece should start at 4.
    def rank(r):
        return {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [r]}]}

    bad = {"logical_shape": [8], "ranks": {"0": rank(0), "1": rank(1)}}
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(bad, {0: np.arange(4.0), 1: np.arange(4.0)})
    assert caught.value.kind in ("twice", "uncovered")


def test_a_view_overlapping_itself_is_refused():
    # Contract 6, case 2.
    bad = {
        "logical_shape": [6],
        "ranks": {
            "0": {"shard_shape": [4], "pieces": [{"shape": [2, 2], "source": [0, [1, 1]], "dest": [0, [2, 1]], "locations": [0]}]},
            "1": {"shard_shape": [3], "pieces": [{"shape": [3], "source": [3, [1]], "dest": [0, [1]], "locations": [1]}]},
        },
    }
    shards = {0: np.array([9, 8, 7, 6], np.float32), 1: np.array([1, 2, 3], np.float32)}
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(bad, shards)
    assert (caught.value.kind, caught.value.rank, caught.value.piece) == ("itself", 0, 0)


def test_replicas_that_disagree_are_refused():
    replicated = {
        "logical_shape": [4],
        "ranks": {
            str(r): {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0, 1]}]}
            for r in (0, 1)
        },
    }
    same = np.array([1, 2, 3, 4], np.int32)
    assert same_bits(shardcheck.rebuild(replicated, {0: same, 1: same.copy()}), same)
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(replicated, {0: same, 1: np.array([1, 2, 7, 4], np.int32)})
    e = caught.value
    assert (e.kind, e.rank, e.piece, e.address, e.side) == ("different_data", 1, 0, 2, "full")


def test_wrong_data_is_refused_as_shape():
    with pytest.raises(MapError) as size:
        shardcheck.rebuild(column_split(), {0: np.zeros((4, 4), np.float32), 1: np.zeros((4, 3), np.float32)})
    assert (size.value.kind, size.value.rank) == ("shape", 1)
    with pytest.raises(MapError) as dtype:
        shardcheck.rebuild(column_split(), {0: np.zeros((4, 4), np.float32), 1: np.zeros((4, 2), np.float64)})
    assert (dtype.value.kind, dtype.value.rank) == ("shape", 1)
    with pytest.raises(MapError) as missing:
        shardcheck.rebuild(column_split(), {0: np.zeros((4, 4), np.float32)})
    assert (missing.value.kind, missing.value.rank) == ("shape", 1)
    with pytest.raises(MapError) as full:
        shardcheck.extract(column_split(), np.zeros(23, np.float32), 0)
    assert full.value.kind == "shape"


def test_shards_are_read_as_flat_buffers_like_deepspeed():
    full = np.arange(24, dtype=np.int64).reshape(4, 6)
    flat = {0: np.ascontiguousarray(full[:, :4]).reshape(-1), 1: np.ascontiguousarray(full[:, 4:]).reshape(2, 4)}
    assert same_bits(shardcheck.rebuild(column_split(), flat), full)


def test_every_map_form_meets_the_same_codec():
    full = np.arange(24, dtype=np.float64).reshape(4, 6)
    shards = {0: np.ascontiguousarray(full[:, :4]), 1: np.ascontiguousarray(full[:, 4:])}

    class FakeParamAffineMap:
        def to_dict(self):
            return deepspeed_form(column_split())

    forms = [
        json.dumps(column_split()),
        json.dumps(column_split()).encode(),
        column_split(),
        deepspeed_form(column_split()),
        FakeParamAffineMap(),
    ]
    for form in forms:
        shardcheck.check(form)
        assert same_bits(shardcheck.rebuild(form, shards), full)
    # A corruption is refused identically in every form.
    bad = fused_qkv_collision()
    for form in (json.dumps(bad), bad, deepspeed_form(bad)):
        with pytest.raises(MapError) as caught:
            shardcheck.check(form)
        assert (caught.value.kind, caught.value.rank, caught.value.piece) == ("twice", 0, 0)


def test_integer_rank_keys_of_any_integer_type():
    m = deepspeed_form(column_split())
    m["ranks"] = {np.int64(k): v for k, v in m["ranks"].items()}
    m["logical_shape"] = tuple(np.int64(e) for e in m["logical_shape"])  # as a torch.Size-derived map may hold
    full = np.arange(24, dtype=np.int32).reshape(4, 6)
    shards = {np.int32(0): np.ascontiguousarray(full[:, :4]), 1: np.ascontiguousarray(full[:, 4:])}
    assert same_bits(shardcheck.rebuild(m, shards), full)
    assert same_bits(shardcheck.extract(m, full, np.int16(1)), np.ascontiguousarray(full[:, 4:]))
    with pytest.raises(TypeError, match="integer rank"):
        shardcheck.rebuild(m, {"0": shards[0], 1: shards[1]})


def test_duplicate_rank_after_key_normalisation_is_a_format_error():
    m = column_split()
    m["ranks"] = {0: m["ranks"]["0"], "0": m["ranks"]["0"], 1: m["ranks"]["1"]}
    with pytest.raises(MapError) as caught:
        shardcheck.check(m)
    assert caught.value.kind == "format"
    assert caught.value.path == "$.ranks.0"


def test_malformed_maps_are_format_errors_with_a_path():
    m = column_split()
    m["ranks"]["1"]["pieces"][0]["source"] = [4]
    with pytest.raises(MapError) as caught:
        shardcheck.check(m)
    assert caught.value.kind == "format"
    assert caught.value.path.startswith("$.ranks.1.pieces[0].source")
    assert caught.value.rank == 1
    for bad in ("not json", {"logical_shape": [float("nan")], "ranks": {}}, {"logical_shape": [object()]}):
        with pytest.raises(MapError) as caught:
            shardcheck.check(bad)
        assert caught.value.kind == "format"


def test_map_error_fields_absent_are_none_and_it_pickles():
    with pytest.raises(MapError) as caught:
        shardcheck.check("[]")
    e = caught.value
    assert isinstance(e, ValueError)
    assert (e.rank, e.piece, e.address, e.side) == (None, None, None, None)
    assert e.kind in shardcheck.KINDS and "different_data" in shardcheck.KINDS
    assert str(e) and not str(e).startswith("format:")
    import pickle

    back = pickle.loads(pickle.dumps(e))
    assert (back.kind, back.path, str(back)) == (e.kind, e.path, str(e))


def test_scaled_pieces_and_scale_power():
    m = column_split()
    for body in m["ranks"].values():
        body["pieces"][0]["scale"] = 2.0
    full = np.arange(24, dtype=np.float32).reshape(4, 6)
    shard = shardcheck.extract(m, full, 1)
    assert same_bits(shard, np.ascontiguousarray(full[:, 4:]) * np.float32(2))
    rebuilt = shardcheck.rebuild(m, {0: shardcheck.extract(m, full, 0), 1: shard})
    assert same_bits(rebuilt, full)
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(m, {0: shardcheck.extract(m, full, 0), 1: shard}, scale_power=-1)
    assert caught.value.kind == "scale"
    with pytest.raises(TypeError, match="scale_power"):
        shardcheck.extract(m, full, 1, scale_power=1.5)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"])
def test_every_numpy_dtype_round_trips_bit_exact(dtype):
    rng = np.random.default_rng(3)
    full = rng.integers(0, 256, size=24 * np.dtype(dtype).itemsize, dtype=np.uint8).view(dtype).reshape(4, 6)
    if dtype == "bool":
        full = full.view(np.uint8).__and__(1).view(np.bool_)
    shards = {r: shardcheck.extract(column_split(), full, r) for r in (0, 1)}
    assert all(s.dtype == full.dtype for s in shards.values())
    assert same_bits(shardcheck.rebuild(column_split(), shards), full)


def zero_d_map():
    return {
        "logical_shape": [],
        "ranks": {"0": {"shard_shape": [], "pieces": [{"shape": [], "source": [0, []], "dest": [0, []], "locations": [0]}]}},
    }


def test_zero_d_tensor():
    value = np.array(-0.0, dtype=np.float64)
    rebuilt = shardcheck.rebuild(zero_d_map(), {0: value})
    assert rebuilt.shape == () and same_bits(rebuilt, value)
    assert same_bits(shardcheck.extract(zero_d_map(), value, 0), value)


def test_empty_tensors_and_no_shards():
    empty = {
        "logical_shape": [4, 0],
        "ranks": {"0": {"shard_shape": [4, 0], "pieces": [{"shape": [4, 0], "source": [0, [0, 1]], "dest": [0, [0, 1]], "locations": [0]}]}},
    }
    out = shardcheck.rebuild(empty, {0: np.zeros((4, 0), np.int16)})
    assert out.shape == (4, 0) and out.dtype == np.int16
    nothing = {"logical_shape": [0, 3], "ranks": {}}
    assert shardcheck.rebuild(nothing, {}, dtype=np.float16).dtype == np.float16
    with pytest.raises(TypeError, match="dtype"):
        shardcheck.rebuild(nothing, {})


def test_inputs_are_read_in_place():
    full = odd_float32((4, 6))
    assert shardcheck._core._borrowed_address(full) == full.ctypes.data
    view = np.arange(30, dtype=np.float32)[6:].reshape(4, 6)  # contiguous, not at its base's start
    assert shardcheck._core._borrowed_address(view) == view.ctypes.data
    assert same_bits(shardcheck.extract(column_split(), view, 1), np.ascontiguousarray(view[:, 4:]))
    frozen = full.copy()
    frozen.flags.writeable = False
    assert same_bits(shardcheck.extract(column_split(), frozen, 0), np.ascontiguousarray(full[:, :4]))


def test_extract_does_not_copy_the_full_tensor():
    # Peak memory of a child process: extracting a 1 KiB shard from a 64 MiB tensor must
    # not take anything near another 64 MiB.
    script = textwrap.dedent(
        """
        import numpy as np, shardcheck
        def status(field):  # this process's memory, in bytes (not inherited through exec)
            for line in open("/proc/self/status"):
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
        n = 8 << 20
        def split(sizes):
            ranks, start = {}, 0
            for r, size in enumerate(sizes):
                ranks[r] = {"shard_shape": [size], "pieces": [
                    {"shape": [size], "source": [start, [1]], "dest": [0, [1]], "locations": [r]}]}
                start += size
            return {"logical_shape": [start], "ranks": ranks}
        shardcheck.extract(split([4, 4]), np.zeros(8), 1)
        full = np.arange(n, dtype=np.float64)
        try:
            open("/proc/self/clear_refs", "w").write("5")  # restart the peak from here
        except OSError:
            pass
        rss_now = status("VmRSS")
        shard = shardcheck.extract(split([n - 128, 128]), full, 1)
        assert shard[0] == n - 128
        print(status("VmHWM") - rss_now)
        """
    )
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc to read the resident set size")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grown = max(0, int(out.stdout.split()[-1]))
    assert grown < 16 << 20, f"extract grew the peak by {grown} bytes for a 64 MiB input"


def test_non_contiguous_input_is_refused_not_copied():
    full = np.arange(24, dtype=np.float32).reshape(6, 4).T  # (4, 6), Fortran order
    with pytest.raises(TypeError, match="C-contiguous"):
        shardcheck.extract(column_split(), full, 0)
    with pytest.raises(TypeError, match="C-contiguous"):
        shardcheck.rebuild(column_split(), {0: np.zeros((4, 8), np.float32)[:, ::2], 1: np.zeros((4, 2), np.float32)})


def test_unsupported_arrays_are_type_errors():
    with pytest.raises(TypeError, match="dtype"):
        shardcheck.extract(column_split(), np.zeros((4, 6), np.complex64), 0)
    with pytest.raises(TypeError, match="byte order"):
        shardcheck.extract(column_split(), np.zeros((4, 6), ">f4"), 0)
    with pytest.raises(TypeError, match="NumPy array"):
        shardcheck.extract(column_split(), [[0.0] * 6] * 4, 0)
    misaligned = np.frombuffer(bytes(24 * 4 + 1), dtype=np.float32, offset=1).reshape(4, 6)
    with pytest.raises(TypeError, match="aligned"):
        shardcheck.extract(column_split(), misaligned, 0)


BFLOAT16_PATTERNS = [0x7FC1, 0x7F81, 0x8000, 0x0001] + list(range(0x3F00, 0x3F14))  # NaNs, -0, subnormal


def test_numpy_uint16_shards_are_bfloat16_bits_when_that_dtype_is_named():
    """NumPy has no bfloat16: with dtype="bfloat16", uint16 shards are its bit patterns and
    the result comes back as uint16 bit patterns (how shardcheck.torchfile hands bfloat16
    tensors over without torch)."""
    full = np.array(BFLOAT16_PATTERNS, dtype=np.uint16).reshape(4, 6)
    shards = {0: np.ascontiguousarray(full[:, :4]), 1: np.ascontiguousarray(full[:, 4:])}
    rebuilt = shardcheck.rebuild(column_split(), shards, dtype="bfloat16")
    assert isinstance(rebuilt, np.ndarray) and rebuilt.dtype == np.uint16 and rebuilt.shape == (4, 6)
    assert np.array_equal(rebuilt, full)
    target = json.loads(json.dumps(column_split()))
    resharded = shardcheck.reshard(column_split(), target, shards, dtype="bfloat16")
    assert all(out.dtype == np.uint16 and np.array_equal(out, shards[r]) for r, out in resharded.items())
    # Read as bfloat16, not as integers: a scale of 2 halves 2.0 (0x4000) to 1.0 (0x3f80),
    # where an integer dtype with a scale is refused (contract 1.2).
    scaled = {"logical_shape": [2], "ranks": {"0": {"shard_shape": [2], "pieces": [
        {"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0], "scale": 2.0}]}}}
    two = np.array([0x4000, 0xC080], dtype=np.uint16)  # 2.0, -4.0
    assert shardcheck.rebuild(scaled, {0: two}, dtype="bfloat16").tolist() == [0x3F80, 0xC000]
    with pytest.raises(TypeError, match="uint16"):
        shardcheck.rebuild(column_split(), shards)  # uint16 without the dtype named: no such dtype
    with pytest.raises(MapError) as refused:
        shardcheck.rebuild(scaled, {0: two.view(np.int16)}, dtype="int16")
    assert refused.value.kind == "scale"


def test_a_path_is_read_no_further_than_the_input_limit(tmp_path):
    """Contract 2: every reader is bounded before it reads. /dev/zero never ends: it is
    read to one byte past the limit and refused, format, naming the limit."""
    for path in (Path("/dev/zero"), tmp_path / "big.json"):
        if path.name == "big.json":
            path.write_text(" " * 5000 + json.dumps(column_split()))
        started = time.monotonic()
        with pytest.raises(MapError) as refused:
            shardcheck.check(path, max_input_bytes=4096)
        assert refused.value.kind == "format" and refused.value.path == "$"
        assert "more than the limit of 4096 bytes" in str(refused.value) and str(path) in str(refused.value)
        assert time.monotonic() - started < 5
    (tmp_path / "map.json").write_text(json.dumps(column_split()))
    shardcheck.check(tmp_path / "map.json", max_input_bytes=4096)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_never_makes_a_reader_wait_forever(tmp_path, monkeypatch):
    """A path that is not a regular file is read as its input comes and refused once it
    gives nothing for shardcheck._INPUT_WAIT_SECONDS (3 s; shortened here): a FIFO
    without a writer, and one whose writer never writes. One whose writer writes a map
    and closes is read."""
    monkeypatch.setattr(shardcheck, "_INPUT_WAIT_SECONDS", 0.5)
    fifo = tmp_path / "map.fifo"
    os.mkfifo(fifo)
    for label in ("no writer", "a writer that never writes"):
        writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK) if label != "no writer" else None
        started = time.monotonic()
        try:
            with pytest.raises(MapError) as refused:
                shardcheck.check(fifo)
        finally:
            if writer is not None:
                os.close(writer)
        assert time.monotonic() - started < 5, label
        assert refused.value.kind == "format" and "gave no input for 0.5 seconds" in str(refused.value), label

    def write_map():
        with open(fifo, "w") as f:  # blocks until the reader has opened the FIFO
            f.write(json.dumps(column_split()))

    writer_thread = threading.Thread(target=write_map)
    writer_thread.start()
    try:
        deadline = time.monotonic() + 5
        while True:  # the writer may open only after the reader: retry an empty read
            try:
                shardcheck.check(fifo)
                break
            except MapError:
                if time.monotonic() > deadline:
                    raise
    finally:
        writer_thread.join(timeout=10)
    read_end, write_end = os.pipe()  # an anonymous pipe, as /dev/stdin or <(cat map.json) are
    os.write(write_end, json.dumps(column_split()).encode())
    os.close(write_end)
    try:
        shardcheck.check(Path(f"/dev/fd/{read_end}"))
    finally:
        os.close(read_end)


@needs_torch
def test_torch_tensors_in_and_out_bfloat16_bit_exact():
    patterns = [0x7FC1, 0x7F81, 0x8000, 0x0001] + list(range(0x3F00, 0x3F14))  # NaNs, -0, subnormal
    bits = torch.tensor([p - 0x10000 if p >= 0x8000 else p for p in patterns], dtype=torch.int16)
    full = bits.view(torch.bfloat16).reshape(4, 6)
    shards = {r: shardcheck.extract(column_split(), full, r) for r in (0, 1)}
    assert all(isinstance(s, torch.Tensor) and s.dtype == torch.bfloat16 for s in shards.values())
    assert torch.equal(shards[1].view(torch.int16), full[:, 4:].contiguous().view(torch.int16))
    rebuilt = shardcheck.rebuild(column_split(), shards)
    assert isinstance(rebuilt, torch.Tensor) and rebuilt.shape == (4, 6)
    assert torch.equal(rebuilt.view(torch.int16), full.view(torch.int16))


@needs_torch
@pytest.mark.parametrize("name", ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"])
def test_torch_dtypes_round_trip(name):
    dtype = getattr(torch, name)
    full = (torch.arange(24) % 3).to(dtype).reshape(4, 6)
    shards = {r: shardcheck.extract(column_split(), full, r) for r in (0, 1)}
    rebuilt = shardcheck.rebuild(column_split(), shards)
    assert rebuilt.dtype == dtype and torch.equal(rebuilt, full)


@needs_torch
def test_torch_inputs_are_read_in_place_and_parameters_accepted():
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    assert shardcheck._core._borrowed_address(full) == full.data_ptr()
    param = torch.nn.Parameter(full.clone())
    shard = shardcheck.extract(column_split(), param, 0)
    assert torch.equal(shard, full[:, :4])
    with pytest.raises(TypeError, match="C-contiguous"):
        shardcheck.extract(column_split(), full.t().contiguous().t(), 0)
    with pytest.raises(TypeError, match="mix"):
        shardcheck.rebuild(column_split(), {0: torch.zeros(4, 4), 1: np.zeros((4, 2), np.float32)})


@pytest.mark.skipif(torch is None or not torch.cuda.is_available(), reason="needs torch with a CUDA device")
def test_cuda_tensors_are_converted_where_they_are():
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    on_cuda = full.cuda()
    try:
        shards = {r: shardcheck.extract(column_split(), on_cuda, r) for r in (0, 1)}
    except TypeError as e:
        # A wheel built without the toolkit says so, in those words.
        assert "no CUDA backend" in str(e)
        pytest.skip(f"this build has no CUDA backend: {e}")
    assert all(s.is_cuda for s in shards.values())
    assert torch.equal(shards[0].cpu(), full[:, :4])
    rebuilt = shardcheck.rebuild(column_split(), shards)
    assert rebuilt.is_cuda and torch.equal(rebuilt.cpu(), full)
    # Replicas compared on the device: the same error, its values read back for the message.
    replicated = {
        "logical_shape": [4],
        "ranks": {
            str(r): {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0, 1]}]}
            for r in (0, 1)
        },
    }
    same = torch.tensor([1, 2, 3, 4], dtype=torch.int32, device="cuda")
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(replicated, {0: same, 1: torch.tensor([1, 2, 7, 4], dtype=torch.int32, device="cuda")})
    e = caught.value
    assert (e.kind, e.rank, e.piece, e.address, e.side) == ("different_data", 1, 0, 2, "full")
    with pytest.raises(ValueError, match="memory"):
        shardcheck.rebuild(column_split(), {0: shards[0], 1: shards[1].cpu()})


@needs_torch
def test_torch_zero_d_tensor_and_refusal():
    value = torch.tensor(2.5, dtype=torch.bfloat16)
    rebuilt = shardcheck.rebuild(zero_d_map(), {0: value})
    assert isinstance(rebuilt, torch.Tensor) and rebuilt.shape == () and torch.equal(rebuilt, value)
    flag = shardcheck.extract(zero_d_map(), torch.tensor(True), 0)
    assert flag.dtype == torch.bool and flag.item() is True
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(fused_qkv_collision(), {0: torch.zeros(2, 4), 1: torch.zeros(2, 4)})
    assert (caught.value.kind, caught.value.rank, caught.value.piece) == ("twice", 0, 0)


@needs_torch
def test_torch_bool_shards_do_not_pass_for_uint8():
    with pytest.raises(MapError) as caught:
        shardcheck.rebuild(column_split(), {0: torch.zeros(4, 4, dtype=torch.bool), 1: torch.zeros(4, 2, dtype=torch.uint8)})
    assert (caught.value.kind, caught.value.rank) == ("shape", 1)

