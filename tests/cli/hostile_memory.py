#!/usr/bin/env python3
"""Small inputs that describe a lot, against every read-only memsnap command: each run must end
with exit status 0 or 1 and, on 1, exactly one line on stderr starting "memsnap: error: " (never
an abort or a signal), and its peak RSS must stay within 4x the bytes the input decompresses to
plus 64 MiB plus the command's own baseline (its peak on a 5 KB snapshot, measured the same
way: a child's peak RSS as wait4 reports it includes this Python's own, about 13 MiB, which the
baseline then holds too). Every run is made under an address-space limit (setrlimit RLIMIT_AS,
as `prlimit --as` sets it) of that bound plus the room a process maps but never touches
(thread stacks of 8 MiB, malloc's arenas of 64 MiB per thread: `--as-slack`, 192 MiB), so a
reader that reaches for more fails there, with one line, instead of only being measured.

The inputs are generated into a temporary folder at each run (nothing big is stored):

  json_empty_segments   {"segments":[{},{},...]} gzipped (the issue's 130 KB file held 45M)
  json_spaces           "{" and then spaces, gzipped (the issue's: 4 GiB of them in 4 MB)
  json_huge_number      a JSON snapshot with 1e400 in it
  json_many_strings     a JSON list of distinct short strings under "segments"
  pickle_dicts_gz       a pickle list of empty dicts, `}a` repeated, gzipped
  pickle_dicts_plain    the same, plain (the issue's: 64 MiB, 63x the file in memory)
  pickle_nones          a pickle list of None, one byte an item
  pickle_strings        a pickle list of distinct short strings
  msgpack_traces_gz     a memsnap msgpack file with 1,000,000 empty device_traces, gzipped
  msgpack_device_N      one segment on device N (134217728, 2^31-1, -5): the issue's `ranks` cases
  msgpack_dense_trace   a valid trace of 1,000,000 events of 7 bytes (the densest memsnap
                        reads), an allocation and its free repeated
  msgpack_dense_leak    the same, allocations only: a replay simulates a million live blocks,
                        about 270 bytes each, so `replay` (and `tune`, skipped on these for
                        time) is held to the address-space limit, not to the bound
  gzip_two_members      a real snapshot gzipped as two members (Python's gzip reads it)

usage: hostile_memory.py MEMSNAP [--scale S] [--only NAME,...] [--commands C,...] [--sanitizer S]
       hostile_memory.py --generate DIR [--scale S] [--only NAME,...]   (only write the inputs)

--scale multiplies every input's size (1, the CTest size: a few MiB decompressed each; the
issue's sizes: json_empty_segments 22.5, json_spaces 512, pickle_dicts_plain 11.2). Under a
sanitizer (--sanitizer address,undefined) only exit statuses and error lines are checked, at a
quarter of the size.
"""
import argparse
import gzip
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time

MiB = 1 << 20
SIMULATING = {"replay", "tune"}
UNBOUNDED_SIMULATION = {"msgpack_dense_leak"}

# ---------------------------------------------------------------- a tiny msgpack writer


def mp(value):
    """msgpack for None, bools, ints, str, lists and dicts (what the cases need)."""
    if value is None:
        return b"\xc0"
    if value is True:
        return b"\xc3"
    if value is False:
        return b"\xc2"
    if isinstance(value, int):
        if 0 <= value < 128:
            return bytes([value])
        if -32 <= value < 0:
            return struct.pack("b", value)
        if value >= 0:
            return b"\xcf" + struct.pack(">Q", value)
        return b"\xd3" + struct.pack(">q", value)
    if isinstance(value, str):
        raw = value.encode()
        if len(raw) < 32:
            return bytes([0xA0 | len(raw)]) + raw
        return b"\xdb" + struct.pack(">I", len(raw)) + raw
    if isinstance(value, (list, tuple)):
        return array_header(len(value)) + b"".join(mp(v) for v in value)
    if isinstance(value, dict):
        out = b"\xdf" + struct.pack(">I", len(value))
        for k, v in value.items():
            out += mp(k) + mp(v)
        return out
    raise TypeError(value)


