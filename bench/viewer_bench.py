#!/usr/bin/env python3
"""memsnap's viewer against PyTorch's torch/cuda/_memory_viz.py on the same snapshot, in one
run: each command runs interleaved (memsnap, python, memsnap, ...) for --rounds rounds; the
medians, their ratio, each side's peak memory (max RSS) and memsnap's CPU time are printed.
memsnap reads a large pickle on every core it may use; it also runs held to one core (its
affinity, as `taskset -c` sets it), interleaved with the others, to show what the threads
bring.

    python3 bench/viewer_bench.py --memsnap build/cli/memsnap --memory-viz _memory_viz.py \
        --flamegraph-pl flamegraph.pl SNAPSHOT.pickle

_memory_viz.py needs flamegraph.pl for `memory` and `segments` and downloads it when it is not
where it looks (~/.cache/flamegraph.pl in PyTorch 2.x releases, /tmp/UID_flamegraph.pl in newer
sources); this script copies the one given to both places first, so nothing is downloaded."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run(argv, cores=None):
    """Runs argv (held to the set of `cores` when given): seconds taken, max RSS in bytes and
    CPU seconds (user and system, all threads)."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               preexec_fn=(lambda: os.sched_setaffinity(0, cores)) if cores else None)
    _, status, usage = os.wait4(process.pid, 0)
    elapsed = time.perf_counter() - start
    stderr = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"viewer_bench: {' '.join(argv)} failed: {stderr.strip()}")
    return elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memsnap", required=True)
    parser.add_argument("--memory-viz", required=True, help="PyTorch's torch/cuda/_memory_viz.py")
    parser.add_argument("--flamegraph-pl", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("snapshot")
    args = parser.parse_args()
    # Where _memory_viz.py looks for it: ~/.cache (PyTorch 2.x releases), /tmp/UID_flamegraph.pl
    # (newer sources).
    for cache in (os.path.expanduser("~/.cache/flamegraph.pl"), f"/tmp/{os.getuid()}_flamegraph.pl"):
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        if not os.path.exists(cache):
            shutil.copy(args.flamegraph_pl, cache)
            os.chmod(cache, 0o755)
    size = os.path.getsize(args.snapshot)
    out = tempfile.mkdtemp(prefix="viewer_bench.")
    commands = [
        ("stats", [args.memsnap, "stats", args.snapshot],
         [sys.executable, args.memory_viz, "stats", args.snapshot]),
        ("memory flamegraph", [args.memsnap, "flamegraph", args.snapshot, "-o", f"{out}/m.svg"],
         [sys.executable, args.memory_viz, "memory", args.snapshot, "-o", f"{out}/p.svg"]),
        ("segments", [args.memsnap, "segments", args.snapshot, "-o", f"{out}/m2.svg"],
         [sys.executable, args.memory_viz, "segments", args.snapshot, "-o", f"{out}/p2.svg"]),
    ]
    cores = len(os.sched_getaffinity(0))
    print(f"{args.snapshot}: {size / 2**20:.1f} MiB, {args.rounds} interleaved rounds (medians), {cores} cores")
    one_core = {min(os.sched_getaffinity(0))}
    for name, ours, theirs in commands:
        ours_times, ours_cpu, one_core_times, theirs_times, ours_rss, theirs_rss = [], [], [], [], 0, 0
        for round_index in range(args.rounds):
            # Which memsnap run comes right after _memory_viz.py's (whose freed memory the next
            # process meets cold) alternates, so neither is always the colder.
            for on_one_core in (False, True) if round_index % 2 == 0 else (True, False):
                t, rss, cpu = run(ours, cores=one_core if on_one_core else None)
                if on_one_core:
                    one_core_times.append(t)
                    continue
                ours_times.append(t)
                ours_cpu.append(cpu)
                ours_rss = max(ours_rss, rss)
            t, rss, _ = run(theirs)
            theirs_times.append(t)
            theirs_rss = max(theirs_rss, rss)
        a, b = statistics.median(ours_times), statistics.median(theirs_times)
        c = statistics.median(one_core_times)
        print(f"  {name:18s} memsnap {a:6.3f} s (cpu {statistics.median(ours_cpu):5.3f} s)  {ours_rss / 2**20:6.1f} MiB "
              f"({ours_rss / size:.2f}x file)   _memory_viz.py {b:6.3f} s  {theirs_rss / 2**20:6.1f} MiB   "
              f"speedup {b / a:5.1f}x   (memsnap on one core {c:6.3f} s, {b / c:4.1f}x)")
    shutil.rmtree(out)


if __name__ == "__main__":
    main()
