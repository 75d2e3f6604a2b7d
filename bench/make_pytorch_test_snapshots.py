"""PyTorch snapshots for the replay, explain-oom and reader tests (tests/data/pytorch-2.11-h100),
recorded on a GPU:  python3 bench/make_pytorch_test_snapshots.py OUT_FOLDER [SCENARIO...]
"""
import sys, torch
MiB = 1 << 20

def frag_oom(path):
    # Fragmentation under a 1 GiB cap: one 960 MiB segment cut into 40 MiB tensors, every
    # other one freed (480 MiB free in 40 MiB holes), then 100 MiB: no hole fits, no room.
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(1.0 * (1 << 30) / total)
    big = torch.empty(960 * MiB, dtype=torch.uint8, device="cuda")
    del big
    keep = [torch.empty(40 * MiB, dtype=torch.uint8, device="cuda") for _ in range(24)]
    for i in range(0, 24, 2):
        keep[i] = None
    try:
        x = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
        print("frag: no OOM; reserved", torch.cuda.memory_reserved() >> 20, "MiB")
    except torch.OutOfMemoryError as e:
        print("frag OOM:", str(e)[:300])
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    del keep
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1.0)

def streams_wrapped(path):
    # Two streams, record_stream, empty_cache, and a ring buffer far smaller than the run.
    torch.cuda.memory._record_memory_history(max_entries=700, stacks="python")
    side = torch.cuda.Stream()
    params = [torch.randn(1024, 1024 * (i + 1), device="cuda") for i in range(6)]
    held = []
    for step in range(120):
        acts = [torch.empty((step % 7 + 1) * 300_000 + 512 * j, dtype=torch.uint8, device="cuda") for j in range(5)]
        with torch.cuda.stream(side):
            s = torch.empty(3 * MiB + step * 512, dtype=torch.uint8, device="cuda")
        shared = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
        shared.record_stream(side)
        with torch.cuda.stream(side):
            shared.add_(1)
        del shared, acts, s
        if step % 10 == 0:
            held.append(torch.empty(700_000 + step, dtype=torch.uint8, device="cuda"))
        if step % 37 == 36:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)

def forward_frames(path):
    # A training step whose forward pass ran under anomaly mode: PyTorch gives the allocations
    # of the backward pass the forward call's traceback ("forward_frames").
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).cuda()
    x = torch.randn(32, 64, device="cuda")
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="python")
    with torch.autograd.set_detect_anomaly(True, check_nan=False):
        loss = model(x).square().mean()
    loss.backward()
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)

SCENARIOS = {"frag_oom": frag_oom, "streams_wrapped": streams_wrapped, "forward_frames": forward_frames}

if __name__ == "__main__":
    out = sys.argv[1]
    for name in sys.argv[2:] or list(SCENARIOS):
        SCENARIOS[name](f"{out}/{name}.pickle")
    print("ok")
