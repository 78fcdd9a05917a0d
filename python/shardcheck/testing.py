"""Judging any Python ``rebuild``/``extract`` under shardcheck's truth oracle.

A :class:`Case` is a case file (README, "Case files"): a map under test, usually a
corrupted copy of a valid layout, the layout that really wrote the shards, a dtype, data
and a scale power. :func:`judge` runs your conversion on it exactly as ``shardcheck
campaign --target ...`` runs an implementation under test: the shards the true layout
wrote go in, and what comes out is compared bit for bit with what must come out.

    verdict = shardcheck.testing.judge(case, rebuild=my_rebuild)
    verdict.require_no_silent_error()      # raises SilentlyWrong with the case
    verdict.require_sound()                # also: a crash or a result that is no tensor

The callables receive the map as parsed JSON (a dict with string rank keys, as
``json.loads`` reads a checkpoint's map; DeepSpeed's ``ParamAffineMap.from_dict`` takes
it) and arrays as torch tensors (when torch is installed) or NumPy arrays:

    rebuild(map, {rank: flat_shard}, scale_power) -> full tensor
    extract(map, full_of_logical_shape, rank, scale_power) -> that rank's shard

Raising any exception is a refusal (a ``kind`` attribute naming one of
:data:`shardcheck.KINDS` says which). Returning a tensor for a corrupted map is fine when
it is the right tensor; a wrong one is the finding this module exists for.

``isolate=True`` runs each call in a forked child process (POSIX only): DeepSpeed 0.19.8's
affine.py, given some corrupted maps (offsets near 2**63), makes torch write outside a
tensor's storage and corrupts the heap of the process it runs in, which can abort or
crash the whole test run later; isolated, that is a ``crash`` verdict of its own case.

Cases come from :mod:`shardcheck.strategies` (Hypothesis) or from case files
(:meth:`Case.load`); the pytest fixture ``shardcheck_judge`` (:mod:`shardcheck.pytest_plugin`)
wraps :func:`judge` for tests.
"""

import json as _json
import os as _os
import pickle as _pickle
import signal as _signal
import sys as _sys
from typing import Any as _Any
from typing import Callable as _Callable
from typing import Optional as _Optional

import numpy as _numpy

from . import KINDS as _KINDS
from . import _core

__all__ = ["Case", "Verdict", "SilentlyWrong", "Unsound", "judge"]

# Same-width integer views: data crosses into the caller's arrays as raw bits, so NaN
# payloads and signalling NaNs arrive exactly as the case holds them.
_BIT_VIEWS = {
    "float64": "int64", "float32": "int32", "float16": "int16", "bfloat16": "int16", "int64": "int64",
    "int32": "int32", "int16": "int16", "int8": "int8", "uint8": "uint8", "bool": "uint8",
}


