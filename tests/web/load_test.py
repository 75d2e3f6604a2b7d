#!/usr/bin/env python3
"""Bounded load test of memsnap serve on loopback: wrk drives several API routes and the UI
for a few seconds each with many connections (zero socket errors and zero non-2xx answers
allowed), then 200 upload/delete cycles check that the server's memory stays flat (20 under a sanitizer,
which checks the same paths while its allocator makes memory meaningless).

usage: load_test.py MEMSNAP SNAPSHOT [SECONDS_PER_ROUTE [SANITIZERS]]
(SANITIZERS: the build's -fsanitize list, when it has one: the memory check is skipped there)
"""
import http.client
import re
import shutil
import subprocess
import sys
import time


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    memsnap, snapshot = sys.argv[1], sys.argv[2]
    seconds = sys.argv[3] if len(sys.argv) > 3 else "3"
    # A sanitizer's allocator keeps freed memory in quarantine, so RSS says nothing about leaks
    # there (LeakSanitizer checks those); the growth check is the plain build's.
    sanitized = len(sys.argv) > 4 and sys.argv[4] != ""
    if not shutil.which("wrk"):
        print("SKIP: wrk is not installed (scripts/setup.sh installs it)")
        return 77
    server = subprocess.Popen([memsnap, "serve", "--port", "0", snapshot], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        line = server.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        if not match:
            print(f"FAIL: no URL from memsnap serve: {line!r}")
            return 1
        port = int(match.group(1))
        base = f"http://127.0.0.1:{port}"
        failed = False
        routes = ["/api/snapshots/1/flamegraph", "/api/snapshots/1/trace?limit=100&action=alloc",
                  "/api/snapshots/1/timeline", "/api/snapshots/1/stats", "/js/app.js"]
        print(f"{'route':50} {'requests/s':>11} {'p99 latency':>12}  errors")
        for route in routes:
            out = subprocess.run(["wrk", "-t2", "-c32", f"-d{seconds}s", "--latency", base + route],
                                 capture_output=True, text=True, timeout=int(seconds) + 60).stdout
            rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
            p99 = re.search(r"99%\s+(\S+)", out)
            errors = []
            for pattern in (r"Socket errors: .*", r"Non-2xx or 3xx responses: \d+"):
                found = re.search(pattern, out)
                if found:
                    errors.append(found.group(0))
            print(f"{route:50} {rate.group(1) if rate else '?':>11} {p99.group(1) if p99 else '?':>12}  "
                  f"{'; '.join(errors) or 'none'}")
            if errors or not rate:
                failed = True
                print(out)

        # Memory across repeated uploads and deletes: warm up, then 200 more cycles.
        with open(snapshot, "rb") as f:
            body = f.read()
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def cycle():
            connection.request("POST", "/api/snapshots?name=cycle", body, {"Content-Type": "application/octet-stream"})
            response = connection.getresponse()
            text = response.read().decode()
            if response.status != 201:
                raise RuntimeError(f"upload: {response.status} {text}")
            snapshot_id = re.search(r'"id":"(\d+)"', text).group(1)
            for view in ("flamegraph", "segments", "timeline", "stats"):
                connection.request("GET", f"/api/snapshots/{snapshot_id}/{view}")
                connection.getresponse().read()
            connection.request("DELETE", f"/api/snapshots/{snapshot_id}")
            response = connection.getresponse()
            response.read()
            if response.status != 204:
                raise RuntimeError(f"delete: {response.status}")

        for _ in range(20):
            cycle()
        # Under a sanitizer the memory is not measured (below): 20 more cycles check the same code
        # paths for the sanitizer, in a tenth of the time its unoptimized build needs for 200.
        cycles = 20 if sanitized else 200
        before = rss_kib(server.pid)
        start = time.time()
        for _ in range(cycles):
            cycle()
        after = rss_kib(server.pid)
        growth = after - before
        print(f"{cycles} upload/view/delete cycles of {len(body)} bytes in {time.time() - start:.1f} s: "
              f"RSS {before} KiB -> {after} KiB ({growth:+d} KiB)")
        if sanitized:
            print(f"RSS growth not checked: built with -fsanitize={sys.argv[4]} (its allocator quarantines freed memory)")
        elif growth > 16 * 1024:
            print("FAIL: memory grew by more than 16 MiB across uploads and deletes")
            failed = True
        return 1 if failed else 0
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
