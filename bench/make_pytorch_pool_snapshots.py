"""Private-pool scenarios (CUDA graphs, MemPool) recorded on a GPU, for the pool tests and the
replay parity tests (tests/data/pytorch-2.11-pools):

    python3 bench/make_pytorch_pool_snapshots.py OUT_FOLDER [--allocator pytorch|memsnap] [NAME...]

Each scenario runs in a fresh process (the allocator's settings and caches start clean) and writes
OUT_FOLDER/NAME.pickle (torch.cuda.memory._dump_snapshot, Python stacks) and NAME.steps.json: after
each step of the scenario, the large-pool and total allocated / active / inactive-split / reserved
bytes from torch.cuda.memory_stats(), and the reserved bytes of every pool from the segments'
segment_pool_id. The snapshot is taken where the scenario calls step.dump() (while its pools still
hold their memory, or inside the handler of its out-of-memory error), else at its end. The scenarios are those of the CUDA-graphs memory guide, scaled so that one of its
"GB" is 64 MiB. With --allocator memsnap the same program runs on memsnap's allocator
(memsnap.torch.install()), for comparing the two tables step by step.
"""
import gc
import json
import os
import subprocess
import sys

G = 64 << 20  # the guide's "1 GB"


def scenarios():
    import torch

    def empty(n):
        return torch.empty(n, dtype=torch.uint8, device="cuda")

    def two_graphs(step, shared):
        x1, x2 = empty(4 * G), empty(4 * G)
        step("alloc x1, x2")
        g1 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g1):
            i1 = x1 * 2
            o1 = i1 + 1
            del i1
        step("del intermediate1")
        g2 = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g2, pool=g1.pool() if shared else None):
            i2 = x2 * 3
            o2 = i2 + 2
            del i2
        step("del intermediate2")
        step.dump()
        g1.replay()
        g2.replay()
        torch.cuda.synchronize()
        del g1, g2, o1, o2
        gc.collect()
        step("del graphs")
        torch.cuda.empty_cache()
        step("empty cache")

    def after_capture(step):
        x1 = empty(4 * G)
        t1 = empty(4 * G)
        del t1
        step("alloc x1, del t1")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step("enter context")
            t2 = x1 * 2
            out1 = t2 + 1
            del t2
        step("alloc out1, del t2")
        t3 = empty(4 * G)
        del t3
        step("alloc t3, del t3")
        step.dump()
        g.replay()
        torch.cuda.synchronize()

    def cross_pool_fragmentation(step):
        temp = empty(8 * G)
        del temp
        step("del temp")
        small = empty(1 * G)
        x = empty(1 * G)
        step("alloc x")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step("empty cache")
            intermediate = x * 2
            out = intermediate + 1
            del intermediate
        step("del intermediate")
        del small, out

    def capture_keeps_freed_memory(step):
        x1 = empty(4 * G)
        step("alloc x1")
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x2 = empty(4 * G)
            step("alloc x2")
            del x1
            step("del x1")
            torch.cuda.empty_cache()
            step("empty cache")
            x3 = empty(4 * G)
            step("alloc x3")
        del x2, x3

    def deferred_recycling(step):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            current = torch.cuda.current_stream()
            side = torch.cuda.Stream()
            x1 = empty(4 * G)
            step("alloc x1")
            side.wait_stream(current)
            with torch.cuda.stream(side):
                x1.record_stream(side)
                x1.fill_(1)
            current.wait_stream(side)
            del x1
            step("del x1")
            t1 = empty(1)
            del t1
            step("alloc t1")
            x2 = empty(4 * G)
            step("alloc x2")
        t2 = empty(1)
        step("alloc t2")
        del x2, t2

    def mempool(step):
        x = empty(4 * G)
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            y = empty(4 * G)
            z = empty(1 * G)
            step("alloc y, z in pool")
            del y
            w = empty(2 * G)
            step("del y, alloc w in pool")
        v = empty(4 * G)
        step("alloc v outside")
        del z, w
        step("del z, w")
        step.dump()
        del pool
        gc.collect()
        step("del pool")
        torch.cuda.empty_cache()
        step("empty cache")
        del x, v

    def pool_oom(step):
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction((28 * G) / total)
        x = empty(4 * G)
        graphs, outs = [], []
        for n in range(2):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                i = empty(6 * G)
                outs.append(empty(2 * G))
                del i
            graphs.append(g)
            step(f"capture graph {n + 1}")
        try:
            big = empty(12 * G)  # what the pools hold free, more than the cap leaves
            step("no OOM")
            del big
        except torch.OutOfMemoryError as e:
            print("pool_oom:", str(e).splitlines()[0][:400])
            step("OOM")
            step.dump()
        del x

    def expandable_capture(step):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            temp = empty(8 * G)
            del temp
            step("del temp")
            x = empty(2 * G)
            step("alloc x")
            y = empty(8 * G)
            step("alloc y")
            del x, y
            step("del x, y")
            z = empty(16 * G)
            step("alloc z")
            del z
            step("del z")
            torch.cuda.empty_cache()
            step("empty cache")
        del g
        gc.collect()
        step("del graph")
        torch.cuda.empty_cache()
        step("empty cache after")

    return {
        "two_graphs": (lambda step: two_graphs(step, shared=False), ""),
        "shared_pool": (lambda step: two_graphs(step, shared=True), ""),
        "after_capture": (after_capture, ""),
        "cross_pool_fragmentation": (cross_pool_fragmentation, ""),
        "capture_keeps_freed_memory": (capture_keeps_freed_memory, ""),
        "deferred_recycling": (deferred_recycling, ""),
        "mempool": (mempool, ""),
        "pool_oom": (pool_oom, ""),
        "expandable_capture": (expandable_capture, "expandable_segments:True"),
    }


