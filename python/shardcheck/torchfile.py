# Long file: the readers of both layouts and the restricted unpickler are one module, so
# that every path from a file's bytes to an object is read in one place (contract 2).
"""``torch.save`` files read without torch, and without running anything they hold
(contract 2: a checkpoint is untrusted like a map).

``load(path)`` reads both layouts ``torch.save`` writes and returns the saved object,
every tensor in it a read-only NumPy array:

- the zip archive (torch 1.6 and later): one folder ``ARCHIVE/`` holding the object's
  pickle ``data.pkl``, each storage's bytes uncompressed in ``data/KEY``, and small
  records (``version`` or ``.data/version``, ``byteorder``, ``.data/serialization_id``,
  ``.format_version``, ``.storage_alignment``);
- the legacy file (``_use_new_zipfile_serialization=False``): five pickles in a row (the
  magic number, the protocol version 1001, a ``sys_info`` dict, the object, the sorted
  storage keys) and then, per key in that order, an 8-byte little-endian element count
  and the storage's little-endian bytes.

The pickles are run by this module's own interpreter (``_Pickle``), not by Python's
``pickle`` nor by torch: it knows the opcodes that build numbers, strings, bytes,
tuples, lists, dicts and sets, and ``find_class`` resolves only the globals that
``torch.save`` writes for tensors and containers (``_rebuild_tensor_v2``,
``_rebuild_parameter``, ``_rebuild_parameter_with_state``, ``_rebuild_from_type_v2`` with
``torch.Tensor`` or ``Parameter``, ``collections.OrderedDict``, ``torch.Size``,
``torch.device``, the typed storages, ``set``, ``frozenset``, and ``_codecs.encode`` and
``bytes`` as protocol 2 writes ``bytes``), each to an implementation here that builds
plain data. Anything else -- any other global, ``INST``/``OBJ``/``NEWOBJ``/``BUILD``, the
copyreg extension registry, ``REDUCE`` on anything but those functions, a TorchScript
archive -- is refused with a ``CheckpointError`` naming the file and the global or the
defect. Nothing is imported by name from the file, so what is installed (torch or not)
changes nothing.

Bounds: the file must be a regular file no larger than ``max_bytes``; it is read once
(memory: its size; a storage misaligned in it, as the legacy layout's usually are, or in
the other byte order is copied once more). Every size the file declares -- a pickle string's length, a zip
member's size and offset, a storage's element count, a tensor's view -- is checked
against the bytes actually there before anything is allocated for it. Zip members must
be stored (not compressed), lie inside the file, not overlap, and carry the size the
pickle declares for their storage. A tensor that is a row-major contiguous run of its
storage is a view of the file's bytes (no copy); any other view (transposed, strided,
overlapping) is copied, and the copies together may not exceed COPY_FACTOR (4) times the
file's size. The pickle interpreter keeps no more than the pickle's own length in stack
and memo entries, and refuses dict and set keys whose hashes could be chosen to collide
(only strings, bytes, booleans, None and integers below 2**61 are keys).
"""

import io
import os
import pickletools
import re
import stat
import struct
import sys
import zipfile
import zlib
from collections import OrderedDict

import numpy as np

__all__ = ["CheckpointError", "BFloat16Array", "load", "loads", "read_bounded", "check_regular", "dtype_name"]


class CheckpointError(Exception):
    """A checkpoint (or one of its files) that cannot be read: one sentence naming the file
    and the defect, or the global it would have had to load."""


class BFloat16Array(np.ndarray):
    """A bfloat16 tensor as NumPy can hold one: its 16-bit patterns, dtype uint16 (NumPy
    has no bfloat16). ``shardcheck.rebuild(map, shards, dtype="bfloat16")`` and
    ``reshard(..., dtype="bfloat16")`` read uint16 shards as bfloat16 bits."""


def dtype_name(array):
    """The dtype's name as shardcheck spells it: NumPy's, or ``bfloat16`` for a
    BFloat16Array."""
    return "bfloat16" if isinstance(array, BFloat16Array) else array.dtype.name


