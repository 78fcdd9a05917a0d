"""The installed distribution as a user meets it: its version, its public names, its
optional test dependencies, and the `shardcheck` command that `pip install .` puts on
the environment's PATH (the C++ command line, shipped in the wheel)."""

import json
import os
from pathlib import Path
import sysconfig
import subprocess
from importlib import metadata

import pytest

import shardcheck

SUBCOMMANDS = ("check", "repro", "digest", "campaign", "deepspeed", "plan", "reduce")


def command_path():
    """Where pip installed the wheel's `shardcheck` script, from the distribution's own
    file list (so a --user or --prefix install is found as well as a venv's bin/)."""
    dist = metadata.distribution("shardcheck")
    found = [f for f in dist.files or () if f.name == "shardcheck" and f.parent.name == "bin"]
    assert len(found) == 1, f"the distribution lists {len(found)} bin/shardcheck files: {dist.files}"
    return dist.locate_file(found[0])


def run(*args, input=None):
    return subprocess.run([str(command_path()), *args], capture_output=True, text=True, timeout=60, input=input)


def test_version_is_the_distributions():
    assert shardcheck.__version__ == metadata.version("shardcheck")
    parts = shardcheck.__version__.split(".")
    assert len(parts) >= 3 and all(p.isdigit() for p in parts[:3]), shardcheck.__version__


def test_public_names_are_exactly_all():
    # Submodules (shardcheck.strategies, .testing, .deepspeed, .pytest_plugin) become
    # attributes once imported; they are reached by their own names, not `import *`.
    public = {name for name, value in vars(shardcheck).items()
              if not name.startswith("_") and not isinstance(value, type(shardcheck))}
    assert public == set(shardcheck.__all__)
    for leaked in ("Any", "Optional", "Mapping", "json", "numbers", "numpy", "sys", "annotations"):
        assert not hasattr(shardcheck, leaked), leaked
    names = {}
    exec("from shardcheck import *", names)
    assert set(names) - {"__builtins__"} == set(shardcheck.__all__)


def test_test_extra_brings_pytest_and_hypothesis():
    requires = metadata.requires("shardcheck") or []
    in_test_extra = {r.split(";")[0].strip() for r in requires if 'extra == "test"' in r}
    assert {"pytest", "hypothesis"} <= in_test_extra, requires


def test_install_requires_numpy_and_regex():
    """numpy for arrays; regex for matching a checkpoint's affine-map patterns in bounded
    time (deepspeed inspect, contract 2)."""
    requires = metadata.requires("shardcheck") or []
    plain = {r.split(";")[0].strip() for r in requires if "extra ==" not in r}
    assert {"numpy", "regex"} <= plain, requires


def test_the_command_is_the_compiled_command_line():
    """bin/shardcheck is the C++ executable, or, in a wheel auditwheel repaired, its shim:
    auditwheel moves an executable that needs bundled libraries into
    <platlib>/shardcheck.scripts/ and leaves a Python script that execs it in its place."""
    path = command_path()
    assert path.is_file()
    assert os.access(path, os.X_OK)
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"\x7fELF":
        text = path.read_text(encoding="utf-8")
        assert "os.execv(" in text and "'shardcheck.scripts/shardcheck'" in text, (
            "bin/shardcheck is neither the C++ executable nor auditwheel's shim for it:\n" + text[:400])
        path = Path(sysconfig.get_path("platlib")) / "shardcheck.scripts" / "shardcheck"
        with open(path, "rb") as f:
            assert f.read(4) == b"\x7fELF", f"{path} should be the C++ executable"
    assert os.access(path, os.X_OK)


def test_the_command_version_is_the_packages():
    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"shardcheck {shardcheck.__version__} (affine map format 1)\n"


def test_the_command_help_covers_every_subcommand():
    done = run("--help")
    assert done.returncode == 0, done.stderr
    for sub in SUBCOMMANDS:
        assert f"\n  {sub} " in done.stdout, sub
    assert done.stdout.count("Exit: 0 ") == len(SUBCOMMANDS)
    for output in ("report.json", "table.txt", "checkpoint.json", "findings/SIGNATURE.json"):
        assert output in done.stdout, output


def test_the_command_and_the_module_judge_a_map_alike(tmp_path):
    valid = {
        "logical_shape": [4],
        "ranks": {"0": {"shard_shape": [4], "pieces": [{"shape": [4], "source": [0, [1]], "dest": [0, [1]], "locations": [0]}]}},
    }
    colliding = {
        "logical_shape": [4],
        "ranks": {
            "0": {
                "shard_shape": [4],
                "pieces": [
                    {"shape": [2], "source": [0, [1]], "dest": [0, [1]], "locations": [0]},
                    {"shape": [2], "source": [2, [1]], "dest": [0, [1]], "locations": [0]},
                ],
            }
        },
    }
    (tmp_path / "valid.json").write_text(json.dumps(valid))
    (tmp_path / "bad.json").write_text(json.dumps(colliding))

    ok = run("check", "--json", str(tmp_path / "valid.json"))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"] == "valid"
    shardcheck.check(valid)

    bad = run("check", "--json", str(tmp_path / "bad.json"))
    assert bad.returncode == 1, bad.stderr
    line = json.loads(bad.stdout)
    with pytest.raises(shardcheck.MapError) as e:
        shardcheck.check(colliding)
    assert (line["verdict"], line["kind"], line["rank"], line["piece"], line["address"], line["side"]) == (
        "refused",
        e.value.kind,
        e.value.rank,
        e.value.piece,
        e.value.address,
        e.value.side,
    )
    assert line["message"] == str(e.value)

    directory = run("check", str(tmp_path))
    assert directory.returncode == 2
    assert "is a directory, not a file" in directory.stderr


def test_the_command_and_the_module_plan_alike(tmp_path):
    def columns(tp):
        w = 12 // tp
        return {"logical_shape": [8, 12], "ranks": {str(r): {"shard_shape": [8, w], "pieces": [
            {"shape": [8, w], "source": [r * w, [12, 1]], "dest": [0, [w, 1]], "locations": [r]}]} for r in range(tp)}}

    source, target = tmp_path / "tp4.json", tmp_path / "tp3.json"
    source.write_text(json.dumps(columns(4)))
    target.write_text(json.dumps(columns(3)))
    planned = run("plan", "--json", "--compare-replicas", str(source), str(target))
    assert planned.returncode == 0, planned.stderr
    assert json.loads(planned.stdout) == shardcheck.plan(source, target, compare_replicas=True)

    over = run("plan", "--json", "--max-segments", "1", str(source), str(target))
    assert over.returncode == 1, over.stderr
    line = json.loads(over.stdout)
    with pytest.raises(shardcheck.MapError) as e:
        shardcheck.plan(source, target, max_segments=1)
    assert (line["verdict"], line["kind"], line["message"]) == ("refused", e.value.kind, str(e.value))
