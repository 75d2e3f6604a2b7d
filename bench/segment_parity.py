#!/usr/bin/env python3
"""Checks that memsnap reproduces PyTorch's segment allocations for a recorded snapshot.

Reads a PyTorch snapshot pickle (torch.cuda.memory._dump_snapshot, recorded with history),
takes the sizes of its segment_alloc events in order, replays the trace of the same snapshot
through `memsnap replay --json` with the same allocator settings, and compares the two lists.

  bench/segment_parity.py --memsnap build/cli/memsnap SNAP.pickle TRACE [--config STR]

Exit status 0 when count, sizes and order agree, 1 otherwise. Stdlib only: a snapshot pickle
holds plain dicts and lists, so no torch import is needed.
"""

import argparse
import json
import pickle
import subprocess
import sys


def pytorch_segment_sizes(snapshot_path, device):
    with open(snapshot_path, "rb") as f:
        snapshot = pickle.load(f)
    traces = snapshot.get("device_traces", [])
    if device >= len(traces):
        sys.exit(f"segment_parity: {snapshot_path} has no trace for device {device}")
    return [e["size"] for e in traces[device] if e.get("action") == "segment_alloc"]


def memsnap_segment_sizes(memsnap, trace, config):
    command = [memsnap, "replay", trace, "--json"]
    if config:
        command += ["--config", config]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"segment_parity: {' '.join(command)}: {done.stderr.strip()}")
    return json.loads(done.stdout)["segment_alloc_sizes"]


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot")
    parser.add_argument("trace")
    parser.add_argument("--memsnap", required=True)
    parser.add_argument("--config", default="")
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    expected = pytorch_segment_sizes(args.snapshot, args.device)
    actual = memsnap_segment_sizes(args.memsnap, args.trace, args.config)
    label = f"{args.trace} [{args.config or 'default settings'}]"
    if expected == actual:
        print(f"SAME {label}: {len(actual)} segment allocations, "
              f"{sum(actual) / 2**20:.1f} MiB, identical sizes and order")
        return 0
    i = first_difference(expected, actual)
    print(f"DIFFERENT {label}: pytorch {len(expected)} segments, memsnap {len(actual)}; "
          f"first difference at #{i}: pytorch {expected[i:i + 5]} memsnap {actual[i:i + 5]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
