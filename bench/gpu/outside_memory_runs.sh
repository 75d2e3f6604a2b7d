#!/usr/bin/env bash
# Run THERE (the GPU machine), from the repository root:
#   bash bench/gpu/outside_memory_runs.sh OUT
# Memory outside the allocator, measured: builds the CLI and the Python package
# (bench/gpu/python_package.sh) and runs python/tests/test_outside_memory.py (NCCL, cuDNN and a
# pinned DataLoader on memsnap.torch; CuPy's cudaMalloc; an OOM another library caused; the
# profiler beside the recording), keeping its snapshots in OUT; then the overhead per
# cudaMalloc (bench/gpu/outside_memory_overhead.py) and a JAX program under `memsnap record`
# (XLA_PYTHON_CLIENT_PREALLOCATE=false), whose snapshot and stats land in OUT too.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:?usage: outside_memory_runs.sh OUT}
mkdir -p "$out"
export MEMSNAP_TEST_KEEP="$out"
bash "$root/bench/gpu/python_package.sh" test_outside_memory.py -v -rs -s >"$out/pytest.log" 2>&1 \
  && echo "test_outside_memory: passed" || echo "test_outside_memory: FAILED (see $out/pytest.log)"
grep -E "PASSED|FAILED|ERROR|passed|failed|whole step" "$out/pytest.log" | tail -20
echo "== overhead per cudaMalloc + cudaFree"
python3 "$root/bench/gpu/outside_memory_overhead.py" 3 | tee "$out/overhead.md"
echo "== JAX under memsnap record"
source "$root/bench/gpu/env.sh"
cli="$root/build-gpu/cli/memsnap"
XLA_PYTHON_CLIENT_PREALLOCATE=false "$cli" record -o "$out/jax-{n}.msgpack" --signal USR1 -- python3 -c '
import os, signal, time
import jax, jax.numpy as jnp
x = jnp.ones((8192, 8192), dtype=jnp.float32)
y = (x @ x).block_until_ready()
print("jax", jax.__version__, jax.devices()[0], float(y[0, 0]))
os.kill(os.getpid(), signal.SIGUSR1)  # a snapshot while the program and its context live
time.sleep(2)
'
for f in "$out"/jax-*.msgpack; do
  echo "-- $f"
  "$cli" stats "$f" | tail -16
done 2>&1 | tee "$out/jax-stats.txt"