# torch.save's storage types (the global torch.<Name>Storage a pickle names): the NumPy
# type of their elements, little-endian (a zip archive's `byteorder` record can say big),
# and the dtype name.
_STORAGE_TYPES = {
    "DoubleStorage": ("<f8", "float64"),
    "FloatStorage": ("<f4", "float32"),
    "HalfStorage": ("<f2", "float16"),
    "BFloat16Storage": ("<u2", "bfloat16"),
    "LongStorage": ("<i8", "int64"),
    "IntStorage": ("<i4", "int32"),
    "ShortStorage": ("<i2", "int16"),
    "CharStorage": ("|i1", "int8"),
    "ByteStorage": ("|u1", "uint8"),
    "BoolStorage": ("|b1", "bool"),
    "UntypedStorage": ("|u1", "uint8"),
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # torch/serialization.py MAGIC_NUMBER
_LEGACY_PROTOCOL = 1001  # torch/serialization.py PROTOCOL_VERSION
_MAX_ARCHIVE_VERSION = 10  # the highest `version` record of a torch.save archive read here
_MAX_RECORD_BYTES = 4096  # a metadata record (version, byteorder, ...) is a few bytes
_MAX_DIMS = 32  # NumPy's dimension limit
_MAX_LINE = 1 << 16  # a text opcode's argument (a global's module or name, ...)
_KEY_INT_LIMIT = (1 << 61) - 1  # CPython hashes an int below it to itself
_INT64_MAX = (1 << 63) - 1
_MAX_MEMO_INDEX = 1 << 32
_STORAGE_KEY = re.compile(r"[0-9]{1,20}")
_ZIP_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")
_ZIP_LOCAL_MAGIC = 0x04034B50
_READ_CHUNK = 1 << 20
# Non-contiguous tensors are copied; all copies of one file together are bounded by this
# many times its size (views cost nothing: a tied transposed weight, or a few strided
# views of one storage, fit; a thousand transposed views of one storage do not).
COPY_FACTOR = 4


class _Refused(Exception):
    """Why a pickle or an archive is refused; the reader prefixes the file's name."""


def _open_regular(path, max_bytes, what):
    """(fd, size) of a regular file of at most ``max_bytes``, opened without blocking (a
    FIFO without a writer would block a plain open); CheckpointError otherwise."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as error:
        raise CheckpointError(f"cannot open {path}: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CheckpointError(f"{path} is not a regular file (a {_file_kind(info.st_mode)}), so it is not read "
                                  f"as a {what}")
        if max_bytes is not None and info.st_size > max_bytes:
            raise CheckpointError(f"{path} is {info.st_size} bytes, more than the limit of {max_bytes} bytes for a "
                                  f"{what}, so it is not read")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def check_regular(path, max_bytes=None, what="file"):
    """The size of ``path``, a regular file of at most ``max_bytes`` (CheckpointError
    otherwise), without reading it."""
    fd, size = _open_regular(path, max_bytes, what)
    os.close(fd)
    return size


def read_bounded(path, max_bytes, what="file"):
    """The bytes of a regular file (a bytearray: read once, into one buffer), refused
    (CheckpointError) when it is something else (a FIFO, a device, a directory: opened
    without blocking, never read) or holds more than ``max_bytes``. At most the size
    fstat gives, plus one byte to notice growth, is read."""
    fd, size = _open_regular(path, max_bytes, what)
    try:
        buffer = bytearray(size + 1)
        view = memoryview(buffer)
        got = 0
        while got <= size:
            try:
                n = os.readv(fd, [view[got:min(size + 1, got + _READ_CHUNK)]])
            except OSError as error:
                raise CheckpointError(f"cannot read {path}: {error.strerror}") from None
            if n == 0:
                break
            got += n
        view.release()
        if got != size:
            raise CheckpointError(f"{path} changed size while it was read ({size} bytes before, {got} read)")
        del buffer[size:]
        return buffer
    finally:
        os.close(fd)


def _file_kind(mode):
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def load(path, max_bytes=None):
    """The object ``torch.save`` wrote to ``path``, tensors as read-only NumPy arrays
    (bfloat16 ones as ``BFloat16Array``). Raises CheckpointError for a file that is not
    such a file, or that holds anything but tensors, containers, strings and numbers.
    ``max_bytes``: the largest file read (None: any); only a regular file is read."""
    return loads(read_bounded(path, max_bytes, what="torch.save file"), path)


def loads(data, name="the bytes"):
    """What ``load`` reads, from the file's bytes in memory (``bytes`` or ``bytearray``;
    tensors are views of them where they can be). ``name`` names it in errors."""
    if not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"loads reads bytes or a bytearray, not {type(data).__name__}")
    try:
        if not data:
            raise _Refused("is empty")
        if data[:4] == b"PK\x03\x04":
            return _load_zip(data, name)
        return _load_legacy(data)
    except _Refused as why:
        raise CheckpointError(f"{name} {why}") from None
    except MemoryError:
        raise CheckpointError(f"{name} needs more memory than this machine gives to read it") from None


# ---------------------------------------------------------------------------------------
# The pickle interpreter.

_OPCODE_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}
# What a refused opcode would have done.
_REFUSED_OPCODES = {
    "INST": "builds an instance of a class the pickle names",
    "OBJ": "builds an instance of a class",
    "NEWOBJ": "calls a class's __new__",
    "NEWOBJ_EX": "calls a class's __new__",
    "BUILD": "sets an object's state (its __setstate__ or __dict__)",
    "EXT1": "loads a global from the copyreg extension registry",
    "EXT2": "loads a global from the copyreg extension registry",
    "EXT4": "loads a global from the copyreg extension registry",
    "PERSID": "names an external object in text, which torch.save never writes",
    "BYTEARRAY8": "builds a bytearray, which torch.save never writes",
    "NEXT_BUFFER": "takes an out-of-band buffer, which torch.save never writes",
    "READONLY_BUFFER": "takes an out-of-band buffer, which torch.save never writes",
}


class _Global:
    """A global a pickle may name, resolved to this module's own implementation: ``call``
    (None for a marker, such as a storage type or torch.Tensor, that is only an argument)
    and what it stands for."""

    __slots__ = ("name", "call", "storage")

    def __init__(self, name, call=None, storage=None):
        self.name = name
        self.call = call
        self.storage = storage  # (NumPy type, dtype name) of a storage type

    def __repr__(self):
        return f"<global {self.name}>"


class _Pickle:
    """One pickle, run from ``data[start:end]``. ``context`` resolves persistent ids
    (storages) and builds tensors; None allows neither, nor any global (the legacy
    format's header pickles)."""

    def __init__(self, data, start, end, where, context=None, base=0):
        self.data = data  # a bytearray: the whole file
        self.view = memoryview(data)
        self.start = start
        self.pos = start
        self.end = end
        self.where = where
        self.context = context
        self.base = base  # where byte 0 of `where` is in `data`
        self.stack = []
        self.marks = []
        self.memo = {}
        self.at = start

    # -- errors and input ----------------------------------------------------------
    def fail(self, what, why=""):
        """Refuses the pickle: ``what`` it does, where, and ``why`` that is refused."""
        raise _Refused(f"{what} at byte {self.at - self.base} of {self.where}{why}")

    def take(self, n):
        if n < 0 or n > self.end - self.pos:
            self.fail(f"declares {n} bytes where {self.end - self.pos} remain")
        chunk = bytes(self.view[self.pos:self.pos + n])
        self.pos += n
        return chunk

    def unpack(self, fmt):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def line(self):
        end = self.data.find(b"\n", self.pos, min(self.end, self.pos + _MAX_LINE))
        if end < 0:
            self.fail(f"has a text argument without an end of line in {_MAX_LINE} bytes")
        text = bytes(self.view[self.pos:end])
        self.pos = end + 1
        return text

    def text(self, raw, encoding="utf-8", errors="strict"):
        try:
            return str(raw, encoding, errors)
        except UnicodeDecodeError as error:
            self.fail(f"holds a string that is not {encoding} ({error.reason})")

    # -- the stack -----------------------------------------------------------------
    def push(self, value):
        self.stack.append(value)

    def pop(self):
        if not self.stack:
            self.fail("takes a value from an empty stack")
        return self.stack.pop()

    def top(self):
        if not self.stack:
            self.fail("takes a value from an empty stack")
        return self.stack[-1]

    def pop_mark(self):
        if not self.marks:
            self.fail("closes a MARK it never opened")
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def key(self, value):
        kind = type(value)
        if kind is str or kind is bytes or kind is bool or value is None:
            return value
        if kind is int and -_KEY_INT_LIMIT < value < _KEY_INT_LIMIT:
            return value
        self.fail(f"uses {_describe(value)} as a dict or set key", ", where keys are strings, bytes, booleans, None "
                  "or integers below 2**61 (whose hashes cannot be made to collide)")

    def target(self, kinds, what):
        target = self.top()
        if type(target) not in kinds:
            self.fail(f"adds {what} to a {type(target).__name__}")
        return target

    # -- running -------------------------------------------------------------------
    def run(self):
        """The pickle's object; ``self.pos`` is then just past its STOP."""
        handlers = _HANDLERS
        while True:
            self.at = self.pos
            if self.pos >= self.end:
                self.fail("ends before its STOP opcode")
            code = self.data[self.pos]
            self.pos += 1
            handler = handlers.get(code)
            if handler is None:
                name = _OPCODE_NAMES.get(code)
                if name is None:
                    self.fail(f"holds the byte 0x{code:02x}", ", which is no pickle opcode")
                self.fail(f"uses the opcode {name}", f", which {_REFUSED_OPCODES[name]}")
            if handler(self):
                if self.marks or len(self.stack) != 1:
                    self.fail("stops with an open MARK or more than one value on its stack")
                return self.stack[0]

    def find_class(self, module, name):
        if self.context is not None:
            found = _find_global(module, name)
            if found is not None:
                return found
        self.fail(f"loads the global {module}.{name}", ", which this reader never loads (only tensors, storages, "
                  "containers, strings and numbers are read)")


def _op(name):
    def register(function):
        _HANDLERS[ord(next(op.code for op in pickletools.opcodes if op.name == name))] = function
        return function
    return register


_HANDLERS = {}


@_op("PROTO")
def _proto(p):
    version = p.take(1)[0]
    if version > 5:
        p.fail(f"declares pickle protocol {version}", ", newer than 5")


@_op("FRAME")
def _frame(p):
    size = p.unpack("<Q")
    if size > p.end - p.pos:
        p.fail(f"declares a frame of {size} bytes where {p.end - p.pos} remain")
    # A frame only groups the opcodes that follow; they are read from the same bytes.


@_op("STOP")
def _stop(p):
    return True


@_op("MARK")
def _mark(p):
    p.marks.append(p.stack)
    p.stack = []


@_op("POP")
def _pop(p):
    if p.stack:
        p.stack.pop()
    else:
        p.pop_mark()


@_op("POP_MARK")
def _pop_mark(p):
    p.pop_mark()


@_op("DUP")
def _dup(p):
    p.push(p.top())


# Numbers, strings, bytes.
for _name, _value in (("NONE", None), ("NEWTRUE", True), ("NEWFALSE", False)):
    _op(_name)(lambda p, value=_value: p.push(value))
for _name, _fmt in (("BININT", "<i"), ("BININT1", "<B"), ("BININT2", "<H"), ("BINFLOAT", ">d")):
    _op(_name)(lambda p, fmt=_fmt: p.push(p.unpack(fmt)))


@_op("INT")
def _int(p):
    text = p.line()
    if text in (b"00", b"01"):  # protocol 0's booleans
        p.push(text == b"01")
        return
    p.push(_parse_int(p, text))


@_op("LONG")
def _long(p):
    text = p.line()
    p.push(_parse_int(p, text[:-1] if text.endswith(b"L") else text))


def _parse_int(p, text):
    try:
        return int(text.decode("ascii"), 10)
    except (UnicodeDecodeError, ValueError):
        p.fail("holds an integer that is not a decimal number of at most 4300 digits")


@_op("LONG1")
def _long1(p):
    p.push(int.from_bytes(p.take(p.take(1)[0]), "little", signed=True))


@_op("LONG4")
def _long4(p):
    p.push(int.from_bytes(p.take(p.unpack("<i")), "little", signed=True))


@_op("FLOAT")
def _float(p):
    try:
        p.push(float(p.line().decode("ascii")))
    except (UnicodeDecodeError, ValueError):
        p.fail("holds a float that is not a number")


for _name, _fmt in (("BINUNICODE", "<I"), ("SHORT_BINUNICODE", "<B"), ("BINUNICODE8", "<Q")):
    _op(_name)(lambda p, fmt=_fmt: p.push(p.text(p.take(p.unpack(fmt)), "utf-8", "surrogatepass")))
for _name, _fmt in (("BINBYTES", "<I"), ("SHORT_BINBYTES", "<B"), ("BINBYTES8", "<Q")):
    _op(_name)(lambda p, fmt=_fmt: p.push(p.take(p.unpack(fmt))))
# Protocol 0-2 strings (Python 2's str), decoded as torch.load decodes them (UTF-8).
for _name, _fmt in (("BINSTRING", "<i"), ("SHORT_BINSTRING", "<B")):
    _op(_name)(lambda p, fmt=_fmt: p.push(p.text(p.take(p.unpack(fmt)))))


@_op("UNICODE")
def _unicode(p):
    p.push(p.text(p.line(), "raw-unicode-escape"))


@_op("STRING")
def _string(p):
    text = p.line()
    if len(text) < 2 or text[0] != text[-1] or text[:1] not in (b"'", b'"'):
        p.fail("holds a STRING argument that is not quoted")
    try:
        raw = _escape_decode(text[1:-1])
    except ValueError:
        p.fail("holds a STRING argument with a broken escape")
    p.push(p.text(raw))


def _escape_decode(text):
    """Python 2 string escapes (as repr writes them: \\\\, \\', \\", \\n, \\r, \\t, \\xNN, octal)."""
    out = bytearray()
    i = 0
    simple = {ord("\\"): 0x5C, ord("'"): 0x27, ord('"'): 0x22, ord("n"): 0x0A, ord("r"): 0x0D, ord("t"): 0x09,
              ord("a"): 0x07, ord("b"): 0x08, ord("f"): 0x0C, ord("v"): 0x0B, ord("\n"): None}
    while i < len(text):
        c = text[i]
        if c != 0x5C:
            out.append(c)
            i += 1
            continue
        if i + 1 >= len(text):
            raise ValueError("a trailing backslash")
        e = text[i + 1]
        if e in simple:
            if simple[e] is not None:
                out.append(simple[e])
            i += 2
        elif e == ord("x"):
            digits = text[i + 2:i + 4]
            if len(digits) != 2:
                raise ValueError("a short \\x escape")
            out.append(int(digits, 16))
            i += 4
        elif ord("0") <= e <= ord("7"):
            j = i + 1
            while j < len(text) and j < i + 4 and ord("0") <= text[j] <= ord("7"):
                j += 1
            out.append(int(text[i + 1:j], 8) & 0xFF)
            i = j
        else:
            out += text[i:i + 2]  # Python 2 keeps an unknown escape as written
            i += 2
    return bytes(out)


# Containers.
_op("EMPTY_TUPLE")(lambda p: p.push(()))
_op("EMPTY_LIST")(lambda p: p.push([]))
_op("EMPTY_DICT")(lambda p: p.push({}))
_op("EMPTY_SET")(lambda p: p.push(set()))
_op("TUPLE")(lambda p: p.push(tuple(p.pop_mark())))
_op("LIST")(lambda p: p.push(p.pop_mark()))
for _name, _count in (("TUPLE1", 1), ("TUPLE2", 2), ("TUPLE3", 3)):
    _op(_name)(lambda p, count=_count: p.push(tuple(reversed([p.pop() for _ in range(count)]))))


@_op("FROZENSET")
def _frozenset(p):
    p.push(frozenset(p.key(item) for item in p.pop_mark()))


@_op("DICT")
def _dict(p):
    items = p.pop_mark()
    if len(items) % 2:
        p.fail("builds a dict from an odd number of values")
    p.push({p.key(items[i]): items[i + 1] for i in range(0, len(items), 2)})


@_op("APPEND")
def _append(p):
    value = p.pop()
    p.target((list,), "an item").append(value)


@_op("APPENDS")
def _appends(p):
    items = p.pop_mark()
    p.target((list,), "items").extend(items)


@_op("SETITEM")
def _setitem(p):
    value = p.pop()
    key = p.key(p.pop())
    p.target((dict, OrderedDict), "an item")[key] = value


@_op("SETITEMS")
def _setitems(p):
    items = p.pop_mark()
    if len(items) % 2:
        p.fail("sets items from an odd number of values")
    target = p.target((dict, OrderedDict), "items")
    for i in range(0, len(items), 2):
        target[p.key(items[i])] = items[i + 1]


@_op("ADDITEMS")
def _additems(p):
    items = p.pop_mark()
    target = p.target((set,), "set items")
    for item in items:
        target.add(p.key(item))


# The memo.
def _memo_index(p, index):
    if not 0 <= index < _MAX_MEMO_INDEX:
        p.fail(f"uses the memo index {index}", ", outside [0, 2**32)")
    return index


def _put(p, index):
    p.memo[_memo_index(p, index)] = p.top()


def _get(p, index):
    try:
        p.push(p.memo[_memo_index(p, index)])
    except KeyError:
        p.fail(f"reads the memo index {index}", ", which was never written")


_op("PUT")(lambda p: _put(p, _parse_int(p, p.line())))
_op("BINPUT")(lambda p: _put(p, p.take(1)[0]))
_op("LONG_BINPUT")(lambda p: _put(p, p.unpack("<I")))
_op("MEMOIZE")(lambda p: _put(p, len(p.memo)))
_op("GET")(lambda p: _get(p, _parse_int(p, p.line())))
_op("BINGET")(lambda p: _get(p, p.take(1)[0]))
_op("LONG_BINGET")(lambda p: _get(p, p.unpack("<I")))


# Globals, calls and persistent ids: each goes through this module's own tables.
@_op("GLOBAL")
def _global(p):
    module = p.text(p.line())
    name = p.text(p.line())
    p.push(p.find_class(module, name))


@_op("STACK_GLOBAL")
def _stack_global(p):
    name = p.pop()
    module = p.pop()
    if type(module) is not str or type(name) is not str:
        p.fail("names a global with something other than two strings")
    p.push(p.find_class(module, name))


@_op("REDUCE")
def _reduce(p):
    args = p.pop()
    function = p.pop()
    if not isinstance(function, _Global) or function.call is None:
        what = function.name if isinstance(function, _Global) else f"a {type(function).__name__}"
        p.fail(f"calls {what}", ", which is not a function this reader runs")
    if type(args) is not tuple:
        p.fail(f"calls {function.name} with a {type(args).__name__} for its arguments")
    p.push(function.call(p, function.name, args))


@_op("BINPERSID")
def _binpersid(p):
    pid = p.pop()
    if p.context is None:
        p.fail("names an external object (a storage) where none belongs")
    p.push(p.context.persistent_load(p, pid))


# ---------------------------------------------------------------------------------------
# The globals a checkpoint may name, and what each builds here.

def _arity(p, name, args, low, high=None):
    high = low if high is None else high
    if not low <= len(args) <= high:
        count = str(low) if low == high else f"{low} to {high}"
        p.fail(f"calls {name} with {len(args)} arguments", f" instead of {count}")


def _integer(p, value, what, low=0):
    """``value``, an integer from ``low`` to 2**63 - 1 (torch's sizes, strides, offsets and
    element counts are 64-bit), or the pickle is refused."""
    if type(value) is not int or not low <= value <= _INT64_MAX:
        p.fail(f"gives {what} as {_describe(value)}", f", not an integer from {low} to 2**63 - 1")
    return value


def _describe(value):
    """A value from the pickle, as an error message shows it: a number or None as it is
    (an integer past 64 bits by its size), anything else by its type."""
    if type(value) is int and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    if type(value) in (int, bool, float) or value is None:
        return repr(value)
    return f"a {type(value).__name__}"


def _rebuild_tensor(p, name, args):
    """torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride,
    requires_grad, backward_hooks[, metadata]) (or _rebuild_tensor, the first four)."""
    if name.endswith("_v2"):
        _arity(p, name, args, 6, 7)
    else:
        _arity(p, name, args, 4)
    storage, offset, size, stride, *rest = args
    if rest:
        requires_grad, hooks, *metadata = rest
        if type(requires_grad) is not bool:
            p.fail(f"calls {name} with requires_grad {_describe(requires_grad)}")
        if type(hooks) not in (dict, OrderedDict) or hooks:
            p.fail(f"calls {name} with backward hooks", ", which are never read")
        if metadata and metadata[0] not in (None, {}):
            p.fail(f"calls {name} with tensor metadata (conjugate or negative bits)", ", which is not read")
    return p.context.tensor(p, storage, offset, size, stride)


def _rebuild_parameter(p, name, args):
    """torch._utils._rebuild_parameter(data, requires_grad, backward_hooks) and
    _rebuild_parameter_with_state(..., state): the parameter's tensor (its state, plain
    data, is dropped)."""
    _arity(p, name, args, 4 if name.endswith("_with_state") else 3)
    data, requires_grad, hooks = args[:3]
    if not isinstance(data, np.ndarray) and data is not _PENDING:
        p.fail(f"calls {name} with {_describe(data)} for its tensor")
    if type(requires_grad) is not bool:
        p.fail(f"calls {name} with requires_grad {_describe(requires_grad)}")
    if type(hooks) not in (dict, OrderedDict) or hooks:
        p.fail(f"calls {name} with backward hooks", ", which are never read")
    return data


_TENSOR_TYPES = ("torch.Tensor", "torch._tensor.Tensor", "torch.nn.parameter.Parameter")


def _rebuild_from_type(p, name, args):
    """torch._tensor._rebuild_from_type_v2(func, new_type, args, state): ``func(*args)``
    when new_type is torch.Tensor or Parameter (a tensor subclass is refused; the state,
    plain data, is dropped)."""
    _arity(p, name, args, 4)
    function, new_type, args = args[:3]
    if not isinstance(new_type, _Global) or new_type.name not in _TENSOR_TYPES:
        p.fail(f"calls {name} for the type {getattr(new_type, 'name', _describe(new_type))}",
               ", which is not torch.Tensor or Parameter")
    if not isinstance(function, _Global) or function.call not in (_rebuild_tensor, _rebuild_parameter):
        p.fail(f"calls {name} with {getattr(function, 'name', _describe(function))}", ", which does not build a tensor")
    if type(args) is not tuple:
        p.fail(f"calls {name} with a {type(args).__name__} for its arguments")
    return function.call(p, function.name, args)


def _ordered_dict(p, name, args):
    _arity(p, name, args, 0)  # OrderedDict pickles as OrderedDict() and then its items
    return OrderedDict()


def _size(p, name, args):
    _arity(p, name, args, 1)
    if type(args[0]) not in (tuple, list):
        p.fail(f"calls {name} with {_describe(args[0])}")
    return tuple(_integer(p, extent, "an extent of a torch.Size") for extent in args[0])


def _device(p, name, args):
    _arity(p, name, args, 1, 2)
    kind = args[0]
    if type(kind) is not str or len(kind) > 64:
        p.fail(f"calls {name} with {_describe(kind)}")
    if len(args) == 2 and args[1] is not None:
        return f"{kind}:{_integer(p, args[1], 'a device index')}"
    return kind


def _set(p, name, args):
    _arity(p, name, args, 0, 1)
    items = args[0] if args else ()
    if type(items) not in (list, tuple):
        p.fail(f"calls {name} with {_describe(items)}")
    values = [p.key(item) for item in items]
    return frozenset(values) if name.endswith("frozenset") else set(values)


def _encode(p, name, args):
    """_codecs.encode(text, "latin1"): how protocol 2 writes bytes."""
    _arity(p, name, args, 2)
    text, encoding = args
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        p.fail(f"calls {name} with something other than a string and latin1")
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        p.fail(f"calls {name} with a string that is not latin1")


def _bytes(p, name, args):
    _arity(p, name, args, 0)  # protocol 2 writes b"" as bytes()
    return b""


_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type,
    ("torch.tensor", "_rebuild_from_type_v2"): _rebuild_from_type,  # its module's name before torch 1.9
    ("torch", "Tensor"): None,
    ("torch._tensor", "Tensor"): None,
    ("torch.nn.parameter", "Parameter"): None,
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch", "Size"): _size,
    ("torch", "device"): _device,
    ("builtins", "set"): _set,
    ("__builtin__", "set"): _set,
    ("builtins", "frozenset"): _set,
    ("__builtin__", "frozenset"): _set,
    ("builtins", "bytes"): _bytes,
    ("__builtin__", "bytes"): _bytes,
    ("_codecs", "encode"): _encode,
}


