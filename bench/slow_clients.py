#!/usr/bin/env python3
"""A normal request to `memsnap serve` while slow clients hold connections (issue 53, item 4).

    python3 bench/slow_clients.py MEMSNAP_SERVE SNAPSHOT [CLIENTS] [INTERVAL_S] [SECONDS]

Starts MEMSNAP_SERVE (build/cli/memsnap-serve) on SNAPSHOT, opens CLIENTS connections (40)
that each send a request line and then one header byte every INTERVAL_S seconds (4), then
times a normal request (/api/snapshots) every second for SECONDS seconds (30) and prints the
slowest, and how long the server kept the slow connections open.
"""
import random
import select
import socket
import subprocess
import sys
import threading
import time


def main():
    serve, snapshot = sys.argv[1], sys.argv[2]
    clients = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    interval = float(sys.argv[4]) if len(sys.argv) > 4 else 4.0
    seconds = float(sys.argv[5]) if len(sys.argv) > 5 else 30.0
    port = random.randint(20000, 60000)
    server = subprocess.Popen([serve, snapshot, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        normal_request(port)  # the snapshot loaded
        held = []
        stop = threading.Event()

        def slow_client():
            start = time.time()
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"GET /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                next_byte = time.time() + interval
                while not stop.is_set():
                    # Whatever the server says (a 408) is read; its closing ends the client.
                    if select.select([s], [], [], min(0.2, max(0.0, next_byte - time.time())))[0]:
                        if not s.recv(65536):
                            break
                    elif time.time() >= next_byte:
                        s.sendall(b"X")
                        next_byte += interval
                s.close()
            except OSError:
                pass
            held.append(time.time() - start)

        threads = [threading.Thread(target=slow_client, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        times = []
        end = time.time() + seconds
        while time.time() < end:
            times.append(normal_request(port, max(1.0, end - time.time())))
            time.sleep(max(0.0, 1.0 - (times[-1] or 1.0)))
        stop.set()
        for t in threads:
            t.join(timeout=interval + 5)
        held.sort()
        unanswered = sum(1 for t in times if t is None)
        answered = sorted(t for t in times if t is not None) or [float("nan")]
        print(f"{clients} slow clients (a byte every {interval:g} s), {len(times)} normal requests over {seconds:g} s: "
              f"{unanswered} not answered before the test ended; "
              f"slowest answered {answered[-1]:.3f} s, median {answered[len(answered) // 2]:.3f} s; "
              f"slow connections dropped by the server after {held[0]:.1f}-{held[-1]:.1f} s"
              + (" (still open when the test ended)" if held[-1] >= seconds else ""))
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print("the server did not stop within 10 s of SIGTERM (killed)")
            server.kill()
            server.wait()


def normal_request(port, timeout=60.0):
    """Seconds until the answer, None when none came within `timeout`."""
    start = time.time()
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"GET /api/snapshots HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        s.settimeout(max(0.01, start + timeout - time.time()))
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            s.close()
            return None
        if not chunk:
            break
        data += chunk
    s.close()
    if not data.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"normal request: {data[:100]!r}")
    return time.time() - start


if __name__ == "__main__":
    main()
