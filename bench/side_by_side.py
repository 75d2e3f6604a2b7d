#!/usr/bin/env python3
"""Side-by-side replay benchmark: memsnap's allocator against PyTorch's, on the same traces.

Runs memsnap_bench and torch_cca_replay (../shared/bench/torch_cca_replay.cpp) alternately,
ROUNDS times per trace, so both see the same machine noise, then prints the median ns per
event of each, their ratio (and the best round of each), and whether both reserved the same
memory.

  bench/side_by_side.py --memsnap build/bench/memsnap_bench --torch /tmp/tcr \\
      --backend cuda --rounds 7 --passes 5 TRACE [TRACE...]

Stdlib only, so it runs on the GPU machine as is. Prints one JSON object per trace with
--json, else a table.
"""

import argparse
import json
import statistics
import subprocess
import sys

TIMING_KEYS = (
    "ns_per_event_history_off",
    "ns_per_event_history_nostack",
    "ns_per_event_history_cpp_stacks",
    "ns_per_event_history_fp_stacks",  # memsnap only: compared with PyTorch's cpp_stacks
)
# Where PyTorch has no such mode, the row compares with this one of PyTorch's.
PYTORCH_EQUIVALENT = {"ns_per_event_history_fp_stacks": "ns_per_event_history_cpp_stacks"}
SAME_RESULT_KEYS = ("peak_reserved_bytes", "peak_allocated_bytes", "device_mallocs")


def run_json(command):
    """Runs a benchmark binary and returns the last JSON line it printed."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"side_by_side: {' '.join(command)} failed ({done.returncode}): "
                 f"{done.stderr.strip()[:500]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"side_by_side: {' '.join(command)} printed no JSON line")
    return json.loads(lines[-1])


def measure(trace, args):
    memsnap_command = [args.memsnap, "replay", trace, "--backend", args.backend,
                       "--passes", str(args.passes), "--json"]
    torch_command = [args.torch, trace, str(args.passes)]
    runs = {"memsnap": [], "pytorch": []}
    for round_index in range(args.rounds):
        # Alternate which goes first so neither always runs on a warmer machine.
        order = ["memsnap", "pytorch"] if round_index % 2 == 0 else ["pytorch", "memsnap"]
        for name in order:
            runs[name].append(run_json(memsnap_command if name == "memsnap" else torch_command))
    return runs


def summarize(trace, runs):
    summary = {"trace": trace, "events": runs["pytorch"][0].get("events"),
               "rounds": len(runs["pytorch"])}
    for key in TIMING_KEYS:
        values = {}
        for name, results in runs.items():
            source_key = PYTORCH_EQUIVALENT.get(key, key) if name == "pytorch" else key
            found = [r[source_key] for r in results if source_key in r]
            if found:
                values[name] = found
        if len(values) == 2:
            # The median is the figure; the best round of each says what the same code does
            # when the (shared, noisy) machine leaves it alone.
            medians = {name: statistics.median(found) for name, found in values.items()}
            bests = {name: min(found) for name, found in values.items()}
            summary[key] = {
                "memsnap_median": medians["memsnap"],
                "pytorch_median": medians["pytorch"],
                "speedup": medians["pytorch"] / medians["memsnap"],
                "memsnap_best": bests["memsnap"],
                "pytorch_best": bests["pytorch"],
                "speedup_best": bests["pytorch"] / bests["memsnap"],
            }
    summary["same_result"] = {
        key: {"memsnap": runs["memsnap"][0].get(key), "pytorch": runs["pytorch"][0].get(key)}
        for key in SAME_RESULT_KEYS
    }
    return summary


def print_table(summary):
    print(f"{summary['trace']}: {summary['events']} events, {summary['rounds']} interleaved rounds")
    for key in TIMING_KEYS:
        if key in summary:
            s = summary[key]
            print(f"  {key:34s} memsnap {s['memsnap_median']:8.1f} ns   "
                  f"pytorch {s['pytorch_median']:8.1f} ns   speedup {s['speedup']:5.2f}x   "
                  f"(best rounds {s['memsnap_best']:.1f} / {s['pytorch_best']:.1f} ns, "
                  f"{s['speedup_best']:.2f}x)")
    for key, pair in summary["same_result"].items():
        mark = "same" if pair["memsnap"] == pair["pytorch"] else "DIFFERENT"
        print(f"  {key:34s} memsnap {pair['memsnap']}   pytorch {pair['pytorch']}   {mark}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--memsnap", required=True, help="path to memsnap_bench")
    parser.add_argument("--torch", required=True, help="path to torch_cca_replay")
    parser.add_argument("--backend", choices=("sim", "cuda"), default="cuda")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.rounds < 1 or args.passes < 1:
        parser.error("--rounds and --passes must be at least 1")
    for trace in args.traces:
        summary = summarize(trace, measure(trace, args))
        if args.json:
            print(json.dumps(summary))
        else:
            print_table(summary)


if __name__ == "__main__":
    main()
