"""What the DeepSpeed adapters share (serve.py: affine.py and its transfer planner;
restore.py: the universal checkpoint's restore step; convert.py: ds_to_universal's merge):
finding the release, loading its modules without its package's dependencies, the
protocol's tensors, a torch whose empty() is poisoned, DeepSpeed's refusals named by kind,
a planted bug for the adapters' own tests, and the fork-server loop (docs/protocol.md).

Where the release comes from, first match wins (load_release):
  1. $SHARDCHECK_DEEPSPEED_PATH: a directory holding deepspeed/checkpoint/ (an unpacked
     sdist, as scripts/deepspeed-target.sh makes). Its module files are loaded by path with
     the top-level package stubbed, so DeepSpeed's own __init__ (and its dependencies
     beyond torch) never runs.
  2. an installed DeepSpeed.
  3. out/deepspeed/current in this repository (the script's default output).

$SHARDCHECK_DEEPSPEED_DEVICE chooses where DeepSpeed's code runs: `cpu` (the default),
`cuda`, or `auto` (cuda when torch sees a device). On cuda every tensor the module gets is
a CUDA tensor and its results are read back; a process that has used CUDA cannot fork a
working child, so the adapter then serves in one process and the harness starts a new
one after a crash. Where torch sees no CUDA device it says so on stderr and runs on CPU.
"""

import atexit
import base64
import ctypes
import importlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
import types
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, 'adapters'))
import protocol_server  # noqa: E402 (found through the line above)

# Who speaks on stderr: the script that runs (each adapter is its own named target).
ADAPTER = {
    'restore.py': 'deepspeed-restore adapter',
    'convert.py': 'deepspeed-convert adapter'
}.get(os.path.basename(sys.argv[0] if sys.argv else ''), 'deepspeed adapter')


def fail(message):
    sys.stderr.write(f'{ADAPTER}: {message}\n')
    sys.stderr.flush()
    sys.exit(2)


try:
    import numpy as np
    import torch
except ImportError as error:
    fail(f'{error}; install python3-torch and python3-numpy (bash scripts/deepspeed-target.sh does)')

# The adapters' shared tables of raw-bit views and poison patterns.
BIT_VIEWS, POISON, WIDTH = protocol_server.BIT_VIEWS, protocol_server.POISON, protocol_server.WIDTH


signed = protocol_server.signed


def torch_dtype(name):
    return torch.bool if name == 'bool' else getattr(torch, name)


def dtype_name(dtype):
    return 'bool' if dtype == torch.bool else str(dtype).replace('torch.', '')


class PoisonedTorch(types.ModuleType):
    """torch, except that empty() hands out poisoned memory instead of whatever was there,
    and that it notes (`escaped`) a view from as_strided() that reaches past its storage."""

    def __init__(self):
        super().__init__('torch')
        self.escaped = False
        self.on_escape = lambda: None  # called before any use of such a view

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def empty(*args, **kwargs):
        tensor = torch.empty(*args, **kwargs)
        name = dtype_name(tensor.dtype)
        if name in POISON and tensor.numel() > 0:
            view = BIT_VIEWS[name]
            tensor.view(getattr(torch, view)).fill_(signed(POISON[name], view))
        return tensor

    def as_strided(self, *args, **kwargs):
        return self.watch(torch.as_strided(*args, **kwargs))

    def watch(self, view):
        """A view torch accepted: one past its storage's end got there only through torch's
        bounds check, which works in bytes and wraps (docs/guide/targets.md). Reading or
        writing through it reaches memory no tensor owns; a write there may not crash at
        once but corrupt the heap, and change what this process answers later."""
        if view.numel() > 0:
            last = view.storage_offset() + sum((size - 1) * stride for size, stride in zip(view.shape, view.stride()))
            if last < 0 or (last + 1) * view.element_size() > view.storage().nbytes():
                self.escaped = True
                self.on_escape()
        return view


# torch 1.13's c10::SetStackTraceFetcher(std::function<std::string()>), with the C++11
# string ABI. The exact name pins the signature: a torch whose fetcher has another type
# (torch 2 returns a lazy Backtrace) simply does not have it.
FETCHER_SETTER = '_ZN3c1020SetStackTraceFetcherESt8functionIFNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEEvEE'
_fetcher_parts = []  # the callbacks and the std::function, alive as long as torch may call them


