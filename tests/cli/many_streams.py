#!/usr/bin/env python3
"""Writes an allocation trace whose every event is on a stream of its own (issue 53: replay and
tune took time quadratic in the streams), or the same events on one stream, to compare with.

    many_streams.py EVENTS trace  [--one-stream]             > FILE.trace
    many_streams.py EVENTS json   [--one-stream] [--deferred] > FILE.json

EVENTS counts allocations and frees: the first half allocates, each request 512 bytes larger
than the one before from 10 MiB (a segment of its own), and the second half frees them in the
same order, so on one stream as on many every allocation reserves a segment and the allocator
decides the same but for the streams. The same events as tests/many_streams.h, which the tests
make in memory. A text trace of more than about 10,000 events needs more than the default
80 GiB: `memsnap replay FILE --capacity-gib 1024`.

`trace` is the text format of `memsnap replay` (shared/bench/TRACE_FORMAT.md). `json` is a
PyTorch snapshot (segments and device_traces, each allocation after the segment_alloc that made
room for it, each free a free_requested and its free_completed) for `memsnap replay`, `memsnap
tune` and the server's /tune and /state. With --deferred every free completes only at the end
of the trace (the replay waits for each on a stream of its own, as for a block used on another
stream).
"""
import json
import sys

FIRST_SIZE = 10 << 20
SEGMENT_ROUNDING = 2 << 20


def events(count, one_stream):
    """(kind, id, bytes, stream) tuples, `count` in all."""
    allocs = (count + 1) // 2
    out = [("a", i + 1, FIRST_SIZE + 512 * i, 0) for i in range(allocs)]
    out += [("f", i + 1, 0, 0) for i in range(count - allocs)]
    return out if one_stream else [(kind, ident, size, n) for n, (kind, ident, size, _) in enumerate(out)]


def write_trace(count, one_stream, out):
    out.write("# a <id> <bytes> <stream> / f <id> <stream>\n")
    for kind, ident, size, stream in events(count, one_stream):
        out.write(f"a {ident} {size} {stream}\n" if kind == "a" else f"f {ident} {stream}\n")


def write_json(count, one_stream, deferred, out):
    # Addresses 1 GiB apart from 1 TiB (where the simulated device can place segments).
    trace, completions = [], []
    for kind, ident, size, stream in events(count, one_stream):
        entry = {"addr": (1 << 40) + (ident << 30), "stream": stream}
        if kind == "a":
            segment = (size + SEGMENT_ROUNDING - 1) // SEGMENT_ROUNDING * SEGMENT_ROUNDING
            trace.append(dict(entry, action="segment_alloc", size=segment))
            trace.append(dict(entry, action="alloc", size=size))
            continue
        size = FIRST_SIZE + 512 * (ident - 1)  # the block's, as PyTorch records it
        trace.append(dict(entry, action="free_requested", size=size))
        (completions if deferred else trace).append(dict(entry, action="free_completed", size=size))
    trace += completions
    for time, entry in enumerate(trace):
        entry["time_us"] = time
    json.dump({"segments": [], "device_traces": [trace]}, out, separators=(",", ":"))


def main():
    args = sys.argv[1:]
    flags = {a for a in args if a.startswith("--")}
    rest = [a for a in args if not a.startswith("--")]
    if len(rest) != 2 or rest[1] not in ("trace", "json") or not flags <= {"--one-stream", "--deferred"}:
        print(__doc__, file=sys.stderr)
        return 2
    count = int(rest[0])
    if rest[1] == "trace":
        write_trace(count, "--one-stream" in flags, sys.stdout)
    else:
        write_json(count, "--one-stream" in flags, "--deferred" in flags, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
