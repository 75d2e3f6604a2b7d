#!/usr/bin/env python3
"""Every memsnap command that writes a file, aimed at the places a careless writer damages:
a missing folder and a folder (one line, refused before any work), a FIFO and a link to it
(written through, still a FIFO), a link to a file (the link stays, the file it leads to is
replaced), links planted at the temporary names older writers used (never followed), and
'-' (standard output).

usage: output_paths.py MEMSNAP SNAPSHOT TRACE
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading

memsnap, snapshot, trace = sys.argv[1:4]

# (name, arguments before the output, how the output is named: "-o" or "positional")
COMMANDS = [
    ("stats", ["stats", snapshot], "-o"),
    ("stats --json", ["stats", snapshot, "--json"], "-o"),
    ("explain-oom", ["explain-oom", snapshot], "-o"),
    ("flamegraph", ["flamegraph", snapshot], "-o"),
    ("folded", ["folded", snapshot], "-o"),
    ("compare", ["compare", snapshot, snapshot], "-o"),
    ("segments", ["segments", snapshot], "-o"),
    ("timeline", ["timeline", snapshot], "-o"),
    ("trace", ["trace", snapshot, "--limit", "50"], "-o"),
    ("replay", ["replay", snapshot], "-o"),
    ("replay text trace", ["replay", trace], "-o"),
    ("tune", ["tune", snapshot], "-o"),
    ("growth", ["growth", snapshot], "-o"),
    ("ranks", ["ranks", snapshot, snapshot], "-o"),
    ("convert", ["convert", snapshot], "positional"),
]

failures = []


def check(name, condition, what):
    if not condition:
        failures.append(f"{name}: {what}")


def comparable(name, data):
    """The bytes to compare between two runs: tune's report says how long its replays took."""
    if name == "tune" and data is not None:
        return re.sub(rb"events in [0-9.]+ s\.", b"events in _ s.", data, count=1)
    return data


def run(arguments, output, style, timeout=120):
    command = [memsnap] + arguments
    if style == "-o":
        command += ["-o", output]
    else:
        command += [output, "--to", "json"]
    return subprocess.run(command, capture_output=True, timeout=timeout)


def one_line_error(name, result, wanted):
    check(name, result.returncode == 1, f"exit {result.returncode}, expected 1")
    lines = result.stderr.decode(errors="replace").strip().splitlines()
    check(name, len(lines) == 1 and lines[0].startswith("memsnap: error: cannot write"),
          f"expected one 'cannot write' line, got {lines}")
    check(name, wanted in result.stderr.decode(errors="replace"), f"no '{wanted}' in {lines}")


with tempfile.TemporaryDirectory(prefix="memsnap-outputs-") as folder:
    folder = pathlib.Path(folder)
    for name, arguments, style in COMMANDS:
        work = folder / name.replace(" ", "_")
        work.mkdir()

        # A plain new file: the reference for the writes below. '-' writes the same to
        # standard output (compare adds its summary there after the picture).
        result = run(arguments, str(work / "plain"), style)
        check(name, result.returncode == 0, f"exit {result.returncode}: {result.stderr[-300:]}")
        expected = comparable(name, (work / "plain").read_bytes() if (work / "plain").is_file() else b"?")
        check(name, len(expected) > 0, "an empty file")
        result = run(arguments, "-", style)
        check(name, result.returncode == 0 and comparable(name, result.stdout).startswith(expected),
              f"'-': exit {result.returncode}, standard output differs from the file")

        one_line_error(name + " (missing folder)", run(arguments, str(work / "missing" / "out"), style),
                       "does not exist")
        one_line_error(name + " (a folder)", run(arguments, str(work), style), "is a folder")
        (work / "dangling").symlink_to(work / "nowhere")
        one_line_error(name + " (link to nothing)", run(arguments, str(work / "dangling"), style),
                       "is a link to nothing")
        check(name, not (work / "nowhere").exists(), "a link to nothing was followed")

        # A link to a file: the link stays, the file it leads to gets the output.
        (work / "real").mkdir()
        (work / "real" / "target").write_bytes(b"old")
        (work / "link").symlink_to(work / "real" / "target")
        result = run(arguments, str(work / "link"), style)
        check(name, result.returncode == 0, f"link: exit {result.returncode}: {result.stderr[-300:]}")
        check(name, (work / "link").is_symlink(), "the link was replaced")
        check(name, comparable(name, (work / "real" / "target").read_bytes()) == expected, "the linked file differs from the plain file")

        # Links planted at the temporary names writers used (OUT.tmp.PID, OUT.tmp.PID.N) for
        # the next few process ids: none may be followed.
        victim = work / "victim"
        victim.write_bytes(b"precious")
        out = work / "out"
        next_pid = os.getpid() + 1
        for pid in range(next_pid, next_pid + 40):
            for planted in (f"out.tmp.{pid}", f"out.tmp.{pid}.1"):
                (work / planted).symlink_to(victim)
        result = run(arguments, str(out), style)
        check(name, result.returncode == 0, f"planted links: exit {result.returncode}")
        check(name, victim.read_bytes() == b"precious", "a planted link was followed")
        check(name, out.is_file() and not out.is_symlink() and comparable(name, out.read_bytes()) == expected,
              "the output differs from the plain file")
        leftovers = [p.name for p in work.iterdir() if ".memsnap-" in p.name]
        check(name, not leftovers, f"temporary files left: {leftovers}")

        # A FIFO, named and through a link: written through, still a FIFO.
        fifo = work / "fifo"
        os.mkfifo(fifo)
        (work / "to-fifo").symlink_to(fifo)
        for target in (fifo, work / "to-fifo"):
            received = []
            reader = threading.Thread(target=lambda: received.append(comparable(name, fifo.read_bytes())), daemon=True)
            reader.start()
            result = run(arguments, str(target), style)
            reader.join(timeout=60)
            check(name, result.returncode == 0, f"FIFO: exit {result.returncode}: {result.stderr[-300:]}")
            check(name, received == [expected], "the FIFO's reader got other bytes than the plain file")
            check(name, fifo.is_fifo(), "the FIFO was replaced")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print(f"{len(COMMANDS)} writers: refused paths, links, planted links, FIFOs and '-' as specified")
