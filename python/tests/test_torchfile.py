"""shardcheck.torchfile: torch.save files read without torch and without running anything
from them (contract 2). Files are built here byte by byte (no torch needed) and, where
torch is installed, written by torch.save itself; hostile ones are refused naming the
file and the global or the defect, and a marker their code would create never appears."""

import argparse
import io
import os
import pickle
import pickletools
import re
import struct
import tracemalloc
import warnings
import zipfile
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardcheck import torchfile
from shardcheck.torchfile import BFloat16Array, CheckpointError

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="files written by torch.save need torch (Debian: python3-torch)")

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
SYS_INFO = {"protocol_version": 1001, "little_endian": True, "type_sizes": {"short": 2, "int": 4, "long": 8}}


# --- Pickles and files built by hand -----------------------------------------------------

def frag(value):
    """The protocol 2 opcodes that push ``value`` (a number, string, tuple...), no PROTO, no STOP."""
    return pickle.dumps(value, protocol=2)[2:-1]


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def persistent_id(key, numel, storage="FloatStorage", legacy=False):
    fields = frag("storage") + glob("torch", storage) + frag(key) + frag("cpu") + frag(numel)
    return b"(" + fields + (b"N" if legacy else b"") + b"tQ"


def tensor(key, numel, size, stride, offset=0, storage="FloatStorage", legacy=False):
    """torch._utils._rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())."""
    args = (persistent_id(key, numel, storage, legacy) + frag(offset) + frag(tuple(size)) + frag(tuple(stride)) +
            b"\x89" + glob("collections", "OrderedDict") + b")R")
    return glob("torch._utils", "_rebuild_tensor_v2") + b"(" + args + b"tR"


def state(**items):
    """A protocol 2 pickle of a dict: each keyword's value is the opcodes of its value."""
    return b"\x80\x02}(" + b"".join(frag(key) + value for key, value in items.items()) + b"u."


def zip_bytes(data_pkl, storages=(), prefix="archive", records=None, extra=()):
    """A torch.save archive as torch writes one (members stored), ``data_pkl`` None for none."""
    out = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        warnings.simplefilter("ignore")  # a member written twice, on purpose
        if data_pkl is not None:
            archive.writestr(f"{prefix}/data.pkl", data_pkl)
        for key, raw in storages:
            archive.writestr(f"{prefix}/data/{key}", raw)
        for name, raw in (records if records is not None else {"version": "3\n"}).items():
            archive.writestr(f"{prefix}/{name}", raw)
        for name, raw, method in extra:
            archive.writestr(name, raw, compress_type=method)
    return out.getvalue()


def legacy_bytes(object_pickle, storages=()):
    """The legacy layout: magic, protocol, sys_info, the object, the keys, then per key an
    8-byte little-endian element count and the bytes."""
    head = b"".join(pickle.dumps(v, protocol=2) for v in (LEGACY_MAGIC, 1001, SYS_INFO))
    tail = pickle.dumps([key for key, _, _ in storages], protocol=2)
    return head + object_pickle + tail + b"".join(struct.pack("<q", count) + raw for _, count, raw in storages)


FLOATS = np.arange(12, dtype="<f4")


def layouts_state(legacy=False):
    """A state dict of tensors over two storages: a contiguous 3x4, its transpose, a view
    at an offset, a 0-d and an empty tensor, and a bfloat16 vector."""
    t = lambda *a, **k: tensor(*a, legacy=legacy, **k)  # noqa: E731
    module = (b"}(" + frag("w") + t("0", 12, (3, 4), (4, 1)) + frag("wt") + t("0", 12, (4, 3), (1, 4)) +
              frag("row") + t("0", 12, (4,), (1,), offset=8) + frag("scalar") + t("0", 12, (), (), offset=5) +
              frag("empty") + t("0", 12, (0, 4), (4, 1)) +
              frag("half") + t("1", 3, (3,), (1,), storage="BFloat16Storage") + b"u")
    return state(module=module, step=frag(7), lr=frag(0.5), name=frag("x"), flags=frag((True, None)))


