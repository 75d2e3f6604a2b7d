#!/usr/bin/env python3
"""Two builds of the memsnap Python package, A/B, on what recording costs a training step.

    python3 bench/torch_recording_ab.py BEFORE_DIR AFTER_DIR [--model gpt2|resnet50|allocations]
                                        [--rounds N] [--cycles N] [--modes all[,python...]]

BEFORE_DIR and AFTER_DIR each hold an installed `memsnap` package (`pip install --target DIR`;
bench/gpu/recording_ab.sh makes both). Each run is a fresh process of
bench/torch_recording_bench.py's memsnap worker with one of them first on PYTHONPATH, the two
alternating (which goes first flips every round). A run measures each mode as pairs of steps
recorded in it and steps with history off beside them; its cost per allocator event is the
median of its pairs' differences over the events of a step. Printed: each run's cost per
event, each side's median over its runs, and after / before.
"""
import argparse
import os
import statistics

from torch_recording_bench import run_worker  # (this folder is first on sys.path)


def run(package_dir, args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_dir] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    result = run_worker(["--worker", "memsnap", "--model", args.model, "--cycles", str(args.cycles),
                         "--modes", args.modes, "--dump-steps", "0"], f"the run with {package_dir}", env)
    per_step = result["events_per_step"]
    return {mode: statistics.median(d) / per_step * 1e6 for mode, d in result["differences"].items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--model", choices=("gpt2", "resnet50", "allocations"), default="gpt2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--modes", default="all")
    args = parser.parse_args()
    for side in (args.before, args.after):
        if not os.path.isdir(os.path.join(side, "memsnap")):
            parser.error(f"{side}: no memsnap package there (pip install --target {side} ./python)")
    if args.rounds < 1 or args.cycles < 1:
        parser.error("--rounds and --cycles take 1 or more")

    costs = {"before": [], "after": []}
    for round_index in range(args.rounds):
        order = ("before", "after") if round_index % 2 == 0 else ("after", "before")
        for side in order:
            cost = run(args.before if side == "before" else args.after, args)
            costs[side].append(cost)
            print(f"round {round_index + 1} {side:<6} " +
                  "  ".join(f"{mode} {us:.3f} us/event" for mode, us in cost.items()), flush=True)
    print(f"{args.model}, {args.rounds} rounds of {args.cycles} cycles, medians over the runs:")
    for mode in costs["before"][0]:
        b = statistics.median(c[mode] for c in costs["before"])
        a = statistics.median(c[mode] for c in costs["after"])
        print(f"  {mode:<16} before {b:.3f}  after {a:.3f} us/event  after / before {a / b:.3f}")


if __name__ == "__main__":
    main()