def skip_cpp_backtraces():
    """Stops torch 1.13 from symbolising a C++ backtrace for every error it raises.

    Each c10::Error runs backtrace_symbols, a dladdr scan over libtorch's symbol table per
    frame: about 4 ms, several times what the rest of a request costs, and torch is what
    refuses the bad views of a corrupted map. Python never sees that backtrace (its
    messages are what_without_backtrace unless TORCH_SHOW_CPP_STACKTRACES is set), so an
    empty one changes no answer. Where anything differs from what this relies on (another
    architecture's calling convention, another signature, the variable set), torch is
    left alone: slower, never different.
    """
    if platform.machine() != 'x86_64' or os.environ.get('TORCH_SHOW_CPP_STACKTRACES'):
        return
    try:
        c10 = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libc10.so'))
        setter = getattr(c10, FETCHER_SETTER)
        libc = ctypes.CDLL(None)
    except (OSError, AttributeError):
        return

    # The invoker returns the std::string through the hidden pointer (x86-64 returns it in
    # rax too): an empty string, its data pointer at its own inline buffer.
    @ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    def empty_backtrace(out, _functor):
        ctypes.c_void_p.from_address(out).value = out + 16
        ctypes.c_size_t.from_address(out + 8).value = 0
        ctypes.c_char.from_address(out + 16).value = b'\0'
        return out

    # libstdc++'s std::function: 16 bytes of functor storage, its manager, its invoker.
    # The manager copies or frees that storage, which this fetcher never reads, so it may
    # do nothing; and it must be native code, because the static std::function is
    # destroyed after the interpreter is gone. getpid ignores its arguments.
    function = (ctypes.c_void_p * 4)(None, None, ctypes.cast(libc.getpid, ctypes.c_void_p).value,
                                     ctypes.cast(empty_backtrace, ctypes.c_void_p).value)
    _fetcher_parts.extend([empty_backtrace, function])
    setter.restype = None
    setter.argtypes = [ctypes.c_void_p]
    setter(ctypes.addressof(function))  # by value: the Itanium ABI passes a pointer to the copy


def stub_package(name, directory):
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [directory]
        sys.modules[name] = package


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module



def load_release(from_sdist, from_installed):
    """What from_sdist(root) or from_installed() returns, from the first place that has
    the release (the module docstring's order). from_installed raises ImportError where
    no DeepSpeed is installed."""
    root = os.environ.get('SHARDCHECK_DEEPSPEED_PATH')
    if root:
        return from_sdist(root)
    try:
        return from_installed()
    except ImportError:
        pass
    default = os.path.join(REPO, 'out', 'deepspeed', 'current')
    if os.path.isdir(default):
        return from_sdist(default)
    fail('DeepSpeed not found: set SHARDCHECK_DEEPSPEED_PATH to an unpacked sdist '
         '(bash scripts/deepspeed-target.sh makes out/deepspeed/current)')


def release_version(root):
    """The sdist's version.txt, as the implementation names itself."""
    version_file = os.path.join(root, 'version.txt')
    if os.path.isfile(version_file):
        with open(version_file, encoding='utf-8') as handle:
            return handle.read().strip()
    return 'unknown version'


DEVICE = 'cpu'  # where tensors handed to the module live (device_choice)


def device_choice():
    """The device $SHARDCHECK_DEEPSPEED_DEVICE asks for, as far as torch can give it."""
    wanted = os.environ.get('SHARDCHECK_DEEPSPEED_DEVICE', 'cpu')
    if wanted not in ('cpu', 'cuda', 'auto'):
        fail(f'SHARDCHECK_DEEPSPEED_DEVICE must be cpu, cuda or auto, not {wanted!r}')
    if wanted == 'cpu':
        return 'cpu'
    if torch.cuda.is_available():
        return 'cuda'
    print(f'deepspeed adapter: SHARDCHECK_DEEPSPEED_DEVICE={wanted}, but torch {torch.__version__} sees no CUDA '
          'device: DeepSpeed runs on CPU', file=sys.stderr, flush=True)
    return 'cpu'