def _find_global(module, name):
    key = (module, name)
    if key in _GLOBALS:
        return _Global(f"{module}.{name}", _GLOBALS[key])
    if module == "torch" and name in _STORAGE_TYPES:
        return _Global(f"torch.{name}", storage=_STORAGE_TYPES[name])
    return None


# ---------------------------------------------------------------------------------------
# Storages and tensors.

_PENDING = object()  # a tensor of the legacy format's first pass, before its storage is read


class _Storage:
    __slots__ = ("key", "numpy_type", "dtype", "numel", "array")

    def __init__(self, key, numpy_type, dtype, numel):
        self.key = key
        self.numpy_type = numpy_type
        self.dtype = dtype
        self.numel = numel
        self.array = None


class _Context:
    """Resolves a pickle's storages (``read(storage)`` fills ``storage.array``, or
    ``read`` is None in the legacy format's first pass) and builds its tensors, copying
    a non-contiguous view only while the copies fit ``copy_budget`` bytes."""

    def __init__(self, legacy, read, copy_budget):
        self.legacy = legacy
        self.read = read
        self.copy_budget = copy_budget
        self.storages = {}
        self.views = {}

    def persistent_load(self, p, pid):
        fields = 6 if self.legacy else 5
        if type(pid) is not tuple or len(pid) != fields or pid[0] not in ("storage", b"storage"):
            p.fail(f"names the external object {_describe(pid)}", f", not a storage of {fields} fields")
        _, storage_type, key, location, numel = pid[:5]
        if not isinstance(storage_type, _Global) or storage_type.storage is None:
            p.fail(f"names a storage of type {getattr(storage_type, 'name', _describe(storage_type))}")
        if type(key) is not str or not _STORAGE_KEY.fullmatch(key):
            p.fail(f"names a storage by {_describe(key) if type(key) is not str else _shown(repr(key[:40]))}",
                   ", not by a decimal key")
        if type(location) not in (str, bytes) or len(location) > 64:
            p.fail(f"gives storage {key} the location {_describe(location)}")
        _integer(p, numel, f"storage {key}'s element count")
        numpy_type, dtype = storage_type.storage
        storage = self.storages.get(key)
        if storage is None:
            storage = self.storages[key] = _Storage(key, numpy_type, dtype, numel)
            if self.read is not None:
                self.read(p, storage)
        elif (storage.dtype, storage.numel) != (dtype, numel):
            p.fail(f"declares storage {key} twice, as {storage.numel} {storage.dtype} and as {numel} {dtype}")
        if self.legacy and pid[5] is not None:
            return self.view(p, storage, pid[5])
        return storage

    def view(self, p, root, metadata):
        """The legacy format's storage view (view_key, offset, size) into a root storage."""
        if type(metadata) is not tuple or len(metadata) != 3 or type(metadata[0]) is not str:
            p.fail(f"gives storage {root.key} the view {_describe(metadata)}")
        key, offset, size = metadata
        _integer(p, offset, "a storage view's offset")
        _integer(p, size, "a storage view's size")
        if offset + size > root.numel:
            p.fail(f"views elements [{offset}, {offset + size}) of storage {root.key}", f", which holds {root.numel}")
        if key in self.storages:
            p.fail(f"uses the storage key {key[:40]!r} for a view too")
        view = self.views.get(key)
        if view is None:
            view = self.views[key] = (_Storage(key, root.numpy_type, root.dtype, size), root, offset)
        elif view[1] is not root or view[2] != offset or view[0].numel != size:
            p.fail(f"declares the storage view {key[:40]!r} twice, differently")
        storage = view[0]
        if root.array is not None and storage.array is None:
            storage.array = root.array[offset:offset + size]
        return storage

    def tensor(self, p, storage, offset, size, stride):
        if not isinstance(storage, _Storage):
            p.fail(f"builds a tensor on {_describe(storage)}", ", not on a storage")
        _integer(p, offset, "a tensor's storage offset")
        if type(size) not in (tuple, list) or type(stride) not in (tuple, list) or len(size) != len(stride):
            p.fail("builds a tensor whose size and stride are not two sequences of one length")
        if len(size) > _MAX_DIMS:
            p.fail(f"builds a tensor of {len(size)} dimensions, more than {_MAX_DIMS}")
        shape = [_integer(p, extent, "a tensor's extent") for extent in size]
        steps = [_integer(p, step, "a tensor's stride") for step in stride]
        numel = 1
        for extent in shape:
            numel *= extent
        if numel == 0:
            if storage.array is None:
                return _PENDING
            try:
                empty = np.empty(shape, storage.numpy_type)
            except (ValueError, OverflowError):
                p.fail("builds an empty tensor", ", whose extents NumPy cannot hold")
            return _readonly(_typed(empty, storage.dtype))
        last = offset + sum((extent - 1) * step for extent, step in zip(shape, steps))
        if last >= storage.numel:
            p.fail(f"builds a tensor reaching element {last} of storage {storage.key}",
                   f", which holds {storage.numel}")
        if storage.array is None:
            return _PENDING
        contiguous, expected = True, 1
        for extent, step in zip(reversed(shape), reversed(steps)):
            if extent != 1 and step != expected:
                contiguous = False
            expected *= extent
        if contiguous:
            array = storage.array[offset:offset + numel].reshape(shape)
        else:
            nbytes = numel * storage.array.itemsize
            if nbytes > self.copy_budget:
                p.fail(f"builds non-contiguous tensors needing more than {COPY_FACTOR} times the file's size in "
                       "copies",
                       f" ({nbytes} more bytes where {self.copy_budget} remain)")
            self.copy_budget -= nbytes
            # Proven above: every element the view reaches lies inside the storage.
            itemsize = storage.array.itemsize
            strides = [step * itemsize if extent > 1 else 0 for extent, step in zip(shape, steps)]
            view = np.lib.stride_tricks.as_strided(storage.array[offset:], shape=shape, strides=strides,
                                                   writeable=False)
            array = np.ascontiguousarray(view)
        return _readonly(_typed(array, storage.dtype))


