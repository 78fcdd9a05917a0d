"""DeepSpeed 0.19.8's own layout constructors, for tests/test_deepspeed_constructors.cc.

    /usr/bin/python3 deepspeed_constructors.py DEEPSPEED_ROOT < calls.jsonl > maps.jsonl

Each input line is one call, {"fn": NAME, ...its arguments}; each output line is the map
DeepSpeed builds, spelled as its to_dict() spells it, or {"raised": "Type: message"}.
affine.py, constants.py and autoep_affine.py are loaded by path from the unpacked sdist
under empty package modules, so nothing else of DeepSpeed is imported.
"""

import importlib.util
import json
import os
import sys
import types


def load_modules(root):
    directory = os.path.join(root, "deepspeed", "checkpoint")
    for name, path in (("deepspeed", os.path.join(root, "deepspeed")), ("deepspeed.checkpoint", directory)):
        package = types.ModuleType(name)
        package.__path__ = [path]
        sys.modules[name] = package

    def load(name):
        spec = importlib.util.spec_from_file_location(f"deepspeed.checkpoint.{name}", os.path.join(directory, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module

    affine = load("affine")
    load("constants")
    return affine, load("autoep_affine")


def build(affine, autoep, call):
    fn, shape = call["fn"], call["shape"]
    if fn == "replicated":
        return affine.replicated_map(shape, call["tp"], call["scale"])
    if fn == "contiguous_split":
        return affine.contiguous_split_map(shape, call["sizes"], call["dim"])
    if fn == "sub_param":
        return affine.sub_param_map(shape, call["sub_sizes"], call["widths"], call["dim"])
    if fn == "segmented":
        segments = [(size, bool(replicated)) for size, replicated in call["segments"]]
        return affine.segmented_map(shape, segments, call["dim"], call["tp"], call["split_widths"])
    if fn == "block_gather":
        ids = {rank: list(blocks) for rank, blocks in enumerate(call["block_ids"])}
        return affine.block_gather_map(shape, ids, call["block_size"], call["dim"])
    if fn == "expert_placement":
        descriptor = autoep.make_autoep_placement_descriptor(shape[0], call["experts"])
        return autoep.autoep_placement_to_affine_map(descriptor, shape)
    raise ValueError(f"unknown constructor {fn!r}")


def main():
    affine, autoep = load_modules(sys.argv[1])
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = build(affine, autoep, json.loads(line)).to_dict()
        except Exception as error:  # the test reports what DeepSpeed raised, whatever it is
            answer = {"raised": f"{type(error).__name__}: {error}"}
        sys.stdout.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
