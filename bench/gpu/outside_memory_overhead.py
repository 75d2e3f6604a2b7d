# Run THERE (the GPU machine), with the memsnap package installed (bench/gpu/python_package.sh):
#   python3 bench/gpu/outside_memory_overhead.py [ROUNDS]
# What recording memory outside the allocator (CUPTI's callbacks in process, outside_memory.h)
# adds, side by side in one run: processes with history recorded and MEMSNAP_OUTSIDE_MEMORY=1
# against =0, alternated, ROUNDS of each (default 3).
#   own:      memsnap's own segment (torch.empty + empty_cache: one cudaMalloc and one cudaFree,
#             made under CallsNotRecorded, so the callbacks return at once);
#   library:  another library's cudaMalloc + cudaFree (CuPy's runtime.malloc, no pool), which is
#             recorded with its Python and C++ stack;
#   pool:     another library's cudaMallocAsync + cudaFreeAsync served from the device's memory
#             pool (no driver allocation: the call itself costs about a µs, so what recording
#             adds shows above the spread that tens of µs of cudaMalloc hide it in); both calls
#             are recorded with their stacks;
#   snapshot: torch.cuda.memory._snapshot() with those libraries' memory in it (recorded: its
#             dictionary carries memory outside the allocator; off: it has none to carry).
# Prints the medians of each process's median (of 5 repeats; 2,000 pairs for own and library,
# 20,000 for pool, 20 snapshots) and the difference.
import json, os, statistics, subprocess, sys

CHILD = r"""
import json, time, memsnap.torch
memsnap.torch.install()
import torch, cupy
memsnap.torch.record_history("all", stacks="all")
torch.empty(1, device="cuda"); torch.cuda.synchronize()
def per_pair(fn, n=2000, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - start) / n * 1e6)
    return sorted(times)[len(times) // 2]
def own():
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.empty_cache()
def library():
    p = cupy.cuda.runtime.malloc(1 << 20)
    cupy.cuda.runtime.free(p)
runtime = cupy.cuda.runtime
stream = cupy.cuda.Stream(non_blocking=True)
# (Freed memory stays in the device's pool until a synchronization; the loop has none.)
def from_pool():
    p = runtime.mallocAsync(1 << 20, stream.ptr)
    runtime.freeAsync(p, stream.ptr)
held = [cupy.cuda.runtime.malloc(1 << 20) for _ in range(64)]  # live other-library memory for the snapshots
def snapshot():
    torch.cuda.memory._snapshot()
own(); library(); from_pool(); snapshot()
result = {"own": per_pair(own), "library": per_pair(library), "pool": per_pair(from_pool, 20000),
          "snapshot": per_pair(snapshot, 20) / 1000}
stream.synchronize()
print(json.dumps(dict(result, recording=memsnap.torch.outside_memory_status()["recording"])))
"""


def run(outside):
    env = dict(os.environ, MEMSNAP_OUTSIDE_MEMORY="1" if outside else "0")
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["recording"] == outside, result
    return result


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
on, off = [], []
for _ in range(rounds):
    off.append(run(False))
    on.append(run(True))
print("| path | recording off | on | added |")
print("|---|---|---|---|")
for key, name, unit in (("own", "memsnap's own segment (not recorded), µs per malloc+free", "µs"),
                        ("library", "another library's cudaMalloc + cudaFree (recorded, with stacks), µs", "µs"),
                        ("pool", "another library's cudaMallocAsync + cudaFreeAsync from a pool (both recorded), µs", "µs"),
                        ("snapshot", "torch.cuda.memory._snapshot() with 64 of them live, ms", "ms")):
    a = statistics.median(r[key] for r in off)
    b = statistics.median(r[key] for r in on)
    print(f"| {name} | {a:.2f} | {b:.2f} | {b - a:+.2f} {unit} ({(b / a - 1) * 100:+.1f}%) |")
