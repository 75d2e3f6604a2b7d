"""A training step's requests to PyTorch's CUDA caching allocator, found without allocating them.

``capture(step, setup=...)`` runs ``setup`` (build the model and optimizer) and then ``step``
(forward, backward, optimizer step) several times on fake CUDA tensors (PyTorch's
``FakeTensorMode``): every operation runs for its shapes and dtypes only and no device memory is
allocated, so a model that would not fit can be measured. Each CUDA storage an operation creates
is recorded with the bytes it asks for, the stream it was made on, the Python stack that made
it (for a storage made in backward: the autograd node that made it and the forward line that
node is the gradient of) and the moment its last reference goes, which is when PyTorch frees it;
so are the cuBLAS and cuBLASLt workspaces, which
the first matrix product on each thread and stream makes (``cublas_workspace_bytes``).
Optimizers take the foreach path a real CUDA run takes. The result is a trace in the layout of
``torch.cuda.memory._dump_snapshot``, with no segments: which segments the caching allocator
reserves for it, on which device and under which settings, is memsnap's replay of that trace
(fit.py, ``memsnap estimate``).

What it cannot see: scratch that kernels allocate inside themselves through the caching
allocator (reductions, fused attention's backward, cuDNN workspaces; ``Capture.unseen`` lists
those of the captured step), memory outside the allocator (the CUDA context, NCCL), and shapes
that depend on data.

A CUDA device must be visible, though no tensor memory is allocated on it: without one, PyTorch
2.11's autograd engine refuses a backward pass over fake CUDA tensors
(``GraphTask::stash_current_streams`` asks for device 0's context) and autocast turns itself off.
"""

from __future__ import annotations

import os
import pickle
import re
import sys
import threading
import weakref
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily
from torch.utils._pytree import tree_flatten

__all__ = ["Capture", "capture", "cublas_workspace_bytes", "settings_from_environment"]

_THIS_FOLDER = os.path.dirname(os.path.abspath(__file__)) + os.sep  # this package's frames are not the program's
# The caching allocator's rounding of a request (PyTorch's round_size): 512-byte multiples.
_MIN_BLOCK = 512
# Fake addresses, far apart so no two storages can look adjacent.
_ADDRESS_BASE = 1 << 44
_ADDRESS_GAP = 1 << 21


def _round_size(nbytes: int) -> int:
    if nbytes < _MIN_BLOCK:
        return _MIN_BLOCK
    return (nbytes + _MIN_BLOCK - 1) // _MIN_BLOCK * _MIN_BLOCK


def _touches_cuda(args, kwargs) -> bool:
    """Whether an operation reads a fake tensor or makes one on a CUDA device."""
    for value in tree_flatten((args, kwargs))[0]:
        if isinstance(value, FakeTensor):
            return True
        if isinstance(value, torch.device) and value.type == "cuda":
            return True
        if isinstance(value, str) and value.startswith("cuda"):
            return True
    return False


def _placeholder_scalar(dtype: torch.dtype):
    if dtype == torch.bool:
        return False
    if dtype.is_floating_point:
        return 0.0
    if dtype.is_complex:
        return 0j
    return 0


# The machinery a fake tensor's operation runs through in Python (the dispatch modes, the fake
# kernels, Python decompositions), where a real CUDA operation runs in C++: frames from these
# files at the inner end of a stack would not be in PyTorch's own snapshot of the same step.
_DISPATCH_MACHINERY = ("/torch/_subclasses/", "/torch/_ops.py", "/torch/_compile.py", "/torch/utils/_python_dispatch.py",
                       "/torch/utils/_stats.py", "/torch/utils/_pytree.py", "/torch/_dynamo/",
                       "/torch/_refs/", "/torch/_decomp/", "/torch/_prims/", "/torch/_prims_common/",
                       "/torch/_meta_registrations.py", "/torch/_library/", "/torch/_higher_order_ops/",
                       "/torch/fx/experimental/")


