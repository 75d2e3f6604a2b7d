"""memsnap's caching allocator as PyTorch's CUDA allocator.

    import memsnap.torch
    memsnap.torch.install()                          # first, before any CUDA tensor exists
    memsnap.torch.record_history(stacks="all")       # who allocated what: Python and C++ frames
    memsnap.torch.dump_snapshot_on_oom("oom-{pid}-{n}.msgpack")
    ...                                              # the program, unchanged
    memsnap.torch.dump_snapshot("run.msgpack")       # then: memsnap serve run.msgpack

memsnap makes the decisions PyTorch's allocator makes, so the program's memory is what it was.
Every ``torch.cuda`` memory call keeps working with PyTorch's meanings (``memory_stats``,
``memory_allocated``, ``max_memory_reserved``, ``reset_peak_memory_stats``, ``empty_cache``,
``memory_summary``, ``set_per_process_memory_fraction``, ``Tensor.record_stream``, out-of-memory
observers, ``torch.cuda.memory._record_memory_history``, ``_snapshot`` and
``_dump_snapshot``), CUDA graph capture, ``torch.compile(mode="reduce-overhead")`` and
``torch.cuda.MemPool`` / ``use_mem_pool`` use memsnap's private pools, and an out-of-memory
raises ``torch.OutOfMemoryError`` with PyTorch's message and memsnap's verdict on the cause
(the sentence ``memsnap explain-oom`` prints for the same error), leaving the
process able to go on. Settings changed while running (``torch.cuda.memory._set_allocator_settings``)
take effect as in PyTorch and are recorded in the trace; ``torch.cuda.caching_allocator_enable``,
``torch.profiler``'s memory views and ``torch.cuda.MemPool(allocator=...)`` work as on PyTorch's
allocator. Not supported yet (it raises a RuntimeError naming it): CUDA IPC between processes.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.util
import sys
import warnings
from typing import Optional

# torch and memsnap's extension are loaded on first use, not when this module is imported: the
# extension's libraries are PyTorch's, and loading them runs PyTorch's static initializers,
# which read PYTORCH_ALLOC_CONF. A program (or a sitecustomize) may install memsnap before it
# imports torch and still set that variable in between (install() then waits for torch).
torch = None
_native = None


def _load() -> None:
    global torch, _native
    if _native is None:
        import torch as torch_module

        from memsnap import _native as native  # after torch: it uses torch's libraries

        torch, _native = torch_module, native

__all__ = [
    "install",
    "is_installed",
    "record_history",
    "history_settings",
    "outside_memory_status",
    "dump_snapshot",
    "dump_snapshot_on_oom",
    "annotate",
    "memory_stats",
    "snapshot",
    "estimate",
]


def __getattr__(name: str):
    # memsnap.torch.estimate is memsnap.estimate.estimate (a step's memory on a given GPU, found
    # without allocating it), loaded on first use: it imports torch, which this module does not
    # until install() or a memory call needs it.
    if name == "estimate":
        from memsnap.estimate import estimate

        return estimate
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# PyTorch keeps an unbounded trace by default (max_entries=sys.maxsize); memsnap's trace is a
# ring allocated up front at 40 bytes an entry, so a request past this is held to it.
PYTORCH_DEFAULT_ENTRY_LIMIT = 2_000_000
# The most trace entries memsnap keeps per device when asked explicitly (2 GB of ring).
MAX_ENTRIES = 50_000_000

_patched = False
_environment_applied = False


def install(settings: Optional[str] = None) -> None:
    """Makes memsnap this process's CUDA allocator.

    ``settings`` uses PyTorch's grammar (``"expandable_segments:True,max_split_size_mb:128"``);
    without it they come from ``MEMSNAP_ALLOC_CONF``, ``PYTORCH_ALLOC_CONF`` or
    ``PYTORCH_CUDA_ALLOC_CONF``. Call it before the first CUDA tensor: once PyTorch's own
    allocator holds memory, it raises a RuntimeError saying so. Calling it again is harmless.

    Recording can be turned on from the environment, with no other change to the program:
    ``MEMSNAP_HISTORY=state|alloc|all`` (as ``record_history``'s level), ``MEMSNAP_STACKS=
    all|python|cpp|none`` (default all), ``MEMSNAP_MAX_ENTRIES=N`` (default 100,000),
    ``MEMSNAP_OOM_SNAPSHOT=oom-{pid}-{n}.msgpack`` (as ``dump_snapshot_on_oom``) and
    ``MEMSNAP_SNAPSHOT_AT_EXIT=run.msgpack`` (``dump_snapshot`` when the program ends). A bad
    value raises a ValueError naming the variable, before anything is installed.
    """
    if settings is not None and not isinstance(settings, str):
        raise TypeError(f"settings must be a str or None, not {type(settings).__name__}")
    if "torch" not in sys.modules:
        _install_when_torch_is_imported(settings)
        return
    _install_now(settings)


def _install_now(settings: Optional[str]) -> None:
    global _environment_applied
    _load()
    if not torch.cuda.is_available():
        raise RuntimeError("memsnap.torch.install(): PyTorch sees no CUDA device")
    backend = torch.cuda.get_allocator_backend()
    if backend != "native" and not _native.is_installed():
        raise RuntimeError(
            f"memsnap.torch.install(): PyTorch's CUDA allocator is {backend!r} (chosen by "
            "PYTORCH_ALLOC_CONF's backend, or torch.cuda.memory.change_current_allocator); "
            "memsnap replaces only PyTorch's native allocator, so it is not installed")
    environment = _native.recording_environment()
    _native.install(settings)
    _patch_torch()
    if not _environment_applied:
        _environment_applied = True
        _apply_environment(environment)


def _apply_environment(environment: dict) -> None:
    """What the MEMSNAP_* recording variables ask for (history/recording_environment.h)."""
    if environment["level"] != "off":
        record_history(environment["level"], environment["stacks"] or "all", environment["max_entries"])
    if environment["oom_snapshot"]:
        dump_snapshot_on_oom(environment["oom_snapshot"])
    if environment["snapshot_at_exit"]:
        atexit.register(_dump_at_exit, environment["snapshot_at_exit"])


def _dump_at_exit(path: str) -> None:
    try:
        dump_snapshot(path)
    except Exception as error:  # the program is ending: say so, never raise
        print(f"memsnap: MEMSNAP_SNAPSHOT_AT_EXIT={path}: {error}", file=sys.stderr)


def is_installed() -> bool:
    """Whether memsnap is this process's CUDA allocator (False while install() waits for torch)."""
    if "torch" not in sys.modules:
        return False
    _load()
    return _native.is_installed()


class _InstallAfterTorch(importlib.abc.MetaPathFinder):
    """install() called before torch is imported: the install runs when torch's import ends,
    after PyTorch read PYTORCH_ALLOC_CONF. When that asked for another allocator backend, the
    explicit choice wins; when the install fails (bad settings), the import still succeeds (an
    error raised there would leave torch half imported). Either way memsnap says on stderr that
    it is not installed, and why."""

    def __init__(self, settings: Optional[str]):
        self.settings = settings

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once, and not for the lookup below
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        original, settings = spec.loader, self.settings

        class Loader(importlib.abc.Loader):
            def create_module(self, spec):
                return original.create_module(spec)

            def exec_module(self, module):
                module.__loader__ = module.__spec__.loader = original
                original.exec_module(module)
                _install_after_import(settings)

        spec.loader = Loader()
        return spec


def _install_when_torch_is_imported(settings: Optional[str]) -> None:
    for finder in sys.meta_path:
        if isinstance(finder, _InstallAfterTorch):
            finder.settings = settings
            return
    sys.meta_path.insert(0, _InstallAfterTorch(settings))


def _install_after_import(settings: Optional[str]) -> None:
    _load()
    backend = torch._C._cuda_getAllocatorBackend() if torch.cuda.is_available() else "native"
    if backend != "native":
        print(f"memsnap: PYTORCH_ALLOC_CONF asks for PyTorch's {backend} allocator backend: it serves "
              "this process, and memsnap is not installed", file=sys.stderr)
        return
    try:
        _install_now(settings)
    except (ValueError, TypeError, RuntimeError) as error:
        print(f"memsnap: not installed: {error}", file=sys.stderr)


def record_history(
    level: str = "all",
    stacks: str = "all",
    max_entries: int = 100_000,
    *,
    clear: bool = False,
    skip_actions: tuple[str, ...] | list[str] = (),
) -> None:
    """Records what happens to the allocator's memory, for snapshots.

    ``level``: ``"off"``; ``"state"`` (the stack of every live allocation); ``"alloc"`` (also a
    trace of allocations); ``"all"`` (also frees, segment events and out-of-memory errors).
    ``stacks``: ``"all"`` (Python and C++ frames, in call order: the C++ frames from the
    allocator up to the innermost Python frame, the Python frames above it; a thread running
    no Python, such as autograd's, gets its whole C++ stack), ``"python"``, ``"cpp"`` or
    ``"none"``. ``max_entries``: trace entries kept per device (the newest). ``skip_actions``:
    trace actions not to record, as PyTorch's (``"free_requested"``, ...). While recording,
    ``torch.profiler.record_function`` ranges (on any thread) are annotations, as through
    PyTorch's API.

    While recording, the memory the process holds outside the allocator is recorded too: device
    memory other libraries ask CUDA for (NCCL, cuBLAS, CuPy, an extension) and pinned host
    memory, each allocation with its stack and the library that asked (CUPTI's callbacks; see
    ``outside_memory_status()``). ``MEMSNAP_OUTSIDE_MEMORY=0`` leaves it out.
    """
    _require_installed()
    _check_int("max_entries", max_entries, 1, MAX_ENTRIES)
    if not isinstance(level, str) or not isinstance(stacks, str):
        raise TypeError("level and stacks are strings")
    _native.record_history(level, stacks, max_entries, bool(clear), [str(a) for a in skip_actions])
    # torch.profiler.record_function ranges become annotations while recording, as through
    # PyTorch's API (which adds its own callback for them).
    _native.follow_record_functions(level != "off")


def outside_memory_status() -> dict:
    """Whether memory outside the allocator is being recorded: ``{"recording": bool,
    "unrecorded_reason": str}``. It records while history does, unless ``MEMSNAP_OUTSIDE_MEMORY=0``
    or another tool (a profiler that started first, Nsight Systems) holds CUPTI's callbacks,
    which a process has one of; the reason says which."""
    _require_installed()
    return _native.outside_memory_status()


def history_settings() -> dict:
    """The recording settings in effect: ``{"level", "stacks", "max_entries"}``."""
    _require_installed()
    return _native.history_settings()


def _note_job_place() -> None:
    """Tells the native side this process's rank and world size when torch.distributed knows
    them (launchers that set no ``RANK``/``WORLD_SIZE`` variables); otherwise it reads those."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        _native.set_job_place(dist.get_rank(), dist.get_world_size())
    else:
        _native.set_job_place(None, None)


def dump_snapshot(path) -> None:
    """Writes a memsnap snapshot (msgpack) of every device: segments, blocks, history, the
    trace, statistics and settings. ``memsnap`` (stats, serve, explain-oom, replay) reads it.
    A path ending in ``.pickle`` gets PyTorch's snapshot pickle instead (what
    ``torch.cuda.memory._dump_snapshot`` writes), for PyTorch's own viewers."""
    _require_installed()
    _note_job_place()
    _native.dump_snapshot(_path(path))


