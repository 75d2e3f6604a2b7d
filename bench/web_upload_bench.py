#!/usr/bin/env python3
"""Uploads a snapshot to two `memsnap serve` builds side by side, as the page's "Open snapshot"
does (POST /api/snapshots), and times each upload from its first byte sent to the server's
answer (the snapshot read and kept), rounds alternating, each upload deleted again. Prints the
medians, their ratio, and each server's peak memory over all its rounds.

usage: web_upload_bench.py MEMSNAP_BEFORE MEMSNAP_AFTER SNAPSHOT [--rounds N]
"""
import http.client
import re
import statistics
import subprocess
import sys
import time


def start(memsnap, upload_mb):
    server = subprocess.Popen([memsnap, "serve", "--port", "0", "--max-upload-mb", str(upload_mb)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(re.search(r":(\d+)/", server.stdout.readline()).group(1))
    return server, port


def upload(port, body):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    started = time.perf_counter()
    connection.request("POST", "/api/snapshots?name=upload", body=body,
                       headers={"Content-Type": "application/octet-stream"})
    response = connection.getresponse()
    answer = response.read()
    seconds = time.perf_counter() - started
    if response.status != 201:
        raise SystemExit(f"upload refused: {response.status} {answer[:200]!r}")
    snapshot_id = re.search(rb'"id":"(\d+)"', answer).group(1).decode()
    connection.request("DELETE", f"/api/snapshots/{snapshot_id}")
    connection.getresponse().read()
    connection.close()
    return seconds


def peak_mib(server):
    with open(f"/proc/{server.pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def main():
    args = sys.argv[1:]
    rounds = 11
    if "--rounds" in args:
        at = args.index("--rounds")
        rounds = int(args[at + 1])
        del args[at:at + 2]
    if len(args) != 3:
        print(__doc__)
        return 2
    before, after, snapshot = args
    with open(snapshot, "rb") as f:
        body = f.read()
    upload_mb = len(body) // (1 << 20) + 16
    servers = {"before": start(before, upload_mb), "after": start(after, upload_mb)}
    times = {"before": [], "after": []}
    try:
        for name in servers:  # one upload each first: page cache, allocator warm
            upload(servers[name][1], body)
        for r in range(rounds):
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                times[name].append(upload(servers[name][1], body))
        peaks = {name: peak_mib(server) for name, (server, _) in servers.items()}
    finally:
        for server, _ in servers.values():
            server.terminate()
            server.wait()
    size_mib = len(body) / (1 << 20)
    print(f"{snapshot} ({size_mib:.1f} MiB), {rounds} rounds, median upload to answer:")
    for name in servers:
        print(f"  {name:6s} {statistics.median(times[name]):.3f} s (range {min(times[name]):.3f} - "
              f"{max(times[name]):.3f} s), server peak {peaks[name]:.0f} MiB ({peaks[name] / size_mib:.2f}x the file)")
    print(f"  before / after: {statistics.median(times['before']) / statistics.median(times['after']):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
