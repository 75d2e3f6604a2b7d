"""What a training step asks of PyTorch's CUDA caching allocator, found without allocating it.

``capture(step, setup=...)`` runs ``setup`` (build the model and optimizer) and then ``step``
(forward, backward, optimizer step) several times on fake CUDA tensors (PyTorch's
``FakeTensorMode``): every operation runs for its shapes and dtypes only and no device memory is
allocated, so a model that would not fit can be measured. Each CUDA storage an operation creates
is recorded with its size (rounded as the caching allocator rounds it), the stream it was made
on, the Python stack that made it (or the operation, for storages autograd's engine makes in
backward) and the moment its last reference goes, which is when PyTorch frees it. The result is
a trace in the layout of ``torch.cuda.memory._dump_snapshot``, with no segments: which segments
the caching allocator reserves for it, on which device and under which settings, is memsnap's
replay of that trace::

    capture(step, setup=build).dump("step.pickle")
    # memsnap replay step.pickle --capacity-gib 80      peak allocated and reserved, any OOM
    # memsnap tune step.pickle                          the settings that reserve least
    # memsnap serve step.pickle                         every view

What it cannot see: memory PyTorch's kernels allocate inside themselves through the caching
allocator (the cuBLAS and cuBLASLt workspaces, 2 x 32 MiB and 1 MiB on an H100 or H200 for a
step with a backward pass; reduction and attention-backward scratch; cuDNN workspaces), memory
outside the allocator (the CUDA context, NCCL), and shapes that depend on data. ``Capture.unseen``
lists the first group for the captured step. PyTorch's optimizers take their per-tensor path
on fake tensors where a real CUDA run takes the foreach path, whose step holds temporaries as
large as a group of parameters: where the optimizer step is a step's peak, the capture is low.

A CUDA device must be visible (no tensor memory is allocated on it): PyTorch's autograd engine refuses a
backward pass over fake CUDA tensors on a machine without one (``GraphTask::stash_current_streams``
asks for device 0's context).
"""

from __future__ import annotations

import pickle
import sys
import threading
import weakref
from dataclasses import dataclass, field

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode_temporarily
from torch.utils._pytree import tree_flatten

__all__ = ["Capture", "capture"]

_THIS_FILE = __file__
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


def _python_frames(op_name: str) -> list[dict]:
    """The Python stack, innermost first, as PyTorch's snapshot frames, after the operation.
    On autograd's engine thread there is no Python stack: the operation alone says what ran."""
    frames = [{"filename": "", "line": 0, "name": op_name}]
    frame = sys._getframe(2)
    inner_end = True
    while frame is not None:
        filename = frame.f_code.co_filename
        if filename != _THIS_FILE and not (inner_end and any(part in filename for part in _DISPATCH_MACHINERY)):
            inner_end = False
            frames.append({"filename": filename, "line": frame.f_lineno or 0, "name": frame.f_code.co_name})
        frame = frame.f_back
    return frames


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

    def __init__(self):
        super().__init__()
        self._lock = threading.RLock()  # weakref callbacks run on whichever thread drops a storage
        self._live: dict[int, tuple[int, int, int]] = {}  # storage key -> (address, size, stream)
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

    def _record_free(self, address: int, size: int, stream: int) -> None:
        self.allocated -= size
        now = self.tick()
        for action in ("free_requested", "free_completed"):
            self.trace.append({"action": action, "addr": address, "size": size, "stream": stream,
                               "time_us": now, "frames": []})

    def _allocate(self, storage, size: int, stream: int, op_name: str) -> None:
        key = storage._cdata
        address = self._next_address
        self._next_address += size + _ADDRESS_GAP
        self._live[key] = (address, size, stream)
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        self.overall_peak = max(self.overall_peak, self.allocated)
        self.trace.append({"action": "alloc", "addr": address, "size": size, "stream": stream,
                           "time_us": self.tick(), "frames": _python_frames(op_name)})
        self.finalizers.append(weakref.finalize(storage, self._free, key))

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
                key = storage._cdata
                held = self._live.get(key)
                if held is not None:
                    if held[1] >= _round_size(nbytes) or nbytes == 0:
                        continue
                    # Grown in place (resize_, an out= result): PyTorch allocates the new size,
                    # then frees the old block.
                    self._record_free(*self._live.pop(key))
                elif nbytes == 0:
                    continue
                if stream is None:
                    stream = torch.cuda.current_stream(value.device).cuda_stream
                self._allocate(storage, _round_size(nbytes), stream, op_name)
        return result


def _unseen(ops: set[str]) -> list[str]:
    unseen = []
    if ops & {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm"}:
        unseen.append("cuBLAS and cuBLASLt workspaces (held from the first matrix product on each "
                      "thread and stream: 2 x 32 MiB and 1 MiB on an H100 or H200 when a backward "
                      "pass runs)")
    if any("attention" in op for op in ops):
        unseen.append("scratch that fused attention's backward allocates inside the kernel")
    if any("convolution" in op for op in ops):
        unseen.append("cuDNN convolution workspaces (their size depends on the algorithm chosen)")
    unseen.append("scratch that reductions and other kernels allocate inside themselves "
                  "(freed before they return)")
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


def capture(step, *, setup=None, steps: int = 3) -> Capture:
    """Runs ``state = setup()`` once and ``step(state)`` ``steps`` times (``step()`` when there is
    no setup) on fake CUDA tensors, and returns what the caching allocator was asked for.

    ``setup`` builds what lives across steps (model, optimizer) as the training script does: on
    the CPU and moved with ``.to("cuda")``, or on the device directly. Work on CPU tensors runs
    for real; every tensor on a CUDA device is fake. A value read back from the device
    (``loss.item()``) is 0 in the capture, and code that branches on it takes that branch."""
    if not callable(step):
        raise TypeError(f"step must be callable, not {type(step).__name__}")
    if setup is not None and not callable(setup):
        raise TypeError(f"setup must be callable or None, not {type(setup).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= 1000:
        raise ValueError(f"steps must be an integer from 1 to 1000, not {steps!r}")
    if not torch.cuda.is_available():
        raise RuntimeError("memsnap.estimate.capture needs a CUDA device to be visible (it "
                           "allocates no tensor memory there): PyTorch's autograd engine refuses a backward pass over "
                           "fake CUDA tensors without one")
    ledger = _StorageLedger()
    step_peaks = []
    with FakeTensorMode(allow_non_fake_inputs=True), ledger, _TiedParameters():
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
                    "allocator_settings": {}}
    return Capture(snapshot=snapshot, steps=steps, peak_live_bytes=ledger.overall_peak,
                   step_peak_live_bytes=step_peaks, unseen=_unseen(ledger.ops))