def _typed(array, dtype):
    return array.view(BFloat16Array) if dtype == "bfloat16" else array


def _readonly(array):
    array.flags.writeable = False
    return array


def _storage_array(data, offset, storage, order):
    """The storage's elements from ``data[offset:]`` as a native-order, aligned array (a
    view of ``data`` where it can be, else a copy of the storage's bytes)."""
    numpy_type = np.dtype(storage.numpy_type)
    if order == "big":
        numpy_type = numpy_type.newbyteorder(">")
    array = np.frombuffer(data, dtype=numpy_type, count=storage.numel, offset=offset)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    elif not array.flags.aligned:
        array = array.copy()
    array.flags.writeable = False
    return array


# ---------------------------------------------------------------------------------------
# The two layouts.

def _load_zip(data, path):
    members = _zip_members(data)
    names = list(members)
    prefix = names[0].split("/", 1)[0]
    records = {}
    for name in names:
        if not prefix or not name.startswith(prefix + "/"):
            raise _Refused(f"holds the member {_shown(name)} outside its archive folder {_shown(prefix)}/")
        record = name[len(prefix) + 1:]
        if not (record.startswith("data/") and _STORAGE_KEY.fullmatch(record[5:])) and record not in _RECORDS:
            raise _Refused(f"holds the member {_shown(name)}, which torch.save does not write")
        records[record] = members[name]
    if "data.pkl" not in records:
        raise _Refused(f"is a zip archive without {_shown(prefix)}/data.pkl, so not a torch.save file")

    def record_text(name):
        start, size = records[name]
        if size > _MAX_RECORD_BYTES:
            raise _Refused(f"holds a {name} record of {size} bytes, more than {_MAX_RECORD_BYTES}")
        try:
            return data[start:start + size].decode("ascii").strip()
        except UnicodeDecodeError:
            raise _Refused(f"holds a {name} record that is not ASCII text") from None

    versions = sorted({record_text(name) for name in ("version", ".data/version") if name in records})
    if not versions:
        raise _Refused("is a zip archive without a version record, so not a torch.save file")
    if len(versions) > 1 or not versions[0].isdigit() or not 1 <= int(versions[0]) <= _MAX_ARCHIVE_VERSION:
        raise _Refused(f"records the archive version {_shown(' and '.join(versions))[:40]}, where this reader "
                       f"knows 1 to {_MAX_ARCHIVE_VERSION}")
    if ".format_version" in records and record_text(".format_version") != "1":
        raise _Refused(f"records the torch.save format version {_shown(record_text('.format_version'))[:40]}, where "
                       f"this reader knows 1")
    if ".storage_alignment" in records and not record_text(".storage_alignment").isdigit():
        raise _Refused("records a storage alignment that is not a number")
    if ".data/serialization_id" in records:
        record_text(".data/serialization_id")  # an identifier of the save, not used; only bounded
    order = record_text("byteorder") if "byteorder" in records else "little"  # torch's default since 2.1
    if order not in ("little", "big"):
        raise _Refused(f"records the byte order {_shown(order)[:40]}, not little or big")

    def read_storage(p, storage):
        name = f"data/{storage.key}"
        if name not in records:
            p.fail(f"names storage {storage.key}", f", but the archive has no {_shown(prefix)}/{name}")
        start, size = records[name]
        nbytes = storage.numel * np.dtype(storage.numpy_type).itemsize
        if size != nbytes:
            p.fail(f"declares storage {storage.key} as {storage.numel} {storage.dtype} ({nbytes} bytes)",
                   f", but {_shown(prefix)}/{name} holds {size} bytes")
        storage.array = _storage_array(data, start, storage, order)

    start, size = records["data.pkl"]
    context = _Context(legacy=False, read=read_storage, copy_budget=COPY_FACTOR * len(data))
    return _Pickle(data, start, start + size, "data.pkl", context, base=start).run()


