"""``python -m memsnap.estimate SCRIPT.py --device H200`` (what ``memsnap estimate SCRIPT.py`` runs)."""

from __future__ import annotations

import sys

from memsnap.estimate.fit import BatchEstimate, _device_capacity, estimate


def _write_report(path: str, text: str) -> None:
    """Writes ``text`` to ``path`` whole or not at all: through a new temporary file beside it,
    never through a link or into something that is not a regular file."""
    import os
    import stat
    import tempfile

    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        raise ValueError(f"{path}: exists and is not a regular file; not replaced")
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".memsnap-estimate-")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main(argv=None) -> int:
    """``python -m memsnap.estimate SCRIPT.py --device H200``: the script defines ``step(state)``
    and, optionally, ``setup()`` (``setup(batch_size)`` with --batch-sizes); it runs as a module
    named ``__memsnap_estimate__``, so its ``if __name__ == "__main__"`` block does not."""
    import argparse
    import json
    import os
    import runpy

    parser = argparse.ArgumentParser(prog="memsnap estimate", description=main.__doc__)
    parser.add_argument("script")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--device", help="the GPU by name (H200)")
    where.add_argument("--capacity-gib", type=float, help="the memory the allocator may reserve, in GiB")
    parser.add_argument("--settings", help="PYTORCH_CUDA_ALLOC_CONF's text (default: the variable's value)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch-sizes", help="comma-separated: capture each, name the largest that fits")
    parser.add_argument("--no-tune", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--save", help="also write the capture (a _dump_snapshot pickle) to this new file")
    parser.add_argument("-o", "--output")
    options = parser.parse_args(argv)

    def fail(message) -> int:
        print(f"memsnap: error: {message}", file=sys.stderr)
        return 1

    try:
        if options.capacity_gib is not None:
            if not 0 < options.capacity_gib <= 1 << 20:
                raise ValueError("--capacity-gib must be between 0 and 1048576")
            device = int(options.capacity_gib * (1 << 30))
        else:
            device = options.device
        _device_capacity(device)
        if not 1 <= options.steps <= 1000:
            raise ValueError(f"--steps must be from 1 to 1000, not {options.steps}")
        if options.settings:
            from memsnap import _native

            _native.check_allocator_settings(options.settings)
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("capturing a step needs a CUDA device to be visible (no tensor memory is "
                               "allocated on it): without one PyTorch refuses a backward pass over fake "
                               "CUDA tensors")
        batch_sizes = None
        if options.batch_sizes is not None:
            try:
                batch_sizes = [int(word) for word in options.batch_sizes.split(",")]
            except ValueError:
                raise ValueError(f"--batch-sizes must be integers separated by commas, "
                                 f"not {options.batch_sizes!r}") from None
            if options.save:
                raise ValueError("--save writes one capture; leave out --batch-sizes")
        if options.save and os.path.lexists(options.save):
            raise FileExistsError(f"{options.save}: exists; --save writes a new file")
        if not os.path.isfile(options.script):
            raise FileNotFoundError(f"{options.script}: no such file")
    except (TypeError, ValueError, RuntimeError, OSError) as error:
        return fail(error)
    # The script's own errors keep their traceback.
    names = runpy.run_path(options.script, run_name="__memsnap_estimate__")
    step, setup = names.get("step"), names.get("setup")
    if not callable(step):
        return fail(f"{options.script} defines no step() function (and optionally setup())")
    result = estimate(step, setup=setup if callable(setup) else None, device=device, settings=options.settings,
                      steps=options.steps, batch_sizes=batch_sizes, tune=not options.no_tune)
    if options.json:
        if isinstance(result, BatchEstimate):
            text = json.dumps({"largest_fitting": result.largest_fitting, "capacity_bytes": result.capacity_bytes,
                               "batch_sizes": {str(size): dict(one.details, unseen=one.capture.unseen)
                                               for size, one in result.estimates.items()}}) + "\n"
        else:
            text = json.dumps(dict(result.details, unseen=result.capture.unseen)) + "\n"
    else:
        text = str(result)
    try:
        if options.save:
            result.capture.dump(options.save)
        if options.output:
            _write_report(options.output, text)
        else:
            sys.stdout.write(text)
    except (ValueError, OSError) as error:
        return fail(error)
    return 0


if __name__ == "__main__":
    sys.exit(main())
