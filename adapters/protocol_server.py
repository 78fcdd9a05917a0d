"""Reading requests and serving them from forked children, for targets written in Python
(docs/protocol.md, "Fork servers").

A target whose start-up is slow (the DeepSpeed adapter imports torch: seconds) pays it
again after every crash when the harness has to start a new process. Under fork_server
the process that started does the slow part once and then never answers a request
itself: each child it forks serves requests until it dies, and a child that dies is
reported to the harness as a crash, in the protocol, and replaced by a fresh fork of
the same parent. Every child starts from the parent's state, never from what an earlier
child did, so a child is as fresh as a new process.
"""

import ctypes
import json
import os
import signal
import sys
import traceback

# Same-width integer views per dtype: data moves as raw bits in both directions.
BIT_VIEWS = {
    'float32': 'int32', 'float64': 'int64', 'float16': 'int16', 'bfloat16': 'int16', 'int8': 'int8',
    'int16': 'int16', 'int32': 'int32', 'int64': 'int64', 'uint8': 'uint8', 'bool': 'uint8'
}
# shardcheck's poison bit patterns (core dtype.cc poison_bits), unsigned.
POISON = {
    'float64': 0x7ff800000000dead, 'float32': 0x7fc0dead, 'float16': 0x7ead, 'bfloat16': 0x7fed,
    'int8': 0xa5, 'int16': 0xa5a5, 'int32': 0xa5a5a5a5, 'int64': 0xa5a5a5a5a5a5a5a5, 'uint8': 0xa5, 'bool': 0xa5
}
WIDTH = {'int8': 8, 'int16': 16, 'int32': 32, 'int64': 64, 'uint8': 0}


def signed(value, view):
    """An unsigned bit pattern as the signed value of its integer view (torch fills with those)."""
    width = WIDTH[view]
    if width and value >= 1 << (width - 1):
        return value - (1 << width)
    return value


PR_SET_PDEATHSIG = 1
HANDED_BACK = 75  # a child's exit status: no crash, the next child reads what it handed back


class Requests:
    """The request lines on stdin (bytes), from `pending`, input already read, on.

    Blank lines are skipped: the harness sends one after each crash report. Under
    fork_server (`handback`, a pipe to the parent) a child can end without a crash and
    hand what it has not answered to the next: see renew() and answer_fresh().
    """

    def __init__(self, pending=b'', handback=None):
        self._buffer = bytearray(pending)
        self._handback = handback
        self._renew = False
        self._line = b''
        self._served = 0

    def renew(self):
        """Makes the request being answered this child's last: a fresh child reads on.
        Outside a fork server (no `handback`) there is no fresh child, and it does nothing."""
        self._renew = self._handback is not None

    def answer_fresh(self):
        """Hands the request being answered to a fresh child and ends this one, unless this
        child is fresh: its first request is answered from its parent's state alone."""
        if self._handback is not None and self._served > 1:
            self._hand_back(self._line + b'\n')

    def _hand_back(self, unanswered):
        # Never empty (a blank line leads, which the next child skips): a child that exits
        # with HANDED_BACK by itself, having handed nothing back, crashed.
        data = b'\n' + unanswered + bytes(self._buffer)
        while data:
            data = data[os.write(self._handback, data):]
        _exit_child(HANDED_BACK)

    def __iter__(self):
        while True:
            newline = self._buffer.find(b'\n')
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[:newline + 1]
                if line.strip():
                    if self._renew:
                        self._hand_back(line + b'\n')
                    self._line = line
                    self._served += 1
                    yield line
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                if self._buffer.strip():
                    yield bytes(self._buffer)
                return
            self._buffer += chunk


def fork_server(serve, out):
    """Calls serve(requests) in a forked child, and again in a fresh one after each that
    dies or hands back, until one returns (its stdin ended). `out` is the protocol's file
    descriptor. serve must answer `hello` with "crash_reports": true, which tells the
    harness what a line {"crash": REASON} means and that it is to send a newline after it."""
    pending = b''
    parent = os.getpid()
    while True:
        sys.stdout.flush()
        sys.stderr.flush()
        handback, handback_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(handback)
            _serve_child(serve, pending, handback_end, parent)
        os.close(handback_end)
        handed_back = _read_to_end(handback)  # ends when the child does
        os.close(handback)
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == HANDED_BACK and handed_back:
            pending = handed_back
            continue
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            return
        reason = f'signal-{os.WTERMSIG(status)}' if os.WIFSIGNALED(status) else f'exit-{os.WEXITSTATUS(status)}'
        report = (json.dumps({'crash': reason}) + '\n').encode()
        while report:
            report = report[os.write(out, report):]
        pending = _after_crash()
        if pending is None:
            return


def _read_to_end(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b''.join(chunks)
        chunks.append(chunk)


def _after_crash():
    """What the next child reads first: the input after the first newline from here on.

    That newline ends the dead child's request, or is the one the harness sends after a
    report, so what follows is a request of its own. Where the request still had its
    newline to come, the harness's newline is left over and the next child skips it as a
    blank line. None when stdin ended.
    """
    buffer = b''
    while True:
        newline = buffer.find(b'\n')
        if newline >= 0:
            return buffer[newline + 1:]
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return None
        buffer = chunk


def _serve_child(serve, pending, handback, parent):
    code = 1
    try:
        _die_with(parent)
        serve(Requests(pending, handback))
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # a child never returns into its parent's loop
        traceback.print_exc()
    finally:
        _exit_child(code)


def _exit_child(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)


def _die_with(parent):
    """The harness kills the parent with its process group, or the parent dies with the
    harness's worker (PR_SET_PDEATHSIG): a child must not outlive it, hung or not."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
