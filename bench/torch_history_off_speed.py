#!/usr/bin/env python3
"""History off: a training step on memsnap's allocator against the same step on PyTorch's.

    python3 bench/torch_history_off_speed.py --model gpt2|resnet50|allocations --rounds 5

Steps are compared in pairs of two processes taking turns on one CPU (torch_step_pairs.py),
neither recording: each round pairs a memsnap process with a PyTorch one ("memsnap / PyTorch"),
and, to show how far apart two processes of one allocator come out anyway, two PyTorch
processes ("PyTorch / PyTorch"). Printed per run: the median over its --pairs pairs; per kind
of pair, over the runs: the median of the runs' medians and their range.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_step_pairs import add_arguments, check_arguments, paired_run  # noqa: E402

PAIRINGS = {"memsnap / PyTorch": ("memsnap", "pytorch"), "PyTorch / PyTorch": ("pytorch", "pytorch")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, pairs=60, rounds=5)
    args = parser.parse_args()
    check_arguments(parser, args)

    medians = {name: [] for name in PAIRINGS}
    for _ in range(args.rounds):
        for name, (kind_a, kind_b) in PAIRINGS.items():
            [ratios] = paired_run(kind_a, kind_b, args, phases=1)
            medians[name].append(statistics.median(ratios))
            print(f"{name:<18} median of {args.pairs} step pairs: {medians[name][-1]:.4f}", flush=True)
    print(f"model {args.model}, history off, {args.rounds} runs of {args.pairs} step pairs, CPUs {args.cpus}; "
          "median of the runs' medians [range]:")
    for name, values in medians.items():
        print(f"{name:<18} {statistics.median(values):.4f}  [{min(values):.4f}, {max(values):.4f}]")


if __name__ == "__main__":
    main()