BF16 = np.array([0x3F80, 0xC000, 0x7FC1], dtype="<u2")  # 1.0, -2.0, a NaN with a payload
STORAGES = [("0", FLOATS.tobytes()), ("1", BF16.tobytes())]


def check_layouts(obj):
    module = obj["module"]
    full = FLOATS.reshape(3, 4)
    assert np.array_equal(module["w"], full) and module["w"].base is not None  # a view of the file's bytes
    assert np.array_equal(module["wt"], full.T) and module["wt"].flags.c_contiguous  # copied, contiguous
    assert np.array_equal(module["row"], FLOATS[8:]) and module["scalar"].shape == () and module["scalar"] == 5
    assert module["empty"].shape == (0, 4)
    assert isinstance(module["half"], BFloat16Array) and torchfile.dtype_name(module["half"]) == "bfloat16"
    assert module["half"].view(np.uint16).tolist() == BF16.tolist()
    assert all(not a.flags.writeable for a in module.values())
    assert (obj["step"], obj["lr"], obj["name"], obj["flags"]) == (7, 0.5, "x", (True, None))


def test_the_zip_layout_is_read_without_torch(tmp_path):
    path = tmp_path / "m.pt"
    path.write_bytes(zip_bytes(layouts_state(), STORAGES))
    check_layouts(torchfile.load(path))


def test_the_legacy_layout_is_read_without_torch(tmp_path):
    storages = [("0", 12, FLOATS.tobytes()), ("1", 3, BF16.tobytes())]
    path = tmp_path / "m.pt"
    path.write_bytes(legacy_bytes(layouts_state(legacy=True), storages))
    check_layouts(torchfile.load(path))


def test_the_byteorder_record_is_honoured():
    big = zip_bytes(layouts_state(), [("0", FLOATS.astype(">f4").tobytes()), ("1", BF16.astype(">u2").tobytes())],
                    records={"version": "3\n", "byteorder": "big"})
    check_layouts(torchfile.loads(big))
    with pytest.raises(CheckpointError, match="byte order middle"):
        torchfile.loads(zip_bytes(layouts_state(), STORAGES, records={"version": "3\n", "byteorder": "middle"}))


def test_a_legacy_storage_at_an_unaligned_offset_is_copied_aligned():
    obj = state(module=b"}" + frag("w") + tensor("0", 3, (3,), (1,), legacy=True) + b"s")
    for pad in range(8):  # a key of another length moves the storage's bytes
        data = legacy_bytes(obj.replace(frag("0"), frag("0" * (pad + 1))),
                            [("0" * (pad + 1), 3, np.array([1.5, 2.5, 3.5], "<f4").tobytes())])
        w = torchfile.loads(data)["module"]["w"]
        assert w.flags.aligned and w.tolist() == [1.5, 2.5, 3.5]


# --- Hostile files -------------------------------------------------------------------------

