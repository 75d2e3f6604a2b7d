"""PyTorch snapshots whose truth is known, for the viewer's verdicts (growth, tune, explain-oom),
recorded on a GPU with PyTorch's own allocator:

    python3 bench/make_pytorch_conclusion_snapshots.py OUT_FOLDER

- wrapped_decoder.pickle: a small decoder trained for 60 steps with a trace far shorter than the
  run (max_entries wrapped), each step named by torch.profiler.record_function; nothing leaks:
  live memory at each step's start is flat.
- predating_segments.pickle: every segment is reserved before history starts; the recorded steps
  reuse them and reserve nothing (tune cannot judge settings from it).
- graph_pool_oom.pickle: two CUDA graphs, each with its own private pool, then an out-of-memory
  error under a memory cap; sharing one pool (pool=g1.pool()) fits under the same cap.
"""
import os
import sys

import torch

MiB = 1 << 20


def wrapped_decoder(path):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).cuda()
    head = torch.nn.Linear(256, 1000).cuda()
    params = list(model.parameters()) + list(head.parameters())
    opt = torch.optim.AdamW(params)
    torch.cuda.memory._record_memory_history(max_entries=4000, stacks="python")
    starts = []
    for step in range(60):
        with torch.profiler.record_function(f"ProfilerStep#{step}"):
            starts.append(torch.cuda.memory_allocated())
            x = torch.randn(8, 64 + (step % 4) * 16, 256, device="cuda")
            loss = head(model(x)).float().logsumexp(-1).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    print("wrapped_decoder: live at step starts (MiB) from step 3:",
          sorted({round(s / MiB, 1) for s in starts[3:]}))


def predating_segments(path):
    keep = [torch.empty(n * MiB, dtype=torch.uint8, device="cuda") for n in (64, 64, 30, 12, 1)]
    del keep  # cached: every later request fits a segment made before the trace
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    for step in range(20):
        a = torch.empty((40 + step) * MiB, dtype=torch.uint8, device="cuda")
        b = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
        del a, b
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    print("predating_segments: device mallocs in the trace:",
          sum(e["action"] == "segment_alloc" for e in torch.cuda.memory._snapshot()["device_traces"][0]))


def graph_pool_oom(path):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    torch.cuda.set_per_process_memory_fraction((1400 * MiB) / total)
    static = torch.zeros(256 * MiB // 4, device="cuda")

    def body():
        a = static * 2
        b = a + 1
        return b.sum()

    graphs = []
    outs = []
    for _ in range(2):
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            body()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            outs.append(body())
        graphs.append(g)
    try:
        big = torch.empty(700 * MiB, dtype=torch.uint8, device="cuda")
        print("graph_pool_oom: no OOM")
    except torch.OutOfMemoryError as error:
        print("graph_pool_oom:", str(error).splitlines()[0][:160])
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    torch.cuda.set_per_process_memory_fraction(1.0)


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for make in (wrapped_decoder, predating_segments, graph_pool_oom):
        make(os.path.join(out, make.__name__ + ".pickle"))
        torch.cuda.empty_cache()
