"""pytest plugin (registered through the ``pytest11`` entry point, so installing shardcheck
is enough): the ``shardcheck_judge`` fixture.

    @given(case=shardcheck.strategies.cases())
    def test_rebuild(case, shardcheck_judge):
        shardcheck_judge(case, rebuild=lambda m, shards, p: my_rebuild(m, shards, p))

``shardcheck_judge(case, rebuild=..., extract=..., tensors=None, isolate=False,
refuse_invalid=False)`` runs :func:`shardcheck.testing.judge` and fails the test
(:class:`~shardcheck.testing.SilentlyWrong`, an AssertionError) when the conversion
returned a wrong tensor it should have refused or converted exactly
(:class:`~shardcheck.testing.Unsound` when it crashed or returned something that is not a
tensor); it returns the :class:`~shardcheck.testing.Verdict` otherwise.
``shardcheck_judge.verdict(...)`` only judges. The fixture is session-scoped and holds
no state, so Hypothesis's function-scoped-fixture health check has nothing to object to.
"""

import pytest


class Judge:
    """The fixture's value: call it to judge and require, or use :meth:`verdict`."""

    def __call__(self, case, *, rebuild=None, extract=None, tensors=None, isolate=False, refuse_invalid=False):
        verdict = self.verdict(case, rebuild=rebuild, extract=extract, tensors=tensors, isolate=isolate)
        verdict.require_sound(refuse_invalid=refuse_invalid)
        return verdict

    @staticmethod
    def verdict(case, *, rebuild=None, extract=None, tensors=None, isolate=False):
        from shardcheck.testing import judge

        return judge(case, rebuild=rebuild, extract=extract, tensors=tensors, isolate=isolate)


@pytest.fixture(scope="session")
def shardcheck_judge():
    """Judges a Python rebuild/extract on a shardcheck case under the truth oracle."""
    return Judge()