class Marker:
    """Unpickled, it would create the directory ``path`` (os.mkdir, global posix.mkdir)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


class Exec:
    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return exec, (f"import os; os.mkdir({self.path!r})",)


def hostile_payloads(marker):
    """(opcodes of a value whose unpickling would run code, the global it names)."""
    mkdir = f"{os.mkdir.__module__}.mkdir"  # posix.mkdir
    return [(frag(Marker(marker)), mkdir), (frag(Exec(marker)), "__builtin__.exec"),  # protocol 2's name
            (frag(argparse.Namespace(a=1)), "argparse.Namespace")]


def wrappers(payload):
    """The payload as the value of a model state, hidden in universal_checkpoint_info, in
    a bare pickle, a zip archive's data.pkl and a legacy file's object pickle."""
    plain = state(module=b"}", x=payload)
    hidden = state(module=b"}", universal_checkpoint_info=b"}" + frag("affine_map") + payload + b"s")
    return {"bare pickle": plain, "zip": zip_bytes(plain), "zip, in universal_checkpoint_info": zip_bytes(hidden),
            "legacy": legacy_bytes(plain), "legacy, in universal_checkpoint_info": legacy_bytes(hidden)}


def test_no_global_outside_the_allowed_ones_is_ever_loaded(tmp_path):
    marker = tmp_path / "MARKER"
    for payload, name in hostile_payloads(marker):
        for label, data in wrappers(payload).items():
            path = tmp_path / "mp_rank_00_model_states.pt"
            path.write_bytes(data)
            with pytest.raises(CheckpointError) as refused:
                torchfile.load(path)
            message = str(refused.value)
            assert message.startswith(str(path)) and f"loads the global {name} at byte" in message, (label, message)
            assert "\n" not in message and not marker.exists(), label


REFUSED_OPCODES = {
    "INST": b"(iargparse\nNamespace\n.", "OBJ": b"(}o.",
    "NEWOBJ": b"}" + b")\x81.", "NEWOBJ_EX": b"})}\x92.", "BUILD": b"}}b.", "EXT1": b"\x82\x01.",
    "EXT2": b"\x83\x01\x00.", "EXT4": b"\x84\x01\x00\x00\x00.", "PERSID": b"P0\n.",
    "BYTEARRAY8": b"\x96" + struct.pack("<Q", 1) + b"x.", "NEXT_BUFFER": b"\x97.", "READONLY_BUFFER": b"N\x98.",
}


def vm_loads(data):
    """The reader's pickle interpreter on one pickle (globals as in data.pkl; no storages)."""
    data = bytearray(data)
    context = torchfile._Context(legacy=False, read=None, copy_budget=0)
    return torchfile._Pickle(data, 0, len(data), "the pickle", context).run()


def test_every_opcode_is_either_interpreted_or_refused_by_name():
    handled = {pickletools.code2op[chr(code)].name for code in torchfile._HANDLERS}
    assert handled | set(torchfile._REFUSED_OPCODES) == {op.name for op in pickletools.opcodes}
    assert not handled & set(torchfile._REFUSED_OPCODES) and set(REFUSED_OPCODES) == set(torchfile._REFUSED_OPCODES)
    for name, body in REFUSED_OPCODES.items():
        with pytest.raises(torchfile._Refused, match=f"uses the opcode {name} at byte"):
            vm_loads(b"\x80\x05" + body)
    with pytest.raises(torchfile._Refused, match="holds the byte 0xff at byte 2 of the pickle, which is no pickle "):
        vm_loads(b"\x80\x02\xff.")


@pytest.mark.parametrize("body, what", [
    (b"])R.", "calls a list at byte 4 of the pickle, which is not a function this reader runs"),
    (glob("torch", "FloatStorage") + b")R.", "calls torch.FloatStorage"),
    (glob("torch._utils", "_rebuild_tensor_v2") + b"N\x85R.", "calls torch._utils._rebuild_tensor_v2 with 1 arguments"),
    (glob("collections", "OrderedDict") + b"]\x85R.", "calls collections.OrderedDict with 1 arguments"),
    (glob("_codecs", "encode") + frag("x") + frag("zlib") + b"\x86R.", "other than a string and latin1"),
    (b"\x93.", "takes a value from an empty stack"),
    (frag(1) + frag("a") + b"\x93.", "names a global with something other than two strings"),
    (b"}" + frag(1.5) + frag(1) + b"s.", "uses 1.5 as a dict or set key"),
    (b"}" + frag(1 << 70) + frag(1) + b"s.", "uses an integer of 71 bits as a dict or set key"),
    (b"}" + frag((1,)) + frag(1) + b"s.", "uses a tuple as a dict or set key"),
    (b"]" + frag(1) + frag(2) + b"s.", "adds an item to a list"),
    (b"NN.", "stops with an open MARK or more than one value"),
    (b"(N.", "stops with an open MARK or more than one value"),
    (b"N", "ends before its STOP opcode"),
    (b"Np1099511627776\n.", "uses the memo index 1099511627776"),
    (b"h\x07.", "reads the memo index 7"),
    (b"\x8d" + struct.pack("<Q", 1 << 62) + b".", f"declares {1 << 62} bytes where 1 remain"),
    (b"\x8e" + struct.pack("<Q", 1 << 40) + b".", f"declares {1 << 40} bytes where 1 remain"),
    (b"\x8b" + struct.pack("<i", 1 << 30) + b".", f"declares {1 << 30} bytes where 1 remain"),
    (b"\x95" + struct.pack("<Q", 1 << 50) + b"N.", f"declares a frame of {1 << 50} bytes"),
    (b"c" + b"a" * 70000 + b".", "has a text argument without an end of line"),
    (b"X\x02\x00\x00\x00\xff\xfe.", "holds a string that is not utf-8"),
    (b"\x80\x06N.", "declares pickle protocol 6"),
])
def test_malformed_and_hostile_pickles_are_refused_saying_what_and_where(body, what):
    with pytest.raises(torchfile._Refused) as refused:
        vm_loads(b"\x80\x02" + body)
    assert what in str(refused.value)


