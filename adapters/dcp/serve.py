#!/usr/bin/env python3
"""Serves PyTorch Distributed Checkpoint (torch.distributed.checkpoint, "DCP") over
shardcheck's target protocol (docs/protocol.md), so that `shardcheck campaign --target dcp`
judges DCP's own save planner, metadata, FileSystemWriter/Reader and load planner.

How a shard map becomes a DCP checkpoint. DCP describes a sharded tensor as boxes: each
chunk of the global tensor is (offsets, sizes) in F's coordinates, and each rank's local
tensor holds its chunks as boxes of itself. torch 2's CheckpointableTensor protocol
(torch/distributed/checkpoint/protocol.py) says exactly that for a plain local tensor:
`global_shape`, and per chunk `global_offsets`, `local_offsets`, `local_sizes`. So a rank of
the map is one local tensor, its shard viewed as `shard_shape`, and each of its pieces is
one chunk: the piece's source view read as a box of F, its dest view as a box of the shard.
A piece is such a box when its shape has F's (and the shard's) number of axes, its
strides are the row-major strides of F (source) and of the shard (dest) on every axis of
extent > 1, and it does not wrap past the end of an inner axis; its offset is then a
coordinate (a box past the end of the first axis, or overlapping another, is DCP's to
refuse: that is where a corrupted offset or extent lands). Anything else is a map
DCP cannot describe (strided or permuted views, a scale, a shard whose element count is
not its shard_shape's), answered with a refusal of type `unsupported` (docs/protocol.md,
"Refusals"), which a campaign tallies in its own "refused as" row, never as DCP's verdict.

What runs for each operation, with a fresh checkpoint folder per request:
  rebuild   every rank of the map saves its shard (DCP's save: one DefaultSavePlanner and
            one FileSystemWriter per rank, the global plan made and validated by rank 0's
            planner as torch.distributed's wrapper does, all in this process), then DCP's
            load reads the whole of F into one poisoned tensor.
  extract   F is saved whole (a plain tensor, one chunk), then the rank's local tensor is
            loaded through DCP's load planner from the map's chunks (resharding on load).
  reshard   the source map's ranks save as for rebuild, then each rank of the target map
            loads its local tensor as for extract.
Every tensor a load fills starts poisoned (shardcheck's poison patterns), so an element
DCP never writes shows as wrong, never as luck. A map the save side accepts is judged by
what the load returns; DCP has no scales and no digests, so those fields are not used.

$SHARDCHECK_DCP_SAVE=unvalidated writes the metadata without the save planner's global
check (_validate_global_plan), as a checkpoint written by other tools reaches DCP's
load: what the load side alone does with overlapping, uncovered or out-of-bounds chunks.
$SHARDCHECK_DCP_PLANT=1 flips the bits of one element of every tensor returned: the
planted bug that proves the harness sees a wrong tensor from this adapter.

The adapter is a fork server (adapters/protocol_server.py): torch imports once, in a
parent that answers nothing, and a crashed child is replaced by a fork of it.
"""

import base64
import importlib
import json
import math
import os
import shutil
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'adapters'))
import protocol_server  # noqa: E402 (found through the line above)

SETUP_HINT = ('make the torch 2 environment with `bash scripts/torch2-env.sh` and run the adapter '
              'on its Python ($SHARDCHECK_DCP_PYTHON)')

# The adapters' shared tables of raw-bit views and poison patterns.
BIT_VIEWS, POISON, WIDTH = protocol_server.BIT_VIEWS, protocol_server.POISON, protocol_server.WIDTH


def fail(name, message):
    """Start-up failure: the harness shows stderr's last lines and reports exit 2."""
    sys.stderr.write(f'{name} adapter: {message}\n')
    sys.stderr.flush()
    sys.exit(2)


def refuse_start(name, message):
    """A dependency is missing: the handshake is answered with a refusal that says what
    to run (the harness reports the target as one that cannot start, exit 2, with this
    message), and the process ends."""
    sys.stderr.write(f'{name} adapter: {message}\n')
    sys.stderr.flush()
    line = sys.stdin.readline()
    try:
        request_id = json.loads(line).get('id')
    except (ValueError, AttributeError):
        request_id = None
    answer = {'id': request_id, 'ok': False, 'error': {'type': 'SetupError', 'message': f'{name} adapter: {message}'}}
    sys.stdout.write(json.dumps(answer) + '\n')
    sys.stdout.flush()
    sys.exit(2)