# The records of a torch.save archive besides data/KEY (torch 1.6 to 2.x).
_RECORDS = ("data.pkl", "version", ".data/version", "byteorder", ".data/serialization_id", ".format_version",
            ".storage_alignment")


class _View(io.RawIOBase):
    """The file's bytes as a read-only file object for zipfile, without copying them."""

    def __init__(self, data):
        super().__init__()
        self.data = memoryview(data)
        self.pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def tell(self):
        return self.pos

    def seek(self, offset, whence=io.SEEK_SET):
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: len(self.data)}[whence]
        if base + offset < 0:
            raise ValueError("a seek before the start of the file")
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer):
        chunk = self.data[self.pos:self.pos + len(buffer)]
        buffer[:len(chunk)] = chunk
        self.pos += len(chunk)
        return len(chunk)

    def read(self, n=-1):
        end = len(self.data) if n is None or n < 0 else min(len(self.data), self.pos + n)
        chunk = bytes(self.data[self.pos:end])  # never more than the file holds
        self.pos = max(self.pos, end)
        return chunk


def _zip_members(data):
    """{name: (offset of its bytes, size)} of every member of the archive, each checked:
    stored uncompressed, its local header agreeing with the central directory, inside
    the file, overlapping no other member, and its CRC-32 right (where one is recorded)."""
    try:
        archive = zipfile.ZipFile(_View(data))
        infos = archive.infolist()
    except Exception as error:  # zipfile parses bytes in memory; any failure is a broken archive
        raise _Refused(f"is not a readable zip archive ({type(error).__name__}: {_shown(str(error)[:200])})") from None
    if not infos:
        raise _Refused("is a zip archive with no members")
    # Named before anything else about its members is judged (torch.jit.save compresses some).
    if any(i.filename.endswith("/constants.pkl") or "/code/" in i.filename or i.filename.endswith("/bytecode.pkl")
           for i in infos):
        raise _Refused("is a TorchScript archive (it holds constants.pkl or code/), whose code is never loaded")
    members, spans = {}, []
    for info in infos:
        name = info.filename
        if name != info.orig_filename:  # zipfile cut it at a NUL or changed its separators
            raise _Refused(f"holds a member whose name {_shown(info.orig_filename)} is no plain path")
        if name in members:
            raise _Refused(f"holds the member {_shown(name)} twice")
        if info.flag_bits & 0x1:
            raise _Refused(f"holds the encrypted member {_shown(name)}")
        if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
            raise _Refused(f"holds the member {_shown(name)} compressed (method {info.compress_type}); torch.save "
                           f"stores members uncompressed, and a compressed one is never inflated")
        offset = info.header_offset
        if offset < 0 or offset + _ZIP_LOCAL_HEADER.size > len(data):
            raise _Refused(f"places the member {_shown(name)} at byte {offset}, outside the file")
        fields = _ZIP_LOCAL_HEADER.unpack_from(data, offset)
        magic, _, flags, method, _, _, _, compressed, plain, name_length, extra_length = fields
        start = offset + _ZIP_LOCAL_HEADER.size + name_length + extra_length
        raw_name = data[offset + _ZIP_LOCAL_HEADER.size:offset + _ZIP_LOCAL_HEADER.size + name_length]
        local_name = raw_name.decode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
        if magic != _ZIP_LOCAL_MAGIC or method != zipfile.ZIP_STORED or local_name != info.orig_filename:
            raise _Refused(f"holds the member {_shown(name)}, whose local header disagrees with the central directory")
        sizes_given = not flags & 0x8 and 0xFFFFFFFF not in (compressed, plain)  # else the central directory's
        if sizes_given and (compressed, plain) != (info.file_size, info.file_size):
            raise _Refused(f"holds the member {_shown(name)}, whose local header gives another size ({plain} bytes) "
                           f"than the central directory ({info.file_size} bytes)")
        end = start + info.file_size
        if end > len(data):
            raise _Refused(f"declares the member {_shown(name)} as {info.file_size} bytes at byte {start}, past the "
                           f"end of the file ({len(data)} bytes)")
        if info.CRC and zlib.crc32(memoryview(data)[start:end]) != info.CRC:
            raise _Refused(f"holds the member {_shown(name)}, whose bytes fail its CRC-32")
        members[name] = (start, info.file_size)
        spans.append((offset, end, name))
    spans.sort()
    for (_, end, name), (offset, _, other) in zip(spans, spans[1:]):
        if offset < end:
            raise _Refused(f"holds the members {_shown(name)} and {_shown(other)}, which overlap")
    return members


