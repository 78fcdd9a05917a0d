"""Checked conversion through DeepSpeed's affine shard maps.

Every map is either refused with a typed :class:`MapError`, or converted bit-exact:

    shardcheck.check(map)                                   # raises MapError if invalid
    full = shardcheck.rebuild(map, {0: shard0, 1: shard1})  # the logical tensor
    shard = shardcheck.extract(map, full, rank=1)           # one rank's shard
    shardcheck.plan(source_map, target_map)                 # a transfer plan, as a dict
    shards = shardcheck.reshard(source_map, target_map, {0: shard0, 1: shard1})

``map`` is JSON text (str or bytes), the path of a JSON file (``os.PathLike``), a parsed
JSON object, what DeepSpeed's ``ParamAffineMap.to_dict()`` returns (integer rank keys,
tuples) or an object with such a ``to_dict()``. It is always turned into JSON text and
decoded by shardcheck's C++ codec, so one validator judges every form; text and files
reach the codec as they are, without a Python object per value. Text longer than
``max_input_bytes`` (by default an eighth of the machine's memory, at least 64 MiB) is
refused with a ``format`` MapError that names the limit; a file is read no further than
one byte past it, and one that is not a regular file (a FIFO, a socket, a device) is
read as its input comes and refused once it gives nothing for 3 seconds.

Arrays are NumPy arrays or, through DLPack, torch tensors (bfloat16 included). They must
be in CPU memory, C-contiguous and aligned; they are read in place, never copied (a
non-contiguous array is refused with a TypeError rather than copied silently). Each shard
and the full tensor are read as flat row-major buffers of the map's element count, as
DeepSpeed does. Results are new arrays of the map's shape: torch tensors when the inputs
are torch tensors, NumPy arrays otherwise. NumPy has no bfloat16: ``rebuild`` and
``reshard`` with ``dtype="bfloat16"`` read uint16 NumPy shards as bfloat16 bit patterns
and return the result's bit patterns as uint16 arrays (what
``shardcheck.torchfile.BFloat16Array`` holds).

Resharding (contract 11) copies shard to shard through a transfer plan, without the
full tensor in one place: ``reshard`` returns ``{target rank: shard}`` bit-exact to what
``extract(target_map, rebuild(source_map, shards), rank)`` would, or raises MapError.
"""

# Imported under private names, so that the module's public names are exactly __all__.
import json as _json
import numbers as _numbers
import os as _os
import select as _select
import stat as _stat
import sys as _sys
from collections.abc import Mapping as _Mapping
from importlib import metadata as _metadata
from typing import Any as _Any
from typing import Optional as _Optional

import numpy as _numpy

__all__ = ["MapError", "check", "rebuild", "extract", "plan", "reshard", "DTYPES", "KINDS"]
# The installed distribution's version: pyproject.toml is its one source (the command
# line's `shardcheck --version` is checked against it by the tests).
__version__ = _metadata.version("shardcheck")


