"""Training steps of two processes compared in pairs taken side by side, for benchmarks that
look for differences of a few percent on a shared host whose speed changes by up to 2x from one
second to the next (1,000 `torch.empty` calls take 2.3-2.8 ms or 4.4-5.0 ms on the H100 host,
on either allocator).

Two worker processes, both pinned to the same CPU (on two CPUs each process can meet a speed
of its own), take turns step by step (A, B, B, A, ...), so that each pair's time A / B sees the
host as it was for both. A run has phases of `pairs` pairs, each after a collection of Python's
garbage and one untimed step in both processes; between phases each process runs commands
(`record N`: N steps recording all stacks, Python and C++, through
`torch.cuda.memory._record_memory_history` from a cleared history, then history off; `idle N`:
N steps with history off). Two processes never exactly alike (where their memory lies, say)
keep a ratio of their own, a few percent from 1, through a run.

Workloads and steps are torch_recording_bench.py's. This file is also the worker:
`torch_step_pairs.py --worker pytorch|memsnap --model M --warmup N --cpus LIST`.
"""
import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_recording_bench import WORKLOADS, build, set_history, time_steps  # noqa: E402

ALLOCATORS = ("pytorch", "memsnap")
MAX_ENTRIES = 1_000_000
REPLY = "@@ "  # what a worker prints for the driver (anything else on its stdout is not)


def parse_cpus(text):
    """`taskset -c`'s syntax ("2-3,8"), as a set; ValueError if it is not that."""
    cpus = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    if not cpus:
        raise ValueError(text)
    return cpus


def add_arguments(parser, pairs, rounds):
    """The options every paired benchmark takes."""
    parser.add_argument("--model", choices=WORKLOADS, default="gpt2")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--pairs", type=int, default=pairs, help="timed step pairs per phase")
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--cpus", default="2", help="the CPUs both processes are pinned to (taskset -c's syntax)")


def check_arguments(parser, args):
    if min(args.rounds, args.pairs) < 1:
        parser.error("--rounds and --pairs take 1 or more")
    try:
        parse_cpus(args.cpus)
    except ValueError:
        parser.error(f"--cpus: not a CPU list: {args.cpus!r}")


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


def paired_run(kind_a, kind_b, args, phases, between=lambda phase: ("idle 0", "idle 0")):
    """Each phase's A / B pair ratios. `between(phase)` gives the commands A and B run after
    that phase (not after the last)."""
    a, b = Worker(kind_a, args), Worker(kind_b, args)  # (both start at once)
    try:
        a.read(), b.read()  # ready
        ratios_by_phase = []
        for phase in range(phases):
            a.ask("settle"), b.ask("settle")
            ratios = []
            for index in range(args.pairs):
                if index % 2 == 0:
                    first = a.ask("step")
                    ratios.append(first / b.ask("step"))
                else:
                    second = b.ask("step")
                    ratios.append(a.ask("step") / second)
            ratios_by_phase.append(ratios)
            if phase + 1 < phases:
                command_a, command_b = between(phase)
                a.ask(command_a), b.ask(command_b)
        return ratios_by_phase
    finally:
        a.close(), b.close()


def quartiles(values):
    values = sorted(values)
    return [values[int(q * (len(values) - 1) + 0.5)] for q in (0.25, 0.75)]


def worker(args):
    """Runs commands from stdin, one a line (step: a timed step, replying its seconds; settle;
    record N; idle N), replying to each on stdout."""
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
        if command == "settle":
            gc.collect()
            step()  # (the step after a collection runs on cold caches)
        elif command in ("record", "idle"):
            if command == "record":
                set_history(torch, "all", MAX_ENTRIES, clear=True)
            for _ in range(int(count)):
                step()
            torch.cuda.synchronize()
            if command == "record":
                set_history(torch, "off", MAX_ENTRIES)
        else:
            raise SystemExit(f"worker: unknown command {line!r}")
        reply("done")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, pairs=1, rounds=1)
    parser.add_argument("--worker", choices=ALLOCATORS, required=True)
    worker(parser.parse_args())
