"""Property testing from Python: shardcheck.strategies (Hypothesis driving the C++
generators), shardcheck.testing.judge and the shardcheck_judge fixture, judged on
implementations whose verdicts are known: shardcheck's own strict conversion (never
wrong), a rebuild that ignores the map (wrong), and ones that crash or return no tensor."""

import json
import os
import signal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import shardcheck
from shardcheck import strategies
from shardcheck.testing import Case, SilentlyWrong, Unsound, judge

QUICK = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                 suppress_health_check=[HealthCheck.too_slow])


def strict_rebuild(amap, shards, power):
    return shardcheck.rebuild(amap, shards, scale_power=power)


def strict_extract(amap, full, rank, power):
    return shardcheck.extract(amap, full, rank, scale_power=power)


@QUICK
@given(case=strategies.cases())
def test_cases_are_case_files_the_command_line_reads(case):
    assert isinstance(case, Case)
    assert case.file["name"].startswith("gen-")
    assert case.dtype in shardcheck.DTYPES
    assert json.loads(case.text) == case.file
    assert repr(case).startswith("Case('gen-")


@QUICK
@given(case=strategies.layouts())
def test_layouts_are_uncorrupted_and_valid(case):
    assert case.corruption["kind"] == "none"
    shardcheck.check(case.map)


@QUICK
@given(case=strategies.cases())
def test_strict_conversion_is_never_silently_wrong(case, shardcheck_judge):
    verdict = shardcheck_judge(case, rebuild=strict_rebuild, extract=strict_extract, tensors="numpy")
    assert verdict.verdict in ("exact", "refused", "wrong")
    assert not verdict.silently_wrong


def test_a_rebuild_that_ignores_the_map_is_caught_and_shrunk():
    def concatenating_rebuild(amap, shards, power):
        flat = np.concatenate([shards[r] for r in sorted(shards, key=int)])
        return np.resize(flat, int(np.prod(amap["logical_shape"]))).reshape(amap["logical_shape"])

    @settings(max_examples=500, deadline=None, database=None, derandomize=True, report_multiple_bugs=False)
    @given(case=strategies.layouts(adversarial_data=False))
    def concatenating_rebuild_is_right(case):
        judge(case, rebuild=concatenating_rebuild, tensors="numpy").require_sound()

    with pytest.raises(SilentlyWrong) as failure:
        concatenating_rebuild_is_right()
    print(failure.value)
    shape = failure.value.case.map["logical_shape"]
    assert int(np.prod(shape)) <= 4, failure.value.case
    assert failure.value.verdict.wrong_on_its_own_map


def split_case():
    full = list(range(6))
    return Case(json.dumps({
        "shardcheck_case": 1, "name": "split", "dtype": "float32", "op": "rebuild",
        "full": [float(v) for v in full],
        "map": {"logical_shape": [6], "ranks": {
            "0": {"shard_shape": [3], "pieces": [{"shape": [3], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]},
            "1": {"shard_shape": [3], "pieces": [{"shape": [3], "source": [3, [1]], "dest": [0, [1]], "locations": [1]}]}}},
    }))


def test_a_refusal_is_a_verdict_with_its_kind():
    def refusing(amap, shards, power):
        raise shardcheck.MapError("no", kind="bounds")

    verdict = judge(split_case(), rebuild=refusing, tensors="numpy")
    assert verdict.verdict == "refused" and verdict.outcome["kind"] == "bounds"
    verdict.require_sound()


def test_a_result_that_is_no_tensor_is_unsound():
    verdict = judge(split_case(), rebuild=lambda m, s, p: "a string", tensors="numpy")
    assert verdict.broken_result and not verdict.crashed
    with pytest.raises(Unsound, match="broken result"):
        verdict.require_sound()
    verdict.require_no_silent_error()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="isolate=True needs os.fork (POSIX)")
def test_an_isolated_crash_is_a_verdict_not_the_end_of_the_run():
    def crashing(amap, shards, power):
        os.kill(os.getpid(), signal.SIGSEGV)

    verdict = judge(split_case(), rebuild=crashing, tensors="numpy", isolate=True)
    assert verdict.crashed, verdict.outcome
    assert "signal-11" in verdict.message or "SIGSEGV" in verdict.message, verdict.message
    with pytest.raises(Unsound, match="crash"):
        verdict.require_sound()
    exact = judge(split_case(), rebuild=strict_rebuild, tensors="numpy", isolate=True)
    assert exact.verdict == "exact", exact.outcome


def test_a_case_file_round_trips(tmp_path):
    case = split_case()
    case.save(str(tmp_path / "case.json"))
    assert Case.load(str(tmp_path / "case.json")).file == case.file
