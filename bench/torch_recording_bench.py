#!/usr/bin/env python3
"""What recording memory history costs a real training step: PyTorch's allocator against
memsnap's (the `memsnap` Python package), side by side on one GPU.

    python3 bench/torch_recording_bench.py --model allocations|gpt2|resnet50 --rounds 3

Each run is a fresh process (the allocator is chosen before CUDA starts), PyTorch and memsnap
alternating for --rounds rounds. A run times every step: history off first, then --cycles
cycles in which each mode is measured as a pair: --steps steps with history off and --steps
steps recording in that mode, in one order in even cycles and the other in odd ones, after a
collection of Python's garbage and one untimed step. Modes: the trace without stacks, Python stacks, all stacks (Python
and C++), all set through PyTorch's own `torch.cuda.memory._record_memory_history` (memsnap
also through memsnap.torch.record_history, to show where its cost goes); then history off
again. Then it records --dump-steps steps from a cleared history with each stack choice and
times `torch.cuda.memory._dump_snapshot` (memsnap: also its msgpack `dump_snapshot`).

Printed, as measured in this one run: median step time per mode; the cost of recording per
allocator event (allocations and frees): the median over all pairs of a mode's steps less the
history-off steps beside them, divided by the events of a step (counted from
`memory_stats()`, equal on both allocators), so that the host's drift over a run cancels pair
by pair; whether turning history off gives the step its speed back; dump times and sizes.
Workloads: `allocations` (the allocator alone: a tensor made and dropped 1,000 times, 30
Python calls deep), a `transformers` GPT-2 small and a torchvision resnet50 (random init,
AdamW, small batches, so the step is CPU-bound).
"""
import argparse
import gc
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = ("gpt2", "resnet50", "allocations")
# One cycle, through PyTorch's API on both allocators ("fresh": history off before any recording
# comes first). "none" records the trace without stacks.
MODES = ("none", "python", "all", "off")
# memsnap only, through memsnap.torch.record_history: where memsnap's own cost goes.
MEMSNAP_MODES = ("memsnap-none", "memsnap-python", "memsnap-cpp", "memsnap-all")
LABELS = {"fresh": "history off (before recording)", "none": "trace, no stacks",
          "python": "python stacks", "all": "all stacks (python + C++)",
          "off": "history off (in the cycles)", "after": "history off (after all recording)"}


def build(workload, torch):
    """One step of the workload, as a function."""
    if workload == "allocations":
        # Allocator calls alone: a tensor made and dropped 1,000 times, 30 Python calls deep
        # (as deep as a model's forward), no kernel run.
        def nest(level):
            if level:
                return nest(level - 1)
            for _ in range(1000):
                torch.empty(4096, device="cuda")
        return lambda: nest(30)
    if workload == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        model = GPT2LMHeadModel(GPT2Config(n_layer=12, n_embd=768, n_head=12)).cuda()
        tokens = torch.randint(0, model.config.vocab_size, (2, 128), device="cuda")
        loss_of = lambda: model(tokens, labels=tokens).loss  # noqa: E731
    else:
        import torchvision
        model = torchvision.models.resnet50().cuda()
        images = torch.randn(8, 3, 128, 128, device="cuda")
        loss_of = lambda: model(images).square().mean()  # noqa: E731
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        loss_of().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def time_steps(torch, step, count):
    """Seconds each of `count` calls of `step` took, the GPU's work included."""
    times = []
    for _ in range(count):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times


def set_history(torch, mode, max_entries, clear=False):
    if mode in ("off", "fresh"):
        torch.cuda.memory._record_memory_history(enabled=None)
    elif mode.startswith("memsnap-"):
        import memsnap.torch
        memsnap.torch.record_history(stacks=mode[len("memsnap-"):], max_entries=max_entries)
    elif mode == "none":
        torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                 max_entries=max_entries, clear_history=clear)
    else:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=mode,
                                                 max_entries=max_entries, clear_history=clear)


def events_so_far(torch):
    stats = torch.cuda.memory_stats()
    return stats["allocation.all.allocated"] + stats["allocation.all.freed"]


