#!/usr/bin/env python3
"""Per-file coverage tables for scripts/coverage.sh, joined with a mutation result.

Reads <out>/{campaign,corpora,all}/summary.json (llvm-cov export -summary-only) and,
with --mutants, the results.json of scripts/mutants.sh; writes <out>/summary.md and
<out>/files.tsv. Coverage says what runs, mutants say what is judged: a file with high
coverage and surviving mutants is marked, since running code is not checking it."""
import argparse
import json
import os
from pathlib import Path

SETS = ("campaign", "corpora", "all")
GROUPS = ("core/", "oracles/", "properties/", "fuzz/", "cli/")


def load(out, repo):
    files = {}
    for s in SETS:
        data = json.loads((out / s / "summary.json").read_text())["data"][0]
        for f in data["files"]:
            name = os.path.normpath(f["filename"])
            rel = name[len(repo) + 1:] if name.startswith(repo + "/") else name
            files.setdefault(rel, {})[s] = {k: f["summary"][k] for k in ("lines", "branches")}
    return files


def pct(covered, count):
    return f"{100.0 * covered / count:.1f}%" if count else "-"


def cell(entry, kind):
    if not entry:
        return "-"
    m = entry[kind]
    return pct(m["covered"], m["count"])


def mutant_counts(path, detector):
    results = json.loads(Path(path).read_text())
    detectors = results.get("detectors", [])
    detector = detector or (detectors[0] if detectors else "campaign")
    per_file = {}
    for m in results["mutants"]:
        status = m["detectors"].get(detector, {}).get("status")
        c = per_file.setdefault(m["file"], {"killed": 0, "survived": 0, "other": 0, "survivors": []})
        if status == "killed":
            c["killed"] += 1
        elif status == "survived":
            c["survived"] += 1
            c["survivors"].append(m["id"])
        else:
            c["other"] += 1
    return detector, per_file


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repo", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mutants", help="results.json of scripts/mutants.sh")
    p.add_argument("--detector", help="the mutants' detector to count (default: the first it ran)")
    args = p.parse_args()
    out = Path(args.out)
    files = load(out, args.repo.rstrip("/"))
    detector, mutants = (None, {})
    if args.mutants:
        detector, mutants = mutant_counts(args.mutants, args.detector)

    lines = ["# Coverage", "",
             "Line and branch coverage (clang source-based) of the harness's own sources, by what ran: "
             "`campaign` (a short strict campaign, plain and `--digest`), `corpora` (every fuzz target's "
             "seeds and `corpus/regressions/`), `all` (both).", "",
             "| part | lines campaign | lines corpora | lines all | branches campaign | branches corpora | branches all |",
             "|---|---|---|---|---|---|---|"]
    for g in GROUPS:
        row = [g]
        for kind in ("lines", "branches"):
            for s in SETS:
                covered = sum(f[s][kind]["covered"] for n, f in files.items() if n.startswith(g) and s in f)
                count = sum(f[s][kind]["count"] for n, f in files.items() if n.startswith(g) and s in f)
                row.append(f"{pct(covered, count)} ({covered}/{count})")
        lines.append("| " + " | ".join(row) + " |")

    header = "| file | lines campaign | lines corpora | lines all | branches campaign | branches corpora | branches all |"
    rule = "|---|---|---|---|---|---|---|"
    if mutants:
        header += f" mutants killed by {detector} |"
        rule += "---|"
    lines += ["", header, rule]
    tsv = ["file\t" + "\t".join(f"{k}_{s}" for k in ("lines", "branches") for s in SETS) +
           "\tmutants_killed\tmutants_judged\tsurvivors"]
    for name in sorted(files):
        if not name.startswith(GROUPS):
            continue
        f = files[name]
        row = [name] + [cell(f.get(s), k) for k in ("lines", "branches") for s in SETS]
        m = mutants.get(name)
        if mutants:
            if m:
                judged = m["killed"] + m["survived"]
                text = f"{m['killed']}/{judged}"
                all_lines = f.get("all", {}).get("lines", {})
                if m["survived"] and all_lines.get("count") and all_lines["covered"] / all_lines["count"] >= 0.8:
                    text += " **covered, not judged: " + ", ".join(m["survivors"]) + "**"
                elif m["survived"]:
                    text += " (" + ", ".join(m["survivors"]) + ")"
                row.append(text)
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
        tsv.append("\t".join([name] + row[1:7] + ([str(m["killed"]), str(m["killed"] + m["survived"]),
                                                   ",".join(m["survivors"])] if m else ["", "", ""])))
    missing = sorted(set(mutants) - set(files))
    if missing:
        lines += ["", "Mutated files without coverage data: " + ", ".join(missing)]
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    (out / "files.tsv").write_text("\n".join(tsv) + "\n")
    print("\n".join(lines[:5 + 2 + len(GROUPS)]))


if __name__ == "__main__":
    main()
