"""memsnap reads what memsnap.estimate.capture writes (python/src/memsnap/estimate.py, which needs
torch and a GPU, so this builds a file of the same layout): a _dump_snapshot-style pickle with no
segments, each alloc's frames led by the operation's name with no file, frees with no frames,
and "estimate step N" annotations around each step. The replay (and memsnap estimate) must take every request as
given, find the peak the capture implies, run out of memory on a device too small for it, and
name the Python frame (not the operation) as an allocation's call site; and it must not claim
that the replay fails to reproduce recorded segments, since none were recorded.

Real PyTorch pickles (segments older than their trace, wrapped traces, CUDA-graph pools) given
after WORK_DIR must never be taken for such a capture.

    estimate_capture_replay.py MEMSNAP WORK_DIR [REAL_PICKLE ...]
"""
import json
import os
import pickle
import subprocess
import sys

MIB = 1 << 20


class Capture:
    def __init__(self):
        self.trace, self.annotations = [], []
        self.clock, self.address = 0, 1 << 44
        self.live = {}
        self.now_bytes = self.peak = 0

    def tick(self):
        self.clock += 1
        return self.clock

    def alloc(self, size, op, function, line):
        address = self.address
        self.address += size + (2 << 20)
        frames = [{"filename": "", "line": 0, "name": op},
                  {"filename": "/work/model.py", "line": line, "name": function},
                  {"filename": "/work/train.py", "line": 40, "name": "<module>"}]
        self.trace.append({"action": "alloc", "addr": address, "size": size, "stream": 0,
                           "time_us": self.tick(), "frames": frames})
        self.live[address] = size
        self.now_bytes += size
        self.peak = max(self.peak, self.now_bytes)
        return address

    def free(self, address):
        size = self.live.pop(address)
        self.now_bytes -= size
        now = self.tick()
        for action in ("free_requested", "free_completed"):
            self.trace.append({"action": action, "addr": address, "size": size, "stream": 0,
                               "time_us": now, "frames": []})

    def annotate(self, name, stage):
        self.annotations.append({"device": 0, "stage": stage, "name": name, "time_us": self.tick()})


def build():
    capture = Capture()
    parameters = [capture.alloc(64 * MIB, "aten::empty", "setup", 8) for _ in range(4)]
    state = []
    for step in range(1, 4):
        capture.annotate(f"estimate step {step}", "START")
        activations = [capture.alloc(32 * MIB + 512 * i, "aten::mm", "forward", 12) for i in range(4)]
        scratch = capture.alloc(3072, "aten::sum", "forward", 13)  # the small pool
        capture.free(scratch)
        gradients = [capture.alloc(64 * MIB, "aten::mm", "backward", 0) for _ in parameters]
        for address in reversed(activations):
            capture.free(address)
        if not state:
            state = [capture.alloc(64 * MIB, "aten::zeros_like", "step", 20) for _ in range(8)]
        for address in gradients:
            capture.free(address)
        capture.annotate(f"estimate step {step}", "END")
    snapshot = {"segments": [], "device_traces": [capture.trace],
                "external_annotations": capture.annotations, "allocator_settings": {}}
    return snapshot, capture.peak


