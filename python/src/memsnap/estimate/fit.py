"""Whether a captured training step fits a device: memsnap's simulation of PyTorch's caching
allocator replays the capture (capture.py) on a device of a given size, under given settings."""

from __future__ import annotations

import io
import json
import pickle
from dataclasses import dataclass

from memsnap.estimate.capture import Capture, capture, settings_from_environment

__all__ = ["BatchEstimate", "Estimate", "estimate"]


@dataclass
class Estimate:
    """A captured step replayed on a device: ``str(estimate)`` is the report."""

    fits: bool
    capacity_bytes: int
    settings: str  # PYTORCH_CUDA_ALLOC_CONF's text ("" for PyTorch's defaults)
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    steps: list[dict]  # name, peak_allocated_bytes, peak_reserved_bytes, ... (setup first)
    failure: dict | None  # the allocation that fails: step, requested_bytes, site, frames, ...
    tune: dict | None  # memsnap tune's ranking of settings on this device
    report: str
    capture: Capture
    details: dict  # everything, as memsnap estimate --json prints it

    def __str__(self) -> str:
        unseen = "".join(f"  - {item}\n" for item in self.capture.unseen)
        return self.report + ("\nNot in the estimate (kernels allocate it inside themselves):\n" + unseen
                              if unseen else "")


@dataclass
class BatchEstimate:
    """One estimate per batch size: ``largest_fitting`` is the largest batch size that fits."""

    estimates: dict[int, Estimate]
    largest_fitting: int | None
    capacity_bytes: int

    def __str__(self) -> str:
        from memsnap._native import format_bytes

        lines = [f"{'batch':>6}  {'fits':<5} {'peak allocated':>15} {'peak reserved':>15}"]
        for size, one in self.estimates.items():
            lines.append(f"{size:>6}  {'yes' if one.fits else 'no':<5} {format_bytes(one.peak_allocated_bytes):>15} "
                         f"{format_bytes(one.peak_reserved_bytes):>15}"
                         + ("" if one.fits else f"  out of memory in {one.failure.get('step') or 'the run'}"))
        head = (f"Largest batch size that fits in {format_bytes(self.capacity_bytes)}: {self.largest_fitting}"
                if self.largest_fitting is not None else
                f"None of the batch sizes fits in {format_bytes(self.capacity_bytes)}")
        return head + "\n\n" + "\n".join(lines) + "\n"


def _device_capacity(device) -> tuple[int, str]:
    from memsnap import _native

    if isinstance(device, bool) or device is None:
        raise TypeError("device must be a GPU's name (\"H200\") or the bytes the allocator may reserve")
    if isinstance(device, int):
        if not 0 < device < (1 << 50):
            raise ValueError(f"device must be between 1 byte and 1 PiB, not {device}")
        return device, "given"
    if isinstance(device, str):
        try:
            return _native.device_preset(device)
        except ValueError as error:
            raise ValueError(str(error)) from None
    raise TypeError(f"device must be a GPU's name or a number of bytes, not {type(device).__name__}")


def _replay(captured: Capture, capacity: tuple[int, str], settings: str | None, tune: bool) -> Estimate:
    from memsnap import _native

    data = io.BytesIO()
    pickle.dump(captured.snapshot, data, protocol=pickle.HIGHEST_PROTOCOL)
    details_text, report = _native.fit_estimate(data.getvalue(), capacity[0], capacity[1], settings, tune)
    details = json.loads(details_text)
    return Estimate(fits=details["fits"], capacity_bytes=details["capacity_bytes"], settings=details["settings"],
                    peak_allocated_bytes=details["peak_allocated_bytes"],
                    peak_reserved_bytes=details["peak_reserved_bytes"], steps=details["steps"],
                    failure=details["failure"], tune=details["tune"], report=report, capture=captured,
                    details=details)


def estimate(step, *, device, setup=None, settings: str | None = None, steps: int = 3,
             batch_sizes=None, tune: bool = True):
    """Whether a training step fits ``device``, found without allocating it: the step is captured
    on fake CUDA tensors (``capture``) and its allocations replayed through memsnap's simulation
    of PyTorch's caching allocator on a device of that size, under ``settings``.

    ``device`` is a GPU's name (``"H200"``: its memory less what its CUDA context keeps) or the
    bytes the allocator may reserve (a memory cap: ``int(0.5 * total)``). ``settings`` is
    PYTORCH_CUDA_ALLOC_CONF's text (default: that variable's value, else PyTorch's defaults).
    Returns an ``Estimate`` (``print`` it: peaks per step, the allocation that fails with its
    Python stack, the settings that reserve least on that device).

    With ``batch_sizes=[8, 16, 32]`` each size is captured in turn, passed to ``setup(batch_size)``
    (to ``step(batch_size)`` when there is no setup), and a ``BatchEstimate`` names the largest
    that fits."""
    from memsnap import _native

    capacity = _device_capacity(device)
    if settings is not None and not isinstance(settings, str):
        raise TypeError(f"settings must be a string or None, not {type(settings).__name__}")
    if settings is None:
        settings = settings_from_environment()
    if settings:
        _native.check_allocator_settings(settings)  # before the capture, not after it
    if batch_sizes is None:
        return _replay(capture(step, setup=setup, steps=steps, settings=settings), capacity, settings, tune)
    sizes = list(batch_sizes)
    if not sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
        raise ValueError(f"batch_sizes must be positive integers, not {batch_sizes!r}")
    estimates = {}
    for size in sizes:
        if setup is not None:
            captured = capture(step, setup=lambda size=size: setup(size), steps=steps, settings=settings)
        else:
            captured = capture(lambda size=size: step(size), steps=steps, settings=settings)
        estimates[size] = _replay(captured, capacity, settings, tune)
    fitting = [size for size, one in estimates.items() if one.fits]
    return BatchEstimate(estimates=estimates, largest_fitting=max(fitting) if fitting else None,
                         capacity_bytes=capacity[0])
