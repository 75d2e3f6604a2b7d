#!/usr/bin/env python3
"""memsnap's PyTorch pickle writer against Python's own pickle module.

For each PyTorch 2.11 snapshot pickle (gzip or not): `memsnap convert FILE OUT.pickle` must
give back, through pickle.load, the very dictionary PyTorch wrote (every key and value; of a
forward_frames traceback line only its first line, since the source text after it is not
kept). For each memsnap snapshot and each older layout (data/legacy, written back in 2.11's):
the converted pickle must load in Python with PyTorch's keys (and memsnap's own under
"memsnap", one string), and `memsnap stats --json` must read the same from it as from the
original: statistics, the driver's figures and memory outside the allocator included.
Usage: pickle_writer_check.py MEMSNAP FILE..."""
import gzip
import json
import os
import pickle
import subprocess
import sys
import tempfile

failures = []


def load(path):
    with open(path, "rb") as f:
        head = f.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        return pickle.load(f)


def first_line(text):
    return text.split("\n", 1)[0]


def differences(want, got, path, out):
    if len(out) >= 5:
        return
    if path.endswith("forward_frames") and isinstance(want, list) and isinstance(got, list):
        want = [first_line(w) for w in want]
        got = [first_line(g) for g in got]
    if type(want) is not type(got):
        out.append(f"{path}: {type(want).__name__} {want!r:.80} became {type(got).__name__} {got!r:.80}")
    elif isinstance(want, dict):
        for key in want.keys() | got.keys():
            if key not in got or key not in want:
                out.append(f"{path}.{key}: {'missing' if key not in got else 'added'}")
            else:
                differences(want[key], got[key], f"{path}.{key}", out)
    elif isinstance(want, (list, tuple)):
        if len(want) != len(got):
            out.append(f"{path}: {len(want)} items became {len(got)}")
        for i, (w, g) in enumerate(zip(want, got)):
            differences(w, g, f"{path}[{i}]", out)
    elif want != got:
        out.append(f"{path}: {want!r:.80} became {got!r:.80}")


def stats(memsnap, path):
    done = subprocess.run([memsnap, "stats", path, "--json"], capture_output=True, text=True)
    if done.returncode != 0:
        failures.append(f"{path}: memsnap stats failed: {done.stderr.strip()}")
        return {}
    result = json.loads(done.stdout)
    result["caching"] = result.get("allocator_settings", {}).get("caching", True)
    # "stacks" is the size of the stack table, which a pickle read back can hold more entries in
    # than the distinct stacks its records name (those are compared through the records).
    for key in ("allocator_settings", "source", "stacks"):
        result.pop(key, None)
    return result


def main():
    memsnap, files = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as folder:
        for path in files:
            name = os.path.basename(path)
            out = os.path.join(folder, name.split(".")[0] + ".out.pickle")
            done = subprocess.run([memsnap, "convert", path, out], capture_output=True, text=True)
            if done.returncode != 0:
                failures.append(f"{name}: convert failed: {done.stderr.strip()}")
                continue
            got = load(out)
            if ".pickle" in name and "legacy" not in path:
                found = []
                differences(load(path), got, name, found)
                failures.extend(found)
            else:
                # PyTorch's keys, and memsnap's own (snapshot/pickle_extras.h) as one string.
                if set(got) - {"memsnap"} != {"segments", "device_traces", "allocator_settings", "external_annotations"}:
                    failures.append(f"{name}: keys {sorted(got)}")
                if not isinstance(got.get("memsnap", ""), str):
                    failures.append(f"{name}: 'memsnap' is a {type(got['memsnap']).__name__}, not a string")
                want_stats, got_stats = stats(memsnap, path), stats(memsnap, out)
                # (`memsnap record`'s snapshots have no caching allocator, so no settings.)
                caching = want_stats.pop("caching", True)
                got_stats.pop("caching", None)
                if ".msgpack" in name and caching and "PYTORCH_CUDA_ALLOC_CONF" not in got["allocator_settings"]:
                    failures.append(f"{name}: allocator_settings lack PYTORCH_CUDA_ALLOC_CONF")
                found = []
                differences(want_stats, got_stats, f"{name} stats", found)
                failures.extend(found)
            print(f"{name}: {len(got['device_traces'][0]) if got['device_traces'] else 0} trace entries written back")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
