"""`shardcheck deepspeed inspect` on hostile checkpoints (contract 2): each file below would
run code, or makes a reader allocate or read past what it holds, if read naively. Each
checkpoint folder is refused with exit 2 and one line naming the file and the global or
defect, by `python -m shardcheck deepspeed inspect` and by the `shardcheck` command, and
the folder a hostile pickle would create never appears. The corpus is built here at test
time (by hand, no torch needed; where torch is installed, also by torch.save and
torch.jit.save)."""

import argparse
import os
import pickle
import subprocess
import sys
import zipfile
from typing import Tuple

import pytest

from test_package import command_path
from test_torchfile import (FLOATS, REFUSED_OPCODES, Exec, Marker, edit_member, frag, legacy_bytes,
                            overlapping_members, state, tensor, zip_bytes)

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

MKDIR = f"{os.mkdir.__module__}.mkdir"  # the global os.mkdir pickles as: posix.mkdir

if torch is not None:
    class Scripted(torch.nn.Module):
        """A TorchScript module whose __setstate__ torch.load(weights_only=True) runs (torch
        1.13 hands a TorchScript archive to torch.jit.load)."""

        def __init__(self):
            super().__init__()
            self.scale = torch.ones(2)

        def forward(self, x):
            return x * self.scale

        @torch.jit.export
        def __getstate__(self) -> Tuple[torch.Tensor, bool]:
            return (self.scale, self.training)

        @torch.jit.export
        def __setstate__(self, state: Tuple[torch.Tensor, bool]) -> None:
            self.scale = state[0] * 2
            self.training = state[1]


