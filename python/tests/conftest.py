"""The memsnap Python package's tests: they need a CUDA GPU and the package built against the
installed torch (bash bench/gpu/python_package.sh on the GPU machine); elsewhere they skip.

Most tests share one process with memsnap installed (the `memsnap_torch` fixture). What must
start in a fresh process (the choice of allocator, PyTorch's own allocator for comparison) runs
through `run_python`."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
try:
    import memsnap.torch as memsnap_torch_module
except ImportError as error:  # the extension was not built for this interpreter
    pytest.skip(f"memsnap package not built: {error}", allow_module_level=True)


@pytest.fixture(scope="session")
def memsnap_torch():
    memsnap_torch_module.install()
    return memsnap_torch_module


def run_python(code: str, *, env=None, timeout=600) -> dict:
    """Runs `code` in a fresh interpreter; the code prints one JSON object last, returned here."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=full_env, timeout=timeout)
    if done.returncode != 0:
        raise AssertionError(f"child failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"child printed no JSON:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    result = json.loads(lines[-1])
    result["_stderr"] = done.stderr
    return result


def memsnap_cli():
    """The memsnap command-line viewer, if built (MEMSNAP_CLI names it)."""
    path = os.environ.get("MEMSNAP_CLI")
    if not path or not os.path.exists(path):
        pytest.skip("MEMSNAP_CLI does not name a built memsnap binary")
    return path