def worker(args):
    import torch
    if args.worker == "memsnap":
        import memsnap.torch
        memsnap.torch.install()
    torch.manual_seed(0)
    step = build(args.model, torch)

    def timed_steps(count):
        return time_steps(torch, step, count)

    for _ in range(args.warmup):
        step()
    # Python's collector runs when the step's allocations of Python objects say so, and a full
    # collection of a `transformers` process takes milliseconds: it runs between stretches
    # instead, never inside a timed one.
    gc.collect()
    gc.disable()
    if args.only == "dumps":  # the dumps alone, for a profiler
        print(json.dumps({"dumps": timed_dumps(args, torch, step)}))
        return
    if args.only:  # one mode alone, for a profiler: nothing else runs after the warmup
        set_history(torch, args.only, args.max_entries)
        timed_steps(args.steps * args.cycles)
        return
    modes = MODES + (MEMSNAP_MODES if args.worker == "memsnap" else ())
    if args.modes:  # (a worker of an A/B: bench/torch_recording_ab.py)
        modes = tuple(args.modes.split(",")) + ("off",)
    times = {mode: [] for mode in ("fresh",) + modes + ("after",)}
    before = events_so_far(torch)
    times["fresh"] += timed_steps(args.steps * 2)
    events_per_step = (events_so_far(torch) - before) / (args.steps * 2)
    # Each recorded stretch against the history-off stretch beside it. A collection leaves
    # the caches cold for the step after it: one untimed step follows it. Which stretch of a
    # pair comes first alternates from cycle to cycle, so that what follows a switch (in either
    # direction) weighs on both sides alike.
    differences = {mode: [] for mode in modes if mode != "off"}
    for cycle in range(args.cycles):
        for mode in differences:
            gc.collect()
            set_history(torch, "off", args.max_entries)
            step()
            if cycle % 2 == 0:
                off = timed_steps(args.steps)
                set_history(torch, mode, args.max_entries)
                recorded = timed_steps(args.steps)
            else:
                set_history(torch, mode, args.max_entries)
                recorded = timed_steps(args.steps)
                set_history(torch, "off", args.max_entries)
                off = timed_steps(args.steps)
            times["off"] += off
            times[mode] += recorded
            differences[mode].append(statistics.fmean(recorded) - statistics.fmean(off))
    set_history(torch, "off", args.max_entries)
    times["after"] += timed_steps(args.steps * 2)

    dumps = timed_dumps(args, torch, step) if args.dump_steps > 0 else {}
    print(json.dumps({"times": times, "differences": differences, "events_per_step": events_per_step,
                      "dumps": dumps}))


def timed_dumps(args, torch, step):
    """Records --dump-steps steps from a cleared history with each stack choice, then times
    `_dump_snapshot` --dump-repeats times (the first one pays for what a process does once, such
    as reading symbol tables) and memsnap's msgpack dump once."""
    dumps = {}
    with tempfile.TemporaryDirectory() as folder:
        for stacks in ("python", "all"):
            set_history(torch, stacks, args.max_entries, clear=True)
            for _ in range(args.dump_steps):
                step()
            torch.cuda.synchronize()
            path = os.path.join(folder, f"{stacks}.pickle")
            repeats = []
            for _ in range(args.dump_repeats):
                start = time.perf_counter()
                torch.cuda.memory._dump_snapshot(path)
                repeats.append(time.perf_counter() - start)
            with open(path, "rb") as file:
                entries = sum(len(trace) for trace in pickle.load(file)["device_traces"])
            dump = {"seconds": repeats[0], "again": repeats[1:], "bytes": os.path.getsize(path),
                    "entries": entries}
            if args.worker == "memsnap":
                import memsnap.torch
                msgpack = os.path.join(folder, f"{stacks}.msgpack")
                start = time.perf_counter()
                memsnap.torch.dump_snapshot(msgpack)
                dump["msgpack_seconds"] = time.perf_counter() - start
                dump["msgpack_bytes"] = os.path.getsize(msgpack)
            dumps[stacks] = dump
            set_history(torch, "off", args.max_entries)
    return dumps