def tensor_in(doc):
    name = doc['dtype']
    raw = np.frombuffer(base64.b64decode(doc['data']), dtype=BIT_VIEWS[name]).copy()
    tensor = torch.from_numpy(raw).view(torch_dtype(name))
    return tensor.reshape([int(extent) for extent in doc['shape']]).to(DEVICE)


def tensor_out(tensor):
    name = dtype_name(tensor.dtype)
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    view = BIT_VIEWS.get(name)
    data = flat.view(getattr(torch, view)).numpy().tobytes() if view else b''
    return {'dtype': name, 'shape': list(tensor.shape), 'data': base64.b64encode(data).decode('ascii')}


# How DeepSpeed's refusals map to shardcheck's error kinds (README, "Error kinds"): its
# exception types and message texts are stable enough to name a kind. One row per rule,
# the first whose type and message substring both match wins (an empty substring matches
# anything); a refusal no row names stays of kind "unknown" on shardcheck's side.
REFUSAL_KINDS = [
    ('ValueError', 'pieces account for', 'count'),
    ('ValueError', 'outside the shard', 'bounds'),
    ('ValueError', 'twice', 'twice'),
    ('ValueError', 'hold different data', 'different_data'),
    ('ValueError', 'supplied a shard of', 'shape'),
    ('ValueError', 'zero scale', 'scale'),
    ('NotImplementedError', 'scaled piece', 'scale'),
    ('AssertionError', 'uncovered', 'uncovered'),
    ('AssertionError', 'held by', 'holders'),
    # The map's text is not JSON, or a number in it is not one int() can read.
    ('JSONDecodeError', '', 'format'),
    ('ValueError', 'invalid literal for int()', 'format'),
    ('TypeError', 'int() argument', 'format'),
    # A missing key of the map's JSON, or a shard for a rank the map does not list (or
    # none for one it does): the key's text tells them apart.
    ('KeyError', "'", 'format'),
    ('KeyError', '', 'shape'),
    ('StopIteration', '', 'shape'),
    # torch's own checks on as_strided views and in-place writes.
    ('RuntimeError', 'out of bounds for storage', 'bounds'),
    ('RuntimeError', 'refers to a single memory location', 'itself'),
    ('RuntimeError', 'Negative strides', 'format'),
    ('RuntimeError', 'negative dimension', 'format'),
    ('RuntimeError', 'storage offset', 'format'),
    ('RuntimeError', "can't be cast to the desired output type", 'scale'),
    # The transfer planner (affine_transfer.py): InvalidMapError's texts, where one names
    # a kind. Its coverage totals ("would receive 3 of its 4 elements") may be a gap or a
    # double cover, so they name none. Its base AffineTransferError is a budget exceeded,
    # which shardcheck's planner refuses as format.
    ('InvalidMapError', ' describes ', 'shape'),
    ('InvalidMapError', 'outside the', 'bounds'),
    ('InvalidMapError', 'is not a coordinate of', 'bounds'),
    ('InvalidMapError', 'pieces account for', 'count'),
    ('InvalidMapError', 'nonempty shard but has no pieces', 'count'),
    ('InvalidMapError', 'empty shard and holds a full piece', 'count'),
    ('InvalidMapError', 'occupy part of the same shard addresses', 'twice'),
    ('InvalidMapError', 'overlapping logical pieces', 'twice'),
    ('InvalidMapError', 'do not cover the full logical parameter', 'uncovered'),
    ('InvalidMapError', 'names no holder', 'holders'),
    ('InvalidMapError', 'does not hold all of', 'holders'),
    ('InvalidMapError', 'has different locations', 'holders'),
    ('InvalidMapError', 'axes of a', 'format'),
    ('InvalidMapError', 'negative extent', 'format'),
    ('InvalidMapError', 'stride vector length', 'format'),
    ('InvalidMapError', 'declares no shard shape', 'format'),
    ('AffineTransferError', '', 'format'),
]


def refusal_kind(type_name, message):
    for rule_type, substring, kind in REFUSAL_KINDS:
        if type_name == rule_type and substring in message:
            return kind
    return None