class MapError(ValueError):
    """A map, or the data given with it, that shardcheck refuses.

    ``kind`` is one of the stable error kinds (``count``, ``bounds``, ``itself``,
    ``twice``, ``uncovered``, ``different_data``, ``holders``, ``scale``, ``shape``,
    ``digest``, ``format``); ``rank``, ``piece`` (the index in that rank's list, as written) and
    ``address`` say where, each None when it does not apply. ``side`` says whether
    ``address`` is an element of the full tensor (``"full"``) or a shard address
    (``"shard"``); ``path`` is the JSON location of a ``format`` error. ``str(e)`` is the
    sentence a user can act on.
    """

    def __init__(
        self,
        message: str,
        kind: str = "format",
        rank: _Optional[int] = None,
        piece: _Optional[int] = None,
        address: _Optional[int] = None,
        side: _Optional[str] = None,
        path: _Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.rank = rank
        self.piece = piece
        self.address = address
        self.side = side
        self.path = path

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __repr__(self) -> str:
        return (
            f"MapError(kind={self.kind!r}, rank={self.rank!r}, piece={self.piece!r}, "
            f"address={self.address!r}, message={str(self)!r})"
        )


from . import _core  # noqa: E402  (the extension looks MapError up in this module)

DTYPES = tuple(_core.dtype_names())  # the dtypes conversion moves, as the core names them
KINDS = tuple(_core.kind_names())  # every MapError.kind
_DEFAULT_MAX_SEGMENTS = _core.default_max_segments()  # the core's ReshardOptions budget

_INT64_MAX = (1 << 63) - 1
_MAX_INPUT_BYTES_CEILING = (1 << 32) - 1  # the core's kMaxInputBytesCeiling
_NATIVE_ORDER = "<" if _sys.byteorder == "little" else ">"
# How long a map path that is not a regular file (a FIFO, a socket, a device) may give
# nothing before it is refused: reading a path never waits forever (contract 2).
_INPUT_WAIT_SECONDS = 3.0  # as the command line's --input-timeout default
_READ_CHUNK = 1 << 20


class _Unwritable(Exception):
    pass


def _encode(value: _Any, out: list) -> None:
    """Writes DeepSpeed's plain-scalar form (integer keys, tuples, NumPy scalars) as JSON
    text. Keys are written as they come, so {0: a, "0": b} reaches the codec as two
    equal keys and is refused there, instead of one silently replacing the other."""
    if isinstance(value, _Mapping):
        out.append("{")
        for i, (key, item) in enumerate(value.items()):
            if i:
                out.append(",")
            out.append(_json.dumps(_key_text(key)))
            out.append(":")
            _encode(item, out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, out)
        out.append("]")
    elif value is None or isinstance(value, (bool, int, float, str)):
        # NaN and infinities come out as tokens JSON lacks, so the codec refuses them.
        out.append(_json.dumps(value))
    elif hasattr(type(value), "__index__"):
        out.append(str(value.__index__()))
    elif isinstance(value, _numbers.Real):
        out.append(_json.dumps(float(value)))
    else:
        raise _Unwritable(f"a value of type {type(value).__name__}")


def _plain_scalar(value: _Any) -> _Any:
    """What _encode writes for a value json.dumps cannot (a NumPy integer or float), as
    a value json.dumps writes the same way."""
    if isinstance(value, (_Mapping, list, tuple)):
        raise TypeError("a container json.dumps does not write as _encode does")
    if hasattr(type(value), "__index__"):
        return value.__index__()
    if isinstance(value, _numbers.Real):
        return float(value)
    raise TypeError(f"a value of type {type(value).__name__}")


def _key_text(key: _Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, float)):
        return _json.dumps(key)  # what json.dumps would make of it: "null", "true", "1.5"
    if hasattr(type(key), "__index__"):
        return str(key.__index__())
    raise _Unwritable(f"a key of type {type(key).__name__}")


def _read_path(path: _Any, limit: int) -> bytes:
    """A map file's bytes, read no further than one byte past ``limit`` (more is refused,
    ``format``, naming the limit). A regular file is read to its end; anything else (a
    FIFO, a socket, a device) as its input comes, refused once it gives nothing for
    _INPUT_WAIT_SECONDS. Opened without blocking, so a FIFO without a writer does not
    stop the open either."""
    flags = _os.O_RDONLY | getattr(_os, "O_NONBLOCK", 0) | getattr(_os, "O_CLOEXEC", 0) | getattr(_os, "O_NOCTTY", 0)
    fd = _os.open(path, flags)
    try:
        info = _os.fstat(fd)
        if _stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(21, "Is a directory", _os.fspath(path))
        regular = _stat.S_ISREG(info.st_mode)
        if regular and info.st_size > limit:
            raise _too_long(path, limit)
        poller = None
        if not regular:
            poller = _select.poll()
            poller.register(fd, _select.POLLIN)
        chunks, total = [], 0
        while total <= limit:
            if poller is not None and not poller.poll(_INPUT_WAIT_SECONDS * 1000):
                raise MapError(
                    f"$: {_os.fspath(path)} gave no input for {_INPUT_WAIT_SECONDS:g} seconds (it is not a regular "
                    "file, and shardcheck does not wait longer for one).",
                    kind="format",
                    path="$",
                )
            try:
                # A regular file in one read where it can (one buffer, not two); else by chunks.
                chunk = _os.read(fd, min(info.st_size + 1 if regular else _READ_CHUNK, limit + 1 - total))
            except BlockingIOError:
                continue
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:
            raise _too_long(path, limit)
        return b"".join(chunks)
    finally:
        _os.close(fd)


def _too_long(path: _Any, limit: int) -> MapError:
    return MapError(
        f"$: {_os.fspath(path)} holds more than the limit of {limit} bytes (by default an eighth of this machine's "
        "memory; max_input_bytes= raises it); it is read no further.",
        kind="format",
        path="$",
    )


