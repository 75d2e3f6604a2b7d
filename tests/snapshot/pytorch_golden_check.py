#!/usr/bin/env python3
"""Golden check of memsnap's PyTorch reader and views against Python's own pickle module.

For each snapshot pickle (gzip or not): Python loads it; `memsnap convert` turns it into JSON
and `memsnap stats --json` summarizes it; every segment, block, trace entry and frame must
match what Python read, the totals must match sums computed here, and every SVG view must be
well-formed XML. Usage: pytorch_golden_check.py MEMSNAP FILE..."""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile
import xml.dom.minidom

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def text(s):
    # What a name reads as once through UTF-8 (lone surrogates become U+FFFD, as in memsnap).
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def frames_of(frames):
    return [(text(f["name"]), text(f["filename"]), f["line"]) for f in frames or []]


def json_frames(frames):
    return [(f["name"], f["filename"], f["line"]) for f in frames]


def load_python(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    snapshot = pickle.loads(data)
    if isinstance(snapshot, list):
        snapshot = {"segments": snapshot, "device_traces": []}
    return snapshot


def memsnap(binary, *args):
    result = subprocess.run([binary, *args], capture_output=True)
    if result.returncode != 0:
        sys.exit(f"memsnap {' '.join(args)} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout


def check_file(binary, path, scratch):
    name = os.path.basename(path)
    py = load_python(path)
    json_path = os.path.join(scratch, "out.json")
    memsnap(binary, "convert", path, json_path)
    with open(json_path) as f:
        ours = json.load(f)
    check(len(ours["segments"]) == len(py["segments"]), f"{name}: segment count")
    for i, (a, b) in enumerate(zip(py["segments"], ours["segments"])):
        where = f"{name}: segments[{i}]"
        for key in ("address", "total_size", "device", "stream", "segment_type"):
            if key in a:
                check(a[key] == b[key], f"{where}.{key}: {a[key]} != {b[key]}")
        check(len(a["blocks"]) == len(b["blocks"]), f"{where}: block count")
        address = a["address"]
        for k, (x, y) in enumerate(zip(a["blocks"], b["blocks"])):
            bw = f"{where}.blocks[{k}]"
            check(x.get("address", address) == y["address"], f"{bw}.address")
            check(x["size"] == y["size"], f"{bw}.size")
            check(x["state"] == y["state"], f"{bw}.state")
            if "requested_size" in x:
                check(x["requested_size"] == y["requested_size"], f"{bw}.requested_size")
            if "frames" in x:
                check(frames_of(x["frames"]) == json_frames(y["frames"]), f"{bw}.frames")
            # PyTorch lists history newest first, memsnap newest last.
            for h, (hx, hy) in enumerate(zip(reversed(x.get("history", [])), y["history"])):
                check(hx["real_size"] == hy["real_size"] and frames_of(hx.get("frames")) == json_frames(hy["frames"]),
                      f"{bw}.history[{h}]")
            address += x["size"]
    traces = py.get("device_traces", [])
    check(len(ours["device_traces"]) == len(traces), f"{name}: device trace count")
    for d, (ta, tb) in enumerate(zip(traces, ours["device_traces"])):
        check(len(ta) == len(tb), f"{name}: device {d} trace length {len(ta)} != {len(tb)}")
        for i, (e, g) in enumerate(zip(ta, tb)):
            where = f"{name}: device_traces[{d}][{i}]"
            action = "free_completed" if e["action"] == "free" else e["action"]
            check(action == g["action"], f"{where}.action")
            address = e.get("addr", e.get("device_free", 0)) if e["action"] == "oom" else e.get("addr", 0)
            check(address == g["addr"], f"{where}.addr")
            check(e["size"] == g["size"], f"{where}.size")
            check(e.get("stream", 0) % 2**64 == g["stream"], f"{where}.stream")
            check(e.get("time_us", 0) == g["time_us"], f"{where}.time_us")
            check(frames_of(e.get("frames")) == json_frames(g["frames"]), f"{where}.frames")
            if len(failures) > 20:
                return
    stats = json.loads(memsnap(binary, "stats", path, "--json"))
    segments = py["segments"]
    check(stats["segments"] == len(segments), f"{name}: stats segments")
    check(stats["blocks"] == sum(len(s["blocks"]) for s in segments), f"{name}: stats blocks")
    check(stats["reserved_bytes"] == sum(s["total_size"] for s in segments), f"{name}: reserved_bytes")
    for key in ("allocated_size", "active_size", "requested_size"):
        if all(key in s for s in segments):
            total = sum(s[key] for s in segments)
            check(stats[key.replace("_size", "_bytes")] == total, f"{name}: {key} {stats[key.replace('_size', '_bytes')]} != {total}")
    for state in ("active_allocated", "active_pending_free", "inactive"):
        total = sum(b["size"] for s in segments for b in s["blocks"] if b["state"] == state)
        check(stats["state_bytes"][state] == total, f"{name}: state_bytes[{state}]")
    check(stats["trace_entries"] == sum(len(t) for t in traces), f"{name}: trace_entries")
    actions = {}
    for t in traces:
        for e in t:
            a = "free_completed" if e["action"] == "free" else e["action"]
            actions[a] = actions.get(a, 0) + 1
    check(stats["trace_actions"] == actions, f"{name}: trace_actions {stats['trace_actions']} != {actions}")
    for view in (["flamegraph"], ["flamegraph", "--kind", "segments"], ["segments"], ["timeline"]):
        svg = os.path.join(scratch, "view.svg")
        memsnap(binary, view[0], path, "-o", svg, *view[1:])
        try:
            xml.dom.minidom.parse(svg)
        except Exception as error:  # noqa: BLE001 - any parse failure is the finding
            failures.append(f"{name}: {' '.join(view)} is not well-formed XML: {error}")


def main():
    binary, paths = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as scratch:
        for path in paths:
            check_file(binary, path, scratch)
    for failure in failures[:20]:
        print("MISMATCH", failure)
    if failures:
        sys.exit(1)
    print(f"{len(paths)} snapshots match Python's pickle")


if __name__ == "__main__":
    main()
