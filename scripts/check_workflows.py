#!/usr/bin/env python3
"""Structural checks of .github/workflows/*.yml and .pre-commit-hooks.yaml, run by
scripts/lint-workflows.sh before actionlint and zizmor (which check far more):

- every workflow has `on` and `jobs`; every job `runs-on` (or a reusable `uses`) and a
  list of steps, each with exactly one of `uses` and `run`;
- `needs` names jobs of the same workflow, and `needs.X` / `matrix.X` in expressions
  name a needed job / a matrix key of that job;
- every `${{` is closed, and `uses:` names owner/repo@ref, a local ./path or docker://;
  an action from another repository is pinned by its full commit SHA with the release
  it is in a comment on the same line (`uses: owner/repo@<40 hex> # v1.2.3`), so that a
  reader (and a bump) sees which release runs;
- the pre-commit hooks are a list with the keys pre-commit requires.

    python3 scripts/check_workflows.py [ROOT]
"""

import re
import sys
from pathlib import Path

import yaml

EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.S)
USES = re.compile(r"^(docker://\S+|\./\S+|[\w.-]+/[\w./-]+@[\w.-]+)$")
# A `uses:` line of another repository's action: its ref and what follows it.
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*[\"']?([\w.-]+/[\w./-]+)@([^\s\"'#]+)[\"']?\s*(#.*)?$")
PINNED = re.compile(r"^[0-9a-f]{40}$")
RELEASE_COMMENT = re.compile(r"^#\s*v\d")


def expressions(value):
    if isinstance(value, str):
        if value.count("${{") != len(EXPRESSION.findall(value)):
            yield None  # an unclosed expression
        yield from (m.strip() for m in EXPRESSION.findall(value))
    elif isinstance(value, dict):
        for item in value.values():
            yield from expressions(item)
    elif isinstance(value, list):
        for item in value:
            yield from expressions(item)


def check_job(path, name, job, jobs, problems):
    where = f"{path}: job {name}"
    if not isinstance(job, dict):
        problems.append(f"{where}: not a mapping")
        return
    needs = job.get("needs", [])
    needs = [needs] if isinstance(needs, str) else needs
    for need in needs:
        if need not in jobs:
            problems.append(f"{where}: needs {need!r}, which is no job of this workflow")
    if "uses" in job:
        return  # a reusable workflow's call
    if "runs-on" not in job:
        problems.append(f"{where}: no runs-on")
    steps = job.get("steps")
    if not isinstance(steps, list) or not steps:
        problems.append(f"{where}: no steps")
        steps = []
    for index, step in enumerate(steps):
        kinds = [key for key in ("uses", "run") if key in (step or {})]
        if len(kinds) != 1:
            problems.append(f"{where}, step {index + 1}: needs exactly one of uses and run, has {kinds}")
        elif kinds == ["uses"] and not USES.match(str(step["uses"])):
            problems.append(f"{where}, step {index + 1}: uses {step['uses']!r} is not owner/repo@ref")
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    for text in expressions(job):
        if text is None:
            problems.append(f"{where}: an unclosed ${{{{")
            continue
        for key in re.findall(r"\bmatrix\.([\w-]+)", text):
            if isinstance(matrix, dict) and key not in matrix:
                problems.append(f"{where}: matrix.{key} is no key of its matrix")
        for need in re.findall(r"\bneeds\.([\w-]+)", text):
            if need not in needs:
                problems.append(f"{where}: needs.{need} is not among its needs")


def check_pins(path, text, problems):
    for number, line in enumerate(text.splitlines(), 1):
        match = USES_LINE.match(line)
        if not match:
            continue
        action, ref, comment = match.groups()
        if not PINNED.match(ref):
            problems.append(f"{path}:{number}: {action}@{ref} is not pinned by a full commit SHA")
        elif not RELEASE_COMMENT.match(comment or ""):
            problems.append(f"{path}:{number}: {action}@{ref} names no release in a comment (# vX.Y.Z)")


def check_workflow(path, problems):
    text = path.read_text(encoding="utf-8")
    check_pins(path, text, problems)
    workflow = yaml.safe_load(text)
    if not isinstance(workflow, dict):
        problems.append(f"{path}: not a mapping")
        return
    # YAML 1.1 reads a bare `on` key as the boolean true.
    if "on" not in workflow and True not in workflow:
        problems.append(f"{path}: no `on`")
    jobs = workflow.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        problems.append(f"{path}: no jobs")
        return
    for name, job in jobs.items():
        check_job(path, name, job, jobs, problems)


def check_hooks(path, problems):
    hooks = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(hooks, list) or not hooks:
        problems.append(f"{path}: holds no hooks")
        return
    for hook in hooks:
        missing = {"id", "name", "entry", "language"} - set(hook)
        if missing:
            problems.append(f"{path}: hook {hook.get('id')!r} lacks {sorted(missing)}")


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    problems = []
    workflows = sorted((root / ".github" / "workflows").glob("*.yml"))
    if not workflows:
        problems.append("no workflows in .github/workflows")
    for path in workflows:
        check_workflow(path, problems)
    check_hooks(root / ".pre-commit-hooks.yaml", problems)
    for problem in problems:
        print(f"workflows: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"workflows: {len(workflows)} workflows and the pre-commit hooks are well formed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
