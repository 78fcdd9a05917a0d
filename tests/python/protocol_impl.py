#!/usr/bin/env python3
"""A small implementation of the affine shard map contract, served over shardcheck's
target protocol (docs/protocol.md). It exists to test the protocol end to end without
DeepSpeed: `shardcheck repro --target exec:'python3 tests/python/protocol_impl.py'`.

It checks what the contract's section 3 asks (structure, bounds, the conservative
self-overlap rule, destination tiling, coverage, homogeneity, replica bits) and moves
data bit-exact; it is written for clarity, not speed, and uses numpy only.

Fault variants, for the harness's own tests (N counts check/rebuild/extract requests of
this process, from 1):
  --crash-on N     exit with status 3 instead of answering request N
  --hang-on N      never answer request N
  --garbage-on N   answer request N with a line that is not JSON
  --lax-locations  accept locations that repeat a rank (this file's own bug, found by
                   the campaign's strict-accepts judgement; tests plant it back)

Planted bugs that depend on the case alone, so that a finding they cause replays (the
finding files of a campaign must fail `shardcheck repro` with this target):
  --refuse-replicas  refuse, kind holders, every map with a replicated piece
  --ignore-scale     move data without scaling it
  --crash-on-extract-of RANK
                     exit with status 3 instead of answering an extract of that rank

  --fallback         every rebuild and extract answer (or refusal) says it came from a
                     fallback, as an implementation that did not go through the map does
  --bad-fallback     ... with a `fallback` that is not an object holding a message

  --fork-server      serve from forked children (adapters/protocol_server.py): a crash
                     is reported in the protocol and the next child answers; N counts
                     each child's requests
  --leave-behind DIR on every hello, leave processes running as a careless or hostile
                     implementation would: a child in its process group, and a daemon
                     (setsid, then a fork whose parent exits); each writes its pid into
                     DIR, so that a test can see none outlives the harness
"""

import argparse
import base64
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                'adapters'))
import protocol_server  # noqa: E402 (found through the line above)

np.seterr(all='ignore')  # scaling may overflow; the result is compared, not trapped

# Bit containers per dtype: data moves as raw bits; only scaling does arithmetic.
BITS = {'float32': np.uint32, 'float64': np.uint64, 'float16': np.uint16, 'bfloat16': np.uint16,
        'int8': np.uint8, 'int16': np.uint16, 'int32': np.uint32, 'int64': np.uint64, 'uint8': np.uint8,
        'bool': np.uint8}
FLOATS = {'float32': np.float32, 'float64': np.float64, 'float16': np.float16}


class Refused(Exception):

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def numel(shape):
    return math.prod(shape)


def addresses(shape, offset, strides):
    """Addresses of a view in row-major index order (int64; Python ints checked first)."""
    out = np.full(tuple(shape), offset, dtype=np.int64)
    for axis, (extent, stride) in enumerate(zip(shape, strides)):
        ramp = np.arange(extent, dtype=np.int64) * stride
        out += ramp.reshape([extent if k == axis else 1 for k in range(len(shape))])
    return out.reshape(-1)


def unique_by_rule(shape, strides):
    """Contract 3.3: the conservative rule, not the exact one."""
    axes = sorted((stride, extent) for extent, stride in zip(shape, strides) if extent > 1)
    reach = 0
    for stride, extent in axes:
        if stride == 0 or stride < 1 + reach:
            return False
        reach += (extent - 1) * stride
    return True


def map_document(request):
    """The map of a request: its JSON value, or the case's text (`map_text`), read strictly:
    a key given twice, a NaN or Infinity literal, or anything but JSON is refused."""
    if 'map_text' not in request:
        return request['map']

    def pairs(items):
        keys = [key for key, _ in items]
        if len(set(keys)) != len(keys):
            raise Refused('format', 'a key appears twice in one object')
        return dict(items)

    def constant(name):
        raise Refused('format', f'{name} is not a JSON number')

    try:
        doc = json.loads(request['map_text'], object_pairs_hook=pairs, parse_constant=constant)
    except json.JSONDecodeError as error:
        raise Refused('format', str(error))
    if isinstance(doc, dict) and 'version' in doc:  # an envelope of one parameter's map
        params = doc.get('params')
        if doc.get('version') != 1 or not isinstance(params, dict) or len(params) != 1:
            raise Refused('format', 'an envelope must be version 1 and hold one parameter')
        doc = next(iter(params.values()))
    return doc


