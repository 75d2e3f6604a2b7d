"""torch.profiler's memory views on PyTorch's allocator and on memsnap's, for one GPT-2 (small)
training step each, in fresh processes:

    python3 bench/torch_profiler_compare.py [--layers N]

Prints, for each allocator, how many memory events the profiler saw and what its memory timeline
(torch.profiler._memory_profiler.MemoryProfileTimeline, what export_memory_timeline draws) holds,
then whether the two are equal: the same events with the same bytes and the same running totals
of allocated and reserved memory, and the same timeline of (action, category, bytes). Times and
addresses differ from run to run on either allocator and are left out.
"""
import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, sys, torch
if sys.argv[1] == "memsnap":
    import memsnap.torch
    memsnap.torch.install()
from transformers import GPT2Config, GPT2LMHeadModel
from torch.profiler import profile, ProfilerActivity
from torch.profiler._memory_profiler import MemoryProfileTimeline
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=int(sys.argv[2]))).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, 50257, (4, 256), device="cuda")
def step():
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
step(); torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
             record_shapes=True, with_stack=True) as prof:
    step(); torch.cuda.synchronize()
events = [(e.name, e.device_memory_usage) for e in prof.events() if e.name == "[memory]" and e.device_memory_usage]
timeline = MemoryProfileTimeline(prof._memory_profile())
def category(key, version):
    try:
        return str(timeline.categories.get(key, version))
    except Exception:
        return "?"
rows = [(action.name, category(key, version), size) for _, action, (key, version), size in timeline.timeline]
print(json.dumps({"events": events, "timeline": rows,
                  "peak_allocated": torch.cuda.max_memory_allocated(),
                  "peak_reserved": torch.cuda.max_memory_reserved()}))
"""


def run(side, layers):
    done = subprocess.run([sys.executable, "-c", CHILD, side, str(layers)], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{side}: failed\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    pytorch, memsnap = run("pytorch", args.layers), run("memsnap", args.layers)
    for name, side in (("PyTorch's allocator", pytorch), ("memsnap", memsnap)):
        print(f"{name}: {len(side['events'])} memory events, {len(side['timeline'])} timeline rows, "
              f"peak allocated {side['peak_allocated'] / 2**20:.1f} MiB, peak reserved {side['peak_reserved'] / 2**20:.1f} MiB")
    same_events = pytorch["events"] == memsnap["events"]
    same_timeline = pytorch["timeline"] == memsnap["timeline"]
    print(f"memory events equal: {same_events}; memory timeline equal: {same_timeline}")
    if not (same_events and same_timeline):
        for label, a, b in (("events", pytorch["events"], memsnap["events"]), ("timeline", pytorch["timeline"], memsnap["timeline"])):
            for i, (x, y) in enumerate(zip(a, b)):
                if x != y:
                    print(f"first {label} difference at {i}: {x} vs {y}")
                    break
    sys.exit(0 if same_events and same_timeline else 1)


if __name__ == "__main__":
    main()
