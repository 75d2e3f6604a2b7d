"""Private pools under memsnap: CUDA graph capture and replay, torch.cuda.MemPool / use_mem_pool,
and the memory they hold, equal to what PyTorch's own allocator holds for the same program."""
import json
import os
import subprocess
import sys

import pytest

from conftest import run_python

torch = pytest.importorskip("torch")
MiB = 1 << 20
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A whole resnet18 training step captured in one graph (the recipe of PyTorch's CUDA graphs
# notes: warm up on a side stream, capture forward, backward and the optimizer step), replayed
# on new data.
GRAPHED_TRAINING = """
import json, os, torch, torchvision
if os.environ.get("USE_MEMSNAP") == "1":
    import memsnap.torch
    memsnap.torch.install()
torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
model = torchvision.models.resnet18(num_classes=10).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
static_input = torch.randn(32, 3, 64, 64, device="cuda")
static_target = torch.randint(0, 10, (32,), device="cuda")
loss_fn = torch.nn.CrossEntropyLoss()
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side):
    for _ in range(3):
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(static_input), static_target).backward()
        optimizer.step()
torch.cuda.current_stream().wait_stream(side)
graph = torch.cuda.CUDAGraph()
optimizer.zero_grad(set_to_none=True)
with torch.cuda.graph(graph):
    static_loss = loss_fn(model(static_input), static_target)
    static_loss.backward()
    optimizer.step()
losses = []
for step in range(6):
    static_input.copy_(torch.randn(32, 3, 64, 64, device="cuda"))
    graph.replay()
    losses.append(static_loss.item())
torch.cuda.synchronize()
pools = {}
for segment in torch.cuda.memory_snapshot():
    key = "%d,%d" % tuple(segment["segment_pool_id"])
    pools[key] = pools.get(key, 0) + segment["total_size"]
s = torch.cuda.memory_stats()
keys = ["allocated_bytes.all.peak", "reserved_bytes.all.peak", "reserved_bytes.all.current",
        "num_device_alloc", "segment.all.current", "active_bytes.all.current"]
result = {k: s[k] for k in keys}
result["losses"] = losses
result["pools"] = pools
del graph
torch.cuda.synchronize()
torch.cuda.empty_cache()
result["reserved_after_graph_deleted"] = torch.cuda.memory_reserved()
print(json.dumps(result))
"""


def test_graphed_resnet_training_holds_what_pytorch_holds():
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    pytorch = run_python(GRAPHED_TRAINING, env={**env, "USE_MEMSNAP": "0"})
    memsnap = run_python(GRAPHED_TRAINING, env={**env, "USE_MEMSNAP": "1"})
    assert all(loss == loss and loss < 10 for loss in memsnap["losses"]), memsnap["losses"]
    private = {k: v for k, v in memsnap["pools"].items() if k != "0,0"}
    assert private, memsnap["pools"]  # the graph's pool holds the captured step's memory
    for key in ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "reserved_bytes.all.current",
                "num_device_alloc", "segment.all.current", "active_bytes.all.current", "pools",
                "reserved_after_graph_deleted"):
        assert memsnap[key] == pytorch[key], (key, memsnap[key], pytorch[key])


