#!/usr/bin/env python3
"""`memsnap stats` on one pickle held to 1, 2, 3, 4, 6, 8, 12 and 16 cores (its affinity, as
`taskset -c` sets it; as many as this machine has), each core count run --rounds times in
turn: the median time, the fastest and the peak memory (max RSS), and the speedup over one
core measured in the same run. Shows what reading a large pickle on several threads brings
and holds.

    python3 bench/viewer_threads.py build/cli/memsnap SNAPSHOT.pickle [--rounds 9]"""
import argparse
import os
import statistics

from viewer_bench import run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("memsnap")
    parser.add_argument("snapshot")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    available = sorted(os.sched_getaffinity(0))
    counts = [n for n in (1, 2, 3, 4, 6, 8, 12, 16) if n <= len(available)]
    size = os.path.getsize(args.snapshot)
    times = {n: [] for n in counts}
    peak = {n: 0 for n in counts}
    for _ in range(args.rounds):  # interleaved, so that a noisy moment hits every count alike
        for n in counts:
            elapsed, rss, _ = run([args.memsnap, "stats", args.snapshot], set(available[:n]))
            times[n].append(elapsed)
            peak[n] = max(peak[n], rss)
    print(f"{args.snapshot}: {size / 2**20:.1f} MiB, {args.rounds} interleaved rounds, {len(available)} cores")
    one = statistics.median(times[1])
    for n in counts:
        median = statistics.median(times[n])
        print(f"  {n:2d} cores: median {median:.3f} s  fastest {min(times[n]):.3f} s  "
              f"peak {peak[n] / 2**20:5.1f} MiB ({peak[n] / size:.2f}x file)  {one / median:.2f}x one core")


if __name__ == "__main__":
    main()