def dump_snapshot_on_oom(pattern) -> None:
    """Writes a snapshot at every out-of-memory error, before the error is raised. ``pattern``
    may hold ``{pid}``, ``{device}``, ``{n}`` (the error's number), ``{host}``, ``{rank}`` and
    ``{local_rank}`` (from torch.distributed once it is initialized, else from the ``RANK`` and
    ``LOCAL_RANK`` variables torchrun sets; 0 outside a job); None or "" stops it. Files are
    memsnap's msgpack, or PyTorch's pickle when the pattern ends in ``.pickle``."""
    _require_installed()
    _note_job_place()
    _native.dump_snapshot_on_oom("" if pattern is None else _path(pattern))


class annotate(contextlib.ContextDecorator):
    """Names a phase of the program in the recorded trace, as a context manager or decorator:

        with memsnap.torch.annotate("forward"): ...
        @memsnap.torch.annotate("optimizer step")
        def step(): ...
    """

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ValueError("annotate() needs a non-empty name")
        self.name = name

    def __enter__(self):
        _require_installed()
        _native.annotate(self.name, True)
        return self

    def __exit__(self, *exc):
        _native.annotate(self.name, False)
        return False


def memory_stats(device=None) -> dict:
    """memsnap's statistics for one device under PyTorch's ``memory_stats()`` names."""
    _require_installed()
    return _native.memory_stats(_device_index(device))


