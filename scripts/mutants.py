#!/usr/bin/env python3
"""Mutation testing over the catalogue mutants/mutants.tsv (see scripts/mutants.sh)."""
import argparse
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CATALOGUE = REPO / "mutants" / "mutants.tsv"
DETECTORS = ("campaign", "replay", "ctest")
# Statuses of one (mutant, detector) cell. Stale and build-failed are never counted as killed.
# Equivalent: survived, and the catalogue's sixth column says why no input can tell it
# apart ("equivalent: ..."). Unreachable: survived a detector the sixth column names as one
# that cannot reach the mutated code ("unreachable by campaign: ..."). Both are left out of
# the score, like stale and build-failed, and listed with their reasons.
KILLED, SURVIVED, EQUIVALENT, UNREACHABLE, STALE, BUILD_FAILED = (
    "killed", "survived", "equivalent", "unreachable", "stale", "build-failed")


def excused(mutant, detector):
    """(status, reason) for a survivor the catalogue explains, or None."""
    note = mutant["equivalent"]
    if note.startswith("equivalent:"):
        return EQUIVALENT, note[len("equivalent:"):].strip()
    if note.startswith("unreachable by "):
        names, _, reason = note[len("unreachable by "):].partition(":")
        if detector in [n.strip() for n in names.split(",")]:
            return UNREACHABLE, reason.strip()
    return None