def integer(value):
    """A JSON integer as it is: a quoted number, a fraction or a bool is no integer."""
    if type(value) is not int or not -2**63 <= value < 2**63:
        raise TypeError(f'{value!r} is not a 64-bit integer')
    return value


def ranks_object(ranks):
    """The ranks as an object keyed by id: DeepSpeed's to_dict may also write a list of
    entries that each carry their "rank"."""
    if isinstance(ranks, dict):
        return ranks
    if not isinstance(ranks, list):
        return None
    out = {}
    for entry in ranks:
        if not isinstance(entry, dict) or type(entry.get('rank')) is not int or not 0 <= entry['rank'] < 2**63:
            raise Refused('format', 'a ranks list entry needs a non-negative integer "rank"')
        key = str(entry['rank'])
        if key in out:
            raise Refused('format', f'rank {key} appears twice')
        out[key] = {k: v for k, v in entry.items() if k != 'rank'}
    return out


def parse_map(doc):
    ranks_doc = ranks_object(doc.get('ranks')) if isinstance(doc, dict) else None
    if ranks_doc is None:
        raise Refused('format', 'the map needs logical_shape and a ranks object')
    shape = doc.get('logical_shape')
    if not isinstance(shape, list) or any(type(e) is not int or not 0 <= e < 2**63 for e in shape):
        raise Refused('format', 'logical_shape must be a list of non-negative integers')
    ranks = {}
    for key, entry in ranks_doc.items():
        if not key.isdigit() or str(int(key)) != key:
            raise Refused('format', f'rank key {key!r} is not a canonical decimal id')
        rank = int(key)
        if rank in ranks:
            raise Refused('format', f'rank {rank} appears twice')
        pieces = entry.get('pieces') if isinstance(entry, dict) else None
        if not isinstance(pieces, list):
            raise Refused('format', f'rank {rank} has no pieces list')
        if 'shard_shape' in entry:
            shard_shape = entry['shard_shape']
        elif pieces:
            raise Refused('format', f'rank {rank} lists pieces but no shard_shape')
        else:
            shard_shape = [0]  # a rank with no pieces may omit it: its shard is empty
        if not isinstance(shard_shape, list) or any(type(e) is not int or not 0 <= e < 2**63 for e in shard_shape):
            raise Refused('format', f'rank {rank}: shard_shape must be a list of non-negative integers')
        parsed = []
        for index, p in enumerate(pieces):
            try:
                piece = {
                    'shape': [integer(e) for e in p['shape']],
                    'src': (integer(p['source'][0]), [integer(s) for s in p['source'][1]]),
                    'dst': (integer(p['dest'][0]), [integer(s) for s in p['dest'][1]]),
                    'locations': [integer(r) for r in p['locations']],
                    'scale': float(p.get('scale', 1.0)),
                }
            except (KeyError, TypeError, ValueError, IndexError) as error:
                raise Refused('format', f'rank {rank} piece {index} is malformed: {error!r}') from None
            parsed.append(piece)
        ranks[rank] = (list(shard_shape), parsed)
    return list(shape), ranks


LAX_LOCATIONS = False
REFUSE_REPLICAS = False
IGNORE_SCALE = False


