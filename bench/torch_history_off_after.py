#!/usr/bin/env python3
"""Whether a training step gets its speed back once recording history is turned off, against
the same process never recording: PyTorch's allocator and memsnap's, side by side on one GPU.

    python3 bench/torch_history_off_after.py --model gpt2|resnet50 --rounds 3 --steps 20

Each run is a fresh process, after the warmup of torch_recording_bench.py's workload: four
stretches of --steps steps with history off, each after a collection of Python's garbage and
one untimed step, and between them a stretch that records with all stacks (Python and C++,
through `torch.cuda.memory._record_memory_history`, from a cleared history: "recording") or
that runs with history off untimed (the control: "control"). Printed per run: each history-off
stretch's median step; per allocator and variant: the medians over the runs of each stretch
relative to the first. A step slowed by recording that was turned off shows as "recording"
stretches 2-4 above "control" ones; the control shows how far the host drifts anyway.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recording_bench import WORKLOADS, build, set_history, time_steps  # noqa: E402

STRETCHES = 4
MAX_ENTRIES = 1_000_000


def worker(args):
    import torch
    if args.worker == "memsnap":
        import memsnap.torch
        memsnap.torch.install()
    torch.manual_seed(0)
    step = build(args.model, torch)
    for _ in range(args.warmup):
        step()
    gc.collect()
    gc.disable()

    def stretch():
        gc.collect()
        step()  # (the step after a collection runs on cold caches)
        return statistics.median(time_steps(torch, step, args.steps))

    medians = []
    for index in range(STRETCHES):
        set_history(torch, "off", MAX_ENTRIES)
        medians.append(stretch())
        if index + 1 < STRETCHES:
            if args.variant == "recording":
                set_history(torch, "all", MAX_ENTRIES, clear=True)
            stretch()
    print(json.dumps(medians))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=WORKLOADS, default="gpt2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per stretch")
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--worker", choices=["pytorch", "memsnap"])
    parser.add_argument("--variant", choices=["recording", "control"])
    args = parser.parse_args()
    if args.steps < 1 or args.rounds < 1:
        parser.error("--steps and --rounds take 1 or more")
    if args.worker:
        return worker(args)

    relative = {}
    for round_index in range(args.rounds):
        kinds = ("pytorch", "memsnap") if round_index % 2 == 0 else ("memsnap", "pytorch")
        for kind in kinds:
            for variant in ("recording", "control"):
                command = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--variant", variant,
                           "--model", args.model, "--steps", str(args.steps), "--warmup", str(args.warmup)]
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    sys.exit(f"{kind} {variant} run failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
                medians = json.loads(done.stdout.strip().splitlines()[-1])
                relative.setdefault((kind, variant), []).append([m / medians[0] for m in medians])
                print(f"{kind:<8} {variant:<10} history-off stretches (median ms): " +
                      " ".join(f"{m * 1e3:.3f}" for m in medians), flush=True)
    print(f"model {args.model}, {args.rounds} rounds, {args.steps} steps a stretch; each stretch "
          "relative to the first, median over the runs (quartiles over the runs for stretches 2-4 together):")
    for (kind, variant), rows in sorted(relative.items()):
        later = sorted(v for row in rows for v in row[1:])
        quartiles = [later[int(q * (len(later) - 1) + 0.5)] for q in (0.25, 0.75)]
        print(f"{kind:<8} {variant:<10} " +
              " ".join(f"{statistics.median(c):.4f}" for c in zip(*rows)) +
              f"  [{quartiles[0]:.4f}, {quartiles[1]:.4f}]")


if __name__ == "__main__":
    main()