def refusal(error):
    """The module's refusal, in its own words, with the kind a rule names."""
    out = {'type': type(error).__name__, 'message': str(error)}
    kind = refusal_kind(out['type'], out['message'])
    if kind is not None:
        out['kind'] = kind
    return out


def map_document(request, key='map'):
    """The map as DeepSpeed loads one: the JSON value, or the case's text parsed by Python's
    json module (which keeps the last of two equal keys), never shardcheck's decoder.
    `key` is 'map', or 'target_map' for a reshard's target side."""
    if f'{key}_text' in request:
        return json.loads(request[f'{key}_text'])
    return request[key]




def planted_bug(tensor):
    """$SHARDCHECK_DEEPSPEED_PLANTED_BUG=flip: the tensor with its first element changed
    (one bit of its highest byte; bool: 0 and 1 swapped), for the tests that prove an
    adapter's wrong answer reaches a verdict (tests/test_deepspeed_restore.cc). The real
    code's answer otherwise, untouched."""
    if os.environ.get('SHARDCHECK_DEEPSPEED_PLANTED_BUG') != 'flip' or tensor.numel() == 0:
        return tensor
    flat = tensor.detach().reshape(-1).clone()
    raw = flat.view(torch.uint8)
    raw[flat.element_size() - 1] ^= 0x01 if flat.dtype == torch.bool else 0x40
    return flat


def note(request, response):
    """$SHARDCHECK_DEEPSPEED_NOTES=FILE: one JSON line per answer appended to FILE, what the
    harness does not read: the operation and rank, the verdict's shape (ok, error type) and
    the adapter's own account (restore.py's path and applied power, convert.py's state).
    For people reading a finding (docs/guide/targets.md), never for a verdict."""
    path = os.environ.get('SHARDCHECK_DEEPSPEED_NOTES')
    if not path or request.get('op') == 'hello':
        return
    line = {'op': request.get('op'), 'rank': request.get('rank'), 'scale_power': request.get('scale_power'),
            'ok': response.get('ok')}
    if not response.get('ok'):
        line['error'] = response.get('error', {}).get('type')
    line.update({key: value for key, value in response.items() if key in ('restore', 'convert')})
    with open(path, 'a', encoding='utf-8') as handle:
        handle.write(json.dumps(line) + '\n')


def serve_main(make_server):
    """Serves make_server()'s answers over the protocol until stdin ends. The server has
    `torch` (the PoisonedTorch its modules use) and `answer(request)`; hello answers get
    "crash_reports": true here. torch and the modules load once, in a parent that answers
    nothing; a child that crashes (some corrupted maps make torch read or write memory no
    tensor owns) is replaced by a fork of that parent, not by a new interpreter."""
    # The protocol owns stdout; anything the modules print goes to stderr.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), 'w', encoding='utf-8')
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    skip_cpp_backtraces()
    global DEVICE
    DEVICE = device_choice()
    server = make_server()

    def serve(requests):
        # What a view past its storage (PoisonedTorch.watch) reaches depends on what the
        # process did before: the request that makes one is answered by a child forked
        # for it, from the parent's state, so that the requests before it make no difference.
        server.torch.on_escape = requests.answer_fresh
        for line in requests:
            request = json.loads(line)
            response = server.answer(request)
            if request.get('op') == 'hello':
                response['crash_reports'] = True  # as a fork server's child
            response['id'] = request.get('id')
            protocol.write(json.dumps(response) + '\n')
            protocol.flush()
            note(request, response)
            # And what it did to that child stays there, never reaching another answer.
            if server.torch.escaped:
                requests.renew()

    if DEVICE == 'cuda':
        # CUDA, once used, does not survive a fork: one process, restarted after a crash.
        serve(protocol_server.Requests())
        return
    # torch and the modules are imported once, in the parent; a crash costs a fork.
    protocol_server.fork_server(serve, protocol.fileno())