def test_memo_and_stack_growth_stay_within_the_pickles_length():
    """An index near 2**32 costs one memo entry, not a table of 2**32; a million DUPs a
    million stack slots (a few MB), after which the pickle is refused."""
    assert vm_loads(b"\x80\x02N" + b"r\xff\xff\xff\xff" + b"j\xff\xff\xff\xff" + b"0.") is None
    body = b"\x80\x02N" + b"2" * 1_000_000 + b"."
    tracemalloc.start()
    try:
        with pytest.raises(torchfile._Refused, match="more than one value"):
            vm_loads(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * len(body), peak


def test_tensors_outside_their_storage_and_storages_outside_the_file_are_refused():
    def one(t, storages=(("0", FLOATS.tobytes()),), **kw):
        return zip_bytes(state(module=b"}" + frag("w") + t + b"s"), storages, **kw)

    cases = {
        r"builds a tensor reaching element 15 of storage 0 at byte \d+ of data.pkl, which holds 12":
            one(tensor("0", 12, (4, 4), (4, 1))),
        r"reaching element 12 of storage 0 at byte \d+ of data.pkl, which holds 12":
            one(tensor("0", 12, (2,), (1,), offset=11)),
        r"gives a tensor's stride as -1 at byte \d+ of data.pkl, not an integer from 0 to 2\*\*63 - 1":
            one(tensor("0", 12, (2,), (-1,))),
        r"gives a tensor's extent as an integer of 71 bits": one(tensor("0", 12, (1 << 70,), (1,))),
        r"declares storage 0 as 1152921504606846976 float32 \(4611686018427387904 bytes\) at byte \d+ of "
        r"data.pkl, but archive/data/0 holds 48 bytes": one(tensor("0", 1 << 60, (1,), (1,))),
        r"names storage 7 at byte \d+ of data.pkl, but the archive has no archive/data/7":
            one(tensor("7", 12, (1,), (1,))),
        r"loads the global torch.QInt8Storage": one(tensor("0", 12, (1,), (1,), storage="QInt8Storage")),
        r"names a storage by '../0' at byte \d+ of data.pkl, not by a decimal key": one(tensor("../0", 12, (1,), (1,))),
        r"builds a tensor of 33 dimensions, more than 32": one(tensor("0", 12, (1,) * 33, (1,) * 33)),
        r"declares storage 0 twice, as 12 float32 and as 3 float32":
            one(b"(" + tensor("0", 12, (1,), (1,)) + tensor("0", 3, (1,), (1,)) + b"t"),
    }
    for what, data in cases.items():
        with pytest.raises(CheckpointError, match=f"^the bytes .*{what}"):
            torchfile.loads(data)
    legacy = legacy_bytes(state(module=b"}" + frag("w") + tensor("0", 12, (12,), (1,), legacy=True) + b"s"),
                          [("0", 12, FLOATS.tobytes())])
    torchfile.loads(legacy)
    for cut, what in ((len(legacy) - 1, "declares storage 0 as 48 bytes"), (len(legacy) - 48, "48 bytes at byte"),
                      (len(legacy) - 52, "ends before the element count of storage 0")):
        with pytest.raises(CheckpointError, match=what):
            torchfile.loads(legacy[:cut])
    with pytest.raises(CheckpointError, match="gives storage 0 13 elements"):
        torchfile.loads(legacy.replace(struct.pack("<q", 12) + FLOATS.tobytes()[:4], struct.pack("<q", 13) +
                                       FLOATS.tobytes()[:4]))
    with pytest.raises(CheckpointError, match="holds 1 bytes after its last storage"):
        torchfile.loads(legacy + b"\x00")


def test_non_contiguous_copies_may_not_exceed_the_files_size():
    """Views are free; a transposed or overlapping view is copied, and 1000 of them over one
    storage would copy 1000 storages: refused once the copies pass 4 times the file's size
    (two transposed views of one storage are read)."""
    square = np.arange(64 * 64, dtype="<f4").tobytes()
    many = b"".join(frag(f"t{i}") + tensor("0", 64 * 64, (64, 64), (1, 64)) for i in range(1000))
    with pytest.raises(CheckpointError, match="needing more than 4 times the file's size in copies"):
        torchfile.loads(zip_bytes(state(module=b"}(" + many + b"u"), [("0", square)]))
    few = b"".join(frag(f"t{i}") + tensor("0", 64 * 64, (64, 64), (1, 64)) for i in range(2))
    module = torchfile.loads(zip_bytes(state(module=b"}(" + few + b"u"), [("0", square)]))["module"]
    assert np.array_equal(module["t1"], np.frombuffer(square, "<f4").reshape(64, 64).T)
    overlap = tensor("0", 12, (1 << 20, 12), (0, 1))  # a million rows that are all the same row
    with pytest.raises(CheckpointError, match="needing more than 4 times the file's size in copies"):
        torchfile.loads(zip_bytes(state(module=b"}" + frag("w") + overlap + b"s"), [("0", FLOATS.tobytes())]))
    shared = b"".join(frag(f"t{i}") + tensor("0", 12, (3, 4), (4, 1)) for i in range(1000))
    module = torchfile.loads(zip_bytes(state(module=b"}(" + shared + b"u"), [("0", FLOATS.tobytes())]))["module"]
    assert len(module) == 1000  # contiguous views of one storage: no copies at all


def edit_member(data, name, size=None, crc=None, central_only=False):
    """The archive with member ``name``'s sizes (both) and CRC-32 replaced in its central
    directory entry and, unless ``central_only``, its local header."""
    data = bytearray(data)
    raw = name.encode()
    end = data.rindex(b"PK\x05\x06")
    count, _, at = struct.unpack_from("<HII", data, end + 10)
    for _ in range(count):
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, at + 28)
        if bytes(data[at + 46:at + 46 + name_length]) == raw:
            local = struct.unpack_from("<I", data, at + 42)[0]
            for header, crc_at in ((at, 16),) + (() if central_only else ((local, 14),)):
                if crc is not None:
                    struct.pack_into("<I", data, header + crc_at, crc)
                if size is not None:
                    struct.pack_into("<II", data, header + crc_at + 4, size, size)
            return bytes(data)
        at += 46 + name_length + extra_length + comment_length
    raise KeyError(name)


