#!/usr/bin/env python3
"""Times memsnap serve's API on a snapshot: each view's first answer (the analysis runs) and a
repeat (cached), with the bytes the browser receives; the budget is 100 ms per call once the
file is loaded. With --memory-viz PATH (PyTorch's torch/cuda/_memory_viz.py) and a PyTorch
pickle, also prints what PyTorch's trace_plot HTML makes the browser download for the same
snapshot, as a ratio against the largest single answer memsnap sends.

usage: web_api_bench.py MEMSNAP SNAPSHOT [--memory-viz PATH]
"""
import http.client
import re
import subprocess
import sys
import time


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__)
        return 2
    memsnap, snapshot = args[0], args[1]
    memory_viz = args[args.index("--memory-viz") + 1] if "--memory-viz" in args else None
    started = time.time()
    server = subprocess.Popen([memsnap, "serve", "--port", "0", snapshot, snapshot], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    try:
        port = int(re.search(r":(\d+)/", server.stdout.readline()).group(1))
        print(f"loaded {snapshot} twice in {time.time() - started:.2f} s")
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

        def get(path):
            start = time.perf_counter()
            connection.request("GET", path, headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
            body = response.read()
            return (time.perf_counter() - start) * 1000, response.status, len(body)

        routes = ["/api/snapshots", "/api/snapshots/1/stats", "/api/snapshots/1/flamegraph?kind=memory",
                  "/api/snapshots/1/flamegraph?kind=segments", "/api/snapshots/1/segments",
                  "/api/snapshots/1/segments/0/blocks/0", "/api/snapshots/1/stacks/0",
                  "/api/snapshots/1/timeline", "/api/snapshots/1/timeline?begin=1000&end=50000",
                  "/api/snapshots/1/trace?limit=100", "/api/snapshots/1/trace?action=alloc&min_size=1000000&offset=5000",
                  "/api/snapshots/1/trace?frame=optimizer&limit=100",
                  "/api/compare?before=2&after=1", "/api/snapshots/1/flamegraph.svg"]
        print(f"{'route':58} {'first ms':>9} {'repeat ms':>10} {'gzip bytes':>11}")
        worst, largest = 0.0, 0
        for route in routes:
            first, status, size = get(route)
            repeat, _, _ = get(route)
            worst = max(worst, first, repeat)
            largest = max(largest, size)
            print(f"{route:58} {first:9.1f} {repeat:10.1f} {size:11d}{'' if status == 200 else f'  status {status}'}")
        print(f"slowest call: {worst:.1f} ms (budget 100 ms); largest answer {largest} bytes")
        if memory_viz:
            html = subprocess.run([sys.executable, "-c", (
                "import sys, pickle, gzip\n"
                f"sys.path.insert(0, {memory_viz.rsplit('/', 1)[0]!r})\n"
                "from _memory_viz import trace_plot\n"
                f"path = {snapshot!r}\n"
                "data = pickle.load(gzip.open(path) if path.endswith('.gz') else open(path, 'rb'))\n"
                "sys.stdout.write(trace_plot(data))\n")], capture_output=True, text=True)
            if html.returncode == 0:
                size = len(html.stdout.encode())
                print(f"PyTorch trace_plot HTML: {size} bytes, all of it before anything shows "
                      f"(and its viewer code from a CDN); memsnap's largest answer: {largest} bytes; "
                      f"ratio {size / max(largest, 1):.1f}x")
            else:
                print(f"PyTorch trace_plot failed: {html.stderr.strip().splitlines()[-1:]}")
        return 0
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