def load_checkpoint_modules(*names):
    """deepspeed.checkpoint's modules `names` (e.g. 'universal_checkpoint') and the
    implementation's name. From a sdist only the top-level package is stubbed:
    deepspeed.checkpoint's own __init__ runs, as it does when a job imports it, and needs
    nothing beyond torch. ds_to_universal imports tqdm for its progress bars, which no
    function driven here draws: where tqdm is missing, an empty module stands in."""
    try:
        import tqdm  # noqa: F401
    except ImportError:
        sys.modules['tqdm'] = types.ModuleType('tqdm')

    def from_sdist(root):
        checkpoint = os.path.join(root, 'deepspeed', 'checkpoint')
        for name in names:
            if not os.path.isfile(os.path.join(checkpoint, f'{name}.py')):
                fail(f'{checkpoint}/{name}.py does not exist: SHARDCHECK_DEEPSPEED_PATH must name an unpacked '
                     'DeepSpeed sdist')
        stub_package('deepspeed', os.path.join(root, 'deepspeed'))
        modules = [importlib.import_module(f'deepspeed.checkpoint.{name}') for name in names]
        return modules, f'deepspeed {release_version(root)} ({checkpoint})'

    def from_installed():
        import deepspeed
        modules = [importlib.import_module(f'deepspeed.checkpoint.{name}') for name in names]
        return modules, f'deepspeed {getattr(deepspeed, "__version__", "?")} (installed, {deepspeed.__file__})'

    return load_release(from_sdist, from_installed)


# The optimizer state a tensor of scale power p is (contract 1.2), per optimizer: Adam's
# names, which DeepSpeed's SCALE_POWER_BY_STATE and ds_to_universal know, and a state of
# another optimizer with the same power, which they do not (DeepSpeed issue #8608: Muon's
# momentum_buffer). 'z' is a schedule-free optimizer's parameter-like sequence.
STATES_BY_POWER = {
    1: (('fp32', 'Adam'), ('z', 'schedule-free AdamW')),
    -1: (('exp_avg', 'Adam'), ('momentum_buffer', 'Muon')),
    -2: (('exp_avg_sq', 'Adam'), ('square_avg', 'RMSprop')),
}


def state_for(request, power, vary_parameter=True):
    """(state name, optimizer, known): the optimizer state a request moves. Known (Adam's
    name) or not is decided by a hash of the map and the power, so that a campaign meets
    both and every rank of one case, and its replay, meet the same one.
    $SHARDCHECK_DEEPSPEED_STATE=known or unknown decides it for every request instead.
    vary_parameter=False keeps power 1 the parameter itself (fp32, Adam's checkpoint)."""
    choices = STATES_BY_POWER.get(power)
    if choices is None:  # no optimizer names a state of this power
        return f'state_p{power}', 'none', False
    forced = os.environ.get('SHARDCHECK_DEEPSPEED_STATE')
    if power == 1 and not vary_parameter:
        unknown = False
    elif forced in ('known', 'unknown'):
        unknown = forced == 'unknown'
    else:
        text = request['map_text'] if 'map_text' in request else json.dumps(request.get('map'), sort_keys=True)
        unknown = bool(zlib.crc32(f'{power}:{text}'.encode('utf-8', 'surrogatepass')) & 1)
    name, optimizer = choices[1 if unknown else 0]
    return name, optimizer, not unknown


def scratch_directory(purpose):
    """A directory of this process's own for the files a checkpoint step reads and writes:
    in memory (/dev/shm) where there is one. Removed when the process ends normally; one
    left by a process that was killed (a campaign kills a hung target) is removed by the
    next that starts, its name holding the pid that made it."""
    base = '/dev/shm' if os.path.isdir('/dev/shm') and os.access('/dev/shm', os.W_OK) else tempfile.gettempdir()
    prefix = f'shardcheck-{purpose}-'
    for entry in os.listdir(base):
        pid = entry[len(prefix):].split('-')[0] if entry.startswith(prefix) else ''
        if pid.isdigit() and not os.path.exists(f'/proc/{pid}'):
            shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
    path = tempfile.mkdtemp(prefix=f'{prefix}{os.getpid()}-', dir=base)
    parent = os.getpid()
    # Only the process that made it removes it: fork-server children share it.
    atexit.register(lambda: os.getpid() == parent and shutil.rmtree(path, ignore_errors=True))
    return path


def empty_directory(path):
    for entry in os.listdir(path):
        full = os.path.join(path, entry)
        if os.path.isdir(full):
            shutil.rmtree(full)
        else:
            os.unlink(full)
