"""DeepSpeed's own affine.py under Hypothesis, as a DeepSpeed developer would test it:
only the public strategies (shardcheck.strategies) and the shardcheck_judge fixture.

DeepSpeed 0.19.8's ParamAffineMap.rebuild returns a tensor for maps it should refuse
(elements no piece writes, elements written twice, scales on integer dtypes), so the
property fails; this test requires that Hypothesis finds such a silently wrong conversion
within 60 seconds and shrinks it to a map of at most four elements. Skipped, with the reason, without
the sdist (bash scripts/deepspeed-target.sh; CI has it) or torch.
"""

import time

import pytest
from hypothesis import HealthCheck, given, settings

import shardcheck.deepspeed
from shardcheck import strategies
from shardcheck.testing import SilentlyWrong

torch = pytest.importorskip("torch", reason="DeepSpeed's affine.py needs torch (Debian: python3-torch)")
try:
    affine = shardcheck.deepspeed.load_affine()
except FileNotFoundError as missing:
    pytest.skip(f"DeepSpeed's sdist is not here ({missing})", allow_module_level=True)


def deepspeed_rebuild(amap, shards, scale_power):
    return affine.ParamAffineMap.from_dict(amap).rebuild(shards, scale_power=scale_power)


def deepspeed_extract(amap, full, rank, scale_power):
    return affine.ParamAffineMap.from_dict(amap).extract(full, rank, scale_power=scale_power)


def test_loading_affine_runs_nothing_else_of_deepspeed():
    import sys

    assert "deepspeed" not in sys.modules and "tqdm" not in sys.modules
    assert hasattr(affine, "ParamAffineMap") and affine.transfer is not None
    full = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    amap = affine.contiguous_split_map((4, 6), [4, 2], 1)
    shards = {r: amap.extract(full, r) for r in (0, 1)}
    assert torch.equal(shardcheck.rebuild(amap.to_dict(), shards), full)


def test_hypothesis_finds_a_silently_wrong_deepspeed_conversion_and_shrinks_it(shardcheck_judge):
    # isolate: some corrupted maps make DeepSpeed's torch calls write outside a storage and
    # corrupt the heap of the process they run in; each call runs in a forked child.
    @settings(max_examples=20000, deadline=None, database=None, derandomize=True, report_multiple_bugs=False,
              suppress_health_check=[HealthCheck.too_slow])
    @given(case=strategies.cases())
    def deepspeed_refuses_or_converts_exactly(case):
        verdict = shardcheck_judge.verdict(case, rebuild=deepspeed_rebuild, extract=deepspeed_extract, isolate=True)
        verdict.require_no_silent_error()

    start = time.monotonic()
    with pytest.raises(SilentlyWrong) as failure:
        deepspeed_refuses_or_converts_exactly()
    elapsed = time.monotonic() - start
    print(f"\nHypothesis found and shrank it in {elapsed:.1f} s: {failure.value}")
    assert elapsed < 60, f"found after {elapsed:.0f} s, not within 60 s"
    case = failure.value.case
    assert case.corruption["kind"] != "none"
    assert failure.value.verdict.silently_wrong
    # Shrunk to a minimal case: a handful of elements (two for an element missed or written
    # twice, one for a bad scale or shape, four for a stride copied across two axes), at
    # most two ranks of one piece each; the seed decides which bug is found first.
    numel = 1
    for extent in case.map["logical_shape"]:
        numel *= extent
    assert numel <= 4, case
    assert len(case.map["ranks"]) <= 2 and all(len(r["pieces"]) == 1 for r in case.map["ranks"].values()), case