def hand_built(marker):
    """{label: (file bytes, what the refusal must say)}, no torch needed."""
    module = b"}" + frag("w") + tensor("0", 12, (12,), (1,)) + b"s"
    legacy_module = b"}" + frag("w") + tensor("0", 12, (12,), (1,), legacy=True) + b"s"
    storages = [("0", FLOATS.tobytes())]
    mkdir = frag(Marker(marker))
    good = zip_bytes(state(module=module), storages)
    legacy_good = legacy_bytes(state(module=legacy_module), [("0", 12, FLOATS.tobytes())])
    cases = {
        "zip archive": (zip_bytes(state(module=module, x=mkdir), storages), f"loads the global {MKDIR} at byte"),
        "legacy file": (legacy_bytes(state(module=legacy_module, x=mkdir), [("0", 12, FLOATS.tobytes())]),
                        f"loads the global {MKDIR} at byte"),
        "bare pickle": (pickle.dumps({"module": {}, "x": Marker(marker)}, protocol=2), f"loads the global {MKDIR}"),
        "in universal_checkpoint_info": (zip_bytes(state(module=module, universal_checkpoint_info=b"}" + frag(
            "affine_map") + mkdir + b"s"), storages), f"loads the global {MKDIR}"),
        "exec": (zip_bytes(state(module=module, x=frag(Exec(marker))), storages), "loads the global __builtin__.exec"),
        "argparse namespace": (zip_bytes(state(module=module, args=frag(argparse.Namespace(lr=1))), storages),
                               "loads the global argparse.Namespace"),
        "TorchScript archive": (zip_bytes(state(module=module), storages, records={
            "version": "3", "constants.pkl": b"\x80\x02)."}), "is a TorchScript archive"),
        "storage outside the archive": (zip_bytes(state(module=b"}" + frag("w") + tensor("7", 12, (12,), (1,)) + b"s"),
                                                  storages), "but the archive has no archive/data/7"),
        "tensor past its storage": (zip_bytes(state(module=b"}" + frag("w") + tensor("0", 12, (13,), (1,)) + b"s"),
                                              storages), "builds a tensor reaching element 12 of storage 0"),
        "huge storage": (zip_bytes(state(module=b"}" + frag("w") + tensor("0", 1 << 60, (1,), (1,)) + b"s"),
                                   storages), "declares storage 0 as 1152921504606846976 float32"),
        "huge string": (zip_bytes(b"\x80\x02\x8d" + (1 << 62).to_bytes(8, "little") + b"."),
                        f"declares {1 << 62} bytes where 1 remain"),
        "member past the end": (edit_member(good, "archive/data/0", 1 << 30), "past the end of the file"),
        "zip bomb": (zip_bytes(state(module=module), extra=[("archive/data/0", bytes(8 << 20), zipfile.ZIP_DEFLATED)]),
                     "compressed (method 8)"),
        "nested archive": (zip_bytes(state(module=module), storages, extra=[("archive/inner.pt", good, 0)]),
                           "holds the member archive/inner.pt, which torch.save does not write"),
        "overlapping members": (overlapping_members(), "which overlap"),
        "truncated archive": (good[:len(good) // 2], "is not a readable zip archive"),
        "truncated legacy file": (legacy_good[:-10], "past the end of the file"),
        "REDUCE on a list": (zip_bytes(b"\x80\x02])R."), "calls a list at byte 4 of data.pkl"),
    }
    for name, body in REFUSED_OPCODES.items():
        cases[f"opcode {name}"] = (zip_bytes(b"\x80\x05" + body), f"uses the opcode {name} at byte")
    return cases


def torch_written(folder, marker):
    """{label: (file bytes, what the refusal must say)} written by torch itself."""
    if torch is None:
        return {}
    cases = {}
    path = folder / "torch.pt"
    for zipped, layout in ((True, "zip"), (False, "legacy")):
        torch.save({"module": {"w": torch.ones(3)}, "x": Marker(marker)}, path, _use_new_zipfile_serialization=zipped)
        cases[f"torch.save {layout}"] = (path.read_bytes(), f"loads the global {MKDIR}")
        torch.save({"module": {"w": torch.ones(3)}, "args": argparse.Namespace(lr=0.1)}, path,
                   _use_new_zipfile_serialization=zipped)
        cases[f"torch.save {layout} with args"] = (path.read_bytes(), "loads the global argparse.Namespace")
    torch.jit.save(torch.jit.script(Scripted()), path)
    cases["torch.jit.save with __setstate__"] = (path.read_bytes(), "is a TorchScript archive")
    return cases


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    marker = root / "MARKER"
    cases = {**hand_built(marker), **torch_written(root, marker)}
    folders = {}
    for i, (label, (data, what)) in enumerate(sorted(cases.items())):
        folder = root / f"case{i:02d}"
        folder.mkdir()
        (folder / "mp_rank_00_model_states.pt").write_bytes(data)
        folders[label] = (folder, what)
    return folders, marker


def run_all(commands):
    """Runs the commands two at a time (this machine's cores); their CompletedProcess-like
    (returncode, stdout, stderr) in order."""
    results = []
    for at in range(0, len(commands), 2):
        running = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for c in commands[at:at + 2]]
        for process in running:
            out, err = process.communicate(timeout=120)
            results.append((process.returncode, out, err))
    return results


@pytest.mark.parametrize("how", ["python -m shardcheck", "shardcheck"])
def test_every_hostile_checkpoint_is_refused_with_exit_2_naming_file_and_cause(corpus, how):
    folders, marker = corpus
    base = [sys.executable, "-m", "shardcheck"] if how != "shardcheck" else [str(command_path())]
    labels = sorted(folders)
    results = run_all([base + ["deepspeed", "inspect", str(folders[label][0])] for label in labels])
    for label, (code, out, err) in zip(labels, results):
        folder, what = folders[label]
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (label, code, out, err)
        file = str(folder / "mp_rank_00_model_states.pt")
        assert lines[0].startswith(f"shardcheck deepspeed inspect: {file} "), (label, err)
        assert what in lines[0], (label, what, err)
    assert not marker.exists()


def test_the_corpus_holds_what_torch_itself_writes(corpus):
    """The hostile files torch.save and torch.jit.save write are in the corpus above (and so
    refused by its tests) wherever torch is installed."""
    if torch is None:
        pytest.skip("the torch-written hostile files need torch to write them (Debian: python3-torch)")
    folders, _ = corpus
    assert {"torch.save zip", "torch.save legacy", "torch.save zip with args", "torch.save legacy with args",
            "torch.jit.save with __setstate__"} <= set(folders)


def test_hostile_checkpoints_are_refused_whatever_is_installed(corpus):
    """The reader imports nothing the file names: with `import torch` failing, the same
    refusals."""
    folders, marker = corpus
    block = ("import sys; sys.modules['torch'] = None; from shardcheck.__main__ import run; "
             "sys.exit(run(sys.argv[1:]))")
    labels = sorted(folders)
    results = run_all([[sys.executable, "-c", block, "deepspeed", "inspect", str(folders[label][0])]
                       for label in labels[::3]])  # a third of them: the reader is the same either way
    for label, (code, out, err) in zip(labels[::3], results):
        assert code == 2 and folders[label][1] in err, (label, err)
    assert not marker.exists()


def test_unsafe_load_is_torch_load_and_says_so(corpus, tmp_path):
    """--unsafe-load is full unpickling (torch.load(weights_only=False)): the help says it
    runs code from the file; on the hand-built marker file it does run it."""
    helped = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", "--help"],
                            capture_output=True, text=True, timeout=60)
    help_text = " ".join(helped.stdout.split())
    assert "full unpickling with torch.load(weights_only=False): runs code from the file; only for files you trust" \
        in help_text
    overview = " ".join(subprocess.run([str(command_path()), "--help"], capture_output=True, text=True,
                                       timeout=60).stdout.split())
    assert "reads the files without torch and runs nothing from them (contract 2); --unsafe-load is full unpickling " \
        "with torch.load (runs code from the file: trusted files only)" in overview and "needs torch" not in overview
    if torch is None:
        pytest.skip("--unsafe-load needs torch (Debian: python3-torch)")
    marker = tmp_path / "RAN"
    folder = tmp_path / "ckpt"
    folder.mkdir()
    torch.save({"module": {}, "x": Marker(marker)}, folder / "mp_rank_00_model_states.pt")
    run = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", str(folder), "--unsafe-load"],
                         capture_output=True, text=True, timeout=120)
    assert marker.exists() and run.returncode == 1, run.stdout + run.stderr  # ran it; then nothing to inspect


def test_a_fifo_or_device_among_the_files_is_never_waited_on(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    os.mkfifo(folder / "mp_rank_00_model_states.pt")
    (folder / "latest").symlink_to("/dev/zero")
    run = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", str(folder)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "is not a regular file (a FIFO)" in run.stderr, run.stderr
    os.unlink(folder / "mp_rank_00_model_states.pt")
    (folder / "mp_rank_00_model_states.pt").symlink_to("/dev/zero")
    run = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", str(folder)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "is not a regular file (a character device)" in run.stderr, run.stderr


def test_the_checkpoint_size_limit_is_refused_naming_it(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    module = b"}" + frag("w") + tensor("0", 12, (12,), (1,)) + b"s"
    (folder / "mp_rank_00_model_states.pt").write_bytes(zip_bytes(state(module=module), [("0", FLOATS.tobytes())]))
    run = subprocess.run([sys.executable, "-m", "shardcheck", "deepspeed", "inspect", str(folder),
                          "--max-checkpoint-bytes", "100"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "more than the 100 bytes left of the limit of 100 bytes" in run.stderr, run.stderr