def overlapping_members():
    """Two stored members whose bytes overlap (the trick of a non-recursive zip bomb): data/0
    grown over data/1's local header, its CRC-32 made right for the bytes it now spans."""
    data = zip_bytes(state(module=b"}"), [("0", b"A" * 64), ("1", b"B" * 64)])
    start = data.index(b"A" * 64)
    grown = 64 + 30 + len("archive/data/1") + 8
    return edit_member(data, "archive/data/0", size=grown, crc=zlib.crc32(data[start:start + grown]))


def test_archives_that_are_no_torch_save_file_are_refused(tmp_path):
    good = zip_bytes(layouts_state(), STORAGES)
    bomb = zip_bytes(layouts_state(), STORAGES[1:], extra=[("archive/data/0", bytes(8 << 20), zipfile.ZIP_DEFLATED)])
    nested = zip_bytes(layouts_state(), STORAGES, extra=[("archive/inner.pt", good, zipfile.ZIP_STORED)])
    torchscript = zip_bytes(state(module=b"}"), records={"version": "3\n", "constants.pkl": b"\x80\x02)."},
                            extra=[("archive/code/__torch__.py", b"def f(): pass\n", zipfile.ZIP_STORED)])
    cases = {
        "holds the member archive/data/0 compressed (method 8); torch.save stores members uncompressed": bomb,
        "member archive/inner.pt, which torch.save does not write": nested,
        "is a TorchScript archive": torchscript,
        "is not a readable zip archive": good[:len(good) // 2],
        "outside its archive folder": zip_bytes(layouts_state(), STORAGES, extra=[("other/x", b"", 0)]),
        "without a version record": zip_bytes(layouts_state(), STORAGES, records={}),
        "archive version 99": zip_bytes(layouts_state(), STORAGES, records={"version": "99"}),
        "format version 2": zip_bytes(layouts_state(), STORAGES, records={"version": "3", ".format_version": "2"}),
        "is a zip archive without archive/data.pkl": zip_bytes(None, STORAGES),
        "declares the member archive/data/0 as 1073741824 bytes at byte": edit_member(good, "archive/data/0", 1 << 30),
        "local header gives another size (6 bytes) than the central directory (4 bytes)":
            edit_member(good, "archive/data/1", 4, central_only=True),
        "whose bytes fail its CRC-32": good.replace(FLOATS.tobytes(), FLOATS[::-1].tobytes()),
        "twice": zip_bytes(layouts_state(), STORAGES, extra=[("archive/data/0", FLOATS.tobytes(), 0)]),
    }
    for what, data in cases.items():
        path = tmp_path / "f.pt"
        path.write_bytes(data)
        with pytest.raises(CheckpointError, match=f"^{re.escape(str(path))} .*{re.escape(what)}"):
            torchfile.load(path)
    with pytest.raises(CheckpointError, match="holds the members archive/data/0 and archive/data/1, which overlap"):
        torchfile.loads(overlapping_members())


def test_files_that_are_not_regular_files_are_never_waited_on(tmp_path):
    fifo = tmp_path / "mp_rank_00_model_states.pt"
    os.mkfifo(fifo)  # no writer: a plain open would block for ever
    with pytest.raises(CheckpointError, match="is not a regular file \\(a FIFO\\)"):
        torchfile.load(fifo)
    with pytest.raises(CheckpointError, match="a character device"):
        torchfile.load("/dev/zero")
    (tmp_path / "big.pt").write_bytes(zip_bytes(layouts_state(), STORAGES))
    with pytest.raises(CheckpointError, match="more than the limit of 100 bytes"):
        torchfile.load(tmp_path / "big.pt", max_bytes=100)
    with pytest.raises(CheckpointError, match="is empty"):
        torchfile.loads(b"")


# --- The interpreter against Python's own unpickler, on data alone --------------------------

keys = st.one_of(st.text(max_size=6), st.integers(-(1 << 60), 1 << 60), st.booleans(), st.none(), st.binary(max_size=6))
scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(-(1 << 200), 1 << 200),
                    st.floats(allow_nan=False), st.text(max_size=20), st.binary(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner), st.tuples(inner, inner, inner, inner),
    st.dictionaries(keys, inner, max_size=4), st.sets(keys, max_size=4), st.frozensets(keys, max_size=4)),
    max_leaves=16)