def _load_legacy(data):
    where = "the file"

    def header(start, what):
        try:
            pickle = _Pickle(data, start, len(data), where)
            value = pickle.run()
        except _Refused as why:
            raise _Refused(f"is neither a torch.save zip archive nor a legacy torch.save file: its {what} pickle "
                           f"{why}") from None
        return value, pickle.pos

    magic, pos = header(0, "first")
    if type(magic) is not int or magic != _LEGACY_MAGIC:
        raise _Refused("is neither a torch.save zip archive nor a legacy torch.save file (no torch magic number)")
    protocol, pos = header(pos, "protocol")
    if type(protocol) is not int or protocol != _LEGACY_PROTOCOL:
        raise _Refused(f"is a legacy torch.save file of protocol {_describe(protocol)}, where this reader knows "
                       f"{_LEGACY_PROTOCOL}")
    info, pos = header(pos, "sys_info")
    if type(info) is not dict:
        raise _Refused(f"is a legacy torch.save file whose sys_info is {_describe(info)}, not a dict")

    # First pass: the storages the object declares, and where its pickle ends.
    object_start = pos
    first = _Context(legacy=True, read=None, copy_budget=COPY_FACTOR * len(data))
    pickle = _Pickle(data, object_start, len(data), where, first)
    pickle.run()
    object_end = pickle.pos
    keys_pickle = _Pickle(data, object_end, len(data), where)
    keys = keys_pickle.run()
    if type(keys) is not list or any(type(k) is not str for k in keys):
        raise _Refused(f"is a legacy torch.save file whose storage key list is {_describe(keys)}")
    if len(set(keys)) != len(keys) or set(keys) != set(first.storages):
        raise _Refused("is a legacy torch.save file whose storage key list does not name each storage its object "
                       "declares exactly once")
    pos = keys_pickle.pos
    for key in keys:
        storage = first.storages[key]
        if len(data) - pos < 8:
            raise _Refused(f"ends before the element count of storage {key}, at byte {pos}")
        count = struct.unpack_from("<q", data, pos)[0]
        pos += 8
        nbytes = storage.numel * np.dtype(storage.numpy_type).itemsize
        if count != storage.numel:
            raise _Refused(f"gives storage {key} {count} elements at byte {pos - 8}, where its object declares "
                           f"{storage.numel}")
        if nbytes > len(data) - pos:
            raise _Refused(f"declares storage {key} as {nbytes} bytes at byte {pos}, past the end of the file "
                           f"({len(data)} bytes)")
        storage.array = _storage_array(data, pos, storage, "little")  # the legacy writer always writes little-endian
        pos += nbytes
    if pos != len(data):
        raise _Refused(f"holds {len(data) - pos} bytes after its last storage, at byte {pos}")
    for key, (view, root, offset) in first.views.items():
        view.array = root.array[offset:offset + view.numel]

    # Second pass: the object, its storages now read.
    second = _Context(legacy=True, read=None, copy_budget=COPY_FACTOR * len(data))
    second.storages, second.views = first.storages, first.views
    return _Pickle(data, object_start, object_end, where, second).run()


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _shown(text):
    """Text from a file, as an error message may show it: control and format characters
    (terminal escapes, line breaks, bidirectional overrides) as Python escapes."""
    import unicodedata

    out = []
    for char in str(text):
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            code = ord(char)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(char)
    return "".join(out)


if __name__ == "__main__":  # python -m shardcheck.torchfile FILE: what the reader reads
    for file in sys.argv[1:]:
        try:
            print(file, load(file))
        except CheckpointError as error:
            print(error)