def import_torch2(name, hint=None):
    """torch >= 2 and numpy, or a refused handshake that says which script makes them."""
    hint = hint or SETUP_HINT
    try:
        import numpy  # noqa: F401
        import torch
    except ImportError as error:
        refuse_start(name, f'{error} (Python {sys.executable}); {hint}')
    if int(torch.__version__.split('.')[0]) < 2:
        refuse_start(name, f'torch {torch.__version__} at {sys.executable} is older than 2; {hint}')
    return torch


torch = import_torch2('dcp') if __name__ == '__main__' else None


def bind_torch(module):
    """For an adapter that imports this file as a module (megatron): its torch."""
    global torch
    torch = module


try:
    import numpy as np
except ImportError:  # said by import_torch2, in the handshake's answer
    np = None


class NotExpressible(Exception):
    """The map describes something DCP has no words for (see the module docstring)."""


class MapFormatError(Exception):
    """The map's JSON does not read as a map at all (contract 2)."""


signed = protocol_server.signed


def torch_dtype(name):
    return torch.bool if name == 'bool' else getattr(torch, name)


def dtype_name(dtype):
    return 'bool' if dtype == torch.bool else str(dtype).replace('torch.', '')


def poisoned(shape, name):
    """A tensor of `shape` and dtype `name` whose every element is the poison pattern."""
    tensor = torch.empty(shape, dtype=torch_dtype(name))
    if tensor.numel() > 0:
        view = BIT_VIEWS[name]
        tensor.view(getattr(torch, view)).fill_(signed(POISON[name], view))
    return tensor


def tensor_in(doc):
    name = doc['dtype']
    raw = np.frombuffer(base64.b64decode(doc['data']), dtype=BIT_VIEWS[name]).copy()
    return torch.from_numpy(raw).view(torch_dtype(name)).reshape([int(extent) for extent in doc['shape']])


PLANT = os.environ.get('SHARDCHECK_DCP_PLANT', '') not in ('', '0')


def tensor_out(tensor, plant=None):
    """The protocol's TENSOR of `tensor`; with the planted bug on (`plant`, default
    $SHARDCHECK_DCP_PLANT), the bits of its first element are flipped."""
    name = dtype_name(tensor.dtype)
    flat = tensor.detach().contiguous().reshape(-1).clone()
    bits = flat.view(getattr(torch, BIT_VIEWS[name]))
    if (PLANT if plant is None else plant) and bits.numel() > 0:
        bits[0] = torch.bitwise_not(bits[0]) if name != 'bool' else 1 - bits[0]
    return {'dtype': name, 'shape': [int(flat.numel())], 'data': base64.b64encode(bits.numpy().tobytes()).decode('ascii')}


# ---------------------------------------------------------------------------------------
# The map (contract 2), read strictly, and its pieces as DCP boxes.

def map_document(request, key='map'):
    """The map's JSON value; a case that holds text is parsed with Python's json module,
    as a checkpoint's map would be."""
    try:
        if f'{key}_text' in request:
            return json.loads(request[f'{key}_text'])
        return request[key]
    except (ValueError, KeyError) as error:
        raise MapFormatError(f'{key} does not read as JSON: {error}') from error


