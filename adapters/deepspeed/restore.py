#!/usr/bin/env python3
"""Serves DeepSpeed's universal checkpoint *restore* step over shardcheck's target protocol
(docs/protocol.md) as `extract`: `shardcheck campaign --target deepspeed-restore` judges the
code a job runs when it resumes from a universal checkpoint, not affine.py alone.

The step is deepspeed/checkpoint/universal_checkpoint.py's load_hp_checkpoint_state, which
enable_universal_checkpoint binds to every parameter. For each `<state>.pt` in a
parameter's folder it loads the full tensor and cuts this rank's part out of it. A
parameter whose layer recorded an affine map (AutoTP's restore metadata,
`conversion.affine_map`) goes through the map only when the map lists the rank and its
numel equals the full tensor's; otherwise the step goes on, saying nothing, to the legacy
path (a chunk of the full tensor along dim 0, the category path conversion no longer
records for a mapped parameter). The map path scales by SCALE_POWER_BY_STATE.get(state, 1):
a state DeepSpeed does not name gets the parameter's power.

Each extract request is one resume of one parameter, driven as a job drives it:
  - the full tensor is written with torch.save as `<state>.pt`, {'param': F}, alone in a
    folder of this process's own (ds_common.scratch_directory);
  - the state is the optimizer state of the request's scale power, Adam's name or another
    optimizer's that DeepSpeed does not know (Muon's momentum_buffer), by a hash of the
    map (ds_common.state_for);
  - the live parameter (LiveParameter) is what load_hp_checkpoint_state reads of one: its
    shape, which is the shard shape the map gives the rank (the layer that recorded the map
    made the parameter), or an even share of F for a rank the map does not list; its
    AutoTP metadata, which holds the map and nothing else; and its ZeRO fragment, the whole
    shard (one data-parallel rank), whose fp32 destination starts poisoned;
  - tp_world_size is one more than the highest rank the map or the request names.
The answer is what the step left for the state: the fp32 fragment, or the optimizer
fragment it stored. Which path the step took, and the power it applied, are said in the
answer's `restore` object; where the step did not go through the map as the map and the
state ask (the legacy path, or a state's default power on a scaled map), the answer's
`fallback` says so, and a campaign counts those extracts as `extract-after-fallback`. See
docs/guide/targets.md.
"""

import math
import os

import ds_common
from ds_common import (PoisonedTorch, map_document, planted_bug, refusal, state_for, tensor_in, tensor_out, torch)


def with_fallback(answer, fallback):
    if fallback is not None:
        answer['fallback'] = fallback
    return answer


class Fragment:
    """The parameter's ZeRO fragment (DeepSpeed's tensor_fragment): where in its TP shard
    this data-parallel rank's part starts and how long it is, and the fp32 tensor the
    restored parameter is copied into. That tensor is made when the step asks for it (after
    it has cut its slice), so a corrupted shard shape costs no allocation."""

    def __init__(self, numel, dtype, device, poisoned):
        self.lp_fragment_address = type('FragmentAddress', (), {'start': 0, 'numel': numel})()
        self.optim_fragment = {}
        self._dtype = dtype
        self._device = device
        self._poisoned = poisoned
        self.hp_fragment = None

    def get_hp_fragment(self):
        if self.hp_fragment is None:
            self.hp_fragment = self._poisoned.empty(self.lp_fragment_address.numel, dtype=self._dtype,
                                                    device=self._device)
        return self.hp_fragment


class LiveParameter:
    """What load_hp_checkpoint_state reads of the parameter it restores into."""

    def __init__(self, shape, fragment, meta_key, meta):
        self.shape = torch.Size(shape)
        self._numel = math.prod(shape)
        self._hp_mapping = fragment
        setattr(self, meta_key, meta)

    def numel(self):
        return self._numel


