#!/usr/bin/env python3
"""Whether a training step gets its speed back once recording history is turned off:
PyTorch's allocator and memsnap's, each against a process of its own kind that never records.

    python3 bench/torch_history_off_after.py --model gpt2|resnet50|allocations --rounds 2

Steps are compared in pairs of two processes of one allocator taking turns on one CPU
(torch_step_pairs.py). A run has four phases; between them process A records
--record-steps steps with all stacks and turns history off again while B runs as many steps
with history off ("recording"), or both run them with history off ("control"). Printed per
run: each phase's median A / B; per allocator and variant, over the runs: each phase's median
relative to the first, with the quartiles of the later phases' pairs relative to their first
phase's median. Recording that leaves a step slower shows as "recording" phases 2-4 above 1
where "control" ones are not.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_step_pairs import add_arguments, check_arguments, paired_run, quartiles  # noqa: E402

PHASES = 4


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, pairs=40, rounds=2)
    parser.add_argument("--record-steps", type=int, default=20, help="steps recorded between phases")
    args = parser.parse_args()
    check_arguments(parser, args)
    if args.record_steps < 1:
        parser.error("--record-steps takes 1 or more")

    relative = {}  # (kind, variant) -> runs' phase medians relative to the first
    later = {}  # (kind, variant) -> later phases' pairs relative to their run's first-phase median
    for round_index in range(args.rounds):
        kinds = ("pytorch", "memsnap") if round_index % 2 == 0 else ("memsnap", "pytorch")
        for kind in kinds:
            for variant in ("recording", "control"):
                command_a = f"{'record' if variant == 'recording' else 'idle'} {args.record_steps}"
                phases = paired_run(kind, kind, args, PHASES,
                                    lambda phase: (command_a, f"idle {args.record_steps}"))
                medians = [statistics.median(p) for p in phases]
                relative.setdefault((kind, variant), []).append([m / medians[0] for m in medians])
                later.setdefault((kind, variant), []).extend(r / medians[0] for p in phases[1:] for r in p)
                print(f"{kind:<8} {variant:<10} median A / B per phase: " + " ".join(f"{m:.4f}" for m in medians),
                      flush=True)
    print(f"model {args.model}, {args.rounds} rounds, {args.pairs} pairs a phase, {args.record_steps} steps "
          f"recorded between phases, CPUs {args.cpus}; each phase's median A / B relative to the first, "
          "median over the runs [quartiles of the later phases' pairs]:")
    for (kind, variant), rows in sorted(relative.items()):
        low, high = quartiles(later[(kind, variant)])
        print(f"{kind:<8} {variant:<10} " + " ".join(f"{statistics.median(c):.4f}" for c in zip(*rows)) +
              f"  [{low:.4f}, {high:.4f}]")


if __name__ == "__main__":
    main()
