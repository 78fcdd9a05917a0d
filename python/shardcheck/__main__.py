"""`python -m shardcheck deepspeed inspect CHECKPOINT_DIR`: the Python side of the
command line (`shardcheck deepspeed ...` runs this), see shardcheck.deepspeed_checkpoint."""

import sys

from .deepspeed_checkpoint import main


def run(argv):
    if not argv or argv[0] != "deepspeed":
        print("usage: python -m shardcheck deepspeed inspect CHECKPOINT_DIR [--cases DIR] [--json] "
              "[--max-checkpoint-bytes N] [--unsafe-load]", file=sys.stderr)
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