def canon(value):
    """The value with every container's type made explicit (set and frozenset compare equal)."""
    if isinstance(value, dict):
        return ("dict", sorted(((repr(k), canon(v)) for k, v in value.items())))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, sorted(repr(k) for k in value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [canon(v) for v in value])
    return (type(value).__name__, repr(value))


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(values, st.integers(0, 5))
def test_plain_data_reads_as_pythons_unpickler_reads_it(value, protocol):
    data = pickle.dumps(value, protocol=protocol)
    assert canon(vm_loads(data)) == canon(pickle.loads(data))


def test_python_2_strings_read_as_utf8():
    assert vm_loads(b"S'a\\x41\\n\\'b'\np0\n.") == "aA\n'b"
    assert vm_loads(b"U\x02\xc3\xa9.") == "\u00e9" and vm_loads(b"I01\n.") is True and vm_loads(b"L12L\n.") == 12


# --- Files torch itself writes ---------------------------------------------------------------

def torch_state():
    generator = torch.Generator().manual_seed(5)
    base = torch.randn(6, 4, generator=generator)
    module = {
        "float32": base, "transposed": base.t(), "strided": base[::2, 1:], "float64": base.double(),
        "float16": base.half(), "bfloat16": base.bfloat16(), "int64": torch.arange(5), "int32": torch.arange(5).int(),
        "int16": torch.arange(5).short(), "int8": torch.arange(-2, 3).char(), "uint8": torch.arange(5).byte(),
        "bool": torch.tensor([True, False, True]), "scalar": torch.tensor(3.5), "empty": torch.empty(0, 3),
        "parameter": torch.nn.Parameter(torch.ones(2, 2)), "expanded": torch.ones(3, 1).expand(3, 4),
    }
    return {"module": module, "ds_version": "0.19.8", "dp_world_size": 1, "param_shapes": [{"float32": base.shape}],
            "sparse_tensor_module_names": set(), "buffer_names": ["b"], "payload": b"cposix\nsystem\n(S'id'\ntR.",
            "universal_checkpoint_info": {"universal_checkpoint_version": 0.4,
                                          "affine_map": {"version": 1, "params": {}}}}


