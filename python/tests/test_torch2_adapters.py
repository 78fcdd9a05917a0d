"""The torch 2 adapters (adapters/dcp/serve.py, adapters/megatron/serve.py) spoken to as
the harness speaks to them (docs/protocol.md): JSON lines in, JSON lines out. Each
converts a valid column split exactly, answers a map it cannot express with the
`unsupported` refusal, flips one element when its planted bug is on, and answers the
handshake with a refusal that names scripts/torch2-env.sh on a Python without torch 2.

Runs where the torch 2 environment is set up (bash scripts/torch2-env.sh, its exports:
SHARDCHECK_DCP_PYTHON, SHARDCHECK_MEGATRON_PYTHON); skipped otherwise.
"""

import base64
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADAPTERS = {"dcp": "SHARDCHECK_DCP_PYTHON", "megatron": "SHARDCHECK_MEGATRON_PYTHON"}

FULL = np.arange(24, dtype=np.float32).reshape(4, 6)
SPLIT = {"logical_shape": [4, 6], "ranks": {
    "0": {"shard_shape": [4, 4], "pieces": [{"shape": [4, 4], "source": [0, [6, 1]], "dest": [0, [4, 1]], "locations": [0]}]},
    "1": {"shard_shape": [4, 2], "pieces": [{"shape": [4, 2], "source": [4, [6, 1]], "dest": [0, [2, 1]], "locations": [1]}]}}}


def tensor(array):
    array = np.ascontiguousarray(array)
    return {"dtype": str(array.dtype), "shape": list(array.shape), "data": base64.b64encode(array.tobytes()).decode()}


def array(doc):
    return np.frombuffer(base64.b64decode(doc["data"]), dtype=doc["dtype"])


def rebuild(affine_map):
    shards = {"0": tensor(FULL[:, :4].reshape(-1)), "1": tensor(FULL[:, 4:].reshape(-1))}
    return {"op": "rebuild", "map": affine_map, "dtype": "float32", "scale_power": 1, "shards": shards}


def serve(name, requests, python=None, env=None):
    """The adapter's answers to `requests` (a hello first), one process."""
    python = python or os.environ.get(ADAPTERS[name])
    if not python:
        pytest.skip(f"{ADAPTERS[name]} is not set (bash scripts/torch2-env.sh, then export what it prints)")
    lines = [{"id": 0, "op": "hello", "protocol": 1}] + [dict(r, id=i + 1) for i, r in enumerate(requests)]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    done = subprocess.run([python, str(ROOT / "adapters" / name / "serve.py")], input=text.encode(),
                          capture_output=True, timeout=300, env={**os.environ, **(env or {})}, check=False)
    return [json.loads(line) for line in done.stdout.decode().splitlines()]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_a_column_split_converts_exactly(name):
    extract = {"op": "extract", "map": SPLIT, "dtype": "float32", "scale_power": 1, "rank": 1, "full": tensor(FULL)}
    hello, rebuilt, extracted = serve(name, [rebuild(SPLIT), extract])
    assert hello["ok"] and hello["crash_reports"], hello
    assert rebuilt["ok"] and array(rebuilt["result"]).tobytes() == FULL.tobytes(), rebuilt
    assert extracted["ok"] and array(extracted["result"]).tobytes() == FULL[:, 4:].tobytes(), extracted


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_a_scaled_piece_is_unsupported(name):
    scaled = json.loads(json.dumps(SPLIT))
    scaled["ranks"]["1"]["pieces"][0]["scale"] = 2.0
    _, answer = serve(name, [rebuild(scaled)])
    assert not answer["ok"] and answer["error"]["type"] == "unsupported", answer
    assert "scale" in answer["error"]["message"]


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_the_planted_bug_flips_one_element(name):
    _, answer = serve(name, [rebuild(SPLIT)], env={f"SHARDCHECK_{name.upper()}_PLANT": "1"})
    got = array(answer["result"])
    differ = np.flatnonzero(got.view(np.int32) != FULL.reshape(-1).view(np.int32))
    assert differ.tolist() == [0], differ


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_without_torch_2_the_handshake_says_what_to_run(name, tmp_path):
    if not os.environ.get(ADAPTERS[name]):
        pytest.skip(f"{ADAPTERS[name]} is not set")
    # Debian's Python without its site packages (-S): no numpy, no torch.
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\nexec /usr/bin/python3 -I -S "$@"\n')
    fake.chmod(0o755)
    answers = serve(name, [], python=str(fake))
    assert len(answers) == 1 and not answers[0]["ok"], answers
    assert "scripts/torch2-env.sh" in answers[0]["error"]["message"]


WIDE = np.arange(48, dtype=np.float32).reshape(4, 12)


def tp_map(count, sizes=(12, )):
    """Tensor parallelism over `count` ranks along axis 1 of WIDE: of each consecutive
    sub-tensor of width sizes[i], rank r holds block r, the blocks side by side in its shard
    (one sub-tensor: plain TP; several: a fused projection, Megatron's partition_sizes)."""
    widths = [size // count for size in sizes]
    ranks = {}
    for r in range(count):
        pieces, start, local = [], 0, 0
        for size, width in zip(sizes, widths):
            pieces.append({"shape": [4, width], "source": [start + r * width, [12, 1]],
                           "dest": [local, [sum(widths), 1]], "locations": [r]})
            start, local = start + size, local + width
        ranks[str(r)] = {"shard_shape": [4, sum(widths)], "pieces": pieces}
    return {"logical_shape": [4, 12], "ranks": ranks}


def tp_shards(count, sizes=(12, )):
    widths = [size // count for size in sizes]
    starts = np.cumsum((0, ) + tuple(sizes))[:-1]
    return {str(r): np.concatenate([WIDE[:, s + r * w:s + (r + 1) * w] for s, w in zip(starts, widths)], axis=1)
            for r in range(count)}


@pytest.mark.parametrize("source,target,sizes", [(2, 3, (12, )), (2, 4, (8, 4))])
def test_the_refit_planner_reshards_tensor_parallel_layouts_exactly(source, target, sizes):
    request = {"op": "reshard", "map": tp_map(source, sizes), "target_map": tp_map(target, sizes), "dtype": "float32",
               "scale_power": 1, "shards": {r: tensor(s.reshape(-1)) for r, s in tp_shards(source, sizes).items()}}
    hello, answer = serve("megatron", [request], env={"SHARDCHECK_MEGATRON_RESHARD": "refit"})
    assert "resharding planner" in hello["implementation"], hello
    assert answer["ok"], answer
    for rank, shard in tp_shards(target, sizes).items():
        assert array(answer["result"][rank]).tobytes() == shard.tobytes(), rank
