"""Large maps through the Python module: text, bytes and paths reach the codec as they
are, and the input limit is the core's, named when it is hit and raised by a keyword."""

import importlib.util
import io
import json
import pathlib

import pytest

import shardcheck
from shardcheck import MapError

ROOT = pathlib.Path(__file__).resolve().parents[2]


def large_map_text(pieces: int, ranks: int = 8) -> str:
    """scripts/large_map.py's map: rows dealt out to `ranks` ranks, one piece per row."""
    spec = importlib.util.spec_from_file_location("large_map", ROOT / "scripts" / "large_map.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = io.StringIO()
    module.write_map(out, pieces, ranks, 64)
    return out.getvalue()


def test_a_large_map_is_checked_from_text_bytes_and_a_path(tmp_path):
    text = large_map_text(100_000)
    path = tmp_path / "large.json"
    path.write_text(text)
    for form in (text, text.encode(), path):
        shardcheck.check(form)
    # Piece 99,993 (rank 1's last) writes rank 1's first shard row again.
    bad = json.loads(text)
    bad["ranks"]["1"]["pieces"][-1]["dest"][0] = 0
    bad_text = json.dumps(bad)
    path.write_text(bad_text)
    for form in (bad_text, bad_text.encode(), path, bad):
        with pytest.raises(MapError) as caught:
            shardcheck.check(form)
        assert (caught.value.kind, caught.value.rank) == ("twice", 1), repr(caught.value)


def test_the_input_limit_is_named_and_raised_by_a_keyword(tmp_path):
    text = json.dumps({"logical_shape": [0], "ranks": {}})
    with pytest.raises(MapError) as caught:
        shardcheck.check(text, max_input_bytes=10)
    assert caught.value.kind == "format"
    assert caught.value.path == "$"
    assert f"the input is {len(text)} bytes, more than the limit of 10 bytes" in str(caught.value)
    assert "max_input_bytes= in Python raises it" in str(caught.value)
    shardcheck.check(text, max_input_bytes=len(text))
    shardcheck.check(text.encode(), max_input_bytes=len(text))
    full = shardcheck.rebuild(text, {}, dtype="float32", max_input_bytes=len(text))
    assert full.shape == (0,)
    for call in (
        lambda: shardcheck.rebuild(text, {}, dtype="float32", max_input_bytes=10),
        lambda: shardcheck.extract(text, full, 0, max_input_bytes=10),
    ):
        with pytest.raises(MapError, match="more than the limit of 10 bytes"):
            call()
    for bad, error in ((0, ValueError), (1 << 32, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="max_input_bytes"):
            shardcheck.check(text, max_input_bytes=bad)


def test_maps_as_python_objects_are_written_as_encode_writes_them():
    # _map_text writes plain objects with json's C encoder; the text must be _encode's,
    # character for character, whatever they hold (else a refusal's byte offset moves).
    import enum

    import numpy as np

    class Rank(enum.IntEnum):
        ONE = 1

    forms = [
        {"logical_shape": [4, 6], "ranks": {0: {"shard_shape": (4, 4), "pieces": [{"shape": (4, 4)}]}}},
        {Rank.ONE: [True, False, None], 1.5: float("nan"), None: -0.0, True: "\u00e9\n\"", "big": 1 << 70},
        {"numpy": [np.int64(3), np.float64(0.1), np.float32(0.5), np.int8(-2)], "nested": [[[1], ()], {}]},
        {np.int64(0): 1, "0": 2},  # a key json.dumps refuses: _encode writes it
        [float("inf"), -float("inf"), 1e300, 5e-324],
    ]
    for form in forms:
        out: list = []
        shardcheck._encode(form, out)
        assert shardcheck._map_text(form) == "".join(out), form
