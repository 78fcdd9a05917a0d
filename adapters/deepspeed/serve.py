#!/usr/bin/env python3
"""Serves DeepSpeed's own affine shard map module over shardcheck's target protocol
(docs/protocol.md), so that `shardcheck campaign --target deepspeed` judges the code
people run rather than a model of it. `reshard` is served by DeepSpeed's transfer planner,
deepspeed/checkpoint/affine_transfer.py (contract 11): plan_transfer, then the plan's
segments executed with torch as a caller executes them, and where the planner declines a
layout (UnsupportedLayoutError) its documented fallback, rebuild then extract.

Where the module comes from: ds_common.load_release ($SHARDCHECK_DEEPSPEED_PATH, an
installed DeepSpeed, out/deepspeed/current). From a sdist the module files are loaded by
path with both package modules stubbed, so no package __init__ runs.

The module allocates results with torch.empty. Uninitialised memory would make a verdict
depend on whatever the allocator hands back, so the adapter gives the module a torch whose
empty() fills every fresh tensor with the poison pattern shardcheck's legacy model uses.

The adapter is a fork server (adapters/protocol_server.py, docs/protocol.md "Fork
servers"): torch and the module load once, in a parent that answers nothing, and a child
that crashes (some corrupted maps make torch read or write memory no tensor owns) is
replaced by a fork of that parent, not by a new interpreter.

$SHARDCHECK_DEEPSPEED_DEVICE chooses the device (ds_common).
"""

import math
import os

import ds_common
# refusal_kind: tests/test_targets.cc asks this module for it.
from ds_common import (PoisonedTorch, fail, load_module, load_release, map_document, refusal,  # noqa: F401
                       refusal_kind, release_version, stub_package, tensor_in, tensor_out, torch_dtype)


def load_from(root):
    """The affine module and, where the release has one, its transfer planner (or None)."""
    checkpoint = os.path.join(root, 'deepspeed', 'checkpoint')
    path = os.path.join(checkpoint, 'affine.py')
    if not os.path.isfile(path):
        fail(f'{path} does not exist: SHARDCHECK_DEEPSPEED_PATH must name an unpacked DeepSpeed sdist')
    stub_package('deepspeed', os.path.join(root, 'deepspeed'))
    stub_package('deepspeed.checkpoint', checkpoint)
    module = load_module('deepspeed.checkpoint.affine', path)
    transfer_path = os.path.join(checkpoint, 'affine_transfer.py')
    transfer = load_module('deepspeed.checkpoint.affine_transfer', transfer_path) if os.path.isfile(transfer_path) else None
    return module, transfer, f'deepspeed {release_version(root)} ({path})'


def load_installed():
    import deepspeed
    import deepspeed.checkpoint.affine as module
    try:
        import deepspeed.checkpoint.affine_transfer as transfer
    except ImportError:
        transfer = None
    return module, transfer, f'deepspeed {getattr(deepspeed, "__version__", "?")} (installed, {module.__file__})'


def load_affine():
    return load_release(load_from, load_installed)


def execute_plan(plan, source_shards, shard_shapes, dtype, poisoned):
    """Runs a TransferPlan as a caller would: each segment one strided copy, from a view of
    its source rank's flat shard into a view of its target rank's flat shard. Target shards
    start poisoned, so an address no segment writes shows as wrong, never as luck."""
    targets = {rank: poisoned.empty(math.prod(shape), dtype=dtype, device=ds_common.DEVICE) for rank, shape in shard_shapes.items()}
    for segment in plan.segments:
        source = poisoned.watch(source_shards[segment.source_rank].as_strided(segment.shape, segment.source_strides,
                                                                              segment.source_offset))
        poisoned.watch(targets[segment.target_rank].as_strided(segment.shape, segment.target_strides,
                                                               segment.target_offset)).copy_(source)
    return targets


class Server:

    def __init__(self, module, transfer, implementation):
        self.module = module
        self.transfer = transfer
        self.implementation = implementation
        self.torch = module.torch = PoisonedTorch()

    def served(self):
        return ('check', 'rebuild', 'extract') + (('reshard', ) if self.transfer is not None else ())

    def reshard(self, request):
        """plan_transfer(target, source), executed; where the planner declines the layout
        (UnsupportedLayoutError), its documented fallback: rebuild F through the source
        map, extract every target rank through the target map, with the same release's
        affine module. The answer, shards or refusal, says when the fallback made it."""
        power = int(request.get('scale_power', 1))
        source_map = self.module.ParamAffineMap.from_dict(map_document(request))
        target_map = self.module.ParamAffineMap.from_dict(map_document(request, 'target_map'))
        shards = {int(rank): tensor_in(doc) for rank, doc in request['shards'].items()}
        dtype = torch_dtype(request['dtype'])
        fallback = None
        try:
            plan = self.transfer.plan_transfer(target_map, source_map)
        except self.transfer.UnsupportedLayoutError as declined:
            fallback = {'type': type(declined).__name__, 'message': str(declined)}
            try:
                full = source_map.rebuild(shards, scale_power=power)
                result = {rank: target_map.extract(full, rank, scale_power=power) for rank in target_map.shard_shapes}
            except Exception as error:  # the fallback's refusal, in its own words
                return {'ok': False, 'error': refusal(error), 'fallback': fallback}
        else:
            result = execute_plan(plan, shards, target_map.shard_shapes, dtype, self.torch)
        answer = {'ok': True, 'result': {str(rank): tensor_out(shard.reshape(-1)) for rank, shard in result.items()}}
        if fallback is not None:
            answer['fallback'] = fallback
        return answer

    def answer(self, request):
        op = request.get('op')
        if op == 'hello':
            return {'ok': True, 'protocol': 1, 'implementation': self.implementation, 'ops': list(self.served())}
        if op not in self.served():
            return {'ok': False, 'error': {'type': 'UnsupportedOperation', 'message': f'op {op!r} is not served'}}
        try:
            if op == 'reshard':
                return self.reshard(request)
            affine_map = self.module.ParamAffineMap.from_dict(map_document(request))
            if op == 'check':
                affine_map.validate_coverage()
                return {'ok': True}
            power = int(request.get('scale_power', 1))
            if op == 'rebuild':
                shards = {int(rank): tensor_in(doc) for rank, doc in request['shards'].items()}
                return {'ok': True, 'result': tensor_out(affine_map.rebuild(shards, scale_power=power))}
            full = tensor_in(request['full'])
            return {'ok': True, 'result': tensor_out(affine_map.extract(full, int(request['rank']), scale_power=power))}
        except Exception as error:  # the module's refusal, in its own words
            return {'ok': False, 'error': refusal(error)}


def main():
    ds_common.serve_main(lambda: Server(*load_affine()))


if __name__ == '__main__':
    main()