def pool_name(pool_id):
    return "global" if tuple(pool_id) == (0, 0) else f"({pool_id[0]},{pool_id[1]})"


def run_one(out, name, allocator):
    import torch
    if allocator == "memsnap":
        import memsnap.torch
        memsnap.torch.install()
    run, _ = scenarios()[name]
    steps = []

    snapshot_path = os.path.join(out, name + ".pickle")

    def step(tag):
        if not torch.cuda.is_current_stream_capturing():  # synchronizing would end a capture
            torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        row = {"tag": tag}
        for scope in ("large_pool", "all"):
            row[scope] = {k: stats.get(f"{k}_bytes.{scope}.current", 0)
                          for k in ("allocated", "active", "inactive_split", "reserved")}
        pools = {}
        for seg in torch.cuda.memory_snapshot():
            key = pool_name(seg.get("segment_pool_id", (0, 0)))
            pools[key] = pools.get(key, 0) + seg["total_size"]
        row["reserved_by_pool"] = pools
        steps.append(row)

    def dump():
        torch.cuda.memory._dump_snapshot(snapshot_path)
        step.dumped = True

    step.dump = dump
    step.dumped = False

    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    run(step)
    if not step.dumped:
        dump()
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(os.path.join(out, name + ".steps.json"), "w") as f:
        json.dump({"scenario": name, "allocator": allocator, "unit_bytes": G,
                   "torch": torch.__version__, "steps": steps}, f, indent=1)
    for row in steps:
        large = row["large_pool"]
        print(f"  {row['tag']:<26}" + "".join(f"{large[k] / G:8.2f}" for k in
              ("allocated", "active", "inactive_split", "reserved")),
              " pools:", {k: v // G for k, v in row["reserved_by_pool"].items()})


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    out = argv[1]
    allocator = "pytorch"
    names = []
    args = iter(argv[2:])
    for a in args:
        if a == "--allocator":
            allocator = next(args, "")
            if allocator not in ("pytorch", "memsnap"):
                sys.exit("--allocator takes pytorch or memsnap")
        elif a == "--one":
            run_one(out, next(args), allocator)
            return
        else:
            names.append(a)
    known = scenarios()
    for n in names:
        if n not in known:
            sys.exit(f"unknown scenario {n!r}; known: {', '.join(known)}")
    os.makedirs(out, exist_ok=True)
    failed = 0
    for name in names or list(known):
        env = dict(os.environ)
        conf = known[name][1]
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
            env["MEMSNAP_ALLOC_CONF"] = conf
        print(f"{name} ({allocator}{', ' + conf if conf else ''}): allocated active inactive_split reserved, in units of 64 MiB")
        r = subprocess.run([sys.executable, argv[0], out, "--allocator", allocator, "--one", name], env=env)
        if r.returncode != 0:
            print(f"{name}: exit status {r.returncode}")
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main(sys.argv)
