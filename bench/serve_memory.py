#!/usr/bin/env python3
"""`memsnap serve`'s resident memory under distinct views and failed hostile uploads (issue 53, item 9).

    python3 bench/serve_memory.py MEMSNAP_SERVE SNAPSHOT [--views N] [--view Q] [--uploads N] [-- SERVER_ARGS...]

Starts MEMSNAP_SERVE (build/cli/memsnap-serve) on SNAPSHOT and prints its resident memory (RSS)
once the snapshot is loaded and its first views made, after N (59) distinct views (the query Q,
by default the timeline at 5000 samples of 2000 bands with roles and pools, each with one
sample more than the last, gzip accepted as a browser asks), then after each of N (3) uploads of
a hostile 128 KiB gzip that expands to 45M empty JSON objects (each refused), and once idle 5 s
after them. SERVER_ARGS go to the server (e.g. --cache-mb 64).
Make the 3M-event, 46.7 MiB demo snapshot with
    build/demo/memsnap-demo --steps 40000 --max-entries 3000000 --out /tmp/big3m.msgpack
"""
import argparse
import gzip
import http.client
import random
import subprocess
import sys
import time


def rss_mib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def main():
    args = sys.argv[1:]
    server_args = []
    if "--" in args:
        server_args = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    parser = argparse.ArgumentParser()
    parser.add_argument("serve")
    parser.add_argument("snapshot")
    parser.add_argument("--views", type=int, default=59)
    parser.add_argument("--view", default="timeline?bands=2000&roles=1&pools=1&samples={}")
    parser.add_argument("--first-sample", type=int, default=5000 - 59)
    parser.add_argument("--uploads", type=int, default=3)
    options = parser.parse_args(args)
    serve, snapshot, views, uploads = options.serve, options.snapshot, options.views, options.uploads
    port = random.randint(20000, 60000)
    server = subprocess.Popen([serve, snapshot, "--port", str(port), *server_args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:
            if "loaded" in line:
                break
            if "error" in line:
                raise RuntimeError(line)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)

        def get(path):
            connection.request("GET", path, headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{path}: {response.status}")

        get("/api/snapshots/1/stats")  # waits for the warm-up's first view
        time.sleep(3)  # the rest of the warm-up
        print(f"loaded, first views made: RSS {rss_mib(server.pid)[0]:.0f} MiB")
        start = time.time()
        for i in range(views):
            get("/api/snapshots/1/" + options.view.format(options.first_sample + i))
        rss, peak = rss_mib(server.pid)
        print(f"after {views} distinct views ({options.view}, {time.time() - start:.1f} s): "
              f"RSS {rss:.0f} MiB (peak {peak:.0f} MiB)")

        bomb = gzip.compress(b"[" + b"{}," * 45_000_000 + b"{}]", 9)
        for i in range(uploads):
            start = time.time()
            connection.request("POST", "/api/snapshots?name=bomb.json.gz", body=bomb,
                               headers={"Content-Type": "application/octet-stream"})
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            rss, peak = rss_mib(server.pid)
            print(f"hostile upload {i + 1} ({len(bomb) // 1024} KiB): {response.status} in {time.time() - start:.1f} s, "
                  f"RSS {rss:.0f} MiB (peak {peak:.0f} MiB) {body.strip()[:90]}")
        time.sleep(5)
        connection.close()  # the server has closed it (idle past its keep-alive); a new one
        get("/api/snapshots/1/stats")
        print(f"idle 5 s after the uploads, the snapshot still served: RSS {rss_mib(server.pid)[0]:.0f} MiB")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
