#!/usr/bin/python3
"""Segments per plan, DeepSpeed's planner against shardcheck's, over a matrix of layouts.

DeepSpeed 0.19.8's `plan_transfer` (deepspeed/checkpoint/affine_transfer.py, loaded from the
sdist by path as the deepspeed target loads it) and `shardcheck plan --json` plan the same
pairs: every source layout of the matrix to every target layout, all made by DeepSpeed's
own constructors (affine.py) on one logical shape. For each pair it prints both segment
counts; it fails (exit 1) where shardcheck's plan has more segments than DeepSpeed's, or
where one planner plans a pair the other refuses. Layouts DeepSpeed's planner declines
(scaled pieces) are left out of the matrix.

    SHARDCHECK_DEEPSPEED_PATH=out/deepspeed/current \\
      /usr/bin/python3 scripts/deepspeed_plan_matrix.py build/shardcheck [--markdown]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'adapters', 'deepspeed'))

SHAPE = (24, 16)


def layouts(affine):
    """Name -> map, every one of DeepSpeed's constructors on SHAPE, split along both axes."""
    rows, columns = SHAPE
    return {
        'replicated tp2': affine.replicated_map(SHAPE, 2),
        'rows tp2': affine.contiguous_split_map(SHAPE, [rows // 2] * 2, 0),
        'rows tp4': affine.contiguous_split_map(SHAPE, [rows // 4] * 4, 0),
        'rows uneven tp3': affine.contiguous_split_map(SHAPE, [10, 0, 14], 0),
        'columns tp2': affine.contiguous_split_map(SHAPE, [columns // 2] * 2, 1),
        'columns tp4': affine.contiguous_split_map(SHAPE, [columns // 4] * 4, 1),
        'columns tp8': affine.contiguous_split_map(SHAPE, [columns // 8] * 8, 1),
        'fused qkv rows tp2': affine.sub_param_map(SHAPE, [8, 8, 8], [[4, 4], [4, 4], [4, 4]], 0),
        'fused qkv columns tp4': affine.sub_param_map(SHAPE, [8, 4, 4], [[2, 2, 2, 2], [1, 1, 1, 1], [1, 1, 1, 1]], 1),
        'segmented rows tp2': affine.segmented_map(SHAPE, [(16, False), (8, True)], 0, 2, [[8, 8]]),
        'block gather rows tp2': affine.block_gather_map(SHAPE, {0: [0, 2, 3], 1: [1, 4, 5]}, 4, 0),
        'block gather columns tp2': affine.block_gather_map(SHAPE, {0: [0, 3], 1: [1, 2]}, 4, 1),
    }


def deepspeed_segments(transfer, source, target):
    try:
        return len(transfer.plan_transfer(target, source).segments), ''
    except transfer.AffineTransferError as error:
        return None, f'{type(error).__name__}: {error}'


def shardcheck_segments(shardcheck, source, target, scratch):
    paths = []
    for name, one in (('source', source), ('target', target)):
        path = os.path.join(scratch, f'{name}.json')
        with open(path, 'w', encoding='utf-8') as handle:
            json.dump(one.to_dict(), handle)
        paths.append(path)
    done = subprocess.run([shardcheck, 'plan', '--json', *paths], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None, (done.stdout + done.stderr).strip()
    return len(json.loads(done.stdout)['segments']), ''


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('shardcheck', help='the shardcheck command line')
    parser.add_argument('--markdown', action='store_true', help='print the matrix as a Markdown table')
    args = parser.parse_args()
    from serve import load_affine
    affine, transfer, implementation = load_affine()
    if transfer is None:
        print(f'{implementation} has no affine_transfer.py', file=sys.stderr)
        return 2
    made = layouts(affine)
    names = list(made)
    problems, pairs, fewer = [], 0, 0
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for source_name in names:
            row = []
            for target_name in names:
                ours, our_error = shardcheck_segments(args.shardcheck, made[source_name], made[target_name], scratch)
                theirs, their_error = deepspeed_segments(transfer, made[source_name], made[target_name])
                pairs += 1
                row.append(f'{ours if ours is not None else "refused"} / {theirs if theirs is not None else "refused"}')
                where = f'{source_name} -> {target_name}'
                if (ours is None) != (theirs is None):
                    problems.append(f'{where}: shardcheck {our_error or ours}, DeepSpeed {their_error or theirs}')
                elif ours is not None and ours > theirs:
                    problems.append(f'{where}: shardcheck {ours} segments, DeepSpeed {theirs}')
                elif ours is not None and ours < theirs:
                    fewer += 1
            rows.append(row)
    if args.markdown:
        print('| source \\ target | ' + ' | '.join(names) + ' |')
        print('|' + '---|' * (len(names) + 1))
        for name, row in zip(names, rows):
            print(f'| {name} | ' + ' | '.join(row) + ' |')
    else:
        for name, row in zip(names, rows):
            print(f'{name}: ' + ', '.join(row))
    print(f'{implementation}: {pairs} pairs of {len(names)} layouts on {SHAPE}; shardcheck / DeepSpeed segments; '
          f'shardcheck fewer on {fewer}, more on {sum("segments, DeepSpeed" in p for p in problems)}')
    for problem in problems:
        print(f'PROBLEM: {problem}')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
