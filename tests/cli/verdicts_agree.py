#!/usr/bin/env python3
"""One verdict through every command, as a user runs them.

    verdicts_agree.py MEMSNAP DATA_DIR WORK_DIR

For each out-of-memory snapshot: `memsnap explain-oom`, `memsnap tune` and `memsnap estimate`
(on the recording's own device) print the same settings verdict, and estimate's failure the
same cause, word for word. For each snapshot: after `memsnap convert` to msgpack, JSON and
PyTorch's pickle, explain-oom and growth give the same verdicts. Exit status 1 with every
disagreement listed.
"""
import json
import os
import subprocess
import sys


def run(memsnap, *args):
    done = subprocess.run([memsnap, *args], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"memsnap {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def main():
    memsnap, data, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    oom_files = [
        "pytorch-2.11-h100/frag_oom.pickle",
        "pytorch-2.11-h100/oom_all_stacks.pickle",
        "pytorch-2.11-pools/pool_oom.pickle",
        "memsnap-h200/library_oom.msgpack",
        "memsnap-h200-verdicts/request_too_large/request_too_large.msgpack",
        "memsnap-h200-verdicts/fragmentation_capped/fragmentation_capped.msgpack",
        "memsnap-h200-verdicts/live_exhaustion_capped/live_exhaustion_capped.msgpack",
    ]
    growth_files = [
        "memsnap-h200-verdicts/ddp_leak/rank2.msgpack",
        "memsnap-h200-verdicts/side_stream_pending/side_stream_pending.msgpack",
        "memsnap-h200-verdicts/no_leak_steady/no_leak_steady.msgpack",
    ]
    problems = []
    checked = 0
    for name in oom_files:
        path = os.path.join(data, name)
        oom = run(memsnap, "explain-oom", path, "--json")
        tune = run(memsnap, "tune", path, "--json")
        estimate = run(memsnap, "estimate", path, "--json")
        checked += 1
        if oom["settings_conclusion"] != tune["conclusion"]:
            problems.append(f"{name}: explain-oom says {oom['settings_conclusion']!r}, tune {tune['conclusion']!r}")
        if estimate["tune"] is None or estimate["tune"]["conclusion"] != tune["conclusion"]:
            problems.append(f"{name}: estimate's settings verdict is not tune's: {estimate['tune_error'] or estimate['tune']}")
        failure = estimate["failure"]
        if failure is None or failure["cause_verdict"]["sentence"] != oom["verdict"]["sentence"]:
            problems.append(f"{name}: estimate says {estimate['verdict']!r}, explain-oom {oom['verdict']['sentence']!r}")
        for fmt in ("msgpack", "json", "pickle"):
            converted = os.path.join(work, os.path.basename(name) + "." + fmt)
            subprocess.run([memsnap, "convert", path, converted], check=True, capture_output=True, timeout=300)
            again = run(memsnap, "explain-oom", converted, "--json")
            if again["verdict"] != oom["verdict"] or again["settings_verdict"]["answer"] != oom["settings_verdict"]["answer"]:
                problems.append(f"{name} as {fmt}: explain-oom says {again['verdict']['sentence']!r}")
    for name in growth_files:
        path = os.path.join(data, name)
        growth = run(memsnap, "growth", path, "--json")
        checked += 1
        for fmt in ("msgpack", "json", "pickle"):
            converted = os.path.join(work, os.path.basename(name) + "." + fmt)
            subprocess.run([memsnap, "convert", path, converted], check=True, capture_output=True, timeout=300)
            again = run(memsnap, "growth", converted, "--json")
            if again["conclusion"] != growth["conclusion"]:
                problems.append(f"{name} as {fmt}: growth says {again['conclusion']!r}, not {growth['conclusion']!r}")
    for problem in problems:
        print("DISAGREE", problem)
    print(f"{checked} snapshots, {len(problems)} disagreements")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
