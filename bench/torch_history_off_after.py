#!/usr/bin/env python3
"""Whether a training step gets its speed back once recording history is turned off:
PyTorch's allocator and memsnap's, each against a process of its own kind that never records.

    python3 bench/torch_history_off_after.py --model gpt2|resnet50|allocations --rounds 2

A shared host's speed changes by up to 2x from one second to the next, more than any effect
worth finding, so steps are compared in pairs taken side by side: two processes of one
allocator, both pinned to the same CPU (--cpus; on two CPUs each process can meet its own
speed), take turns step by step (A, B, B, A, ...), and each pair's time A / B sees the host as
it was for both. A run has four phases of --pairs pairs each, every phase after a collection
of Python's garbage and one untimed step in both processes; between phases, process A records
--record-steps steps with all stacks (Python and C++, through
`torch.cuda.memory._record_memory_history`, from a cleared history) and turns history off
again while B runs as many steps with history off ("recording"), or both run them with
history off ("control"). Printed per run: each phase's median A / B; per allocator and
variant, over the runs: each phase's median relative to the first, with the quartiles of the
later phases' pairs relative to their first phase's median. Recording that leaves a step
slower shows as "recording" phases 2-4 above 1 where "control" ones are not. Workloads are
those of torch_recording_bench.py; the steps run after its warmup.
"""
import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recording_bench import WORKLOADS, build, set_history, time_steps  # noqa: E402

PHASES = 4
MAX_ENTRIES = 1_000_000
REPLY = "@@ "  # what the worker prints for the driver (anything else on its stdout is not)


def parse_cpus(text):
    """`taskset -c`'s syntax ("2-3,8"), as a set."""
    cpus = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    if not cpus:
        raise ValueError(text)
    return cpus


def worker(args):
    """Runs commands from stdin, one a line: step (a timed step; replies its seconds), record N,
    idle N, settle; replies to each on stdout."""
    os.sched_setaffinity(0, parse_cpus(args.cpus))  # before torch, so its threads inherit it
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

    def reply(value):
        print(REPLY + json.dumps(value), flush=True)

    reply("ready")
    for line in sys.stdin:
        command, _, count = line.strip().partition(" ")
        if command == "step":
            reply(time_steps(torch, step, 1)[0])
            continue
        if command == "settle":  # as each phase starts
            gc.collect()
            step()  # (the step after a collection runs on cold caches)
        elif command == "record":
            set_history(torch, "all", MAX_ENTRIES, clear=True)
            for _ in range(int(count)):
                step()
            torch.cuda.synchronize()
            set_history(torch, "off", MAX_ENTRIES)
        elif command == "idle":
            for _ in range(int(count)):
                step()
            torch.cuda.synchronize()
        else:
            raise SystemExit(f"worker: unknown command {line!r}")
        reply("done")


class Worker:
    def __init__(self, kind, args):
        command = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--model", args.model,
                   "--warmup", str(args.warmup), "--cpus", args.cpus]
        self.name = kind
        self.errors = tempfile.TemporaryFile("w+")  # (a pipe nobody reads could fill and block it)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=self.errors, text=True)

    def read(self):
        for line in self.process.stdout:
            if line.startswith(REPLY):
                return json.loads(line[len(REPLY):])
        self.process.wait()
        self.errors.seek(0)
        sys.exit(f"{self.name} worker ended ({self.process.returncode}):\n{self.errors.read()[-4000:]}")

    def ask(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self):
        self.process.stdin.close()
        self.process.wait()
        self.errors.close()


def paired_run(kind, variant, args):
    """Each phase's A / B pair ratios."""
    a, b = Worker(kind, args), Worker(kind, args)  # (both start at once)
    try:
        a.read(), b.read()  # ready
        phases = []
        for phase in range(PHASES):
            a.ask("settle"), b.ask("settle")
            ratios = []
            for index in range(args.pairs):
                if index % 2 == 0:
                    first = a.ask("step")
                    ratios.append(first / b.ask("step"))
                else:
                    second = b.ask("step")
                    ratios.append(a.ask("step") / second)
            phases.append(ratios)
            if phase + 1 < PHASES:
                a.ask(f"{'record' if variant == 'recording' else 'idle'} {args.record_steps}")
                b.ask(f"idle {args.record_steps}")
        return phases
    finally:
        a.close(), b.close()


def quartiles(values):
    values = sorted(values)
    return [values[int(q * (len(values) - 1) + 0.5)] for q in (0.25, 0.75)]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=WORKLOADS, default="gpt2")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=40, help="timed step pairs per phase")
    parser.add_argument("--record-steps", type=int, default=20, help="steps recorded between phases")
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--cpus", default="2", help="CPUs both processes of a pair are pinned to (taskset -c's syntax)")
    parser.add_argument("--worker", choices=["pytorch", "memsnap"])
    args = parser.parse_args()
    if min(args.rounds, args.pairs, args.record_steps) < 1:
        parser.error("--rounds, --pairs and --record-steps take 1 or more")
    try:
        parse_cpus(args.cpus)
    except ValueError:
        parser.error(f"--cpus: not a CPU list: {args.cpus!r}")
    if args.worker:
        return worker(args)

    relative = {}  # (kind, variant) -> runs' phase medians relative to the first
    later = {}  # (kind, variant) -> later phases' pairs relative to their run's first-phase median
    for round_index in range(args.rounds):
        kinds = ("pytorch", "memsnap") if round_index % 2 == 0 else ("memsnap", "pytorch")
        for kind in kinds:
            for variant in ("recording", "control"):
                phases = paired_run(kind, variant, args)
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