def unescape(text):
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            n = text[i + 1]
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(n, "\\" + n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def read_catalogue(path):
    mutants, ids, errors = [], set(), []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        cols = line.split("\t")
        if len(cols) not in (5, 6) or not all(c.strip() for c in cols):
            errors.append(f"{path}:{lineno}: expected 5 or 6 non-empty TAB-separated columns, got {len(cols)}")
            continue
        mid, file, search, replace, what = cols[:5]
        equivalent = cols[5].strip() if len(cols) == 6 else ""
        if equivalent and not (equivalent.startswith("equivalent:") or equivalent.startswith("unreachable by ")):
            errors.append(f"{path}:{lineno}: {mid}: the sixth column starts 'equivalent:' or "
                          f"'unreachable by DETECTOR[,DETECTOR]:'")
        if mid in ids:
            errors.append(f"{path}:{lineno}: duplicate id {mid}")
        ids.add(mid)
        search, replace = unescape(search), unescape(replace)
        if search == replace:
            errors.append(f"{path}:{lineno}: {mid}: the replacement equals the search text")
        mutants.append({"id": mid, "file": file, "search": search, "replace": replace, "what": what,
                        "equivalent": equivalent})
    if errors:
        sys.exit("\n".join(errors))
    return mutants


def sh(cmd, log, timeout=None, cwd=None, env=None):
    """Runs cmd, appending its output to log; returns (exit code, seconds). 124 on timeout."""
    start = time.monotonic()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n")
        out.flush()
        # Own process group, so a timeout ends the campaign's workers too.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_group(proc)
            rc = 124
            out.write(f"\n[mutants] timed out after {timeout} s\n")
    return rc, time.monotonic() - start


def sync_tree(scratch_src):
    """Copies the tracked and untracked-but-not-ignored files into scratch_src, touching only
    files whose content differs (so the scratch build stays incremental)."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    wanted = set()
    for rel in filter(None, listed):
        src = REPO / rel
        if not src.is_file():
            continue  # deleted in the working tree but still in the index
        wanted.add(rel)
        dst = scratch_src / rel
        if dst.is_file() and dst.read_bytes() == src.read_bytes():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        # A fresh modification time, not the source's: an older one could be earlier than
        # the scratch build's object from a previous content, and the build would skip it.
        shutil.copyfile(src, dst)
        shutil.copymode(src, dst)
    for path in sorted(scratch_src.rglob("*"), reverse=True):
        rel = path.relative_to(scratch_src).as_posix()
        if path.is_file() and rel not in wanted:
            path.unlink()


def replay_targets():
    out = subprocess.run(["bash", "-c", 'source fuzz/targets.sh && fuzz_targets'], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout.split()
    return [f"{name}_replay" for name in out]


def targets_for(detectors):
    if "ctest" in detectors:
        return None  # everything
    targets = []
    if "campaign" in detectors:
        targets.append("shardcheck")
    if "replay" in detectors:
        targets += replay_targets()
    return targets


def build(args, build_dir, targets, log):
    cmd = ["cmake", "--build", str(build_dir), "-j", str(args.build_jobs)]
    if targets:
        cmd += ["--target", *targets]
    return sh(cmd, log, timeout=args.build_timeout)


def tree_cpu_seconds(pid):
    """CPU seconds used so far by process pid and its live children (the campaign's workers),
    plus children that have ended: one-core time, whatever else loads the machine."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(p):
        try:
            text = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            return None
        fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
        return int(fields[1]), [int(x) for x in fields[11:15]]  # ppid; utime stime cutime cstime

    own = stat(pid)
    if own is None:
        return None
    total = sum(own[1])
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != pid:
            child = stat(int(entry))
            if child and child[0] == pid:
                total += child[1][0] + child[1][1]
    return total / tick


def stop_group(proc):
    """Ends proc's process group (the campaign and its workers): TERM, then KILL after 10 s."""
    for sig in (15, 9):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.wait()


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def watch_campaign(cmd, log, timeout):
    """Runs one campaign and stops it at its first finding (the CLI announces each new
    signature on a flushed "new finding:" line). Returns (exit code, None when stopped at a
    finding; wall seconds; CPU seconds until the finding or the end; the finding line)."""
    start, waited_before = time.monotonic(), children_cpu_seconds()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, text=True, start_new_session=True)
        # The deadline only matters for a campaign that hangs while printing nothing: the
        # reader blocks, so a timer ends the group.
        timer = threading.Timer(timeout, lambda: stop_group(proc))
        timer.start()
        finding, cpu = None, 0.0
        try:
            for line in proc.stdout:
                out.write(line)
                if line.startswith("new finding:"):
                    finding = line.strip()
                    cpu = tree_cpu_seconds(proc.pid) or 0.0
                    break
        finally:
            timer.cancel()
        wall = time.monotonic() - start
        if finding:
            stop_group(proc)
            rc = None
        else:
            rc = proc.wait()
            if time.monotonic() - start >= timeout:
                rc = 124
            # Its workers were waited for by the campaign, so their CPU is in its rusage.
            cpu = children_cpu_seconds() - waited_before
        out.write(f"[mutants] {'stopped at ' + finding if finding else f'exit {rc}'}; wall {wall:.1f} s, "
                  f"cpu {cpu:.1f} s\n")
    return rc, wall, cpu, finding


def run_campaign(args, build_dir, work, log):
    """The strict campaign, then the same with --digest, a reshard campaign, a --backend
    device-omp campaign and the large mode (every case large, with digests), one after the
    other, each stopped at its first finding (findings as found: no reduction). Killed: a
    finding, or exit code 1 (another non-zero exit, such as a crash of the campaign
    itself, counts too and is noted). Returns the detection time too:
    CPU seconds of the campaign (and its workers) until the finding, the runs before it
    included (time to detection, issue 29), None when it survived."""
    exe = build_dir / "shardcheck"
    # The nightly's modes that need no target (nightly.yml): the default campaign, the same
    # with every rebuild verifying a digest, the reshard campaign (pairs of layouts through
    # transfer plans: what reaches the planner), and the device code on OpenMP beside the
    # CPU backend on every case (what reaches the device kernels and their fault reports).
    # And the large mode: every case a large layout (past the parallel threshold, half of
    # them past the streaming one with misaligned rows), every rebuild verifying a digest.
    runs = [("plain", []), ("digest", ["--digest"]), ("reshard", ["--op", "reshard"]),
            ("device-omp", ["--backend", "device-omp"]), ("large", ["--large-share", "1", "--digest"])]
    # A large case costs a few hundred milliseconds (the reference model reads 1M
    # elements): the large mode gets the longest share, so that it runs a few dozen.
    shares = (0.25, 0.125, 0.125, 0.125, 0.375)
    total_s, cpu_s, details = 0.0, 0.0, []
    for (name, extra), share in zip(runs, shares):
        out = work / f"campaign-{name}"
        shutil.rmtree(out, ignore_errors=True)
        seconds = max(1, int(args.budget * share))
        cmd = [str(exe), "campaign", "--seed", str(args.seed), "--time", str(seconds), "--jobs", str(args.jobs),
               "--out", str(out), "--case-time-limit", str(args.case_time_limit), "--reduce-evaluations", "0", *extra]
        if args.cases:
            cmd += ["--cases", str(args.cases)]
        rc, secs, cpu, finding = watch_campaign(cmd, log, timeout=seconds + 120)
        total_s += secs
        cpu_s += cpu
        if finding:
            return KILLED, f"{name}: {finding[len('new finding: '):]}", total_s, cpu_s
        if rc != 0:
            why = f"{name}: exit {rc}"
            if rc != 1:
                why += " (not a verdict: crash, timeout or bad usage)"
            return KILLED, why, total_s, cpu_s
        try:
            cases = json.loads((out / "report.json").read_text()).get("cases")
        except (OSError, ValueError):
            cases = None
        details.append(f"{name}: {cases if cases is not None else '?'} cases clean")
    return SURVIVED, "; ".join(details), total_s, None


def run_ctest(args, build_dir, log, regex=None):
    cmd = ["ctest", "--test-dir", str(build_dir), "-j", str(args.jobs), "--timeout", str(args.budget * 4)]
    if regex:
        cmd += ["-R", regex]
    rc, secs = sh(cmd, log, timeout=args.ctest_timeout)
    if rc == 0:
        return SURVIVED, "all tests passed", secs
    failed = []
    try:
        text = Path(log).read_text().splitlines()
        failed = [l.split(" - ")[1].split(" (")[0].strip() for l in text if " - " in l and "(Failed" in l or
                  " - " in l and "(Timeout" in l or " - " in l and "(SEGFAULT" in l or " - " in l and "(Subprocess" in l]
    except (OSError, IndexError):
        pass
    return KILLED, f"exit {rc}" + (f"; failed: {', '.join(failed[:4])}" if failed else ""), secs


def detect(detector, args, build_dir, work, log):
    """(status, detail, seconds, CPU seconds to detection or None)."""
    if detector == "campaign":
        return run_campaign(args, build_dir, work, log)
    if detector == "replay":
        return (*run_ctest(args, build_dir, log, regex="^fuzz_"), None)
    return (*run_ctest(args, build_dir, log), None)


def write_reports(out_dir, meta, results, detectors):
    with open(out_dir / "results.tsv", "w") as f:
        f.write("id\tfile\tdetector\tstatus\tseconds\tdetect_cpu_seconds\tdetail\n")
        for r in results:
            for d in detectors:
                cell = r["detectors"][d]
                detect = cell.get("detect_cpu_seconds")
                f.write(f"{r['id']}\t{r['file']}\t{d}\t{cell['status']}\t{cell['seconds']:.1f}\t"
                        f"{'' if detect is None else detect}\t{cell['detail']}\n")
    totals = summarize(results, detectors)
    (out_dir / "results.json").write_text(json.dumps({**meta, "totals": totals, "mutants": results}, indent=1))
    lines = [f"# Mutation testing: {meta['started']}", "",
             f"Catalogue `mutants/mutants.tsv` at `{meta['commit']}`; detectors {', '.join(detectors)}; "
             f"budget {meta['budget']} s per detector, seed {meta['seed']}, {meta['jobs']} jobs.", "",
             "| mutant | file | " + " | ".join(detectors) + " | what |",
             "|---|---|" + "---|" * len(detectors) + "---|"]
    for r in results:
        cells = []
        for d in detectors:
            cell = r["detectors"][d]
            text = f"**{cell['status']}**" if cell["status"] == SURVIVED else cell["status"]
            if cell.get("detect_cpu_seconds") is not None:
                text += f" ({cell['detect_cpu_seconds']:.2f} s)"
            cells.append(text)
        lines.append(f"| {r['id']} | {r['file']} | " + " | ".join(cells) + f" | {r['what']} |")
    lines += ["", "| detector | killed | survived | equivalent | unreachable | build-failed | stale | "
              "score (killed / judged) | killed / all that built |",
              "|---|---|---|---|---|---|---|---|---|"]
    for d in detectors:
        t = totals[d]
        lines.append(f"| {d} | {t[KILLED]} | {t[SURVIVED]} | {t[EQUIVALENT]} | {t[UNREACHABLE]} | "
                     f"{t[BUILD_FAILED]} | {t[STALE]} | {t['score']} | {t['score_all']} |")
    if "campaign" in detectors and totals["campaign"].get("detection"):
        lines += ["", "Time to detection (campaign, CPU seconds of the campaign and its workers until the "
                  "first finding, the earlier runs' time included when a later run found it): "
                  + totals["campaign"]["detection"]]
    excused_rows = [r for r in results
                    if any(r["detectors"][d]["status"] in (EQUIVALENT, UNREACHABLE) for d in detectors)]
    if excused_rows:
        lines += ["", "Excused survivors (left out of the score for the catalogue's reason):", ""]
        lines += [f"- `{r['id']}`: {r['equivalent']}" for r in excused_rows]
    survivors = [r for r in results if any(r["detectors"][d]["status"] == SURVIVED for d in detectors)]
    if survivors:
        lines += ["", "Survivors (detail of the first detector each survived):", ""]
        for r in survivors:
            d = next(d for d in detectors if r["detectors"][d]["status"] == SURVIVED)
            lines.append(f"- `{r['id']}` ({r['file']}): {r['what']} [{d}: {r['detectors'][d]['detail']}]")
    (out_dir / "matrix.md").write_text("\n".join(lines) + "\n")
    return totals


def summarize(results, detectors):
    totals = {}
    for d in detectors:
        t = {KILLED: 0, SURVIVED: 0, EQUIVALENT: 0, UNREACHABLE: 0, BUILD_FAILED: 0, STALE: 0}
        for r in results:
            t[r["detectors"][d]["status"]] += 1
        judged = t[KILLED] + t[SURVIVED]
        t["score"] = f"{t[KILLED]}/{judged} ({100.0 * t[KILLED] / judged:.0f}%)" if judged else "-"
        # The same with the excused survivors counted as survivors, so the excuses show.
        everything = judged + t[EQUIVALENT] + t[UNREACHABLE]
        t["score_all"] = f"{t[KILLED]}/{everything} ({100.0 * t[KILLED] / everything:.0f}%)" if everything else "-"
        times = [r["detectors"][d].get("detect_cpu_seconds") for r in results
                 if r["detectors"][d]["status"] in (KILLED, SURVIVED)]
        if any(x is not None for x in times):
            t["detection"] = detection_summary(times)
        totals[d] = t
    return totals


def percentile(sorted_times, q):
    """The q-quantile (nearest rank) of detection times; None (never) sorts last."""
    rank = max(1, -(-len(sorted_times) * q // 100))  # ceil
    return sorted_times[int(rank) - 1]


def detection_summary(times):
    """Median and 90th percentile over the judged mutants, a survivor counting as never
    detected, and the same over the killed ones alone."""
    never = float("inf")
    judged = sorted(never if x is None else x for x in times)
    killed = [x for x in judged if x != never]

    def show(x):
        return "never (survivor)" if x == never else f"{x:.2f} s"

    text = (f"over {len(judged)} judged mutants median {show(percentile(judged, 50))}, "
            f"90th percentile {show(percentile(judged, 90))}")
    if killed:
        text += (f"; over the {len(killed)} killed median {show(percentile(killed, 50))}, "
                 f"90th percentile {show(percentile(killed, 90))}, slowest {show(killed[-1])}")
    return text


def print_matrix(results, detectors, totals):
    width = max([len(r["id"]) for r in results] + [6])
    print(f"\n{'mutant':<{width}}  " + "  ".join(f"{d:<12}" for d in detectors))
    for r in results:
        print(f"{r['id']:<{width}}  " + "  ".join(f"{r['detectors'][d]['status']:<12}" for d in detectors))
    print()
    for d in detectors:
        t = totals[d]
        print(f"{d}: killed {t[KILLED]}, survived {t[SURVIVED]}, equivalent {t[EQUIVALENT]}, "
              f"unreachable {t[UNREACHABLE]}, build-failed {t[BUILD_FAILED]}, stale {t[STALE]}; "
              f"score {t['score']} (all that built: {t['score_all']})")
        if t.get("detection"):
            print(f"{d}: time to detection {t['detection']}")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--detectors", default="campaign", help="comma-separated: campaign, replay, ctest")
    p.add_argument("--only", action="append", default=[], help="mutant id (repeatable, or comma-separated)")
    p.add_argument("--budget", type=int, default=40, help="seconds per mutant per detector (campaign: both runs)")
    p.add_argument("--jobs", type=int, default=2, help="campaign workers and ctest parallelism")
    p.add_argument("--build-jobs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cases", type=int, default=0, help="cap each campaign run at N cases (deterministic)")
    p.add_argument("--case-time-limit", type=int, default=10)
    p.add_argument("--out", help="report folder (default out/mutants/<time>)")
    p.add_argument("--scratch", help="scratch tree and build, reused between runs "
                   "(default $TMPDIR/shardcheck-mutants-<uid>)")
    p.add_argument("--build-timeout", type=int, default=1200)
    p.add_argument("--ctest-timeout", type=int, default=3600)
    p.add_argument("--list", action="store_true", help="check the catalogue's anchors against this tree and exit")
    return p.parse_args()


def list_anchors(mutants):
    """Each mutant's anchor checked against this tree: 1 when one is stale."""
    stale = 0
    for m in mutants:
        path = REPO / m["file"]
        n = path.read_text().count(m["search"]) if path.is_file() else 0
        state = "ok" if n == 1 else f"STALE ({n} matches)"
        stale += n != 1
        print(f"{m['id']:<34} {m['file']:<26} {state}")
    print(f"{len(mutants)} mutants, {stale} stale")
    return 1 if stale else 0


def prepare_scratch(args, src, build_dir, work, detectors, setup_log):
    """The scratch tree synced and built, and every detector passing on it (else every
    mutant would look killed): the build targets the detectors need."""
    sync_tree(src)
    if not (build_dir / "build.ninja").exists() and not (build_dir / "Makefile").exists():
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        rc, _ = sh(["cmake", *gen, "-S", str(src), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                    "-DSHARDCHECK_CUDA=OFF", "-DSHARDCHECK_BENCH=OFF", "-DSHARDCHECK_TESTS=ON",
                    "-DSHARDCHECK_SANITIZE=OFF", "-DSHARDCHECK_DEVICE_OMP=ON"], setup_log)
        if rc != 0:
            sys.exit(f"mutants: configuring the scratch build failed, see {setup_log}")
    targets = targets_for(detectors)
    rc, secs = build(args, build_dir, targets, setup_log)
    if rc != 0:
        sys.exit(f"mutants: the unmutated tree does not build, see {setup_log}")
    print(f"baseline build: {secs:.0f} s", flush=True)
    # Every detector must pass on the unmutated tree, or every mutant would look killed.
    for d in detectors:
        status, detail, secs, _ = detect(d, args, build_dir, work, setup_log)
        print(f"baseline {d}: {detail} ({secs:.0f} s)", flush=True)
        if status != SURVIVED:
            sys.exit(f"mutants: the {d} detector fails on the unmutated tree ({detail}); see {setup_log}")
    return targets


def run_mutant(m, args, src, build_dir, work, detectors, targets, out_dir):
    """One mutant planted, built and judged by each detector, then taken out: its row."""
    path = src / m["file"]
    log = out_dir / "logs" / f"{m['id']}.log"
    log.write_text(f"# {m['id']}: {m['what']}\n")
    original = path.read_text() if path.is_file() else None
    matches = original.count(m["search"]) if original is not None else 0
    row = {"id": m["id"], "file": m["file"], "what": m["what"], "equivalent": m["equivalent"], "detectors": {}}
    cells = row["detectors"]
    if matches != 1:
        for d in detectors:
            cells[d] = {"status": STALE, "seconds": 0.0,
                        "detail": f"the search text occurs {matches} times in {m['file']}"}
    else:
        try:
            path.write_text(original.replace(m["search"], m["replace"], 1))
            rc, bsecs = build(args, build_dir, targets, log)
            row["build_seconds"] = round(bsecs, 1)
            if rc != 0:
                for d in detectors:
                    cells[d] = {"status": BUILD_FAILED, "seconds": bsecs, "detail": f"build exit {rc}"}
            else:
                for d in detectors:
                    status, detail, secs, detect_cpu = detect(d, args, build_dir, work, log)
                    excuse = excused(m, d)
                    if status == SURVIVED and excuse:
                        status = excuse[0]
                        detail = f"{detail}; {excuse[0]}: {excuse[1]}"
                    elif status == KILLED and excuse:
                        detail += f" (the catalogue calls it {excuse[0]}: its reason is wrong)"
                    cells[d] = {"status": status, "seconds": secs, "detail": detail}
                    if detect_cpu is not None:
                        cells[d]["detect_cpu_seconds"] = round(detect_cpu, 2)
        finally:
            path.write_text(original)
    return row


def main():
    args = parse_args()

    detectors = [d for d in args.detectors.split(",") if d]
    for d in detectors:
        if d not in DETECTORS:
            sys.exit(f"mutants: unknown detector {d!r} (campaign, replay, ctest)")
    mutants = read_catalogue(CATALOGUE)
    only = {i for o in args.only for i in o.split(",") if i}
    if only:
        unknown = only - {m["id"] for m in mutants}
        if unknown:
            sys.exit(f"mutants: no mutant {', '.join(sorted(unknown))} in {CATALOGUE}")
        mutants = [m for m in mutants if m["id"] in only]

    if args.list:
        return list_anchors(mutants)

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = Path(args.out) if args.out else REPO / "out" / "mutants" / stamp
    out_dir = out_dir.resolve()
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    scratch = Path(args.scratch or Path(os.environ.get("TMPDIR", "/tmp")) / f"shardcheck-mutants-{os.getuid()}")
    scratch = scratch.resolve()
    if scratch == REPO or REPO in scratch.parents:
        sys.exit("mutants: the scratch folder must be outside the repository")
    src, build_dir, work = scratch / "src", scratch / "build", scratch / "work"
    for d in (src, work):
        d.mkdir(parents=True, exist_ok=True)

    commit = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    meta = {"started": stamp, "commit": commit, "detectors": detectors, "budget": args.budget, "seed": args.seed,
            "jobs": args.jobs, "cases": args.cases or None}
    print(f"mutants: {len(mutants)} mutants, detectors {','.join(detectors)}, budget {args.budget} s, "
          f"scratch {scratch}, report {out_dir}", flush=True)

    targets = prepare_scratch(args, src, build_dir, work, detectors, out_dir / "logs" / "_baseline.log")

    results = []
    for i, m in enumerate(mutants, 1):
        row = run_mutant(m, args, src, build_dir, work, detectors, targets, out_dir)
        cells = row["detectors"]
        results.append(row)
        summary = ", ".join(f"{d} {cells[d]['status']}" for d in detectors)
        built = f", build {row['build_seconds']:.0f} s" if "build_seconds" in row else ""
        print(f"[{i}/{len(mutants)}] {m['id']}: {summary}  ({cells[detectors[0]]['detail']}{built})", flush=True)
        write_reports(out_dir, meta, results, detectors)  # current after every mutant

    # Leave the scratch build matching the real tree for the next run.
    build(args, build_dir, targets, out_dir / "logs" / "_baseline.log")
    totals = write_reports(out_dir, meta, results, detectors)
    print_matrix(results, detectors, totals)
    print(f"\nreport: {out_dir}/matrix.md, results.tsv, results.json; logs in {out_dir}/logs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
