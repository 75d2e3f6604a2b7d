#!/usr/bin/env python3
"""The memsnap CLI on damaged files, as a user would meet them: each sample snapshot cut at
every byte offset (small files) or at 300 evenly spread offsets, with bytes flipped at random
(fixed seed), empty, and as absurd lengths; `replay` and `explain-oom` also run on a quarter
of the flipped files. Every run must end with exit status 0 (the damage
left a readable file) or 1 with exactly one line on stderr starting "memsnap: error: " — never
a crash, a hang (10 s limit) or a multi-line dump.

usage: hostile_files.py MEMSNAP SAMPLE...
"""
import os
import random
import subprocess
import sys
import tempfile


def check(memsnap, path, what, problems, command="stats"):
    try:
        run = subprocess.run([memsnap, command, path], capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        problems.append(f"{what}: hung")
        return
    errors = run.stderr.decode(errors="replace").splitlines()
    if run.returncode == 0:
        return
    if run.returncode != 1:
        problems.append(f"{what}: exit status {run.returncode}: {errors[:3]}")
    elif len(errors) != 1 or not errors[0].startswith("memsnap: error: "):
        problems.append(f"{what}: stderr not one error line: {errors[:3]}")


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    memsnap, samples = sys.argv[1], sys.argv[2:]
    # MEMSNAP_HOSTILE_SHARE (0-1] runs that share of the cuts and flips: scripts/sanitize.sh
    # uses a quarter, since every run under AddressSanitizer costs several times more.
    share = float(os.environ.get("MEMSNAP_HOSTILE_SHARE", "1"))
    if not 0 < share <= 1:
        print(f"MEMSNAP_HOSTILE_SHARE must be in (0, 1], not {share}")
        return 2
    spread, flips = max(1, int(300 * share)), max(1, int(100 * share))
    rng = random.Random(20261122)
    problems, runs = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        damaged = os.path.join(scratch, "damaged")
        for sample in samples:
            data = open(sample, "rb").read()
            name = os.path.basename(sample)
            cuts = range(len(data)) if len(data) <= spread else sorted({len(data) * i // spread for i in range(spread)})
            for cut in cuts:
                open(damaged, "wb").write(data[:cut])
                check(memsnap, damaged, f"{name} cut at {cut}", problems)
                runs += 1
            for flip in range(flips):
                mutated = bytearray(data)
                for _ in range(rng.randint(1, 4)):
                    mutated[rng.randrange(len(mutated))] ^= 1 << rng.randrange(8)
                open(damaged, "wb").write(mutated)
                check(memsnap, damaged, f"{name} flip #{flip}", problems)
                runs += 1
                if flip % 4 == 0:  # the commands that simulate from what they read
                    for command in ("replay", "explain-oom"):
                        check(memsnap, damaged, f"{name} flip #{flip} ({command})", problems, command)
                        runs += 1
        for what, content in (("empty file", b""), ("one NUL", b"\0"),
                              ("msgpack map of 2^32-1 entries", b"\xdf\xff\xff\xff\xff"),
                              ("msgpack str of 2^32-1 bytes", b"\xdb\xff\xff\xff\xff"),
                              ("pickle BINUNICODE8 of 2^63 bytes", b"\x80\x04\x8d" + b"\xff" * 7 + b"\x7f"),
                              ("gzip header only", b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"),
                              ("deeply nested JSON", b"[" * 100000),
                              ("deeply nested msgpack", b"\x91" * 100000)):
            open(damaged, "wb").write(content)
            check(memsnap, damaged, what, problems)
            runs += 1
    print(f"{runs} damaged inputs, {len(problems)} problems")
    for problem in problems[:20]:
        print("  " + problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
