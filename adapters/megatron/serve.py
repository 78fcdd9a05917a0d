#!/usr/bin/env python3
"""Serves Megatron-Core's distributed checkpointing (megatron.core.dist_checkpointing) and
its refit planner (megatron.core.resharding) over shardcheck's target protocol
(docs/protocol.md), so that `shardcheck campaign --target megatron` judges them.

A shard map becomes Megatron's description of a sharded parameter: one ShardedTensor per
piece (key `param`, the piece's box of F as `global_offset` and `local_shape`), the
piece's rank the process that holds it, and `replica_id` 0 on the first rank the piece's
`locations` name (the main replica, the one Megatron saves) and the rank's place in that
list elsewhere. When every piece has one shape that divides F, the set is a regular grid
(`axis_fragmentations` = F's extents over that shape, as ShardedTensor.from_rank_offsets
makes it); otherwise `axis_fragmentations` is None, an irregular sharding, which Megatron
leaves to DCP to check. Pieces must be boxes of F and of their shard, as for the `dcp`
target (adapters/dcp/serve.py, whose conversion and DCP code this adapter uses); an empty
piece holds nothing and is left out (Megatron divides a global offset by the local shape).

  check     validate_sharding_integrity over every rank's ShardedTensors, as rank 0 runs
            it after gathering them (its `torch.distributed.get_rank() != 0` gate answered
            0 here: one process plays every rank): acceptance or CheckpointingException.
  rebuild   that check, then what Megatron's torch_dist strategy saves, the main replicas
            only, written by DCP (one MCoreSavePlanner and FileSystemWriter per rank), and
            F loaded whole.
  extract   that check (dist_checkpointing.load validates the access pattern too), F saved
            whole, and the rank's ShardedTensors loaded into its poisoned shard.
  reshard   $SHARDCHECK_MEGATRON_RESHARD chooses the path:
              checkpoint (default): both maps checked, the source's main replicas saved,
                each target rank's ShardedTensors loaded (resharding through a checkpoint);
              refit: megatron.core.resharding's planner (build_plan_from_rosters, pure and
                without collectives), for source and target maps that are its layouts
                (replicated, or equal tensor-parallel blocks along one axis, one per rank
                or one of each of several sub-tensors: partition_sizes), its receive
                operations executed with torch into poisoned shards.
What needs more than one process or a GPU is not run: Megatron's save and load wrappers
(dist_checkpointing.save/load) gather metadata with torch.distributed collectives, and the
refit's executor (execute_reshard_plan) sends through a process group; the adapter runs
the same planners and checks on the metadata those collectives would carry.

$SHARDCHECK_MEGATRON_PLANT=1 flips one element of every tensor returned (the planted bug).
"""

import importlib.util
import math
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load_dcp_adapter():
    """adapters/dcp/serve.py as a module: its map reading, tensors and DCP save/load."""
    spec = importlib.util.spec_from_file_location('shardcheck_dcp_adapter', os.path.join(REPO, 'adapters', 'dcp', 'serve.py'))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


dcpa = load_dcp_adapter()
SETUP_HINT = dcpa.SETUP_HINT.replace('SHARDCHECK_DCP_PYTHON', 'SHARDCHECK_MEGATRON_PYTHON')
torch = dcpa.import_torch2('megatron', SETUP_HINT)
dcpa.bind_torch(torch)

try:
    import warnings
    with warnings.catch_warnings():
        # Megatron warns at import about the optional fused kernels it falls back from.
        warnings.simplefilter('ignore')
        import megatron.core
        from megatron.core.dist_checkpointing import ShardedTensor
        from megatron.core.dist_checkpointing import validation
        from megatron.core.dist_checkpointing.strategies.torch import MCoreSavePlanner
        from megatron.core.resharding import planner as refit_planner
        from megatron.core.resharding.utils import ParameterMetadata
except ImportError as error:
    dcpa.refuse_start('megatron', f'{error} (Python {sys.executable}); {SETUP_HINT}')

VERSION = getattr(megatron.core, '__version__', None) or getattr(
    sys.modules.get('megatron.core.package_info'), '__version__', '?')
PLANT = os.environ.get('SHARDCHECK_MEGATRON_PLANT', '') not in ('', '0')
KEY = dcpa.FQN


def replica_id(rank, locations):
    """Megatron's replica_id for a copy on `rank` of a block held by `locations`: 0 (the
    main replica, the one saved) on the first holder, the rank's place in the list on the
    others, and past the list on a rank the list does not name."""
    holders = sorted(locations)
    if rank in holders:
        return holders.index(rank)
    return len(holders)


class Piece:
    def __init__(self, rank, global_offset, local_offset, shape, locations):
        self.rank, self.global_offset, self.local_offset = rank, global_offset, local_offset
        self.shape, self.locations = shape, locations