def array_header(n):
    if n < 16:
        return bytes([0x90 | n])
    if n < 65536:
        return b"\xdc" + struct.pack(">H", n)
    return b"\xdd" + struct.pack(">I", n)


def memsnap_header(fields):
    """The start of a memsnap msgpack file whose top-level map has `fields` more entries."""
    return b"\xdf" + struct.pack(">I", 2 + fields) + mp("format") + mp("memsnap-snapshot") + mp("version") + mp(1)


def segment(device, address=0x7F0000000000, size=2 << 20):
    # device, address, total, allocated, active, requested, stream, type, pool, expandable, stack, blocks
    block = [address, size, 0, 2, -1, []]  # one inactive block covering it
    return [device, address, size, 0, 0, 0, 0, "large", [0, 0], False, -1, [block]]


# ---------------------------------------------------------------- the cases


def gz_repeated(path, head, unit, count, tail):
    """gzip of head + unit*count + tail, written in pieces (never held whole)."""
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(head)
        piece = unit * max(1, (4 * MiB) // len(unit))
        per_piece = len(piece) // len(unit)
        left = count
        while left >= per_piece:
            out.write(piece)
            left -= per_piece
        out.write(unit * left)
        out.write(tail)
    return len(head) + len(unit) * count + len(tail)


def plain_repeated(path, head, unit, count, tail):
    with open(path, "wb") as out:
        out.write(head)
        piece = unit * max(1, (4 * MiB) // len(unit))
        per_piece = len(piece) // len(unit)
        left = count
        while left >= per_piece:
            out.write(piece)
            left -= per_piece
        out.write(unit * left)
        out.write(tail)
    return len(head) + len(unit) * count + len(tail)


def json_empty_segments(folder, scale):
    p = os.path.join(folder, "json_empty_segments.json.gz")
    return p, gz_repeated(p, b'{"segments":[', b"{},", int(2_000_000 * scale), b"{}]}")  # 6 MB


def json_spaces(folder, scale):
    p = os.path.join(folder, "json_spaces.json.gz")
    return p, gz_repeated(p, b"{", b" " * 4096, int(2048 * scale), b"")  # 8 MiB


def json_huge_number(folder, scale):
    p = os.path.join(folder, "json_huge_number.json")
    text = b'{"segments":[{"address":1e400,"total_size":2}]}'
    open(p, "wb").write(text)
    return p, len(text)


def json_many_strings(folder, scale):
    p = os.path.join(folder, "json_many_strings.json.gz")
    count = int(1_000_000 * scale)
    with gzip.open(p, "wb", compresslevel=6) as out:
        out.write(b'{"segments":[')
        size = 13
        for start in range(0, count, 65536):
            chunk = ("," if start else "") + ",".join('"%x"' % i for i in range(start, min(count, start + 65536)))
            out.write(chunk.encode())
            size += len(chunk)
        out.write(b"]}")
    return p, size + 2


def pickle_dicts_gz(folder, scale):
    p = os.path.join(folder, "pickle_dicts.pickle.gz")
    return p, gz_repeated(p, b"\x80\x04]", b"}a", int(3_000_000 * scale), b".")  # 6 MB


def pickle_dicts_plain(folder, scale):
    p = os.path.join(folder, "pickle_dicts.pickle")
    return p, plain_repeated(p, b"\x80\x04]", b"}a", int(3_000_000 * scale), b".")


def pickle_nones(folder, scale):
    p = os.path.join(folder, "pickle_nones.pickle.gz")  # 6 MB of None, in APPENDS batches of 1,000
    return p, gz_repeated(p, b"\x80\x04]", b"(" + b"N" * 1000 + b"e", int(6_000 * scale), b".")


def pickle_strings(folder, scale):
    p = os.path.join(folder, "pickle_strings.pickle.gz")
    count = int(1_000_000 * scale)
    with gzip.open(p, "wb", compresslevel=6) as out:
        out.write(b"\x80\x04]")
        size = 3
        for start in range(0, count, 1000):
            batch = b"(" + b"".join(b"\x8c\x06" + b"%06x" % i for i in range(start, min(count, start + 1000))) + b"e"
            out.write(batch)
            size += len(batch)
        out.write(b".")
    return p, size + 1


def msgpack_traces_gz(folder, scale):
    count = int(1_000_000 * scale)
    p = os.path.join(folder, "msgpack_traces.msgpack.gz")
    return p, gz_repeated(p, memsnap_header(1) + mp("device_traces") + array_header(count), b"\x90", count, b"")


def msgpack_device(device):
    def make(folder, scale):
        p = os.path.join(folder, "msgpack_device_%d.msgpack" % device)
        data = memsnap_header(1) + mp("segments") + mp([segment(device)])
        open(p, "wb").write(data)
        return p, len(data)
    return make


# Valid events of 7 bytes: [action, +0, 0, 0, +0, -1] (memsnap writes address and time as
# deltas): 24 bytes each in memory, the densest a valid file gets. An allocation and its free,
# repeated; and allocations only (a million live at once, which replay and tune simulate).
def dense_trace(name, leak):
    def make(folder, scale):
        count = int(1_000_000 * scale)
        header = memsnap_header(1) + mp("device_traces") + array_header(1) + array_header(count)
        alloc, free_requested, free_completed = (b"\x96" + bytes([a]) + b"\x00\x00\x00\x00\xff" for a in (0, 1, 2))
        p = os.path.join(folder, name + ".msgpack.gz")
        if leak:
            return p, gz_repeated(p, header, alloc, count, b"")
        return p, gz_repeated(p, header, alloc + free_requested + free_completed, count // 3, alloc * (count % 3))
    return make


def gzip_two_members(sample):
    def make(folder, scale):
        raw = gzip.decompress(open(sample, "rb").read())
        p = os.path.join(folder, "gzip_two_members.pickle.gz")
        half = len(raw) // 2
        open(p, "wb").write(gzip.compress(raw[:half]) + gzip.compress(raw[half:]))
        return p, len(raw)
    return make


def build_cases(folder, scale, memsnap_sample, only=()):
    """Writes the inputs (those named in `only`, or all); returns [(name, path, decompressed bytes)]."""
    makers = {
        "json_empty_segments": json_empty_segments,
        "json_spaces": json_spaces,
        "json_huge_number": json_huge_number,
        "json_many_strings": json_many_strings,
        "pickle_dicts_gz": pickle_dicts_gz,
        "pickle_dicts_plain": pickle_dicts_plain,
        "pickle_nones": pickle_nones,
        "pickle_strings": pickle_strings,
        "msgpack_traces_gz": msgpack_traces_gz,
        "msgpack_device_134217728": msgpack_device(134_217_728),
        "msgpack_device_2147483647": msgpack_device(2**31 - 1),
        "msgpack_device_-5": msgpack_device(-5),
        "msgpack_dense_trace": dense_trace("msgpack_dense_trace", leak=False),
        "msgpack_dense_leak": dense_trace("msgpack_dense_leak", leak=True),
        "gzip_two_members": gzip_two_members(memsnap_sample),
    }
    cases = []
    for name, make in makers.items():
        if not only or name in only:
            cases.append((name,) + make(folder, scale))
    return cases


# ---------------------------------------------------------------- running


def commands(output):
    """The read-only commands, each as a function of the input path."""
    return {
        "stats": lambda f: ["stats", f],
        "flamegraph": lambda f: ["flamegraph", f, "-o", output + ".svg"],
        "folded": lambda f: ["folded", f],
        "segments": lambda f: ["segments", f, "-o", output + ".svg"],
        "timeline": lambda f: ["timeline", f, "-o", output + ".svg"],
        "trace": lambda f: ["trace", f, "-o", output + ".txt"],
        "replay": lambda f: ["replay", f],
        "tune": lambda f: ["tune", f],
        "growth": lambda f: ["growth", f],
        "ranks": lambda f: ["ranks", f],
        "compare": lambda f: ["compare", f, f, "-o", output + ".svg"],
        "explain-oom": lambda f: ["explain-oom", f],
        "convert": lambda f: ["convert", f, output + ".msgpack"],
    }


def run_limited(argv, as_bytes, timeout):
    """Runs argv under RLIMIT_AS; returns (status, stderr lines, peak RSS in bytes, seconds)."""

    def limit():
        if as_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (as_bytes, as_bytes))

    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=limit)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                return None, ["timed out"], usage.ru_maxrss * 1024, time.monotonic() - start
            time.sleep(0.01)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = err.read().decode(errors="replace").splitlines()
    return proc.returncode, lines, usage.ru_maxrss * 1024, time.monotonic() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("memsnap", nargs="?")
    parser.add_argument("--generate", metavar="DIR")
    parser.add_argument("--scale", type=float, default=None)
    parser.add_argument("--only", default="")
    parser.add_argument("--commands", default="")
    parser.add_argument("--sample", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                         "pytorch-2.11-h100", "transformer_s0.pickle.gz"))
    parser.add_argument("--tiny", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                       "pytorch-2.11-h100", "frag_oom.pickle"))
    parser.add_argument("--as-slack", type=int, default=192, help="MiB of address space mapped but not used")
    parser.add_argument("--no-limit", action="store_true", help="measure only, without RLIMIT_AS")
    parser.add_argument("--sanitizer", default="", help="the build's sanitizers: then only exit statuses and "
                        "error lines are checked (a sanitizer's shadow memory makes RSS and address space meaningless)")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args()
    if args.scale is None:
        args.scale = 0.25 if args.sanitizer else 1.0
    if args.generate:
        os.makedirs(args.generate, exist_ok=True)
        only = set(filter(None, args.only.split(",")))
        for name, path, size in build_cases(args.generate, args.scale, args.sample, only):
            print(f"{name:28} {os.path.getsize(path):>12,} bytes, {size:>14,} decompressed  {path}")
        return 0
    if not args.memsnap:
        parser.print_help()
        return 2
    only = set(filter(None, args.only.split(",")))
    problems, runs = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        output = os.path.join(scratch, "out")
        table = commands(output)
        wanted = [c for c in table if not args.commands or c in args.commands.split(",")]
        # Each command's own peak on a tiny snapshot: what the bound adds to 4x + 64 MiB.
        baseline = {}
        for command in wanted:
            status, lines, rss, _ = run_limited([args.memsnap] + table[command](args.tiny), 0, args.timeout)
            baseline[command] = rss
            if status != 0:
                problems.append(f"baseline {command}: exit status {status}: {lines[:2]}")
        for name, path, decompressed in build_cases(scratch, args.scale, args.sample, only):
            for command in wanted:
                if command == "tune" and name.startswith("msgpack_dense"):
                    continue  # a replay per setting of a million events: replay covers it, in a tenth of the time
                inputs = 2 if command == "compare" else 1  # it holds both snapshots
                bound = 4 * inputs * decompressed + 64 * MiB + baseline[command]
                # A replay simulates the allocator: each allocation live at once costs it about
                # 270 bytes, whatever the file spent on it. A valid trace of allocations only
                # is held to the address-space limit (a clean error), not to the bound.
                measured = not (name in UNBOUNDED_SIMULATION and command in SIMULATING)
                limit = 0 if args.no_limit or args.sanitizer else bound + args.as_slack * MiB
                status, lines, rss, seconds = run_limited([args.memsnap] + table[command](path), limit, args.timeout)
                runs += 1
                verdict = "ok"
                if status is None:
                    verdict = "timed out"
                elif status not in (0, 1):
                    verdict = f"exit status {status}: {lines[-3:]}"
                elif status == 1 and (len(lines) != 1 or not lines[0].startswith("memsnap: error: ")):
                    verdict = f"stderr not one error line: {lines[:3]}"
                elif rss > bound and measured and not args.sanitizer:
                    verdict = f"peak RSS {rss / MiB:.0f} MiB over the bound {bound / MiB:.0f} MiB"
                if verdict != "ok":
                    problems.append(f"{name} {command}: {verdict}")
                first = lines[0] if lines else ""
                print(f"{name:26} {command:11} exit {status}  {rss / MiB:8.1f} MiB (bound {bound / MiB:7.1f})"
                      f"  {seconds:5.2f} s  {first[:110]}", flush=True)
    print(f"{runs} runs, {len(problems)} problems")
    for problem in problems:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