def expect_torch_state(obj, original):
    for name, value in original["module"].items():
        array = obj["module"][name]
        expected = value.detach()
        if expected.dtype == torch.bfloat16:
            assert isinstance(array, BFloat16Array), name
            expected = expected.view(torch.int16).numpy().view(np.uint16)
        else:
            expected = expected.numpy()
        assert array.shape == expected.shape and array.dtype == expected.dtype, name
        assert array.tobytes() == np.ascontiguousarray(expected).tobytes(), name
    assert obj["param_shapes"] == [{"float32": (6, 4)}] and obj["sparse_tensor_module_names"] == set()
    assert obj["payload"] == original["payload"]
    assert obj["universal_checkpoint_info"]["universal_checkpoint_version"] == 0.4


@needs_torch
@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_what_torch_save_writes_reads_bit_exact(tmp_path, zipped, protocol):
    original = torch_state()
    torch.save(original, tmp_path / "m.pt", _use_new_zipfile_serialization=zipped, pickle_protocol=protocol)
    expect_torch_state(torchfile.load(tmp_path / "m.pt"), original)


@needs_torch
def test_what_torch_save_writes_with_hostile_objects_is_refused(tmp_path):
    marker = tmp_path / "MARKER"
    for zipped in (True, False):
        for hostile, name in ((Marker(marker), "mkdir"), (argparse.Namespace(lr=1), "argparse.Namespace")):
            torch.save({"module": {"w": torch.ones(2)}, "x": hostile}, tmp_path / "m.pt",
                       _use_new_zipfile_serialization=zipped)
            with pytest.raises(CheckpointError, match=f"loads the global .*{name}"):
                torchfile.load(tmp_path / "m.pt")
    assert not marker.exists()


# --- Fuzzing: byte mutations of files torch writes -----------------------------------------

@pytest.fixture(scope="module")
def torch_files(tmp_path_factory):
    """Two files torch.save wrote (zip, legacy), each carrying the text of a pickle that
    would create the folder MARKER, for mutations to stumble on; and that folder's path."""
    if torch is None:
        pytest.skip("the fuzz seeds are written by torch.save (Debian: python3-torch)")
    folder = tmp_path_factory.mktemp("seeds")
    seeds = {"marker": folder / "MARKER"}
    original = torch_state()
    original["payload"] = pickle.dumps(Marker(seeds["marker"]), protocol=0)
    for zipped in (True, False):
        path = folder / f"{'zip' if zipped else 'legacy'}.pt"
        torch.save(original, path, _use_new_zipfile_serialization=zipped)
        seeds["zip" if zipped else "legacy"] = path.read_bytes()
    with zipfile.ZipFile(io.BytesIO(seeds["zip"])) as archive:
        seeds["members"] = [(info.filename, archive.read(info)) for info in archive.infolist()]
    return seeds