def _map_text(map: _Any, limit: _Optional[int] = None) -> _Any:
    """The map as JSON text, str or bytes (the core reads either in place). ``limit``: the
    caller's input limit (None: the core's default), which bounds reading a path."""
    if isinstance(map, str):
        return map
    if isinstance(map, _os.PathLike):
        map = _read_path(map, limit if limit is not None else _core.default_max_input_bytes())
    if isinstance(map, (bytes, bytearray)):
        map = bytes(map)
        if map.isascii():  # plain JSON: no copy, no decoding
            return map
        try:
            return map.decode("utf-8")
        except UnicodeDecodeError as e:
            raise MapError(f"$: the map is not UTF-8 text ({e}).", kind="format", path="$") from None
    if not isinstance(map, _Mapping) and callable(getattr(map, "to_dict", None)):
        map = map.to_dict()
    # json's C encoder writes plain dicts, lists, tuples and scalars as _encode does,
    # character for character, and a map of a million pieces in a second where _encode
    # takes half a minute; anything it would write differently or not at all (keys other
    # than str, int, float, bool or None; a Mapping that is not a dict; a cycle) makes it
    # raise, and _encode writes that map.
    try:
        return _json.dumps(map, separators=(",", ":"), default=_plain_scalar)
    except (TypeError, ValueError, RecursionError):
        pass
    out: list = []
    try:
        _encode(map, out)
    except _Unwritable as e:
        raise MapError(f"$: the map holds {e}, which JSON cannot represent.", kind="format", path="$") from None
    except RecursionError:
        raise MapError("$: the map is nested too deeply to be written as JSON.", kind="format", path="$") from None
    return "".join(out)


def _torch_tensor_type() -> _Any:
    # torch is looked up, never imported: a NumPy-only caller does not pay for it.
    torch = _sys.modules.get("torch")
    return getattr(torch, "Tensor", None) if torch is not None else None


def _array(value: _Any, what: str, bfloat16_bits: bool = False) -> tuple[_Any, bool, bool]:
    """The array to hand to the core, whether it is a torch tensor, and whether it is a
    uint8 view of a torch bool tensor (DLPack in torch cannot carry bool).
    ``bfloat16_bits``: the caller named dtype bfloat16, so a uint16 NumPy array holds its
    bit patterns."""
    tensor_type = _torch_tensor_type()
    if tensor_type is not None and isinstance(value, tensor_type):
        # A parameter that requires grad cannot be exported; detaching shares its memory.
        if value.requires_grad:
            value = value.detach()
        torch = _sys.modules["torch"]
        if value.dtype == torch.bool:
            return value.view(torch.uint8), True, True
        return value, True, False
    if isinstance(value, _numpy.ndarray):
        if bfloat16_bits and value.dtype.kind == "u" and value.dtype.itemsize == 2:
            pass  # bfloat16 bit patterns (the core reads uint16 as bfloat16 when that dtype is named)
        elif value.dtype.name not in DTYPES:
            raise TypeError(f"{what} has dtype {value.dtype}, which shardcheck does not convert ({', '.join(DTYPES)})")
        if value.dtype.byteorder not in ("=", "|") and value.dtype.byteorder != _NATIVE_ORDER:
            raise TypeError(
                f"{what} is stored in non-native byte order ({value.dtype.str}); "
                "pass a.astype(a.dtype.newbyteorder('='))"
            )
    elif not hasattr(value, "__dlpack__"):
        try:
            memoryview(value).release()
        except TypeError:
            raise TypeError(
                f"{what} must be a NumPy array or a tensor that supports DLPack, not {type(value).__name__}"
            ) from None
    return value, False, False


def _rank(value: _Any, what: str) -> int:
    if isinstance(value, bool) or not hasattr(type(value), "__index__"):
        raise TypeError(f"{what} must be an integer rank, not {type(value).__name__}")
    rank = value.__index__()
    if not -_INT64_MAX - 1 <= rank <= _INT64_MAX:
        raise ValueError(f"{what} {rank} is outside the 64-bit range of rank ids")
    return rank


def _power(scale_power: _Any) -> int:
    if isinstance(scale_power, bool) or not hasattr(type(scale_power), "__index__"):
        raise TypeError(f"scale_power must be an integer (1, -1 or -2), not {type(scale_power).__name__}")
    power = scale_power.__index__()
    if not -(1 << 31) <= power < (1 << 31):
        raise ValueError(f"scale_power {power} is outside the 32-bit range")
    return power