def check_map(shape, ranks):
    """Conditions 1-6, in the contract's order."""
    numel_f = numel(shape)
    views = []  # (rank, index, piece)
    for rank in sorted(ranks):
        for index, piece in enumerate(ranks[rank][1]):
            views.append((rank, index, piece))
    for rank, index, p in views:
        n = len(p['shape'])
        if len(p['src'][1]) != n or len(p['dst'][1]) != n:
            raise Refused('format', f'rank {rank} piece {index}: shape and strides disagree in length')
        if min([0] + p['shape'] + p['src'][1] + p['dst'][1] + [p['src'][0], p['dst'][0]]) < 0:
            raise Refused('format', f'rank {rank} piece {index}: a negative number')
        if p['locations'] != sorted(set(p['locations'])) and not LAX_LOCATIONS:
            raise Refused('format', f'rank {rank} piece {index}: locations must be sorted, each rank once')
        if not p['locations'] or rank not in p['locations']:
            raise Refused('holders' if p['locations'] else 'format',
                          f'rank {rank} piece {index}: locations must name the rank')
        if p['scale'] == 0 or not math.isfinite(p['scale']):
            raise Refused('scale', f'rank {rank} piece {index}: scale {p["scale"]}')
    for rank, index, p in views:
        if numel(p['shape']) == 0:
            continue
        shard_numel = numel(ranks[rank][0])
        for (offset, strides), size, side in ((p['src'], numel_f, 'source'), (p['dst'], shard_numel, 'dest')):
            last = offset + sum((e - 1) * s for e, s in zip(p['shape'], strides))
            if last >= size:
                raise Refused('bounds', f'rank {rank} piece {index}: the {side} view reaches {last} of {size}')
    for rank, index, p in views:
        if numel(p['shape']) == 0:
            continue
        for side in ('src', 'dst'):
            if not unique_by_rule(p['shape'], p[side][1]):
                raise Refused('itself', f'rank {rank} piece {index}: a view overlaps itself')
    for rank in sorted(ranks):
        shard_shape, pieces = ranks[rank]
        shard_numel = numel(shard_shape)
        if sum(numel(p['shape']) for p in pieces) != shard_numel:
            raise Refused('count', f'rank {rank}: the pieces do not hold {shard_numel} elements')
        hits = np.zeros(shard_numel, dtype=np.int64)
        for p in pieces:
            if numel(p['shape']):
                np.add.at(hits, addresses(p['shape'], *p['dst']), 1)
        if (hits > 1).any():
            raise Refused('twice', f'rank {rank}: shard address {int(np.argmax(hits > 1))} is written twice')
        if (hits == 0).any():
            raise Refused('uncovered', f'rank {rank}: shard address {int(np.argmax(hits == 0))} is never written')
    holders = [set() for _ in range(numel_f)]
    per_rank_hits = {}
    for rank, index, p in views:
        if numel(p['shape']) == 0:
            continue
        for element in addresses(p['shape'], *p['src']).tolist():
            holders[element].add(rank)
            key = (rank, element)
            per_rank_hits[key] = per_rank_hits.get(key, 0) + 1
    for element, who in enumerate(holders):
        if not who:
            raise Refused('uncovered', f'element {element} of F is held by nobody')
    for rank, index, p in views:
        if numel(p['shape']) == 0:
            continue
        for element in addresses(p['shape'], *p['src']).tolist():
            if holders[element] != set(p['locations']):
                raise Refused('holders', f'rank {rank} piece {index}: element {element} is held by '
                              f'{sorted(holders[element])}, not {sorted(p["locations"])}')
            if per_rank_hits[(rank, element)] > 1:
                raise Refused('twice', f'rank {rank}: element {element} of F is listed twice')


def arithmetic_factor(dtype, scale):
    """The scale rounded once to the arithmetic type of contract 1.2 (float64 for
    float64 data, float32 otherwise); None when it is zero, subnormal or not finite there."""
    math_type = np.float64 if dtype == 'float64' else np.float32
    with np.errstate(all='ignore'):
        factor = math_type(scale)
    if not np.isfinite(factor) or abs(factor) < np.finfo(math_type).tiny:
        return None
    return factor


def widen(dtype, bits):
    if dtype == 'bfloat16':
        return (bits.astype(np.uint32) << 16).view(np.float32)
    values = bits.view(FLOATS[dtype])
    return values.astype(np.float32) if dtype == 'float16' else values


