"""PyTorch 2.11 snapshots recorded with expandable_segments:True, for memsnap's replay tests.
Recorded on a GPU, one process per case (the setting is read when CUDA starts):
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 bench/make_pytorch_expandable_snapshots.py OUT streams|frag"""
import sys, torch
from make_pytorch_test_snapshots import frag_oom  # the same program, run under this setting
out, case = sys.argv[1], sys.argv[2]
MiB = 1 << 20

def streams():
    # Two streams, record_stream, frees of every size, and empty_cache (unmaps) mid-run.
    torch.cuda.memory._record_memory_history(max_entries=1000000, stacks="python")
    side = torch.cuda.Stream()
    params = [torch.randn(1024, 1024 * (i + 1), device="cuda") for i in range(6)]
    held = []
    for step in range(150):
        acts = [torch.empty((step % 7 + 1) * 300_000 + 512 * j, dtype=torch.uint8, device="cuda") for j in range(5)]
        big = torch.empty((step % 5 + 1) * 23 * MiB + step * 4096, dtype=torch.uint8, device="cuda")
        with torch.cuda.stream(side):
            s = torch.empty(3 * MiB + step * 512, dtype=torch.uint8, device="cuda")
        shared = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
        shared.record_stream(side)
        with torch.cuda.stream(side):
            shared.add_(1)
        del shared, acts, s
        if step % 3 == 0:
            del big
        else:
            held.append(big)
        if len(held) > 6:
            held.pop(step % 5)
        if step % 10 == 0:
            held.append(torch.empty(700_000 + step, dtype=torch.uint8, device="cuda"))
        if step % 37 == 36:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(out + "/expandable_streams.pickle")
    print("streams ok; reserved", torch.cuda.memory_reserved() >> 20, "MiB")

def frag():
    # frag_oom.pickle's program (fragmentation under a 1 GiB cap) with expandable segments:
    # memsnap's explain-oom on frag_oom.pickle predicts this setting avoids the error.
    frag_oom(out + "/expandable_frag.pickle")

{"streams": streams, "frag": frag}[case]()