def snapshot() -> dict:
    """The snapshot as ``torch.cuda.memory._snapshot()`` returns it (PyTorch's layout)."""
    _require_installed()
    return _native.torch_snapshot()


# --- PyTorch's own entry points, answered by memsnap ------------------------------------------


def _patch_torch() -> None:
    """Routes the parts of PyTorch's memory API that bypass the allocator interface (history
    with its stack choice, the snapshot with frames, allocator settings) to memsnap. Each is a
    function of ``torch._C`` that ``torch.cuda.memory`` looks up at every call, or (the
    snapshot pickle, written natively rather than through Python objects) a function of
    ``torch.cuda.memory`` itself."""
    global _patched
    if _patched:
        return
    C = torch._C
    original_record = C._cuda_record_memory_history
    original_legacy = C._cuda_record_memory_history_legacy

    def record_memory_history(
        enabled="all",
        context="all",
        stacks="all",
        max_entries=sys.maxsize,
        clear_history=False,
        compile_context=False,
        global_record_annotations=False,
        skip_actions=(),
    ):
        if not _native.is_installed():  # (another allocator took over: see install())
            return original_record(enabled, context, stacks, max_entries, clear_history, compile_context,
                                   global_record_annotations, list(skip_actions or ()))
        entries = _entries_for_pytorch(max_entries, enabled is not None)
        # PyTorch's own bookkeeping first (record_function annotations, compile contexts); it
        # calls memsnap's recordHistory, then the stack choice is made exact here.
        original_record(enabled, context, stacks, entries, clear_history, compile_context,
                        global_record_annotations, list(skip_actions or ()))
        level = "off" if enabled is None else str(enabled)
        kind = "none" if context is None else ("all" if stacks == "all" else "python")
        _native.record_history(level, kind, entries, False, [str(a) for a in (skip_actions or ())],
                               context=str(context or "state"))
        _native.follow_record_functions(False)  # (PyTorch's callback takes the ranges here)

    def record_memory_history_legacy(
        enabled,
        record_context=True,
        trace_alloc_max_entries=1,
        trace_alloc_record_context=False,
        record_context_cpp=False,
        clear_history=False,
        compile_context=False,
        global_record_annotations=False,
        skip_actions=(),
    ):
        if not _native.is_installed():
            return original_legacy(enabled, record_context, trace_alloc_max_entries, trace_alloc_record_context,
                                   record_context_cpp, clear_history, compile_context,
                                   global_record_annotations, list(skip_actions or ()))
        entries = _entries_for_pytorch(trace_alloc_max_entries, bool(enabled))
        original_legacy(enabled, record_context, entries, trace_alloc_record_context,
                        record_context_cpp, clear_history, compile_context,
                        global_record_annotations, list(skip_actions or ()))
        if not enabled:
            level = "off"
        else:
            level = "all" if entries > 1 else "state"
        kind = "none" if not record_context else ("all" if record_context_cpp else "python")
        _native.record_history(level, kind, max(entries, 1), False, [str(a) for a in (skip_actions or ())],
                               context="alloc" if trace_alloc_record_context else "state")
        _native.follow_record_functions(False)  # (PyTorch's callback takes the ranges here)

    original_snapshot = C._cuda_memorySnapshot

    def memory_snapshot(mempool_id=None):
        if not _native.is_installed():
            return original_snapshot(mempool_id)
        snapshot = _native.torch_snapshot()
        pool = (0, 0) if mempool_id is None else tuple(mempool_id)[:2]
        if pool != (0, 0):  # one private pool's segments (MemPool.snapshot()); (0, 0): all
            snapshot["segments"] = [s for s in snapshot["segments"] if tuple(s["segment_pool_id"]) == pool]
        return snapshot

    original_dump = torch.cuda.memory._dump_snapshot

    def dump_snapshot_pickle(filename="dump_snapshot.pickle", *args, **kwargs):
        # PyTorch's own options (augment_with_fx_traces) rework its dictionary in Python.
        if args or any(kwargs.values()) or not _native.is_installed():
            return original_dump(filename, *args, **kwargs)
        _note_job_place()
        _native.dump_pickle(_path(filename))

    original_set_settings = C._accelerator_setAllocatorSettings

    def set_allocator_settings(settings):
        # PyTorch's parser first: its keys, its errors, its defaults for what the string leaves
        # out, and the pinned_* keys for its host allocator. memsnap's allocator then takes the
        # result, and the trace records it.
        original_set_settings(settings)
        if _native.is_installed():
            _native.apply_settings(str(settings))

    # torch.profiler traces the GPU through CUPTI's callbacks, which a process has one of: when it
    # is about to, memsnap's recording of memory outside the allocator gives them up (else the
    # profiler would trace no kernel), and the snapshots say so from then on.
    import torch.autograd.profiler as autograd_profiler

    def yielding(original):
        def prepare(config, activities, *args, **kwargs):
            if _native.is_installed() and torch.autograd.ProfilerActivity.CUDA in set(activities or ()):
                _native.yield_cupti_to_profiler()
            return original(config, activities, *args, **kwargs)
        return prepare

    for module in (autograd_profiler, torch.autograd):
        for name in ("_prepare_profiler", "_enable_profiler"):
            if hasattr(module, name):
                setattr(module, name, yielding(getattr(module, name)))

    C._cuda_record_memory_history = record_memory_history
    C._cuda_record_memory_history_legacy = record_memory_history_legacy
    C._cuda_memorySnapshot = memory_snapshot
    C._accelerator_setAllocatorSettings = set_allocator_settings
    torch.cuda.memory._dump_snapshot = dump_snapshot_pickle
    _patched = True