def narrow(dtype, values):
    if dtype == 'bfloat16':
        out = values.view(np.uint32)
        return ((out + 0x7fff + ((out >> 16) & 1)) >> 16).astype(np.uint16)  # to nearest, ties to even
    return values.astype(FLOATS[dtype]).view(BITS[dtype])


def scaled(dtype, bits, scale, multiply):
    """Contract 1.2: bits * scale (extract) or bits / scale (rebuild) in float32 for the
    16-bit types (float64 for float64), rounded once to the dtype; a NaN keeps its bits;
    a value that becomes infinite or zero where it was not is refused."""
    if scale == 1.0 or IGNORE_SCALE:
        return bits
    factor = arithmetic_factor(dtype, scale)
    values = widen(dtype, bits)
    with np.errstate(all='ignore'):
        result = narrow(dtype, values * factor if multiply else values / factor)
    back = widen(dtype, result)
    nan = np.isnan(values)
    lost = ~nan & ((np.isinf(back) & np.isfinite(values)) | ((back == 0) & (values != 0)))
    if lost.any():
        raise Refused('scale', f'scaling by {scale} overflows or flushes an element')
    return np.where(nan, bits, result).astype(BITS[dtype])


def check_scale(ranks, dtype, power):
    scales = [p['scale'] for _, pieces in ranks.values() for p in pieces if p['scale'] != 1.0]
    if scales and power != 1:
        raise Refused('scale', 'an optimizer state cannot move through a scaled piece')
    if scales and dtype not in FLOATS and dtype != 'bfloat16':
        raise Refused('scale', f'a scale on {dtype} data')
    for scale in scales:
        if arithmetic_factor(dtype, scale) is None:
            raise Refused('scale', f'the scale {scale} is zero, subnormal or not finite in the arithmetic of {dtype}')


def tensor_in(doc, dtype):
    if doc.get('dtype') != dtype:
        raise Refused('shape', f'a tensor of {doc.get("dtype")} where {dtype} was asked for')
    return np.frombuffer(base64.b64decode(doc['data']), dtype=BITS[dtype]).copy()


def tensor_out(bits, dtype):
    return {'dtype': dtype, 'shape': [int(bits.size)], 'data': base64.b64encode(bits.tobytes()).decode('ascii')}


def refuse_replicas(ranks):
    if REFUSE_REPLICAS and any(len(p['locations']) >= 2 for _, pieces in ranks.values() for p in pieces):
        raise Refused('holders', 'replicated pieces are refused (--refuse-replicas)')


def rebuild(request):
    dtype = request['dtype']
    shape, ranks = parse_map(map_document(request))
    check_map(shape, ranks)
    refuse_replicas(ranks)
    check_scale(ranks, dtype, request['scale_power'])
    shards = {int(rank): tensor_in(t, dtype) for rank, t in request['shards'].items()}
    full = np.zeros(numel(shape), dtype=BITS[dtype])
    written = np.zeros(numel(shape), dtype=bool)
    for rank in sorted(ranks):
        shard_shape, pieces = ranks[rank]
        if not pieces:
            continue
        if rank not in shards or shards[rank].size != numel(shard_shape):
            raise Refused('shape', f'rank {rank}: no shard of {numel(shard_shape)} elements was supplied')
        for p in pieces:
            if numel(p['shape']) == 0:
                continue
            src = addresses(p['shape'], *p['src'])
            values = scaled(dtype, shards[rank][addresses(p['shape'], *p['dst'])], p['scale'], False)
            seen = written[src]
            if (full[src][seen] != values[seen]).any():
                raise Refused('different_data', f'rank {rank}: replicas of one element hold different bits')
            full[src] = values
            written[src] = True
    return full