def read_pieces(doc):
    """(logical_shape, {rank: dcp Rank}, [Piece]) of a map; empty pieces left out."""
    logical, ranks = dcpa.read_map(doc)
    pieces = []
    for key, entry in doc['ranks'].items():
        rank = int(key)
        for piece in entry['pieces']:
            shape = piece['shape']
            if math.prod(shape) == 0:
                continue
            global_offset = dcpa.coordinates(piece['source'][0], logical)
            local_offset = dcpa.coordinates(piece['dest'][0], ranks[rank].shard_shape)
            pieces.append(Piece(rank, global_offset, local_offset, list(shape), list(piece['locations'])))
    return logical, ranks, pieces


def regular_grid(logical, pieces):
    """axis_fragmentations when every piece has one shape that divides F, else None."""
    if not pieces:
        return None
    shape = pieces[0].shape
    if any(p.shape != shape for p in pieces) or any(extent == 0 or full % extent for full, extent in zip(logical, shape)):
        return None
    return tuple(full // extent for full, extent in zip(logical, shape))


def sharded_tensors(logical, ranks, pieces, dtype):
    """Every rank's ShardedTensors (no data: what the metadata gather carries), in the
    order of the ranks (a process group's rank i is the map's i-th rank id)."""
    grid = regular_grid(logical, pieces)
    by_rank = {rank: [] for rank in ranks}
    for p in pieces:
        by_rank[p.rank].append(
            ShardedTensor(KEY, None, dcpa.torch_dtype(dtype), tuple(p.shape), tuple(logical), tuple(p.global_offset),
                          grid, replica_id(p.rank, p.locations)))
    return [by_rank[rank] for rank in sorted(by_rank)]


def validate(logical, ranks, pieces, dtype):
    """validate_sharding_integrity, run as global rank 0 runs it after the gather."""
    metadata = sharded_tensors(logical, ranks, pieces, dtype)
    get_rank = torch.distributed.get_rank
    torch.distributed.get_rank = lambda group=None: 0
    try:
        validation.validate_sharding_integrity(metadata)
    finally:
        torch.distributed.get_rank = get_rank


def main_replica_ranks(logical, ranks, pieces):
    """The ranks as Megatron's save sees them: each keeps only its main-replica pieces."""
    kept = {}
    for rank, entry in ranks.items():
        chunks = [(p.global_offset, p.local_offset, p.shape) for p in pieces
                  if p.rank == rank and replica_id(rank, p.locations) == 0]
        if not chunks:
            chunks = dcpa.empty_chunk(logical, entry.shard_shape)
        kept[rank] = dcpa.Rank(rank, entry.shard_shape, chunks)
    return kept


def save_main_replicas(path, logical, ranks, pieces, shards, dtype):
    saving = main_replica_ranks(logical, ranks, pieces)
    order = sorted(saving)
    state_dicts = [{KEY: dcpa.shard_tensor(saving[r], shards, logical, dtype)} for r in order]
    save_ranks_with(path, state_dicts)


def save_ranks_with(path, state_dicts):
    """DCP's multi-rank save (adapters/dcp/serve.py) with the planner Megatron's torch_dist
    strategy uses: MCoreSavePlanner, without flattening (its state dicts are flat), and
    the coordinator's global plan (the decentralised one skips the exchange, not a check)."""
    dcpa.save_ranks(path, state_dicts,
                    planner_class=lambda: MCoreSavePlanner(flatten_state_dict=False,
                                                           can_run_decentralized_global_plan=False))


class Server:

    def __init__(self, refit):
        self.refit = refit
        self.implementation = (f'Megatron-Core {VERSION} dist_checkpointing (validate_sharding_integrity, '
                               f'torch_dist through PyTorch {torch.__version__} DCP)'
                               + (', megatron.core.resharding planner for reshard' if refit else ''))

    def rebuild(self, request, path):
        logical, ranks, pieces = read_pieces(dcpa.map_document(request))
        dtype = request['dtype']
        if not ranks:
            raise dcpa.NotExpressible('a map without ranks')
        validate(logical, ranks, pieces, dtype)
        shards = {int(rank): dcpa.tensor_in(doc) for rank, doc in request['shards'].items()}
        save_main_replicas(path, logical, ranks, pieces, shards, dtype)
        full = dcpa.poisoned(logical, dtype)
        dcpa.load(path, full)
        return {'ok': True, 'result': dcpa.tensor_out(full, PLANT)}

    def extract(self, request, path):
        logical, ranks, pieces = read_pieces(dcpa.map_document(request))
        dtype = request['dtype']
        rank = dcpa.as_int(request['rank'], 'rank')
        if rank not in ranks:
            raise dcpa.NotExpressible(f'rank {rank} is not in the map: it has no ShardedTensor to load')
        validate(logical, ranks, pieces, dtype)
        full = dcpa.tensor_in(request['full'])
        if full.numel() != math.prod(logical):
            raise dcpa.NotExpressible(f'F has {full.numel()} elements, the map\'s logical_shape {logical} '
                                      f'{math.prod(logical)}: the checkpoint cannot be of this map')
        save_ranks_with(path, [{KEY: full.reshape(logical).clone()}])
        shard = dcpa.loaded_rank(path, logical, ranks[rank], dtype)
        return {'ok': True, 'result': dcpa.tensor_out(shard, PLANT)}

    def reshard(self, request, path):
        if self.refit:
            return self.reshard_refit(request)
        logical, source, source_pieces = read_pieces(dcpa.map_document(request))
        target_logical, target, target_pieces = read_pieces(dcpa.map_document(request, 'target_map'))
        dtype = request['dtype']
        if not source:
            raise dcpa.NotExpressible('a source map without ranks')
        validate(logical, source, source_pieces, dtype)
        validate(target_logical, target, target_pieces, dtype)
        shards = {int(rank): dcpa.tensor_in(doc) for rank, doc in request['shards'].items()}
        save_main_replicas(path, logical, source, source_pieces, shards, dtype)
        result = {str(r): dcpa.tensor_out(dcpa.loaded_rank(path, target_logical, target[r], dtype), PLANT)
                  for r in sorted(target)}
        return {'ok': True, 'result': result}

    def reshard_refit(self, request):
        """megatron.core.resharding: each map as the planner's ParameterMetadata (one per
        rank), build_plan_from_rosters for every target rank, its receive operations
        executed as execute_reshard_plan copies them (dst[my_slice] = src[peer_slice])."""
        logical, source, _ = read_pieces(dcpa.map_document(request))
        target_logical, target, _ = read_pieces(dcpa.map_document(request, 'target_map'))
        dtype = request['dtype']
        if target_logical != logical:
            raise dcpa.NotExpressible('the refit planner moves one parameter: the two maps give F different shapes')
        src_layout = refit_layout(logical, source, 'source')
        dst_layout = refit_layout(logical, target, 'target')
        shards = {int(rank): dcpa.tensor_in(doc) for rank, doc in request['shards'].items()}
        # The planner's world: source ranks then target ranks, as two models on disjoint
        # ranks (a refit from a training layout to an inference layout).
        src_global = {rank: i for i, rank in enumerate(sorted(source))}
        dst_global = {rank: len(src_global) + i for i, rank in enumerate(sorted(target))}
        src_meta = {rank: metadata(logical, src_layout, source[rank], src_global[rank], sorted(src_global.values()),
                                   dtype) for rank in source}
        dst_meta = {rank: metadata(logical, dst_layout, target[rank], dst_global[rank], sorted(dst_global.values()),
                                   dtype) for rank in target}
        dst_by_global = {dst_global[r]: {KEY: dst_meta[r]} for r in target}
        src_by_name = {KEY: [src_meta[r] for r in sorted(source)]}
        by_global_source = {src_global[r]: r for r in source}
        result = {}
        for rank in sorted(target):
            out = dcpa.poisoned(target[rank].shard_shape, dtype)
            plan = refit_planner.build_plan_from_rosters(dst_by_global, src_by_name, dst_global[rank])
            for op in plan.recv_ops:
                src_rank = by_global_source.get(op.peer_rank)
                if src_rank is None or src_rank not in shards:
                    raise dcpa.NotExpressible(f'the plan receives from global rank {op.peer_rank}, which holds no shard')
                src = shards[src_rank].reshape(source[src_rank].shard_shape)
                out[op.my_slice] = src[op.peer_slice]
            result[str(rank)] = dcpa.tensor_out(out, PLANT)
        return {'ok': True, 'result': result}

    def check(self, request, path):
        logical, ranks, pieces = read_pieces(dcpa.map_document(request))
        validate(logical, ranks, pieces, 'float32')
        return {'ok': True}

    def answer(self, request):
        op = request.get('op')
        if op == 'hello':
            return {'ok': True, 'protocol': 1, 'implementation': self.implementation,
                    'ops': ['check', 'rebuild', 'extract', 'reshard']}
        if op not in ('check', 'rebuild', 'extract', 'reshard'):
            return {'ok': False, 'error': {'type': 'UnsupportedOperation', 'message': f'op {op!r} is not served'}}
        path = dcpa.workdir()
        try:
            return getattr(self, op)(request, path)
        except Exception as error:  # Megatron's (or DCP's) refusal, in its own words
            return {'ok': False, 'error': refusal(error)}
        except BaseException as error:
            if type(error).__name__ != 'CheckpointException':
                raise
            return {'ok': False, 'error': refusal(error)}
        finally:
            shutil.rmtree(path, ignore_errors=True)


def refit_layout(logical, ranks, side):
    """The refit planner's layout of a map, or NotExpressible (it has no other layouts):
    ('replicated',) when every rank holds all of F as one piece; ('tp', dim, sizes) when,
    in rank order, the ranks hold equal blocks along `dim` and all of F on every other
    axis: one block each (sizes None: plain tensor parallelism), or one block of each of
    several consecutive sub-tensors, side by side in the shard (sizes: the block widths,
    Megatron's partition_sizes, as for a fused projection)."""
    order = sorted(ranks)
    count = len(order)
    if not count:
        raise dcpa.NotExpressible(f'the {side} map has no ranks: not a layout of the refit planner')
    shard = list(ranks[order[0]].shard_shape)
    if any(list(ranks[r].shard_shape) != shard for r in order):
        raise dcpa.NotExpressible(f'the {side} ranks have different shard shapes: not a layout of the refit planner')
    nonempty = [[c for c in ranks[r].chunks if math.prod(c[2]) > 0] for r in order]
    if all(len(c) == 1 and list(c[0][0]) == [0] * len(logical) and list(c[0][2]) == list(logical)
           and list(c[0][1]) == [0] * len(shard) for c in nonempty) and shard == list(logical):
        return ('replicated', )
    for dim in range(len(logical)):
        other = [extent for axis, extent in enumerate(logical) if axis != dim]
        blocks = [sorted(c, key=lambda chunk: chunk[0][dim]) for c in nonempty]
        if not blocks[0] or any(len(b) != len(blocks[0]) for b in blocks):
            continue
        widths = [chunk[2][dim] for chunk in blocks[0]]
        if shard[:dim] + shard[dim + 1:] != other or shard[dim] != sum(widths):
            continue
        fits = True
        for r, rank_blocks in enumerate(blocks):
            global_start, local_start = 0, 0
            for width, (global_offset, local_offset, sizes) in zip(widths, rank_blocks):
                box_other = [v for axis, v in enumerate(sizes) if axis != dim]
                fits &= (sizes[dim] == width and box_other == other
                         and list(global_offset) == [0] * dim + [global_start + r * width] + [0] * (len(logical) - dim - 1)
                         and list(local_offset) == [0] * dim + [local_start] + [0] * (len(shard) - dim - 1))
                global_start += count * width
                local_start += width
            fits &= global_start == logical[dim]
        if fits:
            return ('tp', dim, widths if len(widths) > 1 else None)
    raise dcpa.NotExpressible(f'the {side} map is neither replicated nor equal blocks along one axis in rank order: '
                              'not a layout of the refit planner')


def metadata(logical, layout, rank_entry, global_rank, group, dtype):
    """A rank's ParameterMetadata, as extract_param_metadata fills it for a TP or a
    replicated parameter: its local shape, its TP (or DP) group of global ranks."""
    torch_dtype = dcpa.torch_dtype(dtype)
    meta = ParameterMetadata(name=KEY, shape=tuple(rank_entry.shard_shape), dtype=torch_dtype,
                             element_size=torch.tensor([], dtype=torch_dtype).element_size(), owner_rank=global_rank,
                             resolved_name=KEY)
    if layout[0] == 'tp':
        meta.is_tp = True
        meta.partition_dim = layout[1]
        meta.partition_stride = 1
        meta.partition_sizes = layout[2]
        meta.tensor_parallel_group_ranks = list(group)
        meta.data_parallel_group_ranks = [global_rank]
    else:
        meta.tensor_parallel_group_ranks = [global_rank]
        meta.data_parallel_group_ranks = list(group)
    return meta


# Megatron's refusals as shardcheck's error kinds, first match wins; DCP's after them.
REFUSAL_KINDS = [
    ('CheckpointingException', 'Invalid access pattern', 'uncovered'),
    ('CheckpointingException', 'must be divisible by local shape', 'bounds'),
] + dcpa.REFUSAL_KINDS


def refusal(error):
    if isinstance(error, dcpa.NotExpressible):
        return {'type': 'unsupported', 'message': f'{type(error).__name__}: {error}'}
    out = dcpa.refusal(error)
    out.pop('kind', None)
    cause_text = out['message']
    for rule_type, substring, kind in REFUSAL_KINDS:
        if rule_type in (out['type'], cause_text.split(':')[0]) and substring in cause_text:
            out['kind'] = kind
            break
    return out


def main():
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), 'w', encoding='utf-8')
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    mode = os.environ.get('SHARDCHECK_MEGATRON_RESHARD', 'checkpoint')
    if mode not in ('checkpoint', 'refit'):
        dcpa.fail('megatron', f'SHARDCHECK_MEGATRON_RESHARD must be checkpoint or refit, not {mode!r}')
    dcpa.serve_forever(Server(refit=mode == 'refit'), protocol)


if __name__ == '__main__':
    main()