def as_int(value, what):
    """A JSON integer. DCP reads no map, so this reading is the adapter's: strict, so that
    a map whose text is not the format (a quoted or fractional number) is refused here,
    kind format, rather than converted and charged to DCP."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise MapFormatError(f'{what} is {value!r}, not an integer')
    if not -(1 << 63) <= value < 1 << 63:
        # torch's sizes and offsets are 64-bit: such a number is no DCP metadata.
        raise MapFormatError(f'{what} is {value}, outside 64 bits')
    return value


def int_list(value, what):
    if not isinstance(value, list):
        raise MapFormatError(f'{what} is not a list')
    return [as_int(v, f'{what}[{i}]') for i, v in enumerate(value)]


def row_major(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return list(reversed(strides))


def coordinates(offset, shape):
    """`offset` as a coordinate in row-major `shape`: the last axes take what fits and the
    first takes the rest, so a box placed past the end shows as past the end of axis 0.
    An axis of extent 0 takes nothing."""
    coords = [0] * len(shape)
    for axis in range(len(shape) - 1, 0, -1):
        if shape[axis] > 0:
            coords[axis] = offset % shape[axis]
            offset //= shape[axis]
    if shape:
        coords[0] = offset
    return coords


def box_of(shape, offset, strides, space, side):
    """The coordinate where the view (shape, offset, strides) starts, when the view is a box
    of the row-major `space`; NotExpressible otherwise."""
    if len(shape) != len(space) or len(strides) != len(shape):
        raise NotExpressible(f'a {side} view of {len(shape)} axes is no box of a {len(space)}-axis tensor')
    expected = row_major(space)
    for axis, extent in enumerate(shape):
        if extent > 1 and strides[axis] != expected[axis]:
            raise NotExpressible(f'the {side} strides {strides} are not the row-major strides {expected} '
                                 f'of {space}: DCP chunks are boxes')
    if offset < 0 or any(extent < 0 for extent in shape):
        raise NotExpressible(f'a {side} view with a negative offset or extent')
    coords = coordinates(offset, space)
    # Past the end of an inner axis the view wraps into the next row: its addresses are no
    # box (the box of that offset and shape would stick out of the tensor, which the view
    # does not). Past the end of the first axis the view leaves the tensor: a box that does,
    # for DCP to judge.
    for axis in range(1, len(space)):
        if coords[axis] + shape[axis] > space[axis]:
            raise NotExpressible(f'the {side} view of shape {shape} at {coords} wraps past the end of axis {axis} '
                                 f'of {space}: no box')
    return coords


class Rank:
    """One rank of a map: its shard shape and its pieces as (global box, local box)."""

    def __init__(self, rank, shard_shape, chunks):
        self.rank = rank
        self.shard_shape = shard_shape
        self.chunks = chunks  # [(global_offset, local_offset, sizes)]


def empty_chunk(logical, shard_shape):
    """[the empty chunk at F's far corner], or [] where F is 0-d: a 0-d box is one
    element, so a 0-d F has no empty chunk (a rank without one saves nothing)."""
    if not logical:
        return []
    return [(list(logical), [0] * len(shard_shape), [0] * len(logical))]


def read_map(doc):
    """(logical_shape, {rank: Rank}) of a map document, or MapFormatError/NotExpressible."""
    if not isinstance(doc, dict):
        raise MapFormatError('the map is not a JSON object')
    logical = int_list(doc.get('logical_shape'), 'logical_shape')
    if any(extent < 0 for extent in logical):
        raise MapFormatError(f'logical_shape {logical} has a negative extent')
    ranks_doc = doc.get('ranks')
    if not isinstance(ranks_doc, dict):
        raise MapFormatError('ranks is not an object')
    ranks = {}
    for key, entry in ranks_doc.items():
        if not (isinstance(key, str) and key.isdigit() and key.isascii() and (key == '0' or key[0] != '0')):
            raise MapFormatError(f'rank key {key!r} is not a rank id')
        rank = int(key)
        if rank < 0:
            raise MapFormatError(f'rank {rank} is negative')
        if not isinstance(entry, dict) or not isinstance(entry.get('pieces'), list):
            raise MapFormatError(f'rank {key}: no list of pieces')
        pieces = entry['pieces']
        if 'shard_shape' in entry:
            shard_shape = int_list(entry['shard_shape'], f'rank {key} shard_shape')
        elif not pieces:
            shard_shape = [0]
        else:
            raise MapFormatError(f'rank {key} lists pieces but no shard_shape')
        if any(extent < 0 for extent in shard_shape):
            raise MapFormatError(f'rank {key} shard_shape {shard_shape} has a negative extent')
        chunks = []
        for index, piece in enumerate(pieces):
            where = f'rank {key} piece {index}'
            if not isinstance(piece, dict):
                raise MapFormatError(f'{where} is not an object')
            shape = int_list(piece.get('shape'), f'{where} shape')
            source, dest = piece.get('source'), piece.get('dest')
            if not (isinstance(source, list) and len(source) == 2 and isinstance(dest, list) and len(dest) == 2):
                raise MapFormatError(f'{where}: source and dest must be [offset, [strides]]')
            src_offset, src_strides = as_int(source[0], f'{where} source offset'), int_list(source[1], f'{where} source strides')
            dst_offset, dst_strides = as_int(dest[0], f'{where} dest offset'), int_list(dest[1], f'{where} dest strides')
            int_list(piece.get('locations'), f'{where} locations')
            scale = piece.get('scale', 1.0)
            if isinstance(scale, bool) or not isinstance(scale, (int, float)):
                raise MapFormatError(f'{where} scale is {scale!r}, not a number')
            if scale != 1:
                raise NotExpressible(f'{where} has scale {scale!r}: DCP stores no scale')
            if any(extent < 0 for extent in shape):
                raise NotExpressible(f'{where} has a negative extent')
            if math.prod(shape) == 0:
                # An empty piece holds nothing: it becomes the empty chunk DTensor makes for
                # an empty local shard, at F's far corner. (DeepSpeed's builders place it
                # where its block would start; as a chunk there, DCP's storage index, keyed
                # by a chunk's offset, would give it the entry of the chunk that starts at
                # the same place, which then fails to load: docs/guide/targets.md.)
                chunks.extend(empty_chunk(logical, shard_shape))
                continue
            global_offset = box_of(shape, src_offset, src_strides, logical, 'source')
            local_offset = box_of(shape, dst_offset, dst_strides, shard_shape, 'dest')
            chunks.append((global_offset, local_offset, shape))
        if not chunks:
            # A rank that holds nothing still has a local tensor, an empty one, as every
            # rank of a DTensor does: the same empty chunk (so that even an F without
            # elements is in the checkpoint).
            chunks.extend(empty_chunk(logical, shard_shape))
        ranks[rank] = Rank(rank, shard_shape, chunks)
    return logical, ranks


# ---------------------------------------------------------------------------------------
# DCP: local tensors, the multi-rank save, the load.

FQN = 'param'


def checkpointable(local, global_shape, chunks):
    """`local` declared, through DCP's CheckpointableTensor protocol, as the chunks of F
    listed in `chunks`; DCP's own planners take it from there."""
    local.global_shape = tuple(global_shape)
    local.global_offsets = tuple(tuple(c[0]) for c in chunks)
    local.local_offsets = tuple(tuple(c[1]) for c in chunks)
    local.local_sizes = tuple(tuple(c[2]) for c in chunks)
    return local


def save_ranks(path, state_dicts, validate=True, planner_class=None):
    """DCP's save of one state dict per rank (list index = rank in the process group), as
    torch.distributed.checkpoint.save runs it on that many processes: each rank plans
    locally, rank 0's planner makes (and validates) the global plan and the metadata, each
    rank writes its items, and rank 0 writes .metadata. Here the ranks take turns in one
    process; what they exchange is what the collectives would carry."""
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.default_planner import DefaultSavePlanner, create_default_global_save_plan

    count = len(state_dicts)
    writers = [FileSystemWriter(path, sync_files=False) for _ in range(count)]
    planners = [(planner_class or DefaultSavePlanner)() for _ in range(count)]
    local_plans = []
    for i in range(count):
        planners[i].set_up_planner(state_dict=state_dicts[i], storage_meta=writers[i].storage_meta(),
                                   is_coordinator=i == 0)
        writers[i].set_up_storage_writer(i == 0, rank=i, use_collectives=True)
        local_plans.append(writers[i].prepare_local_plan(planners[i].create_local_plan()))
    if validate:
        global_plans, metadata = planners[0].create_global_plan(local_plans)
    else:
        # The plan without DefaultSavePlanner's validation: deduplicated and merged as it
        # does, so only the check is left out.
        deduped = planners[0]._dedup_save_plans(local_plans)
        global_plans, metadata = create_default_global_save_plan(deduped)
    global_plans = writers[0].prepare_global_plan(global_plans)
    results = []
    for i in range(count):
        future = writers[i].write_data(planners[i].finish_plan(global_plans[i]), planners[i])
        future.wait()
        results.append(future.value())
    writers[0].finish(metadata=metadata, results=results)


def load(path, target):
    """DCP's load of {FQN: target} (a plain tensor or a checkpointable one), in place."""
    import torch.distributed.checkpoint as dcp
    dcp.load({FQN: target}, storage_reader=dcp.FileSystemReader(path), no_dist=True)


def shard_tensor(rank_entry, shards, logical, dtype):
    """The local tensor of a rank that saves: its supplied shard, viewed as the map says."""
    shard = shards.get(rank_entry.rank)
    if shard is None:
        raise NotExpressible(f'rank {rank_entry.rank} lists pieces, but no shard was supplied for it')
    if shard.numel() != math.prod(rank_entry.shard_shape):
        raise NotExpressible(f'rank {rank_entry.rank} holds {shard.numel()} elements, but the map gives it '
                             f'shard_shape {rank_entry.shard_shape}: DCP keeps no shard shape to disagree with')
    if shard.dtype != torch_dtype(dtype):
        raise NotExpressible(f'rank {rank_entry.rank} holds {dtype_name(shard.dtype)} data, not {dtype}')
    return checkpointable(shard.reshape(rank_entry.shard_shape).clone(), logical, rank_entry.chunks)


def saved_from_ranks(path, logical, ranks, shards, dtype, validate):
    order = sorted(ranks)
    save_ranks(path, [{FQN: shard_tensor(ranks[r], shards, logical, dtype)} for r in order], validate)


def loaded_rank(path, logical, rank_entry, dtype):
    """Rank `rank_entry`'s shard, loaded from the checkpoint at `path` into a poisoned
    local tensor through DCP's load planner."""
    local = checkpointable(poisoned(rank_entry.shard_shape, dtype), logical, rank_entry.chunks)
    load(path, local)
    return local


def workdir():
    """A fresh checkpoint folder for one request (removed after it), in memory where
    /dev/shm exists: the writes are DCP's, the disk's speed is not what is judged."""
    base = os.environ.get('SHARDCHECK_DCP_TMPDIR') or ('/dev/shm' if os.path.isdir('/dev/shm') else None)
    return tempfile.mkdtemp(prefix='shardcheck-dcp-', dir=base)


class Server:

    def __init__(self, validate=True):
        self.validate = validate
        self.implementation = (f'PyTorch {torch.__version__} torch.distributed.checkpoint (FileSystemWriter, '
                               f'DefaultSavePlanner/DefaultLoadPlanner'
                               f'{"" if validate else ", save-side validation off"})')

    def rebuild(self, request, path):
        logical, ranks = read_map(map_document(request))
        dtype = request['dtype']
        shards = {int(rank): tensor_in(doc) for rank, doc in request['shards'].items()}
        if not ranks:
            raise NotExpressible('a map without ranks: no rank saves anything')
        saved_from_ranks(path, logical, ranks, shards, dtype, self.validate)
        full = poisoned(logical, dtype)
        load(path, full)
        return {'ok': True, 'result': tensor_out(full)}

    def extract(self, request, path):
        logical, ranks = read_map(map_document(request))
        dtype = request['dtype']
        full = tensor_in(request['full'])
        if full.numel() != math.prod(logical):
            raise NotExpressible(f'F has {full.numel()} elements, the map\'s logical_shape {logical} '
                                 f'{math.prod(logical)}: the checkpoint cannot be of this map')
        rank = as_int(request['rank'], 'rank')
        if rank not in ranks:
            raise NotExpressible(f'rank {rank} is not in the map: it has no local tensor to load')
        save_ranks(path, [{FQN: full.reshape(logical).clone()}], self.validate)
        return {'ok': True, 'result': tensor_out(loaded_rank(path, logical, ranks[rank], dtype))}

    def reshard(self, request, path):
        logical, source = read_map(map_document(request))
        target_logical, target = read_map(map_document(request, 'target_map'))
        dtype = request['dtype']
        shards = {int(rank): tensor_in(doc) for rank, doc in request['shards'].items()}
        if not source:
            raise NotExpressible('a source map without ranks: no rank saves anything')
        saved_from_ranks(path, logical, source, shards, dtype, self.validate)
        result = {str(r): tensor_out(loaded_rank(path, target_logical, target[r], dtype)) for r in sorted(target)}
        return {'ok': True, 'result': result}

    def answer(self, request):
        op = request.get('op')
        if op == 'hello':
            return {'ok': True, 'protocol': 1, 'implementation': self.implementation,
                    'ops': ['check', 'rebuild', 'extract', 'reshard']}
        if op not in ('check', 'rebuild', 'extract', 'reshard'):
            return {'ok': False, 'error': {'type': 'UnsupportedOperation', 'message': f'op {op!r} is not served'}}
        path = workdir()
        try:
            if op == 'check':
                return self.check(request, path)
            return getattr(self, op)(request, path)
        except Exception as error:  # DCP's refusal (or the map's), in its own words
            return {'ok': False, 'error': refusal(error)}
        except BaseException as error:
            # DCP's CheckpointException (a failure on a rank during save or load, the
            # rank's traceback in its text) is a BaseException.
            if type(error).__name__ != 'CheckpointException':
                raise
            return {'ok': False, 'error': refusal(error)}
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def check(self, request, path):
        """The map alone, as DCP sees one: every rank saves zeros through it; the save's
        planner checks (bounds, overlap, volume) are DCP's whole map check."""
        logical, ranks = read_map(map_document(request))
        if not ranks:
            raise NotExpressible('a map without ranks: no rank saves anything')
        zeros = {r: torch.zeros(math.prod(ranks[r].shard_shape), dtype=torch.float32) for r in ranks}
        saved_from_ranks(path, logical, ranks, zeros, 'float32', True)
        return {'ok': True}


# DCP's refusals as shardcheck's error kinds (README, "Error kinds"), first match wins:
# (type, message substring, kind). The save planner's validation names every problem it
# found, in the order it checks them (bounds, overlap, volume): the first one names the kind.
REFUSAL_KINDS = [
    ('ValueError', 'out of bounds chunk', 'bounds'),
    ('ValueError', 'overlapping chunks', 'twice'),
    ('ValueError', 'invalid fill', 'uncovered'),
    ('ValueError', 'is outside global_shape', 'bounds'),
    ('ValueError', 'is outside tensor shape', 'bounds'),
    ('ValueError', 'Size mismatch between saved', 'shape'),
    ('MapFormatError', '', 'format'),
]


def refusal(error):
    """The error in DCP's words. A CheckpointException wraps what failed on each rank
    (with a traceback in its text): the first rank's error is the message, and it names
    the kind."""
    if isinstance(error, NotExpressible):
        # The protocol's word for a case beyond what the implementation can express: a
        # campaign tallies it in its `unsupported` row, never as a refusal of a valid map.
        return {'type': 'unsupported', 'message': f'{type(error).__name__}: {error}'}
    cause = error
    failures = getattr(error, 'failures', None)
    if type(error).__name__ == 'CheckpointException' and isinstance(failures, dict) and failures:
        inner = failures[min(failures)]
        cause = inner[0] if isinstance(inner, tuple) else inner
    out = {'type': type(error).__name__, 'message': f'{type(cause).__name__}: {cause}' if cause is not error else str(error)}
    if not out['message']:
        out['message'] = repr(error)
    for rule_type, substring, kind in REFUSAL_KINDS:
        if type(cause).__name__ == rule_type and substring in str(cause):
            out['kind'] = kind
            break
    return out


def serve_forever(server, protocol):
    def serve(requests):
        for line in requests:
            request = json.loads(line)
            response = server.answer(request)
            if request.get('op') == 'hello':
                response['crash_reports'] = True  # as a fork server's child
            response['id'] = request.get('id')
            protocol.write(json.dumps(response) + '\n')
            protocol.flush()

    protocol_server.fork_server(serve, protocol.fileno())


def main():
    # The protocol owns stdout; anything torch prints goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), 'w', encoding='utf-8')
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    mode = os.environ.get('SHARDCHECK_DCP_SAVE', 'validated')
    if mode not in ('validated', 'unvalidated'):
        fail('dcp', f'SHARDCHECK_DCP_SAVE must be validated or unvalidated, not {mode!r}')
    importlib.import_module('torch.distributed.checkpoint')  # once, in the parent
    serve_forever(Server(validate=mode == 'validated'), protocol)


if __name__ == '__main__':
    main()
