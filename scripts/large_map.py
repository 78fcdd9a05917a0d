"""Writes a valid map of N pieces to a file, streaming, in DeepSpeed's JSON spelling.

    python3 scripts/large_map.py PIECES OUT.json [--ranks R] [--width W]

The layout is a block gather of rows: F is PIECES x W, row k is one piece held by rank
k % R, stored at row k // R of that rank's shard. Every piece is a box, as the layouts of
large expert-parallel checkpoints are. The text is what `json.dump` writes (", " and ": "
separators, one line), written a piece at a time so that even 10^7 pieces take no more
memory than a few thousand of them.
"""

import argparse
import sys


def write_map(out, pieces: int, ranks: int, width: int) -> None:
    out.write(f'{{"logical_shape": [{pieces}, {width}], "ranks": {{')
    strides = f"[{width}, 1]"
    for rank in range(ranks):
        held = pieces // ranks + (1 if rank < pieces % ranks else 0)
        if rank:
            out.write(", ")
        out.write(f'"{rank}": {{"shard_shape": [{held}, {width}], "pieces": [')
        batch = []
        for row in range(held):
            source = (row * ranks + rank) * width
            batch.append(
                f'{{"shape": [1, {width}], "source": [{source}, {strides}], '
                f'"dest": [{row * width}, {strides}], "locations": [{rank}]}}'
            )
            if len(batch) == 4096:
                out.write(", ".join(batch))
                out.write(", " if row + 1 < held else "")
                batch.clear()
        out.write(", ".join(batch))
        out.write("]}")
    out.write("}}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pieces", type=int)
    parser.add_argument("out")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--width", type=int, default=64)
    args = parser.parse_args()
    if args.pieces < 1 or args.ranks < 1 or args.width < 1:
        parser.error("pieces, ranks and width must be at least 1")
    with open(args.out, "w", buffering=1 << 20) as out:
        write_map(out, args.pieces, args.ranks, args.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