def _entries_for_pytorch(max_entries, recording: bool) -> int:
    """PyTorch's max_entries as memsnap keeps them; the cap is told only to a caller who turns
    recording on (turning it off leaves max_entries at its default)."""
    entries = int(max_entries)
    if entries > PYTORCH_DEFAULT_ENTRY_LIMIT:
        if recording:
            warnings.warn(
                f"memsnap keeps at most {PYTORCH_DEFAULT_ENTRY_LIMIT:,} trace entries per device when "
                f"max_entries is left at PyTorch's unbounded default (asked: {entries:,}); pass "
                "max_entries to choose",
                stacklevel=3,
            )
        entries = PYTORCH_DEFAULT_ENTRY_LIMIT
    return max(entries, 1)


def _require_installed() -> None:
    _load()
    if not _native.is_installed():
        raise RuntimeError("memsnap is not PyTorch's CUDA allocator: call memsnap.torch.install() first")


def _check_int(name, value, low, high) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low:,} and {high:,}, got {value:,}")


def _path(path) -> str:
    import os

    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text or "\0" in text:
        raise ValueError(f"not a usable path: {path!r}")
    return text


def _device_index(device) -> int:
    _load()
    if device is None:
        return torch.cuda.current_device()
    return torch.cuda._utils._get_device_index(device, optional=True)