def _dtype_name(dtype: _Any) -> _Optional[str]:
    """A dtype's name as the core spells it, from a name, a NumPy or a torch dtype."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    text = str(dtype)
    if text.startswith("torch."):
        return text[len("torch.") :]
    try:
        return _numpy.dtype(dtype).name
    except TypeError:
        return text


def _limit(max_input_bytes: _Any) -> _Optional[int]:
    """The input limit for the core: None for its default, else a positive byte count."""
    if max_input_bytes is None:
        return None
    if isinstance(max_input_bytes, bool) or not hasattr(type(max_input_bytes), "__index__"):
        raise TypeError(f"max_input_bytes must be an integer, not {type(max_input_bytes).__name__}")
    limit = max_input_bytes.__index__()
    if not 1 <= limit <= _MAX_INPUT_BYTES_CEILING:
        raise ValueError(f"max_input_bytes must be between 1 and {_MAX_INPUT_BYTES_CEILING}, got {limit}")
    return limit


def _segments(max_segments: _Any) -> int:
    if isinstance(max_segments, bool) or not hasattr(type(max_segments), "__index__"):
        raise TypeError(f"max_segments must be an integer, not {type(max_segments).__name__}")
    budget = max_segments.__index__()
    if not 1 <= budget <= _INT64_MAX:
        raise ValueError(f"max_segments must be between 1 and {_INT64_MAX}, got {budget}")
    return budget


def _shard_items(shards: _Any, dtype: _Optional[str] = None) -> tuple[list, bool]:
    """The shards as the core takes them, [(rank, array, as_bool)], and whether they are
    torch tensors (so the result is too). ``dtype``: the dtype the caller named, if any."""
    if not isinstance(shards, _Mapping):
        raise TypeError(f"shards must be a mapping of rank to array, not {type(shards).__name__}")
    items = []
    kinds = set()
    for key, value in shards.items():
        rank = _rank(key, "A shard key")
        array, is_torch, as_bool = _array(value, f"The shard of rank {rank}", dtype == "bfloat16")
        kinds.add(is_torch)
        items.append((rank, array, as_bool))
    if len(kinds) > 1:
        raise TypeError("shards mix torch tensors and other arrays; pass one kind, so the result's kind is clear")
    return items, kinds == {True}


def check(map: _Any, *, max_input_bytes: _Optional[int] = None) -> None:
    """Raises :class:`MapError` unless the map passes every check on the map alone
    (contract 3, conditions 1-6). ``max_input_bytes`` replaces the default input limit."""
    limit = _limit(max_input_bytes)
    _core.check(_map_text(map, limit), limit)


def rebuild(
    map: _Any,
    shards: _Mapping[int, _Any],
    scale_power: int = 1,
    *,
    dtype: _Any = None,
    digest_state: _Optional[str] = None,
    max_input_bytes: _Optional[int] = None,
) -> _Any:
    """The full tensor, of the map's logical shape, from ``{rank: shard}``.

    Runs every map check first and records who wrote each element, so it refuses (with
    :class:`MapError`) instead of ever returning a wrong tensor: a collision, a hole,
    replicas that disagree, a shard of the wrong size or dtype. ``scale_power`` is 1 for
    a parameter, -1 for Adam's ``exp_avg``, -2 for ``exp_avg_sq``. ``dtype`` (a name
    such as ``"float32"``, a NumPy or a torch dtype) is needed only when no shard is
    given; otherwise the shards' dtype is used and they must all agree. With
    ``dtype="bfloat16"``, uint16 NumPy shards are read as bfloat16 bit patterns and the
    result is a uint16 array of the rebuilt bit patterns (NumPy has no bfloat16).
    ``digest_state`` (``"param"``, ``"exp_avg"``, ...) also verifies the content digest the
    map records for that state (contract 10): a rebuilt tensor whose digest differs, or a
    map without that record, is refused with kind ``digest``. ``max_input_bytes`` replaces
    the default input limit.
    """
    items, torch = _shard_items(shards, _dtype_name(dtype))
    limit = _limit(max_input_bytes)
    text = _map_text(map, limit)
    if digest_state is not None and not isinstance(digest_state, str):
        raise TypeError(f"digest_state must be a state name such as 'param', not {type(digest_state).__name__}")
    return _core.rebuild(text, items, _power(scale_power), _dtype_name(dtype), torch, digest_state, limit)


def extract(map: _Any, full: _Any, rank: int, scale_power: int = 1, *, max_input_bytes: _Optional[int] = None) -> _Any:
    """Rank ``rank``'s shard, of its shard shape, from the full tensor.

    Runs every map check first (on all ranks, not only this one) and never leaves a
    shard address unwritten; refuses with :class:`MapError` otherwise. ``full`` is read
    as a flat row-major buffer of the map's element count. ``max_input_bytes`` replaces the
    default input limit.
    """
    array, is_torch, as_bool = _array(full, "The full tensor")
    limit = _limit(max_input_bytes)
    text = _map_text(map, limit)
    return _core.extract(text, array, as_bool, _rank(rank, "rank"), _power(scale_power), is_torch, limit)


def plan(
    source_map: _Any,
    target_map: _Any,
    *,
    compare_replicas: bool = False,
    max_segments: int = _DEFAULT_MAX_SEGMENTS,
    max_input_bytes: _Optional[int] = None,
) -> dict:
    """The transfer plan (contract 11) from the source map's shards to the target map's,
    as ``shardcheck plan --json`` prints it: ``logical_shape``; ``segments``, each
    ``{"shape": [...], "source": [rank, offset, [strides]], "target": [rank, offset,
    [strides]]}`` as DeepSpeed's ``TransferSegment.to_dict`` spells it; and
    ``statistics`` (``segments``, ``elements_moved``, ``elements_read_by_source_rank``
    keyed by the rank as a string, ``elements_by_rank_pair`` as ``[source, target,
    elements]`` rows, ``replica_checks``).

    Both maps are checked whole first; an invalid map is refused with its kind (the
    message says which map), different logical shapes with ``shape``, an element whose
    source and target scales differ with ``scale``, and a plan that needs more than
    ``max_segments`` address runs or segments with ``format``: a plan is whole or an
    error. ``compare_replicas`` also plans comparisons of every holder of a replicated
    source element (counted in ``replica_checks``), not only a read of the lowest rank's.
    """
    limit = _limit(max_input_bytes)
    source_text = _map_text(source_map, limit)
    target_text = _map_text(target_map, limit)
    text = _core.plan(source_text, target_text, bool(compare_replicas), _segments(max_segments), limit)
    return _json.loads(text)


def reshard(
    source_map: _Any,
    target_map: _Any,
    shards: _Mapping[int, _Any],
    *,
    dtype: _Any = None,
    compare_replicas: bool = False,
    max_segments: int = _DEFAULT_MAX_SEGMENTS,
    scale_power: int = 1,
    digest_state: _Optional[str] = None,
    max_input_bytes: _Optional[int] = None,
) -> dict:
    """The target map's shards, ``{rank: shard}`` with each of its shard shape, from the
    source map's ``{rank: shard}``, copied shard to shard through :func:`plan`'s plan:
    bit-exact what ``extract(target_map, rebuild(source_map, shards), rank)`` gives,
    without the full tensor in one place.

    Refuses with :class:`MapError` as :func:`plan` does, and for the shards as a
    conversion does: a shard of the wrong size or dtype, a missing one, one of a rank the
    source map does not list, or (a plan copies without rescaling) a scaled piece on an
    integer dtype. A replicated element is read from its lowest holder; with
    ``compare_replicas`` every holder's copy is compared first and any difference is
    refused (kind ``different_data``). ``dtype`` is needed only when no shard is given.
    Torch tensors in give torch tensors out.

    ``digest_state`` (``"param"``, ...) verifies the content digest the source map records
    for that state (contract 10) on both sides of the plan: F as the source shards hold it
    (a source map that is valid but describes another layout is refused here, kind
    ``digest``), then F as the target shards hold it, each target replica against its
    lowest holder's copy. A target map that records another value for the state is
    refused too. ``scale_power`` says which tensor the shards hold (the digest is of F
    after unscaling); the copy itself never rescales. With ``dtype="bfloat16"``, uint16
    NumPy shards are bfloat16 bit patterns, and so are the uint16 results.
    """
    items, torch = _shard_items(shards, _dtype_name(dtype))
    limit = _limit(max_input_bytes)
    source_text = _map_text(source_map, limit)
    target_text = _map_text(target_map, limit)
    if digest_state is not None and not isinstance(digest_state, str):
        raise TypeError(f"digest_state must be a state name such as 'param', not {type(digest_state).__name__}")
    return _core.reshard(
        source_text,
        target_text,
        items,
        _dtype_name(dtype),
        torch,
        bool(compare_replicas),
        _segments(max_segments),
        _power(scale_power),
        digest_state,
        limit,
    )