class Server:

    def __init__(self, modules, implementation):
        self.affine, self.universal, self.constants = modules
        self.implementation = f'{implementation}: universal_checkpoint.load_hp_checkpoint_state'
        self.torch = PoisonedTorch()
        # Every tensor the step and the map allocate comes from the poisoned torch.
        self.affine.torch = self.universal.torch = self.torch
        self.folder = ds_common.scratch_directory('deepspeed-restore')
        self.map_extracts = []  # the scale powers the map path extracted with, this request
        self._observe_map_extract()

    def _observe_map_extract(self):
        """Notes each ParamAffineMap.extract the step makes (and its power), so that the
        answer can say which path it took. The call itself is DeepSpeed's, unchanged."""
        extract = self.affine.ParamAffineMap.extract
        noted = self.map_extracts

        def observed(affine_map, full_param, rank, scale_power=1):
            noted.append(scale_power)
            return extract(affine_map, full_param, rank, scale_power)

        self.affine.ParamAffineMap.extract = observed

    def read_map(self, document):
        """The map as DeepSpeed reads it, or None where it cannot (the step then refuses it
        with DeepSpeed's own error)."""
        try:
            return self.affine.ParamAffineMap.from_dict(document)
        except Exception:
            return None

    @staticmethod
    def live_shape(affine_map, rank, full):
        """The shard shape the map gives `rank`, or an even share of F for a rank it does not
        list (or a map DeepSpeed cannot read); and tp_world_size."""
        shapes = affine_map.shard_shapes if affine_map is not None else {}
        world = max(list(shapes) + [rank]) + 1
        if rank in shapes:
            return list(shapes[rank]), world
        return [full.numel() // world if world > 0 else 0], world

    def extract(self, request):
        rank = int(request['rank'])
        power = int(request.get('scale_power', 1))
        state, optimizer, known = state_for(request, power)
        note = {'state': state, 'optimizer': optimizer, 'state_known_to_deepspeed': known}
        fallback = None
        try:
            document = map_document(request)
            full = tensor_in(request['full'])
            affine_map = self.read_map(document)
            shape, world = self.live_shape(affine_map, rank, full)
            scaled = affine_map is not None and any(
                piece.scale != 1.0 for pieces in affine_map.pieces_by_rank.values() for piece in pieces)
            ds_common.empty_directory(self.folder)
            torch.save({self.constants.PARAM: full}, os.path.join(self.folder, f'{state}.pt'))
            fragment = Fragment(math.prod(shape), full.dtype, full.device, self.torch)
            meta = {'conversion': {'affine_map': document}}
            parameter = LiveParameter(shape, fragment, self.constants.DS_AUTOTP_UC_META, meta)
            self.universal.enable_universal_checkpoint([parameter])
            del self.map_extracts[:]
            try:
                parameter.load_hp_checkpoint_state(self.folder, rank, world)
            finally:
                note['path'] = 'affine_map' if self.map_extracts else 'legacy_category'
                if self.map_extracts:
                    note['scale_power_applied'] = self.map_extracts[-1]
                    # A scaled piece moved with another power than the state's: what the
                    # request's power would have refused (or scaled otherwise) went through.
                    note['mis_scaled'] = scaled and self.map_extracts[-1] != power
                fallback = self.fallback(note, affine_map, rank, full, power)
            if state == self.constants.FP32_WEIGHT_KEY:
                result = fragment.hp_fragment
            else:
                result = fragment.optim_fragment[state]
        except Exception as error:  # the step's refusal, in its own words
            return with_fallback({'ok': False, 'error': refusal(error), 'restore': note}, fallback)
        return with_fallback({'ok': True, 'result': tensor_out(planted_bug(result)), 'restore': note}, fallback)

    @staticmethod
    def fallback(note, affine_map, rank, full, power):
        """The protocol's `fallback` (docs/protocol.md) where the step did not restore through
        the map as the map and the state ask, or None: the silent legacy path (the map does
        not list the rank, or its numel is not F's), or the map path with the power
        SCALE_POWER_BY_STATE gives a state it does not name (1) on a scaled map where the
        state's own power differs. The harness counts such answers apart
        (extract-after-fallback) and judges them like any other."""
        if note['path'] == 'legacy_category':
            if affine_map is None:
                return None  # DeepSpeed's own reading of the map failed: its refusal, no path
            if rank not in affine_map.shard_shapes:
                why = f'the map does not list rank {rank}'
            else:
                why = f'the map\'s logical numel is not F\'s ({full.numel()})'
            return {'type': 'LegacyCategoryPath',
                    'message': f'{why}: the step cut the legacy chunk of F along dim 0 instead, saying nothing'}
        if note.get('mis_scaled'):
            return {'type': 'DefaultScalePower',
                    'message': f'state {note["state"]!r} is not in SCALE_POWER_BY_STATE: the step scaled with power '
                               f'{note["scale_power_applied"]} where the state\'s is {power}'}
        return None

    def answer(self, request):
        op = request.get('op')
        if op == 'hello':
            return {'ok': True, 'protocol': 1, 'implementation': self.implementation, 'ops': ['extract']}
        if op != 'extract':
            return {'ok': False, 'error': {'type': 'UnsupportedOperation', 'message': f'op {op!r} is not served: '
                                           'a restore cuts a rank\'s shard from the full tensor (extract) only'}}
        return self.extract(request)


def main():
    ds_common.serve_main(
        lambda: Server(*ds_common.load_checkpoint_modules('affine', 'universal_checkpoint', 'constants')))


if __name__ == '__main__':
    main()
