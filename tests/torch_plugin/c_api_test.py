#!/usr/bin/env python3
"""libmemsnap_torch.so's C entry points through ctypes, as a PyTorch script calls them, on the
simulated device (MEMSNAP_BACKEND=simulated; no GPU or PyTorch needed). The snapshot it dumps
must be readable by `memsnap` and hold the allocations made through the entry points.

usage: c_api_test.py LIBMEMSNAP_TORCH MEMSNAP_BINARY
"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile


def main():
    library_path, memsnap = sys.argv[1], sys.argv[2]
    os.environ["MEMSNAP_BACKEND"] = "simulated"
    os.environ["MEMSNAP_ALLOC_CONF"] = "max_split_size_mb:64"
    lib = ctypes.CDLL(library_path)
    lib.memsnap_torch_malloc.restype = ctypes.c_void_p
    lib.memsnap_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.memsnap_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.memsnap_torch_record_history.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    lib.memsnap_torch_dump_snapshot.argtypes = [ctypes.c_char_p]
    lib.memsnap_torch_stat.restype = ctypes.c_int64
    lib.memsnap_torch_stat.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.memsnap_torch_last_error.restype = ctypes.c_char_p
    lib.memsnap_torch_memory_summary.restype = ctypes.c_char_p
    lib.memsnap_torch_memory_summary.argtypes = [ctypes.c_int]

    failures = []

    def check(condition, what):
        if not condition:
            failures.append(what)

    check(lib.memsnap_torch_record_history(b"all", 10000, 1) == 0, "record_history all")
    check(lib.memsnap_torch_record_history(b"sometimes", 10, 1) == -1, "bad level refused")
    check(b"unknown history level" in lib.memsnap_torch_last_error(), "bad level message")

    sizes = [4096, 3 << 20, 25 << 20, 700, 1 << 30]
    pointers = [lib.memsnap_torch_malloc(size, 0, None) for size in sizes]
    check(all(pointers) and len(set(pointers)) == len(pointers), "distinct allocations")
    check(lib.memsnap_torch_malloc(0, 0, None) is None, "zero bytes give a null pointer")
    allocated = lib.memsnap_torch_stat(b"allocated_bytes.all.current", 0)
    check(allocated >= sum(sizes), f"allocated_bytes.all.current {allocated}")
    check(lib.memsnap_torch_stat(b"no.such.stat", 0) == -1, "unknown stat is -1")
    check(lib.memsnap_torch_stat(b"allocated_bytes.all.current", 7) == -1, "unknown device is -1")
    lib.memsnap_torch_free(pointers[1], sizes[1], 0, None)
    check(b"Allocated memory" in lib.memsnap_torch_memory_summary(0), "memory summary")

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "plugin.msgpack")
        check(lib.memsnap_torch_dump_snapshot(path.encode()) == 0,
              "dump_snapshot: " + lib.memsnap_torch_last_error().decode())
        bad = os.path.join(folder, "missing", "x.msgpack")
        check(lib.memsnap_torch_dump_snapshot(bad.encode()) == -1, "dump into a missing folder fails")
        check(lib.memsnap_torch_dump_snapshot_on_oom(os.path.join(folder, "oom_{n}.msgpack").encode()) == 0,
              "dump_snapshot_on_oom")
        stats = json.loads(subprocess.run([memsnap, "stats", "--json", path], check=True,
                                          capture_output=True, text=True).stdout)
        actions = stats["trace_actions"]
        check(actions.get("alloc") == 5 and actions.get("free_requested") == 1,
              f"five allocs and one free in the trace: {actions}")
        check(stats["allocated_bytes"] >= sum(sizes) - sizes[1], "the snapshot holds the live blocks")
        # The blocks were allocated from Python through libffi: their C++ stacks reach it.
        folded = subprocess.run([memsnap, "folded", path], check=True, capture_output=True,
                                text=True).stdout
        check(folded.count("\n") >= 4 and "ffi" in folded, "C++ stacks of the allocations: " + folded[:300])

    check_recording_environment(library_path, memsnap, check)

    for p in pointers:
        if p and p != pointers[1]:
            lib.memsnap_torch_free(p, 0, 0, None)
    check(lib.memsnap_torch_stat(b"allocated_bytes.all.current", 0) == 0, "everything freed")
    check(lib.memsnap_torch_empty_cache() == 0, "empty_cache")
    check(lib.memsnap_torch_stat(b"reserved_bytes.all.current", 0) == 0, "nothing reserved after empty_cache")
    check(lib.memsnap_torch_reset_peak_stats(0) == 0, "reset_peak_stats")

    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("libmemsnap_torch C API: all checks passed")
    return 0


# A child process: the library with MEMSNAP_* recording variables set, as a script run with them.
CHILD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.memsnap_torch_malloc.restype = ctypes.c_void_p
lib.memsnap_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.memsnap_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
lib.memsnap_torch_last_error.restype = ctypes.c_char_p
if lib.memsnap_torch_empty_cache() != 0:
    print(lib.memsnap_torch_last_error().decode())
    sys.exit(3)
a = lib.memsnap_torch_malloc(1 << 20, 0, None)
b = lib.memsnap_torch_malloc(5 << 20, 0, None)
lib.memsnap_torch_free(a, 0, 0, None)
"""


def check_recording_environment(library_path, memsnap, check):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "at_exit.msgpack")
        environment = dict(os.environ, MEMSNAP_HISTORY="all", MEMSNAP_SNAPSHOT_AT_EXIT=path)
        run = subprocess.run([sys.executable, "-c", CHILD, library_path], env=environment,
                             capture_output=True, text=True)
        check(run.returncode == 0, f"a child with MEMSNAP_HISTORY=all: {run.stdout}{run.stderr}")
        if os.path.exists(path):
            stats = json.loads(subprocess.run([memsnap, "stats", "--json", path], check=True,
                                              capture_output=True, text=True).stdout)
            actions = stats["trace_actions"]
            check(actions.get("alloc") == 2 and actions.get("free_requested") == 1,
                  f"the at-exit snapshot holds the child's history: {actions}")
        else:
            check(False, "MEMSNAP_SNAPSHOT_AT_EXIT written at exit")
        bad = dict(os.environ, MEMSNAP_HISTORY="sometimes")
        run = subprocess.run([sys.executable, "-c", CHILD, library_path], env=bad,
                             capture_output=True, text=True)
        check(run.returncode == 3 and "MEMSNAP_HISTORY=sometimes" in run.stdout,
              f"a bad MEMSNAP_HISTORY is an error naming it: {run.returncode} {run.stdout}{run.stderr}")


if __name__ == "__main__":
    sys.exit(main())
