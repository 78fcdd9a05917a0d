"""Hypothesis strategies that drive shardcheck's own generators.

The C++ generators (every in-tree layout constructor, the corruption catalogue of contract
7, adversarial data: special values, rounding ties, inexact scales) read every decision
from a choice source. Here each of those decisions is one Hypothesis draw, so Hypothesis
explores the same space as ``shardcheck campaign`` and shrinks a failing case decision by
decision, towards the generators' simplest answer (the smallest layout, the first
corruption kind, marker data):

    from hypothesis import given
    from shardcheck import strategies

    @given(case=strategies.cases())
    def test_my_rebuild(case, shardcheck_judge):
        shardcheck_judge(case, rebuild=my_rebuild)

Every strategy gives :class:`shardcheck.testing.Case` values (case files).
"""

from hypothesis import strategies as _st

from . import _core
from .testing import Case as _Case

__all__ = ["cases", "layouts"]


@_st.composite
def _generated(
    draw,
    max_elements,
    max_dims,
    max_extent,
    max_tp,
    corrupt_probability,
    scale_power,
    record_digest,
    adversarial_data,
):
    def choose(lo, hi):
        return draw(_st.integers(min_value=lo, max_value=hi))

    return _Case(
        _core.generate_case(
            choose,
            max_elements,
            max_dims,
            max_extent,
            max_tp,
            corrupt_probability,
            scale_power,
            record_digest,
            adversarial_data,
        )
    )


def cases(
    *,
    max_elements: int = 64,
    max_dims: int = 3,
    max_extent: int = 8,
    max_tp: int = 4,
    corrupt_probability: float = 0.9,
    scale_power: bool = True,
    record_digest: bool = False,
    adversarial_data: bool = True,
) -> _st.SearchStrategy:
    """Generated cases, as the campaign makes them: a valid layout from one of the
    constructors (``replicated``, ``contiguous_split``, ``sub_param``, ``segmented``,
    ``block_gather``, ``expert_placement``), corrupted with probability
    ``corrupt_probability`` by one row of the corruption catalogue. ``scale_power``
    allows optimizer-state powers (-1, -2) besides 1; ``record_digest`` records a content
    digest (contract 10) that the rebuild is asked to verify; ``adversarial_data`` mixes
    special values and inexact scales into the data. The bounds are clamped as
    ``LayoutOptions`` says (at most 8 dims, extent 4096, tp 64)."""
    return _generated(
        max_elements,
        max_dims,
        max_extent,
        max_tp,
        corrupt_probability,
        scale_power,
        record_digest,
        adversarial_data,
    )


def layouts(**bounds) -> _st.SearchStrategy:
    """Uncorrupted cases only: every map is valid and must convert exactly. Takes the
    bounds and data options of :func:`cases`."""
    bounds["corrupt_probability"] = 0.0
    return cases(**bounds)
