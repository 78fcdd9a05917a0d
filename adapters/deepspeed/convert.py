#!/usr/bin/env python3
"""Serves DeepSpeed's checkpoint *conversion* step over shardcheck's target protocol
(docs/protocol.md) as `rebuild`: `shardcheck campaign --target deepspeed-convert` judges
what ds_to_universal.py writes into a universal checkpoint for a parameter with an affine
map, not affine.py alone.

The step is deepspeed/checkpoint/ds_to_universal.py's merge_tp_slices(uc_info, dir,
slice_dir, tp_degree, (name, per_tp_shapes)). It reads the fragments the extraction step
dumped (slice_dir/<name>/<tp rank>/<state>.<dp rank>), concatenates each TP rank's
data-parallel fragments (_merge_zero_shards: a rank that holds nothing wrote none, and an
empty placeholder takes its place), and for each of Adam's three states (fp32, exp_avg,
exp_avg_sq: the names are written into the function) rebuilds the full parameter through
the map that uc_info's affine_map patterns give the parameter, with that state's power,
into dir/<name>/<state>.pt.

Each rebuild request is one conversion of one parameter, driven as ds_to_universal drives
it:
  - the state is the optimizer state of the request's scale power: the parameter (fp32)
    for power 1, else Adam's moment or another optimizer's (Muon's momentum_buffer,
    RMSprop's square_avg), by a hash of the map (ds_common.state_for). The checkpoint
    holds the states of that optimizer: Adam's three, or fp32 and the other optimizer's.
    The request's shards stand in for every one of them (only the requested state's result
    is judged), so a conversion refused because of another state is refused as a whole,
    as the job would be;
  - each rank's shard is dumped with DeepSpeed's own dump_param_fragment as two
    data-parallel fragments (one where it holds a single element; none where it holds
    nothing), under a folder of this process's own (ds_common.scratch_directory);
  - tp_degree is one more than the highest rank among the shards; per_tp_shapes (the shapes
    the model states record) are the map's shard shapes where their element count is the
    shard's, else the shard's flat length, and the map's shape (or an empty one) for a rank
    without a shard;
  - uc_info holds only the map, under a pattern that matches the parameter's name.
The answer is `param` of <state>.pt. A state the function does not convert leaves no file:
it is answered as a refusal (type StateDropped), since a caller gets no tensor. An error
DeepSpeed raises with no text says where it was raised. See docs/guide/targets.md.
"""

import math
import os
import re
import traceback

import ds_common
from ds_common import (PoisonedTorch, map_document, planted_bug, refusal, state_for, tensor_in, tensor_out, torch)

PARAMETER = 'shardcheck.weight'


def refusal_with_place(error):
    """DeepSpeed's refusal; where its text is empty (a StopIteration from next() on no
    shards), the text says which DeepSpeed function raised it, so that it explains itself."""
    out = refusal(error)
    if not out['message']:
        frames = [frame for frame in traceback.extract_tb(error.__traceback__) if '/deepspeed/' in frame.filename]
        where = f' in {frames[-1].name} ({os.path.basename(frames[-1].filename)}:{frames[-1].lineno})' if frames else ''
        out['message'] = f'{type(error).__name__} with no message{where}'
    return out


class Server:

    def __init__(self, modules, implementation):
        self.affine, self.convert, self.constants = modules
        self.implementation = f'{implementation}: ds_to_universal.merge_tp_slices'
        self.torch = PoisonedTorch()
        # Every tensor the merge and the map allocate comes from the poisoned torch.
        self.affine.torch = self.convert.torch = self.torch
        self.folder = ds_common.scratch_directory('deepspeed-convert')

    def shard_shapes(self, document):
        """The shard shapes as DeepSpeed reads the map; none for a map it cannot read (the
        merge then refuses it with DeepSpeed's own error)."""
        try:
            return self.affine.ParamAffineMap.from_dict(document).shard_shapes
        except Exception:
            return {}

    def rebuild(self, request):
        power = int(request.get('scale_power', 1))
        state, optimizer, known = state_for(request, power, vary_parameter=False)
        states = ['fp32', 'exp_avg', 'exp_avg_sq'] if optimizer == 'Adam' else sorted({'fp32', state})
        note = {'state': state, 'optimizer': optimizer, 'state_known_to_deepspeed': known}
        try:
            document = map_document(request)
            shards = {int(rank): tensor_in(doc).reshape(-1) for rank, doc in request['shards'].items()}
            ds_common.empty_directory(self.folder)
            slice_dir = os.path.join(self.folder, 'slices')
            universal_dir = os.path.join(self.folder, 'universal')
            self.convert.cnt = 0  # the extraction step's global fragment counter
            for name in states:
                for rank, flat in shards.items():
                    numel = flat.numel()
                    cuts = [0, numel // 2, numel] if numel >= 2 else [0, numel]
                    for dp_rank, (start, stop) in enumerate(zip(cuts, cuts[1:])):
                        if stop > start:
                            self.convert.dump_param_fragment(slice_dir, rank, dp_rank, name, flat, PARAMETER, start,
                                                             stop - start)
            tp_degree = max(shards) + 1 if shards else 0
            recorded = self.shard_shapes(document)
            per_tp_shapes = []
            for rank in range(tp_degree):
                shape = list(recorded.get(rank, [0]))
                if rank in shards and math.prod(shape) != shards[rank].numel():
                    shape = [shards[rank].numel()]
                per_tp_shapes.append(shape)
            uc_info = {
                self.constants.AFFINE_MAP: {
                    self.constants.AFFINE_MAP_PARAMS: {
                        f'^{re.escape(PARAMETER)}$': document
                    }
                }
            }
            self.convert.merge_tp_slices(uc_info, universal_dir, slice_dir, tp_degree, (PARAMETER, per_tp_shapes))
            written = os.path.join(universal_dir, PARAMETER, f'{state}.pt')
            if not os.path.isfile(written):
                return {
                    'ok': False,
                    'error': {
                        'type': 'StateDropped',
                        'message': f'merge_tp_slices returned without writing {state}.pt: it converts only '
                        'fp32, exp_avg and exp_avg_sq, so this state is left out of the universal checkpoint'
                    },
                    'convert': note
                }
            result = torch.load(written, weights_only=False)[self.constants.PARAM]
        except Exception as error:  # the step's refusal, in its own words
            return {'ok': False, 'error': refusal_with_place(error), 'convert': note}
        return {'ok': True, 'result': tensor_out(planted_bug(result)), 'convert': note}

    def answer(self, request):
        op = request.get('op')
        if op == 'hello':
            return {'ok': True, 'protocol': 1, 'implementation': self.implementation, 'ops': ['rebuild']}
        if op != 'rebuild':
            return {'ok': False, 'error': {'type': 'UnsupportedOperation', 'message': f'op {op!r} is not served: '
                                           'a conversion merges the ranks\' shards into the full tensor (rebuild) '
                                           'only'}}
        return self.rebuild(request)


def main():
    ds_common.serve_main(
        lambda: Server(*ds_common.load_checkpoint_modules('affine', 'ds_to_universal', 'constants')))


if __name__ == '__main__':
    main()