class Case:
    """One case file, as text and parsed. ``repr`` shows what Hypothesis prints for a
    falsifying example: the map under test, the dtype and the corruption."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.file = _json.loads(text)

    @classmethod
    def load(cls, path: str) -> "Case":
        with open(path, encoding="utf-8") as f:
            return cls(f.read())

    def save(self, path: str) -> None:
        """Writes the case file: ``shardcheck repro PATH --target deepspeed`` replays it."""
        with open(path, "w", encoding="utf-8") as f:
            f.write(self.text if self.text.endswith("\n") else self.text + "\n")

    @property
    def name(self) -> str:
        return self.file.get("name", "")

    @property
    def map(self) -> _Any:
        """The map under test (parsed JSON), or its text where the case is about text."""
        return self.file["map"] if "map" in self.file else self.file.get("map_text")

    @property
    def dtype(self) -> str:
        return self.file.get("dtype", "float32")

    @property
    def scale_power(self) -> int:
        return int(self.file.get("scale_power", 1))

    @property
    def corruption(self) -> dict:
        return self.file.get("corruption", {"kind": "none"})

    def __repr__(self) -> str:
        c = self.corruption
        where = ", ".join(f"{k}={c[k]!r}" for k in ("rank", "piece", "field", "old", "new") if k in c)
        return (
            f"Case({self.name!r}, dtype={self.dtype!r}, scale_power={self.scale_power}, "
            f"corruption={c.get('kind')!r}{' (' + where + ')' if where else ''}, "
            f"map={_json.dumps(self.map, separators=(',', ':'))})"
        )


class SilentlyWrong(AssertionError):
    """A conversion returned a tensor that is not the one the shards hold, for a map it
    should have refused or converted exactly. ``case`` and ``verdict`` say which."""

    def __init__(self, message: str, case: Case, verdict: "Verdict") -> None:
        super().__init__(message)
        self.case = case
        self.verdict = verdict


class Unsound(AssertionError):
    """A conversion crashed its process or returned something that is not a tensor of the
    dtype it was given (:meth:`Verdict.require_sound`)."""

    def __init__(self, message: str, case: Case, verdict: "Verdict") -> None:
        super().__init__(message)
        self.case = case
        self.verdict = verdict


def _wrong_on_valid_layout(outcome: dict) -> bool:
    """Wrong, and each wrong operation's map passes every check that operation owes (an
    extract reads no shard, so replicas the shards contradict do not count against it)."""
    wrong = [op for op in outcome.get("ops", []) if op.get("verdict") == "wrong"]
    return outcome["verdict"] == "wrong" and all(op.get("valid_layout", False) for op in wrong)


class Verdict:
    """How one case ended. ``outcome`` is the truth oracle's JSON (``verdict``: exact,
    refused, wrong or target_fault; ``kind``, ``message``, ``valid_layout``,
    ``accepted_invalid``, ``ops``); ``same_map`` is the same-map oracle's, asked only when
    a valid map (not the true layout) gave a different tensor."""

    def __init__(self, case: Case, outcome: dict, same_map: _Optional[dict]) -> None:
        self.case = case
        self.outcome = outcome
        self.same_map = same_map

    @property
    def verdict(self) -> str:
        return self.outcome["verdict"]

    @property
    def message(self) -> str:
        return self.outcome.get("message", "")

    @property
    def valid_but_different(self) -> bool:
        """The map under test is valid but is not the layout that wrote the shards, and the
        conversion followed it faithfully: no check can know (a content digest can,
        contract 10). Not a fault of the implementation."""
        return self.verdict == "wrong" and _wrong_on_valid_layout(self.outcome) and not self.wrong_on_its_own_map

    @property
    def wrong_on_its_own_map(self) -> bool:
        """A valid map converted wrong even with shards it wrote itself (the case's own,
        where the case has no separate true layout; else the same-map oracle's)."""
        if self.verdict == "wrong" and "truth" not in self.case.file:
            return True
        return self.same_map is not None and self.same_map["verdict"] == "wrong"

    @property
    def silently_wrong(self) -> bool:
        """A tensor that is not the one the shards hold, where the implementation should have
        refused (an invalid map) or converted exactly (its own map)."""
        if self.verdict == "wrong":
            return not _wrong_on_valid_layout(self.outcome) or self.wrong_on_its_own_map
        return False

    @property
    def crashed(self) -> bool:
        """An isolated call's process died (a signal, or an exit without an answer)."""
        return self.verdict == "target_fault" and self.outcome.get("fault") == "crash"

    @property
    def broken_result(self) -> bool:
        """Something that is not a tensor of the dtype it was given came back."""
        return self.verdict == "target_fault" and not self.crashed

    def require_no_silent_error(self, refuse_invalid: bool = False) -> None:
        """Raises :class:`SilentlyWrong` for a silently wrong tensor; with
        ``refuse_invalid``, also for a right tensor returned through an invalid map
        (contract 9 says refuse)."""
        problem = None
        if self.silently_wrong:
            problem = "silently wrong conversion"
            if self.wrong_on_its_own_map:
                problem += " of a valid map (with shards that map wrote itself)"
        elif refuse_invalid and self.outcome.get("accepted_invalid"):
            problem = "an invalid map was accepted"
        if problem is not None:
            message = self.same_map["message"] if self.wrong_on_its_own_map else self.message
            raise SilentlyWrong(self._explain(problem, message), self.case, self)

    def require_sound(self, refuse_invalid: bool = False) -> None:
        """:meth:`require_no_silent_error`, and raises :class:`Unsound` for a crash or a
        broken result."""
        self.require_no_silent_error(refuse_invalid)
        if self.crashed or self.broken_result:
            raise Unsound(self._explain("crash" if self.crashed else "broken result", self.message), self.case, self)

    def _explain(self, problem: str, message: str) -> str:
        return (
            f"{problem}: {message}\n  {self.case!r}\n"
            "  (save it with case.save('case.json'); `shardcheck repro case.json --target ...` replays it)"
        )

    def __repr__(self) -> str:
        return f"Verdict({self.verdict!r}, {self.message!r})"


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _array_in(data: bytes, dtype: str, shape: _Any, tensors: str) -> _Any:
    raw = _numpy.frombuffer(data, dtype=_BIT_VIEWS[dtype]).copy()
    if tensors == "torch":
        import torch

        tensor = torch.from_numpy(raw).view(torch.bool if dtype == "bool" else getattr(torch, dtype))
        return tensor if shape is None else tensor.reshape([int(e) for e in shape])
    array = raw.view(_numpy.bool_ if dtype == "bool" else _numpy.dtype(dtype))
    return array if shape is None else array.reshape([int(e) for e in shape])


def _array_out(value: _Any) -> tuple:
    torch = _sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        name = "bool" if flat.dtype == torch.bool else str(flat.dtype).replace("torch.", "")
        if name not in _BIT_VIEWS:
            return ("garbage", "wrong-dtype", f"a torch tensor of {flat.dtype}")
        return ("ok", name, flat.view(getattr(torch, _BIT_VIEWS[name])).numpy().tobytes())
    if isinstance(value, _numpy.ndarray):
        name = value.dtype.name
        if name not in _BIT_VIEWS:
            return ("garbage", "wrong-dtype", f"a NumPy array of {value.dtype}")
        return ("ok", name, _numpy.ascontiguousarray(value).tobytes())
    return ("garbage", "not-a-tensor", f"a {type(value).__name__}, not a tensor")


def _refusal(error: Exception) -> tuple:
    kind = getattr(error, "kind", None)
    return ("refused", type(error).__name__, str(error), kind if kind in _KINDS else None)


def _isolated(call: _Callable) -> _Callable:
    """``call`` in a forked child, its answer pickled back through a pipe; a child that
    dies answers ("crash", "signal-N" or "exit-N", detail)."""

    def run(*args):
        readable, writable = _os.pipe()
        pid = _os.fork()
        if pid == 0:  # the child: answer, then leave without running any cleanup
            status = 0
            try:
                # A crash is reported as the case's verdict; pytest's faulthandler would
                # also print the child's stack to the shared stderr.
                import faulthandler

                faulthandler.disable()
                _os.close(readable)
                data = _pickle.dumps(call(*args))
                view = memoryview(data)
                while view:
                    view = view[_os.write(writable, view):]
            except BaseException:
                status = 70
            finally:
                _os._exit(status)
        _os.close(writable)
        chunks = []
        with open(readable, "rb") as pipe:
            while chunk := pipe.read(1 << 16):
                chunks.append(chunk)
        _, status = _os.waitpid(pid, 0)
        if _os.WIFSIGNALED(status):
            number = _os.WTERMSIG(status)
            return ("crash", f"signal-{number}", f"the call's process died of {_signal.Signals(number).name}")
        if _os.WEXITSTATUS(status) != 0 or not chunks:
            code = _os.WEXITSTATUS(status)
            return ("crash", f"exit-{code}", f"the call's process exited with status {code} before answering")
        return _pickle.loads(b"".join(chunks))

    return run


# The operation the caller did not supply, where an oracle needs both (the same-map
# oracle extracts every shard, then rebuilds): shardcheck's strict conversion.
def _strict_rebuild(amap, shards, scale_power):
    from . import rebuild

    return rebuild(amap, shards, scale_power)


def _strict_extract(amap, full, rank, scale_power):
    from . import extract

    return extract(amap, full, rank, scale_power)


def _bridge(rebuild: _Optional[_Callable], extract: _Optional[_Callable], tensors: str, isolate: bool) -> _Callable:
    def bridge(op, map_text, dtype, scale_power, data, shape, rank):
        try:
            amap = _json.loads(map_text)
        except ValueError as error:
            return ("refused", type(error).__name__, str(error), "format")
        try:
            if op == "rebuild":
                shards = {r: _array_in(b, dtype, None, tensors) for r, b in data}
                result = (rebuild or _strict_rebuild)(amap, shards, scale_power)
            else:
                result = (extract or _strict_extract)(amap, _array_in(data, dtype, shape, tensors), rank, scale_power)
        except Exception as error:  # the implementation's refusal, in its own words
            return _refusal(error)
        return _array_out(result)

    return _isolated(bridge) if isolate else bridge


def judge(
    case: Case,
    *,
    rebuild: _Optional[_Callable] = None,
    extract: _Optional[_Callable] = None,
    tensors: _Optional[str] = None,
    isolate: bool = False,
    name: str = "python",
) -> Verdict:
    """Runs ``case`` through the truth oracle with your ``rebuild`` and/or ``extract``
    (the case's own operation when both are given). ``tensors`` is ``"torch"`` (the
    default when torch is installed) or ``"numpy"``; NumPy has no bfloat16, so a bfloat16
    case is rejected (``hypothesis.reject()``) inside a Hypothesis test and a TypeError
    elsewhere. ``isolate`` runs each call in a forked child (see the module's doc)."""
    if rebuild is None and extract is None:
        raise TypeError("judge needs rebuild=, extract= or both")
    if tensors is None:
        tensors = "torch" if _has_torch() else "numpy"
    if tensors not in ("torch", "numpy"):
        raise ValueError(f"tensors must be 'torch' or 'numpy', not {tensors!r}")
    if tensors == "numpy" and case.dtype == "bfloat16":
        if "hypothesis" in _sys.modules:
            import hypothesis

            hypothesis.reject()
        raise TypeError("a bfloat16 case needs tensors='torch' (NumPy has no bfloat16)")
    op = None if rebuild is not None and extract is not None else ("rebuild" if rebuild is not None else "extract")
    bridge = _bridge(rebuild, extract, tensors, isolate)
    outcome = _json.loads(_core.judge(case.text, bridge, name, op, "truth"))
    same_map = None
    if _wrong_on_valid_layout(outcome):
        same_map = _json.loads(_core.judge(case.text, bridge, name, op, "same-map"))
    return Verdict(case, outcome, same_map)