# One entry of traceback.format_stack's list: '  File "PATH", line N, in NAME\n    source\n'.
_TRACEBACK_ENTRY = re.compile(r'File "(.*)", line (\d+), in ')


def _forward_frames(node) -> list[str]:
    """The stack at which autograd made ``node`` in forward, as anomaly mode records it (and
    PyTorch's snapshot holds it: traceback lines, outermost first), without this package's frames
    and the dispatch machinery at the inner end; empty when it was not recorded."""
    try:
        entries = node.metadata.get("traceback_")
    except (AttributeError, RuntimeError):
        return []
    if not isinstance(entries, (list, tuple)):
        return []
    kept = []
    inner_end = True
    for entry in reversed(entries):
        match = _TRACEBACK_ENTRY.search(entry) if isinstance(entry, str) else None
        if match is None:
            continue
        filename = match.group(1)
        if filename.startswith(_THIS_FOLDER):
            continue
        if inner_end and any(part in filename for part in _DISPATCH_MACHINERY):
            continue
        inner_end = False
        kept.append(entry)
    kept.reverse()
    return kept


def _current_autograd_node():
    current = getattr(torch._C, "_current_autograd_node", None)
    if current is None:
        return None
    try:
        return current()
    except RuntimeError:
        return None


def _python_frames(op_name: str) -> tuple[list[dict], list[str]]:
    """The Python stack, innermost first, as PyTorch's snapshot frames, after the operation; and
    in backward, the forward call's stack (PyTorch's ``forward_frames``) that made the autograd
    node that runs, which is named after the operation (``AddmmBackward0``). The engine's own
    thread has no Python stack of its own: the forward call says whose memory it is."""
    frames = [{"filename": "", "line": 0, "name": op_name}]
    forward = []
    node = _current_autograd_node()
    if node is not None:
        frames.append({"filename": "", "line": 0, "name": node.name()})
        forward = _forward_frames(node)
    frame = sys._getframe(2)
    inner_end = True
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_THIS_FOLDER) and not (inner_end and any(part in filename for part in _DISPATCH_MACHINERY)):
            inner_end = False
            frames.append({"filename": filename, "line": frame.f_lineno or 0, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames, forward


@dataclass
class Capture:
    """A captured step: ``snapshot`` is in ``torch.cuda.memory._dump_snapshot``'s layout."""

    snapshot: dict
    steps: int
    # The most bytes of live storages at once, each rounded up to 512 bytes as the allocator rounds
    # a request; PyTorch's allocated figure can be a little higher, where the allocator hands out
    # a cached block whole rather than split it (memsnap replay tells that and the reserved bytes).
    peak_live_bytes: int
    step_peak_live_bytes: list[int] = field(default_factory=list)
    unseen: list[str] = field(default_factory=list)

    def dump(self, path: str) -> None:
        """Writes the snapshot as a pickle that memsnap and PyTorch's memory_viz read, to a new
        file: a path that exists (a file, a link) is refused with FileExistsError."""
        with open(path, "xb") as out:
            pickle.dump(self.snapshot, out, protocol=pickle.HIGHEST_PROTOCOL)


class _StorageLedger(TorchDispatchMode):
    """Sees every operation under the fake mode; records the CUDA storages they create."""

    def __init__(self, workspace_bytes: int):
        super().__init__()
        self._lock = threading.RLock()  # weakref callbacks run on whichever thread drops a storage
        self._workspace_bytes = workspace_bytes
        self._workspaces: set[tuple] = set()  # (kind, thread, stream) that have one
        # storage key -> (address, size as the allocator rounds it, stream, bytes asked for)
        self._live: dict[int, tuple[int, int, int, int]] = {}
        self._next_address = _ADDRESS_BASE
        self._clock = 0
        self.trace: list[dict] = []
        self.annotations: list[dict] = []
        self.allocated = 0
        self.peak = 0  # since the current step began
        self.overall_peak = 0
        self.ops: set[str] = set()
        self.finalizers: list = []

    def tick(self) -> int:
        self._clock += 1
        return self._clock

    def annotate(self, name: str, stage: str) -> None:
        with self._lock:
            self.annotations.append({"device": 0, "stage": stage, "name": name, "time_us": self.tick()})

    def _free(self, key: int) -> None:
        with self._lock:
            entry = self._live.pop(key, None)
            if entry is None:
                return
            self._record_free(*entry)

    def _record_free(self, address: int, size: int, stream: int, nbytes: int) -> None:
        self.allocated -= size
        now = self.tick()
        for action in ("free_requested", "free_completed"):
            self.trace.append({"action": action, "addr": address, "size": nbytes, "stream": stream,
                               "time_us": now, "frames": []})

    def _record_alloc(self, nbytes: int, stream: int, op_name: str) -> tuple[int, int]:
        """Adds an allocation of ``nbytes`` (PyTorch's request; the allocator rounds it) to the
        trace: its address and the rounded size the ledger counts."""
        size = _round_size(nbytes)
        address = self._next_address
        self._next_address += size + _ADDRESS_GAP
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        self.overall_peak = max(self.overall_peak, self.allocated)
        frames, forward = _python_frames(op_name)
        entry = {"action": "alloc", "addr": address, "size": nbytes, "stream": stream,
                 "time_us": self.tick(), "frames": frames}
        if forward:
            entry["forward_frames"] = forward
        self.trace.append(entry)
        return address, size

    def _allocate(self, storage, nbytes: int, stream: int, op_name: str) -> None:
        key = storage._cdata
        address, size = self._record_alloc(nbytes, stream, op_name)
        self._live[key] = (address, size, stream, nbytes)
        self.finalizers.append(weakref.finalize(storage, self._free, key))

    def _cublas_workspaces(self, func, args, stream: int, op_name: str) -> None:
        """The first matrix product on a thread's cuBLAS handle and a stream makes that pair's
        cuBLAS workspace (autograd's backward runs on its own thread: a second one), and the
        first product with a bias, which goes through cuBLASLt, makes cuBLASLt's; the allocator
        serves them and keeps them for the rest of the process."""
        thread = threading.get_ident()
        wanted = [("cuBLAS", self._workspace_bytes)]
        if func in _CUBLASLT_OPS and isinstance(args[0], torch.Tensor) and args[0].dim() == 1:
            wanted.append(("cuBLASLt", _cublaslt_workspace_bytes()))
        for kind, nbytes in wanted:
            key = (kind, thread, stream)
            if nbytes == 0 or key in self._workspaces:
                continue
            self._workspaces.add(key)
            self._record_alloc(nbytes, stream, f"{kind} workspace of {op_name}")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _touches_cuda(args, kwargs):
            # Host work stays real (a model built on the CPU, values its constructor computes):
            # run below the fake mode, which is the top of the mode stack inside this handler.
            with _pop_mode_temporarily():
                return func(*args, **kwargs)
        if func is torch.ops.aten._local_scalar_dense.default:
            # A value read back from the device (.item(), a logged loss): the capture has none.
            return _placeholder_scalar(args[0].dtype)
        result = func(*args, **kwargs)
        op_name = f"{func.namespace}::{func._opname}"
        self.ops.add(op_name)
        stream = None
        with self._lock:
            for value in tree_flatten(result)[0]:
                if not isinstance(value, torch.Tensor) or value.device.type != "cuda":
                    continue
                storage = value.untyped_storage()
                nbytes = storage.nbytes()
                if nbytes == 0:
                    continue
                key = storage._cdata
                held = self._live.get(key)
                if held is not None and held[1] >= _round_size(nbytes):
                    continue
                if stream is None:
                    stream = _current_stream()
                if held is not None:
                    # Grown in place (resize_, an out= result): PyTorch allocates the new size,
                    # then frees the old block.
                    del self._live[key]
                    self._allocate(storage, nbytes, stream, op_name)
                    self._record_free(*held)
                else:
                    self._allocate(storage, nbytes, stream, op_name)
            if func in _CUBLAS_OPS:
                self._cublas_workspaces(func, args, stream if stream is not None else _current_stream(), op_name)
        return result


def _unseen(ops: set[str]) -> list[str]:
    unseen = []
    if any("attention" in op for op in ops):
        unseen.append("scratch that fused attention's backward allocates inside the kernel (five "
                      "blocks of about 3 MiB per layer for GPT-2 small at 4 x 256 tokens on an H200)")
    if any("convolution" in op for op in ops):
        unseen.append("cuDNN convolution workspaces (their size depends on the algorithm chosen)")
    if any(op.startswith("aten::embedding") for op in ops):
        unseen.append("the embedding backward's scratch (3 MiB at 1,024 tokens)")
    unseen.append("scratch that reductions and other kernels allocate inside themselves "
                  "(up to 24 MiB in a GPT-2 small step at 4 x 256 tokens on an H200; freed before they return)")
    return unseen


class _TiedParameters:
    """Module.to() keeps a parameter that several modules share (tied embeddings) one parameter:
    it moves the data in place (``param.data = moved``). A fake tensor cannot be the data of a
    real one, so under the capture Module._apply makes a new Parameter for each module that holds
    the parameter, and the tie would break (two copies, twice the optimizer state). While
    entered, Module._apply converts each parameter once and gives every module that shared it
    the one new Parameter, as the real move leaves them."""

    def __init__(self):
        self._original = None
        self._depth = 0
        self._moved: dict[int, tuple] = {}

    def __enter__(self):
        self._original = torch.nn.Module._apply
        original = self._original
        keeper = self

        def _apply(module, fn, recurse=True):
            outermost = keeper._depth == 0
            places: dict[int, list] = {}
            if outermost:
                for owner in module.modules():
                    for name, param in owner._parameters.items():
                        if param is not None:
                            places.setdefault(id(param), []).append((owner, name, param))

                def convert_once(tensor, _fn=fn):
                    held = keeper._moved.get(id(tensor))
                    if held is not None and held[0] is tensor:
                        return held[1]
                    moved = _fn(tensor)
                    keeper._moved[id(tensor)] = (tensor, moved)
                    return moved
                fn = convert_once
            keeper._depth += 1
            try:
                result = original(module, fn, recurse)
            finally:
                keeper._depth -= 1
                if outermost:
                    keeper._moved.clear()
            if outermost:
                for shared in places.values():
                    if len(shared) > 1:
                        first_owner, first_name, _ = shared[0]
                        kept = first_owner._parameters[first_name]
                        for owner, name, _ in shared[1:]:
                            owner._parameters[name] = kept
            return result

        torch.nn.Module._apply = _apply
        return self

    def __exit__(self, *exc):
        torch.nn.Module._apply = self._original
        return False


class _ForeachOnFakes:
    """PyTorch's optimizers take their foreach path (one kernel over a list of tensors, whose
    temporaries are as large as a group of parameters) for CUDA tensors of the types it knows;
    a fake tensor is not one of them, and the optimizer would take its per-tensor path, which a
    real run does not. While entered, fake tensors count as those types."""

    def __enter__(self):
        from torch.optim import optimizer

        self._types = getattr(optimizer, "_foreach_supported_types", None)
        self._added = self._types is not None and FakeTensor not in self._types
        if self._added:
            self._types.append(FakeTensor)
        return self

    def __exit__(self, *exc):
        if self._added:
            self._types.remove(FakeTensor)
        return False


# Operations that run a cuBLAS matrix product (and so make the stream's cuBLAS workspace).
_CUBLAS_OPS = {getattr(torch.ops.aten, name).default for name in
               ("mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "_addmm_activation")
               if hasattr(torch.ops.aten, name)}


# Products with a bias that PyTorch sends through cuBLASLt (addmm's bias-and-GEMM path).
_CUBLASLT_OPS = {getattr(torch.ops.aten, name).default for name in ("addmm", "_addmm_activation")
                 if hasattr(torch.ops.aten, name)}


def _cublaslt_workspace_bytes() -> int:
    """cuBLASLt's workspace: CUBLASLT_WORKSPACE_SIZE (KiB) when set, else 1 MiB (seen on an H200,
    torch 2.11)."""
    value = os.environ.get("CUBLASLT_WORKSPACE_SIZE", "")
    return int(value) * 1024 if value.isdigit() else 1 << 20


def _current_stream() -> int:
    return torch.cuda.current_stream().cuda_stream


def cublas_workspace_bytes() -> int:
    """The workspace PyTorch gives cuBLAS for each thread and stream on the visible GPU: CUBLAS_WORKSPACE_CONFIG
    (":SIZE_KIB:COUNT" pairs) when set, else PyTorch's default for the GPU's architecture (32 MiB
    on Hopper and Blackwell, 8 MiB + 128 KiB before them)."""
    import re

    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    major, _ = torch.cuda.get_device_capability()
    default = 4096 * 8 * 1024 if 9 <= major <= 12 else 4096 * 1024 * 2 + 16 * 1024 * 8
    if config is None:
        return default
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if not pairs:
        return default
    return sum(int(size) * int(count) * 1024 for size, count in pairs)


def settings_from_environment() -> str | None:
    """PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, the order PyTorch reads them in."""
    for name in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"):
        value = os.environ.get(name)
        if value:
            return value
    return None


def capture(step, *, setup=None, steps: int = 3, settings: str | None = None) -> Capture:
    """Runs ``state = setup()`` once and ``step(state)`` ``steps`` times (``step()`` when there is
    no setup) on fake CUDA tensors, and returns what the caching allocator was asked for.

    ``setup`` builds what lives across steps (model, optimizer) as the training script does: on
    the CPU and moved with ``.to("cuda")``, or on the device directly. Work on CPU tensors runs
    for real; every tensor on a CUDA device is fake. A value read back from the device
    (``loss.item()``) is 0 in the capture, and code that branches on it takes that branch.
    ``settings`` (PYTORCH_CUDA_ALLOC_CONF's text; default: that variable's value) are recorded
    with the capture for the replays that read it."""
    if not callable(step):
        raise TypeError(f"step must be callable, not {type(step).__name__}")
    if setup is not None and not callable(setup):
        raise TypeError(f"setup must be callable or None, not {type(setup).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
        raise ValueError(f"steps must be an integer from 1 to 1000, not {steps!r}")
    if settings is not None and not isinstance(settings, str):
        raise TypeError(f"settings must be a string or None, not {type(settings).__name__}")
    if not torch.cuda.is_available():
        raise RuntimeError("memsnap.estimate needs a CUDA device to be visible (it allocates no tensor "
                           "memory there): PyTorch's autograd engine refuses a backward pass over fake "
                           "CUDA tensors without one, and autocast turns itself off")
    if settings is None:
        settings = settings_from_environment()
    ledger = _StorageLedger(cublas_workspace_bytes())
    step_peaks = []
    # Anomaly mode's metadata keeps, for each autograd node, the forward stack that made it: a
    # storage made in backward is then named by its forward line. Its NaN check reads values,
    # which fake tensors have none of: off.
    with torch.autograd.set_detect_anomaly(True, check_nan=False), \
            FakeTensorMode(allow_non_fake_inputs=True), ledger, _TiedParameters(), _ForeachOnFakes():
        state = setup() if setup is not None else None
        for index in range(steps):
            name = f"estimate step {index + 1}"
            ledger.annotate(name, "START")
            with ledger._lock:
                ledger.peak = ledger.allocated
            step(state) if setup is not None else step()
            ledger.annotate(name, "END")
            step_peaks.append(ledger.peak)
    for finalizer in ledger.finalizers:  # what outlives the capture is not freed in it
        finalizer.detach()
    with ledger._lock:
        snapshot = {"segments": [], "device_traces": [list(ledger.trace)],
                    "external_annotations": list(ledger.annotations),
                    "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": settings} if settings else {}}
    return Capture(snapshot=snapshot, steps=steps, peak_live_bytes=ledger.overall_peak,
                   step_peak_live_bytes=step_peaks, unseen=_unseen(ledger.ops))
