"""DeepSpeed's affine shard map module, loaded without installing or importing DeepSpeed.

    affine = shardcheck.deepspeed.load_affine("out/deepspeed/current")
    amap = affine.contiguous_split_map((4, 6), [4, 2], 1)

DeepSpeed's package ``__init__`` imports most of DeepSpeed (and tqdm, and more); its
``checkpoint/affine.py`` needs only torch, and ``affine_transfer.py`` only ``affine``. So
the two files are loaded by path, inside a private stand-in package (a module object
with the right ``__path__``, one per path), and nothing else of DeepSpeed ever runs.
"""

import hashlib as _hashlib
import importlib.util as _util
import os as _os
import sys as _sys
import types as _types
from typing import Optional as _Optional

__all__ = ["load_affine", "find_sdist"]

# shardcheck's poison bit patterns (core dtype.cc poison_bits), by torch dtype name, as
# the signed value of a same-width integer view.
_POISON = {
    "float64": ("int64", 0x7FF800000000DEAD), "float32": ("int32", 0x7FC0DEAD), "float16": ("int16", 0x7EAD),
    "bfloat16": ("int16", 0x7FED), "int8": ("int8", 0xA5), "int16": ("int16", 0xA5A5),
    "int32": ("int32", 0xA5A5A5A5), "int64": ("int64", 0xA5A5A5A5A5A5A5A5), "uint8": ("uint8", 0xA5),
    "bool": ("uint8", 0xA5),
}
_WIDTH = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 0}


def find_sdist(path: _Optional[str] = None) -> str:
    """The directory holding ``deepspeed/checkpoint/affine.py``: ``path`` (that directory,
    its ``deepspeed/`` or ``deepspeed/checkpoint/``, or affine.py itself), else
    ``$SHARDCHECK_DEEPSPEED_PATH``, else ``out/deepspeed/current`` under the working
    directory (what ``bash scripts/deepspeed-target.sh`` makes), else an installed
    DeepSpeed's package directory (found, not imported). FileNotFoundError otherwise."""
    candidates = [path] if path is not None else [
        _os.environ.get("SHARDCHECK_DEEPSPEED_PATH"),
        _os.path.join("out", "deepspeed", "current"),
    ]
    if path is None:
        spec = _util.find_spec("deepspeed") if "deepspeed" not in _sys.modules else None
        if spec is not None and spec.submodule_search_locations:
            candidates.append(_os.path.dirname(list(spec.submodule_search_locations)[0]))
    for candidate in candidates:
        if not candidate:
            continue
        candidate = _os.path.abspath(candidate)
        if _os.path.isfile(candidate):
            candidate = _os.path.dirname(candidate)
        for up in (candidate, _os.path.dirname(candidate), _os.path.dirname(_os.path.dirname(candidate))):
            if _os.path.isfile(_os.path.join(up, "deepspeed", "checkpoint", "affine.py")):
                return up
    where = path if path is not None else "$SHARDCHECK_DEEPSPEED_PATH, ./out/deepspeed/current or an installed DeepSpeed"
    raise FileNotFoundError(
        f"no deepspeed/checkpoint/affine.py in {where}: pass an unpacked DeepSpeed sdist "
        "(bash scripts/deepspeed-target.sh makes out/deepspeed/current)"
    )


def _poisoned_torch(torch):
    """torch, except that empty() hands out memory filled with shardcheck's poison pattern:
    an element a conversion never writes then has one value on every run, instead of
    whatever the allocator left, so a verdict (and a Hypothesis example) is reproducible."""

    class PoisonedTorch(_types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*args, **kwargs):
            tensor = torch.empty(*args, **kwargs)
            name = "bool" if tensor.dtype == torch.bool else str(tensor.dtype).replace("torch.", "")
            if name in _POISON and tensor.numel() > 0:
                view, value = _POISON[name]
                width = _WIDTH[view]
                if width and value >= 1 << (width - 1):
                    value -= 1 << width
                tensor.view(getattr(torch, view)).fill_(value)
            return tensor

    return PoisonedTorch("torch")


def _load(package: str, directory: str, name: str):
    spec = _util.spec_from_file_location(f"{package}.{name}", _os.path.join(directory, f"{name}.py"))
    module = _util.module_from_spec(spec)
    _sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del _sys.modules[spec.name]
        raise
    return module


def load_affine(path: _Optional[str] = None, *, poison_empty: bool = True) -> _types.ModuleType:
    """DeepSpeed's ``deepspeed/checkpoint/affine.py`` from an unpacked sdist (see
    :func:`find_sdist` for where it is looked for), as a module: ``ParamAffineMap``,
    ``contiguous_split_map`` and the other constructors. When the sdist has
    ``affine_transfer.py`` it is loaded too, as the module's ``transfer`` attribute.

    Needs torch (affine.py imports it). ``poison_empty`` makes the module's
    ``torch.empty`` fill fresh tensors with a fixed pattern, so that elements it never
    writes are reproducible (what ``--target deepspeed`` does too)."""
    root = find_sdist(path)
    directory = _os.path.join(root, "deepspeed", "checkpoint")
    # A stand-in package per sdist: affine_transfer's `from .affine import ...` resolves
    # inside it, and an installed DeepSpeed (or another sdist) is never shadowed.
    package = "_shardcheck_deepspeed_" + _hashlib.sha1(directory.encode()).hexdigest()[:12]
    key = (package, poison_empty)
    if key in _loaded:
        return _loaded[key]
    if poison_empty:
        package += "_poisoned"
    for name, where in ((package, _os.path.join(root, "deepspeed")), (f"{package}.checkpoint", directory)):
        stand_in = _types.ModuleType(name)
        stand_in.__path__ = [where]
        _sys.modules[name] = stand_in
    package += ".checkpoint"
    affine = _load(package, directory, "affine")
    if poison_empty:
        affine.torch = _poisoned_torch(affine.torch)
    transfer = None
    if _os.path.isfile(_os.path.join(directory, "affine_transfer.py")):
        transfer = _load(package, directory, "affine_transfer")
    affine.transfer = transfer
    _loaded[key] = affine
    return affine


_loaded: dict = {}