def test_graph_capture_and_replay_compute_what_eager_computes(memsnap_torch):
    layer = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).cuda()
    static_x = torch.randn(128, 256, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = layer(static_x)
    pool = graph.pool()
    assert torch.cuda.memory._snapshot is not None
    in_pool = [s for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(pool)]
    assert in_pool, "the captured graph's output lives in the graph's pool"
    for _ in range(3):
        x = torch.randn(128, 256, device="cuda")
        static_x.copy_(x)
        graph.replay()
        torch.testing.assert_close(static_y, layer(x))
    del graph, static_y
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # What the graph's pool cached goes back; cuBLAS keeps its workspace for the capture stream,
    # allocated in the pool, as it does under PyTorch's allocator.
    left = [s for s in torch.cuda.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(pool)]
    assert all(s["allocated_size"] > 0 for s in left), left


def test_mempool_routes_this_threads_allocations_and_releases_them(memsnap_torch):
    torch.cuda.empty_cache()
    reserved_before = torch.cuda.memory_reserved()
    pool = torch.cuda.MemPool()
    assert pool.use_count() == 1
    with torch.cuda.use_mem_pool(pool):
        assert pool.use_count() == 2
        a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
        b = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    outside = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    assert pool.use_count() == 1
    segments = pool.snapshot()
    addresses = {blk["address"] for s in segments for blk in s["blocks"] if blk["state"] == "active_allocated"}
    assert {a.data_ptr(), b.data_ptr()} <= addresses and outside.data_ptr() not in addresses
    assert all(tuple(s["segment_pool_id"]) == tuple(pool.id) for s in segments)
    del a, b
    # The pool's free memory serves the pool only.
    again = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    assert again.data_ptr() not in addresses
    del again, outside
    del pool
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == reserved_before


def test_pool_scenarios_of_the_cuda_graphs_guide_match_pytorch(tmp_path):
    """bench/make_pytorch_pool_snapshots.py's scenarios (two graphs, a shared pool, allocations
    after capture, fragmentation across pools, frees during capture, record_stream during
    capture, MemPool, an OOM caused by pools, expandable segments during capture): the allocated,
    active, inactive-split and reserved bytes after every step, and each pool's reserved bytes,
    on memsnap equal PyTorch's."""
    script = os.path.join(ROOT, "bench", "make_pytorch_pool_snapshots.py")
    tables = {}
    for allocator in ("pytorch", "memsnap"):
        out = tmp_path / allocator
        done = subprocess.run([sys.executable, script, str(out), "--allocator", allocator],
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        tables[allocator] = {p.name.split(".")[0]: json.loads(p.read_text())["steps"]
                             for p in out.glob("*.steps.json")}
    assert len(tables["pytorch"]) == 9, sorted(tables["pytorch"])
    for name, steps in tables["pytorch"].items():
        mine = tables["memsnap"][name]
        assert [s["tag"] for s in mine] == [s["tag"] for s in steps], name
        for theirs, ours in zip(steps, mine):
            for scope in ("large_pool", "all"):
                assert ours[scope] == theirs[scope], (name, theirs["tag"], scope, ours[scope], theirs[scope])
            assert ours["reserved_by_pool"] == theirs["reserved_by_pool"], (name, theirs["tag"])


def test_torch_compile_reduce_overhead_runs_on_memsnaps_pools():
    """CUDA graph trees: torch.compile(mode="reduce-overhead") records graphs into a private pool,
    checkpoints the pool after each recording and puts a checkpoint back when a step takes
    another path from a recorded graph (f then g, then f then h)."""
    result = run_python("""
        import json, torch, memsnap.torch
        memsnap.torch.install()
        restores = [0]
        original = torch._C._cuda_setCheckpointPoolState
        def counting(*args, **kwargs):
            restores[0] += 1
            return original(*args, **kwargs)
        torch._C._cuda_setCheckpointPoolState = counting
        torch.manual_seed(0)
        layer = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
        f = torch.compile(lambda x: layer(x), mode="reduce-overhead")
        g = torch.compile(lambda y: (y * 2).sum(-1), mode="reduce-overhead")
        h = torch.compile(lambda y: (y + 1).mean(-1), mode="reduce-overhead")
        worst = 0.0
        with torch.no_grad():
            for i in range(8):
                x = torch.randn(64, 256, device="cuda")
                torch.compiler.cudagraph_mark_step_begin()
                y = f(x)
                z = g(y) if i % 2 == 0 else h(y)
                eager = layer(x)
                expected = (eager * 2).sum(-1) if i % 2 == 0 else (eager + 1).mean(-1)
                worst = max(worst, (z - expected).abs().max().item() / (expected.abs().max().item() + 1))
        pools = {tuple(s["segment_pool_id"]) for s in torch.cuda.memory_snapshot()}
        print(json.dumps({"worst": worst, "restores": restores[0],
                          "private_pools": len([p for p in pools if p != (0, 0)])}))
    """)
    assert result["worst"] < 1e-3, result
    assert result["private_pools"] >= 1, result
    assert result["restores"] >= 1, result  # the second path started from f's checkpoint