def rezipped(members, plan):
    """The archive rebuilt with data.pkl mutated and every CRC-32 right, so that the
    mutation reaches the pickle interpreter instead of failing the CRC check."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, raw in members:
            archive.writestr(name, mutate(raw, plan) if name.endswith("/data.pkl") else raw)
    return out.getvalue()


edits = st.lists(st.tuples(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]),
                           st.floats(0, 1, exclude_max=True), st.integers(0, 255), st.integers(1, 64)),
                 min_size=1, max_size=6)


def mutate(data, plan):
    data = bytearray(data)
    for kind, where, byte, length in plan:
        at = int(where * len(data)) if data else 0
        if kind == "flip" and data:
            data[at] ^= 1 << (byte % 8)
        elif kind == "set" and data:
            data[at] = byte
        elif kind == "insert":
            data[at:at] = bytes([byte]) * length
        elif kind == "delete":
            del data[at:at + length]
        elif kind == "truncate":
            del data[at:]
    return bytes(data)


FUZZ = settings(max_examples=1500, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("layout", ["zip", "zip, data.pkl", "legacy"])
def test_mutated_torch_files_read_or_are_refused_in_bounded_memory(torch_files, layout):
    """Flips, writes, insertions, deletions and truncations of a file torch.save wrote:
    the reader returns the object or raises CheckpointError, nothing else; runs nothing
    (the seeds carry the text of a posix.mkdir pickle for mutations to stumble on); and
    its peak allocation stays within a small multiple of the file's size."""
    seed = torch_files[layout.split(",")[0]]
    peaks, read = [], []

    @FUZZ
    @given(edits)
    def fuzz(plan):
        data = rezipped(torch_files["members"], plan) if layout == "zip, data.pkl" else mutate(seed, plan)
        tracemalloc.start()
        try:
            try:
                obj = torchfile.loads(data)
                read.append(True)
            except CheckpointError as error:
                assert "\n" not in str(error)
                obj = None
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        peaks.append((peak, len(data)))
        assert peak <= 64 * len(data) + (1 << 20), (peak, len(data))
        if obj is not None:
            assert isinstance(obj, (dict, list, tuple, set, frozenset, int, float, str, bytes, np.ndarray,
                                    type(None)))

    fuzz()
    assert not torch_files["marker"].exists()
    ratio = max(peak / size for peak, size in peaks if size >= 1024)
    print(f"{layout}: {len(peaks)} mutants of {len(seed)} bytes ({len(read)} read, the rest refused), peak "
          f"allocation at most {max(p for p, _ in peaks)} bytes, {ratio:.1f} x the file's size")


# Files torch itself wrote (python/tests/data/write_torch_files.py): the zip layout and the
# legacy one, by Debian's torch 1.13 and by PyPI's torch 2.15 (whose zip records differ:
# byteorder, .data/serialization_id, aligned storages). Read without torch, they give the
# values written, bit for bit, a transposed view included.
TORCH_FILES = os.path.join(os.path.dirname(__file__), "data")


@pytest.mark.parametrize("name", ["torch-1.13-zip.pt", "torch-1.13-legacy.pt", "torch-2.15-zip.pt",
                                  "torch-2.15-legacy.pt"])
def test_files_torch_wrote_are_read_as_written(name):
    got = torchfile.load(os.path.join(TORCH_FILES, name))
    module = got["module"]
    assert list(module) == ["w", "b", "h", "i", "flag"]
    w = np.arange(24, dtype=np.float32).reshape(4, 6) / 8
    assert module["w"].dtype == np.float32 and np.array_equal(module["w"], w)
    b = module["b"]
    assert isinstance(b, BFloat16Array) and b.shape == (6,)
    expected_bf16 = (np.arange(6, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    assert b.dtype == np.uint16 and np.array_equal(np.asarray(b), expected_bf16)
    h = np.arange(12, dtype=np.float16).reshape(3, 4).T
    assert module["h"].dtype == np.float16 and module["h"].shape == (4, 3)
    assert module["h"].tobytes() == np.ascontiguousarray(h).tobytes()
    assert np.array_equal(module["i"], np.array([1, -2, 3], dtype=np.int64))
    assert module["flag"].dtype == np.bool_ and module["flag"].tolist() == [True, False]
    assert np.array_equal(np.asarray(got["p"]), np.ones((2, 2), dtype=np.float32))
    assert got["universal_checkpoint_info"] == {"universal_checkpoint_version": 0.2}