def run_worker(worker_args, what, env=None):
    """Runs this script's worker in a fresh process and returns the JSON it printed last
    (bench/torch_recording_ab.py runs it too)."""
    command = [sys.executable, os.path.abspath(__file__)] + worker_args
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{what} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(args, kind):
    return run_worker(["--worker", kind, "--model", args.model, "--steps", str(args.steps),
                       "--cycles", str(args.cycles), "--warmup", str(args.warmup),
                       "--dump-steps", str(args.dump_steps), "--dump-repeats", str(args.dump_repeats),
                       "--max-entries", str(args.max_entries)], f"{kind} run")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=WORKLOADS, default="gpt2")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per half of a pair")
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--dump-steps", type=int, default=60)
    parser.add_argument("--dump-repeats", type=int, default=1,
                        help="dumps timed one after another (the first is the one compared)")
    parser.add_argument("--max-entries", type=int, default=1_000_000)
    parser.add_argument("--worker", choices=["pytorch", "memsnap"])
    parser.add_argument("--modes", help="with --worker: the recording modes of the cycles, comma-separated "
                                         "(default: all of them); --dump-steps 0 then skips the dumps")
    parser.add_argument("--only", choices=MODES + MEMSNAP_MODES + ("dumps",),
                        help="with --worker: record in this mode alone for --steps x --cycles steps "
                             "after the warmup, or ('dumps') only record and time the dumps (to run "
                             "under a profiler: bench/gpu/profile.sh)")
    args = parser.parse_args()
    if args.dump_repeats < 1:
        parser.error(f"--dump-repeats takes 1 or more (given {args.dump_repeats})")
    if args.modes is not None:
        if not args.worker:
            parser.error("--modes goes with --worker")
        unknown = [m for m in args.modes.split(",") if m not in MODES + MEMSNAP_MODES or m == "off"]
        if unknown or not args.modes:
            parser.error(f"--modes takes recording modes of {', '.join(MODES[:-1] + MEMSNAP_MODES)} "
                         f"(given {args.modes!r})")
    if args.dump_steps < (0 if args.worker else 1):
        parser.error(f"--dump-steps takes 1 or more (given {args.dump_steps})")
    if args.worker:
        return worker(args)

    kinds = ("pytorch", "memsnap")
    runs = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            runs[kind].append(run(args, kind))

    events = {kind: {r["events_per_step"] for r in runs[kind]} for kind in kinds}
    per_step = runs["pytorch"][0]["events_per_step"]
    print(f"model {args.model}: {args.rounds} rounds alternating, {args.steps} steps per mode x "
          f"{args.cycles} cycles, allocator events (allocations + frees) per step: "
          f"pytorch {sorted(events['pytorch'])} memsnap {sorted(events['memsnap'])}")
    median = {kind: {mode: statistics.median(t for r in runs[kind] for t in r["times"][mode])
                     for mode in runs[kind][0]["times"]} for kind in kinds}
    print(f"{'median step (ms)':<34}{'pytorch':>10}{'memsnap':>10}{'memsnap/pytorch':>17}")
    for mode in ("fresh",) + MODES + ("after",):
        p, m = median["pytorch"][mode], median["memsnap"][mode]
        print(f"{LABELS[mode]:<34}{p * 1e3:>10.3f}{m * 1e3:>10.3f}{m / p:>17.4f}")
    # Each pair's recorded steps less the history-off steps beside them: drift over a run
    # (clocks, caches warming, other tenants of the host) cancels pair by pair.
    def cost(kind, mode):
        return statistics.median(d for r in runs[kind] for d in r["differences"][mode]) / per_step

    print(f"{'recording cost per event (us)':<34}{'pytorch':>10}{'memsnap':>10}{'memsnap/pytorch':>17}")
    for mode in ("none", "python", "all"):
        p, m = cost("pytorch", mode), cost("memsnap", mode)
        ratio = m / p if p > 0 else float("nan")
        print(f"{LABELS[mode]:<34}{p * 1e6:>10.3f}{m * 1e6:>10.3f}{ratio:>17.4f}")
    pairs = len(runs["pytorch"]) * len(runs["pytorch"][0]["differences"]["all"])
    print(f"(median of {pairs} pairs per mode and allocator; the pairs' quartiles for all stacks, us "
          f"per event: " + ", ".join(
              f"{kind} " + " / ".join(f"{q / per_step * 1e6:.3f}" for q in statistics.quantiles(
                  [d for r in runs[kind] for d in r["differences"]["all"]], n=4))
              for kind in kinds) + ")")
    print("memsnap through memsnap.torch.record_history, cost per event (us): " + ", ".join(
        f"{mode[len('memsnap-'):]} {cost('memsnap', mode) * 1e6:.3f}" for mode in MEMSNAP_MODES))
    for kind in kinds:
        print(f"{kind}: history off, after recording / before any: "
              f"{median[kind]['after'] / median[kind]['fresh']:.4f} (last {args.steps * 2} steps / first "
              f"{args.steps * 2}), in the cycles / before any: {median[kind]['off'] / median[kind]['fresh']:.4f}")
    print(f"{'dump (median s, MB, entries)':<34}{'pytorch':>26} {'memsnap':>26}")
    for stacks in ("python", "all"):
        cells = []
        for kind in kinds:
            dumps = [r["dumps"][stacks] for r in runs[kind]]
            cells.append(f"{statistics.median(d['seconds'] for d in dumps):.3f} s "
                         f"{dumps[0]['bytes'] / 1e6:.1f} MB {dumps[0]['entries']}")
        print(f"{'_dump_snapshot, ' + stacks + ' stacks':<34}{cells[0]:>26} {cells[1]:>26}")
        if args.dump_repeats > 1:
            cells = [f"{statistics.median(t for r in runs[kind] for t in r['dumps'][stacks]['again']):.3f} s"
                     for kind in kinds]
            print(f"{'  again, same history':<34}{cells[0]:>26} {cells[1]:>26}")
        dumps = [r["dumps"][stacks] for r in runs["memsnap"]]
        cell = (f"{statistics.median(d['msgpack_seconds'] for d in dumps):.3f} s "
                f"{dumps[0]['msgpack_bytes'] / 1e6:.1f} MB")
        print(f"{'memsnap msgpack, ' + stacks + ' stacks':<34}{'':>26} {cell:>26}")


if __name__ == "__main__":
    main()