def extract(request):
    dtype = request['dtype']
    shape, ranks = parse_map(map_document(request))
    check_map(shape, ranks)
    refuse_replicas(ranks)
    check_scale(ranks, dtype, request['scale_power'])
    rank = request['rank']
    if rank not in ranks:
        raise Refused('format', f'rank {rank} is not in the map')
    full = tensor_in(request['full'], dtype)
    if full.size != numel(shape):
        raise Refused('shape', f'F has {full.size} elements, the map says {numel(shape)}')
    shard_shape, pieces = ranks[rank]
    shard = np.zeros(numel(shard_shape), dtype=BITS[dtype])
    for p in pieces:
        if numel(p['shape']):
            shard[addresses(p['shape'], *p['dst'])] = scaled(dtype, full[addresses(p['shape'], *p['src'])],
                                                             p['scale'], True)
    return shard


def answer(request):
    op = request.get('op')
    if op == 'hello':
        return {'ok': True, 'protocol': 1, 'implementation': 'protocol_impl.py (numpy)'}
    try:
        if op == 'check':
            check_map(*parse_map(map_document(request)))
            return {'ok': True}
        if op == 'rebuild':
            return {'ok': True, 'result': tensor_out(rebuild(request), request['dtype'])}
        if op == 'extract':
            return {'ok': True, 'result': tensor_out(extract(request), request['dtype'])}
    except Refused as error:
        return {'ok': False, 'error': {'type': 'Refused', 'kind': error.kind, 'message': str(error)}}
    return {'ok': False, 'error': {'type': 'UnsupportedOperation', 'message': f'op {op!r} is not supported'}}


def leave_behind(directory):
    """Two sleepers the harness must end: one in this process group, one that left it."""
    def sleep_forever():
        with open(os.path.join(directory, str(os.getpid())), 'w'):
            pass
        while True:
            time.sleep(3600)

    if os.fork() == 0:
        sleep_forever()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            sleep_forever()
        os._exit(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--crash-on', type=int, default=0)
    parser.add_argument('--hang-on', type=int, default=0)
    parser.add_argument('--garbage-on', type=int, default=0)
    parser.add_argument('--lax-locations', action='store_true')
    parser.add_argument('--refuse-replicas', action='store_true')
    parser.add_argument('--ignore-scale', action='store_true')
    parser.add_argument('--crash-on-extract-of', type=int, default=-1)
    parser.add_argument('--fallback', action='store_true')
    parser.add_argument('--bad-fallback', action='store_true')
    parser.add_argument('--fork-server', action='store_true')
    parser.add_argument('--leave-behind', default='')
    args = parser.parse_args()
    global LAX_LOCATIONS, REFUSE_REPLICAS, IGNORE_SCALE
    LAX_LOCATIONS = args.lax_locations
    REFUSE_REPLICAS = args.refuse_replicas
    IGNORE_SCALE = args.ignore_scale

    def serve(requests):
        served = 0
        for line in requests:
            request = json.loads(line)
            if request.get('op') == 'hello' and args.leave_behind:
                leave_behind(args.leave_behind)
            if request.get('op') != 'hello':
                served += 1
                if served == args.crash_on or (request.get('op') == 'extract'
                                               and request.get('rank') == args.crash_on_extract_of):
                    os._exit(3)
                if served == args.hang_on:
                    while True:
                        time.sleep(3600)
                if served == args.garbage_on:
                    sys.stdout.write('this is not a response\n')
                    sys.stdout.flush()
                    continue
            response = answer(request)
            if request.get('op') in ('rebuild', 'extract') and (args.fallback or args.bad_fallback):
                response['fallback'] = 'elsewhere' if args.bad_fallback else {
                    'type': 'OtherPath', 'message': '--fallback: answered without the map, as told'}
            if args.fork_server and request.get('op') == 'hello':
                response['crash_reports'] = True
            response['id'] = request.get('id')
            sys.stdout.write(json.dumps(response) + '\n')
            sys.stdout.flush()

    if args.fork_server:
        protocol_server.fork_server(serve, sys.stdout.fileno())
    else:
        serve(protocol_server.Requests())


if __name__ == '__main__':
    main()