def run(*args):
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def main():
    memsnap, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "estimate_capture.pickle")
    snapshot, peak = build()
    with open(path, "wb") as out:
        pickle.dump(snapshot, out)
    failures = []

    code, out, err = run(memsnap, "replay", path, "--capacity-gib", "80", "--json")
    if code != 0:
        sys.exit(f"FAILED: replay exited {code}: {err}")
    device = json.loads(out)["devices"][0]
    if device["peak_requested_bytes"] != peak:
        failures.append(f"peak requested {device['peak_requested_bytes']}, the capture implies {peak}")
    if not peak <= device["peak_allocated_bytes"] <= device["peak_reserved_bytes"]:
        failures.append(f"allocated {device['peak_allocated_bytes']} / reserved {device['peak_reserved_bytes']}"
                        f" not at or above the capture's peak {peak}")
    if device["num_ooms"] or device["failed_allocs"]:
        failures.append(f"out of memory on 80 GiB: {device}")

    if not device.get("records_requests_only"):
        failures.append("the replay does not say the trace records requests only")
    code, out, err = run(memsnap, "replay", path, "--capacity-gib", "80")
    if code != 0 or "does NOT reproduce" in out or "nothing is compared" not in out:
        failures.append(f"the text report compares with segments that were never recorded:\n{out}{err}")

    small = (peak - 64 * MIB) / (1 << 30)  # a device that cannot hold the peak
    code, out, err = run(memsnap, "replay", path, "--capacity-gib", f"{small:.4f}", "--json")
    if code != 0:
        failures.append(f"replay on {small:.4f} GiB exited {code}: {err}")
    elif json.loads(out)["devices"][0]["num_ooms"] < 1:
        failures.append(f"no out-of-memory error on {small:.4f} GiB for a {peak / MIB:.0f} MiB peak")

    code, out, err = run(memsnap, "trace", path)
    sites = [line for line in out.splitlines() if " alloc " in line]
    if code != 0 or not sites or not all("(model.py" in line for line in sites):
        failures.append("trace does not name model.py as each allocation's site:\n" + "\n".join(sites[:3]) + err)

    code, out, err = run(memsnap, "growth", path)
    if code != 0 or "cannot judge" not in out.lower():
        failures.append(f"growth over 3 steps should say it cannot judge (exit {code}):\n{out}{err}")

    # memsnap estimate: the same capture on a device that holds it and on one that does not.
    code, out, err = run(memsnap, "estimate", path, "--capacity-gib", "80", "--json")
    if code != 0:
        failures.append(f"estimate on 80 GiB exited {code}: {err}")
    else:
        fit = json.loads(out)
        names = [step["name"] for step in fit["steps"]]
        if not fit["fits"] or names != ["setup", "estimate step 1", "estimate step 2", "estimate step 3"]:
            failures.append(f"estimate on 80 GiB: fits {fit['fits']}, steps {names}")
        if fit["peak_allocated_bytes"] != device["peak_allocated_bytes"]:
            failures.append(f"estimate's peak {fit['peak_allocated_bytes']} is not replay's {device['peak_allocated_bytes']}")
        if fit["tune"] is None or fit["tune"]["verdict"] not in ("keep", "change"):
            failures.append(f"estimate on 80 GiB ranks no settings: {fit['tune_error']}")
    code, out, err = run(memsnap, "estimate", path, "--capacity-gib", f"{small:.4f}")
    first = out.splitlines()[0] if out else ""
    if code != 0 or not first.startswith("Does not fit") or "(model.py" not in first:
        failures.append(f"estimate on {small:.4f} GiB should say where it runs out (exit {code}):\n{out}{err}")
    for arguments, message in ((["--device", "A100"], "unknown device 'A100'"),
                               ([], "say which device"),
                               (["--capacity-gib", "1", "--steps", "2"], "--steps, --batch-sizes and --save are for a SCRIPT.py")):
        code, out, err = run(memsnap, "estimate", path, *arguments)
        if code != 1 or message not in err or err.count("\n") != 1:
            failures.append(f"estimate {arguments}: exit {code}, want one line with '{message}':\n{err}")
    script = os.path.join(work, "train.py")
    with open(script, "w") as out_file:
        out_file.write("def step():\n    pass\n")
    done = subprocess.run([memsnap, "estimate", script, "--capacity-gib", "1"], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, MEMSNAP_PYTHON=os.path.join(work, "no-such-python")))
    if done.returncode != 1 or "cannot run" not in done.stderr or "MEMSNAP_PYTHON" not in done.stderr:
        failures.append(f"a script without a Python to capture it: exit {done.returncode}:\n{done.stderr}")

    replayed_real = 0
    for real in sys.argv[3:]:
        code, out, err = run(memsnap, "replay", real, "--json")
        if code != 0:
            continue  # a pickle replay cannot take (no trace) says so elsewhere; nothing to classify
        replayed_real += 1
        if any(d.get("records_requests_only") for d in json.loads(out)["devices"]):
            failures.append(f"{os.path.basename(real)}: a real recording taken for a capture of requests")

    if sys.argv[3:] and replayed_real * 2 < len(sys.argv[3:]):
        failures.append(f"only {replayed_real} of {len(sys.argv) - 3} real pickles replayed")

    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print(f"ok: peak {peak / MIB:.1f} MiB replayed, reserved {device['peak_reserved_bytes'] / MIB:.0f} MiB;"
          f" {replayed_real} real recordings not taken for captures")


if __name__ == "__main__":
    main()
