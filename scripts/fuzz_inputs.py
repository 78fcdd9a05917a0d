#!/usr/bin/env python3
"""Picks fuzz inputs for a generator-driven target (fuzz/conversion.cc's rows) by replaying
pseudo-random byte strings through its replay binary, so that seed folders and a canary's
known findings are made the same way every time and can be made again when the generators
change (properties/src/corruptions.def says when).

    scripts/fuzz_inputs.py seeds BINARY OUT_DIR [--count N] [--seed S] [--prefix P]
    scripts/fuzz_inputs.py finds BINARY OUT_DIR [--count N] [--seed S] [--signature REGEX]

BINARY is a <target>_replay of the gcc build (build-dev/fuzz/reshard_replay). Its bytes
decode as in the libFuzzer build (fuzz/fdp_choices.h), so an input picked here means the
same case to both.

seeds: inputs that replay cleanly, alternately one whose case the target converts (or
plans and executes) and one it refuses, so that a fuzzing run starts from both paths.
finds: inputs on which the binary reports a wrong tensor (a canary's known findings: a
finding of findings.def's silently_wrong class, as ctest's fuzz_<canary>_finds_* want),
whose signature matches --signature (e.g. `/none$`: an uncorrupted case, which no change
to the corruption catalogue can turn into another case's bytes), one per signature.

Each pick is printed with what it did. Seeds are written as <prefix>-NN, findings are named
after their signature.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def wrong_tensor_prefixes():
    """The signature prefixes of the judges of class silently_wrong (findings.def)."""
    text = (REPO / "properties/include/shardcheck/findings.def").read_text(encoding="utf-8")
    prefixes = re.findall(r'^SHARDCHECK_JUDGE\([a-z_]+, "([a-z-]+)", silently_wrong,', text, flags=re.M)
    if not prefixes:
        sys.exit("fuzz_inputs: findings.def has no judge of class silently_wrong")
    return tuple(f"SHARDCHECK-FINDING: {p}:" for p in prefixes)


# Below the max_len of conversion.options and reshard.options, so libFuzzer keeps every seed whole.
MAX_LENGTH = 240
MIN_LENGTH = 16


def replay(binary, data):
    """(return code, stderr) of the binary on one input, with the usable-input counter on."""
    with tempfile.NamedTemporaryFile(prefix="fuzz-input-", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        env = dict(os.environ, SHARDCHECK_FUZZ_STATS="1")
        run = subprocess.run([binary, path], capture_output=True, text=True, errors="replace", env=env, timeout=60)
        return run.returncode, run.stderr
    finally:
        os.unlink(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("seeds", "finds"))
    parser.add_argument("binary")
    parser.add_argument("out_dir")
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prefix", default="seed", help="seeds: the file name prefix")
    parser.add_argument("--signature", default="", help="finds: a regular expression the signature must match")
    parser.add_argument("--tries", type=int, default=200000, help="give up after this many inputs")
    args = parser.parse_args()

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    picked = 0
    want_usable = True
    findings = wrong_tensor_prefixes()
    kept = set()
    for tried in range(1, args.tries + 1):
        data = bytes(rng.randrange(256) for _ in range(rng.randint(MIN_LENGTH, MAX_LENGTH)))
        code, log = replay(args.binary, data)
        if args.mode == "finds":
            line = next((l for l in log.splitlines() if l.startswith(findings)), None)
            if line is None or not re.search(args.signature, line) or line in kept:
                continue
            kept.add(line)
            what = line
            name = re.sub(r"[^A-Za-z0-9_.]+", "-", line[len("SHARDCHECK-FINDING: "):]).strip("-")
        else:
            if code != 0 or "SHARDCHECK-FINDING" in log:
                sys.exit(f"fuzz_inputs: input {tried} does not replay cleanly (a finding for the strict target?):\n{log}")
            usable = "1 usable" in log
            if usable != want_usable:
                continue
            want_usable = not want_usable
            what = "converted" if usable else "refused"
            name = f"{args.prefix}-{picked:02d}"
        path = out / name
        path.write_bytes(data)
        print(f"{path} ({len(data)} bytes, input {tried}): {what}")
        picked += 1
        if picked == args.count:
            return
    sys.exit(f"fuzz_inputs: {picked} of {args.count} inputs found in {args.tries} tries")


if __name__ == "__main__":
    main()
