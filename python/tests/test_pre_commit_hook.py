"""The pre-commit hook (.pre-commit-hooks.yaml) as pre-commit runs it: its entry, split as
a shell would, with the staged files appended, and the installed `shardcheck` on PATH."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from test_package import command_path

ROOT = Path(__file__).resolve().parents[2]


def test_the_hook_checks_every_staged_map(tmp_path):
    yaml = pytest.importorskip("yaml", reason="PyYAML reads .pre-commit-hooks.yaml (Debian: python3-yaml)")
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "shardcheck-check" and hook["language"] == "python"
    valid = {"logical_shape": [4], "ranks": {"0": {"shard_shape": [4], "pieces": [
        {"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}}}
    (tmp_path / "good.json").write_text(json.dumps(valid))
    valid["ranks"]["0"]["pieces"][0]["source"][0] = 1
    (tmp_path / "bad.json").write_text(json.dumps(valid))
    env = dict(os.environ, PATH=f"{Path(command_path()).parent}{os.pathsep}{os.environ['PATH']}")

    def hook_run(*files):
        return subprocess.run(shlex.split(hook["entry"]) + list(files), capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=60)

    good = hook_run("good.json")
    assert good.returncode == 0 and good.stdout == "valid\n", good.stdout + good.stderr
    both = hook_run("bad.json", "good.json")
    assert both.returncode == 1, both.stdout + both.stderr
    assert both.stdout.startswith("refused bounds: ") and both.stdout.endswith("valid\n"), both.stdout
