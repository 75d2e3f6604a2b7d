"""History through PyTorch's own API and memsnap's: Python frames (file, line, function) in
call order with C++ frames, snapshots PyTorch's tools and memsnap's viewer both read."""
import json
import os
import pickle
import subprocess
import sys
import threading
import warnings

import pytest
import torch

from conftest import memsnap_cli, run_python

HERE = os.path.abspath(__file__)


def allocate_here():
    return torch.empty(5 * 1024 * 1024 + 4096, dtype=torch.uint8, device="cuda"), sys._getframe().f_lineno


def frames_of_block(snapshot, address):
    for segment in snapshot["segments"]:
        for block in segment["blocks"]:
            if block["address"] == address:
                return block["frames"]
    raise AssertionError(f"no block at {address:#x}")


def test_record_memory_history_python_stacks_name_this_file_and_line(memsnap_torch):
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=10000)
    try:
        tensor, line = allocate_here()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    frames = frames_of_block(snapshot, tensor.data_ptr())
    assert frames[0] == {"filename": HERE, "line": line, "name": "allocate_here"}
    assert frames[1]["name"] == "test_record_memory_history_python_stacks_name_this_file_and_line"
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc" and e["addr"] == tensor.data_ptr()]
    assert allocs and allocs[-1]["frames"][0]["line"] == line
    assert snapshot["device_traces"][0][-1]["time_us"] > 1.6e15  # Unix microseconds, as PyTorch's


def test_all_stacks_put_python_frames_in_call_order_among_cpp_frames(memsnap_torch):
    memsnap_torch.record_history("all", "all", 10000)
    try:
        tensor, line = allocate_here()
        snapshot = memsnap_torch.snapshot()
    finally:
        memsnap_torch.record_history("off", "none", 1)
    frames = frames_of_block(snapshot, tensor.data_ptr())
    names = [f["name"] for f in frames]
    mine = names.index("allocate_here")
    assert frames[mine]["line"] == line and frames[mine]["filename"] == HERE
    assert any("empty" in n for n in names[:mine]), names[:mine]  # PyTorch's C++ below it
    assert names[mine + 1] == "test_all_stacks_put_python_frames_in_call_order_among_cpp_frames"
    assert not any(n.startswith("_PyEval_EvalFrameDefault") for n in names), "loop frames are replaced"
    assert not any(n.startswith("memsnap::") for n in names)
    # The C++ walk ends at the innermost Python frame: CPython calling itself through C
    # between pytest's frames is not walked.
    python_file = lambda name: name.endswith(".py") or name.startswith("<frozen ")  # noqa: E731
    outer = [f"{f['name']} {f['filename']}" for f in frames[mine:] if not python_file(f["filename"])]
    assert not outer, outer


def test_dump_snapshot_is_read_by_memory_viz_and_by_memsnap(memsnap_torch, tmp_path):
    torch.cuda.memory._record_memory_history(max_entries=10000)
    try:
        kept = [torch.empty(n * 1024 * 1024, dtype=torch.uint8, device="cuda") for n in (1, 3, 25)]
        del kept[1]
        pickle_path = str(tmp_path / "snap.pickle")
        torch.cuda.memory._dump_snapshot(pickle_path)
        msgpack_path = str(tmp_path / "snap.msgpack")
        memsnap_torch.dump_snapshot(msgpack_path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    with open(pickle_path, "rb") as f:
        loaded = pickle.load(f)
    assert set(loaded) >= {"segments", "device_traces", "allocator_settings", "external_annotations"}
    viz = [sys.executable, "-m", "torch.cuda._memory_viz"]
    for command in (["stats", pickle_path], ["trace_plot", pickle_path, "-o", str(tmp_path / "t.html")],
                    ["segment_plot", pickle_path, "-o", str(tmp_path / "s.html")]):
        done = subprocess.run(viz + command, capture_output=True, text=True)
        assert done.returncode == 0, (command, done.stderr[-2000:])
    cli = memsnap_cli()
    for path in (pickle_path, msgpack_path):
        done = subprocess.run([cli, "stats", path, "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)
    done = subprocess.run([cli, "trace", msgpack_path, "--stacks", "--action", "alloc"], capture_output=True, text=True)
    assert done.returncode == 0 and "test_history.py" in done.stdout


def test_annotations_reach_the_trace(memsnap_torch):
    memsnap_torch.record_history("all", "none", 1000)
    try:
        with memsnap_torch.annotate("phase one"):
            x = torch.empty(1024, device="cuda")
        snapshot = memsnap_torch.snapshot()
    finally:
        memsnap_torch.record_history("off", "none", 1)
    stages = [(a["name"], a["stage"]) for a in snapshot["external_annotations"]]
    assert ("phase one", "START") in stages and ("phase one", "END") in stages
    del x


def test_history_off_captures_nothing(memsnap_torch):
    memsnap_torch.record_history("off", "none", 1)
    assert memsnap_torch.history_settings()["level"] == "off"
    before = len(memsnap_torch.snapshot()["device_traces"][0])
    torch.empty(1024, device="cuda")
    assert len(memsnap_torch.snapshot()["device_traces"][0]) == before


def test_pytorch_api_tells_of_the_entry_cap_when_recording_starts_not_when_it_stops(memsnap_torch):
    with pytest.warns(UserWarning, match="trace entries per device"):
        torch.cuda.memory._record_memory_history()  # max_entries left at PyTorch's sys.maxsize
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.cuda.memory._record_memory_history(enabled=None)
    assert memsnap_torch.history_settings()["level"] == "off"


def test_turning_history_off_leaves_no_record_function_callback(memsnap_torch):
    # PyTorch's API records record_function annotations through a RecordFunction callback,
    # which then runs at every operator: it must go when history does (pytorch/pytorch #153571).
    from torch.utils.cpp_extension import load_inline

    probe = load_inline(
        "memsnap_record_function_probe",
        cpp_sources="#include <ATen/record_function.h>\n"
        "bool callbacks() { return at::hasCallbacks(); }",
        functions=["callbacks"],
    )
    torch.cuda.memory._record_memory_history(max_entries=1000)
    assert probe.callbacks()  # (the probe sees the callback)
    torch.cuda.memory._record_memory_history(enabled=None)
    assert not probe.callbacks()
    memsnap_torch.record_history(max_entries=1000)
    assert probe.callbacks()  # memsnap's own, for record_function ranges
    memsnap_torch.record_history("off")
    assert not probe.callbacks()


def test_record_function_ranges_are_annotations_once_through_either_api(memsnap_torch):
    apis = {
        "memsnap": (lambda: memsnap_torch.record_history("all", "none", 1000, clear=True),
                    lambda: memsnap_torch.record_history("off", "none", 1)),
        "pytorch": (lambda: torch.cuda.memory._record_memory_history(max_entries=1000, clear_history=True),
                    lambda: torch.cuda.memory._record_memory_history(enabled=None)),
    }
    for api, (start, stop) in apis.items():
        start()
        try:
            with torch.profiler.record_function("phase two"):
                x = torch.empty(1024, device="cuda")
            worker = threading.Thread(target=in_worker_range)
            worker.start()
            worker.join()
            snapshot = memsnap_torch.snapshot()
        finally:
            stop()
        assert annotation_stages(snapshot, "phase two") == ["START", "END"], api
        # PyTorch's callback is the calling thread's; memsnap's takes every thread's ranges.
        expected = ["START", "END"] if api == "memsnap" else []
        assert annotation_stages(snapshot, "worker range") == expected, api
        del x


def test_growth_takes_profiler_steps_recorded_through_memsnaps_api(memsnap_torch, tmp_path):
    # torch.profiler's steps (ProfilerStep#N ranges) are what `memsnap growth` counts steps by.
    cli = memsnap_cli()
    kept = []
    memsnap_torch.record_history("all", "python", 100000, clear=True)
    try:
        # (Only a profiler with a schedule names its steps.)
        schedule = torch.profiler.schedule(wait=1, warmup=1, active=2)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule) as profiler:
            for _ in range(6):
                kept.append(torch.empty(1 << 20, dtype=torch.uint8, device="cuda"))  # 1 MiB a step, kept
                scratch = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
                del scratch
                profiler.step()
        path = str(tmp_path / "steps.msgpack")
        memsnap_torch.dump_snapshot(path)
    finally:
        memsnap_torch.record_history("off", "none", 1)
    done = subprocess.run([cli, "growth", path, "--json"], capture_output=True, text=True, check=True)
    growth = json.loads(done.stdout)
    assert growth["steps_from"] == "annotation 'ProfilerStep#'", growth
    assert len(growth["step_events"]) >= 6, growth
    leak = growth["sites"][0]
    assert "test_history.py" in leak["label"] and leak["bytes_per_step"] == 1 << 20, growth


def annotation_stages(snapshot, name):
    return [a["stage"] for a in snapshot["external_annotations"] if a["name"] == name]


def in_worker_range():
    with torch.profiler.record_function("worker range"):
        torch.empty(2048, device="cuda")


# A GPT-2 training step recorded with Python stacks; prints, for every allocation of the trace,
# the innermost frame of its forward call ("file:line") or None. PyTorch's allocator gives
# backward allocations forward frames only under anomaly mode; memsnap's without it.
FORWARD_FRAMES = """
import json, os, sys, torch
memsnap = os.environ["USE_MEMSNAP"] == "1"
if memsnap:
    import memsnap.torch
    memsnap.torch.install()
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=4096)).cuda()
x = torch.randint(0, 4096, (2, 64), device="cuda")
model(x, labels=x).loss.backward()  # warm-up: the same allocations in both runs afterwards
torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
with torch.autograd.set_detect_anomaly(not memsnap, check_nan=False):
    loss = model(x, labels=x).loss
loss.backward()
torch.cuda.synchronize()
snapshot = torch.cuda.memory._snapshot()
def innermost(entry):
    lines = entry.get("forward_frames") or []
    if not lines:
        return None
    text = lines[-1].strip().splitlines()[0]  # '  File "f.py", line 12, in forward'
    file = text.split('"')[1].rsplit("/", 1)[-1]
    return file + ":" + text.split(", line ")[1].split(",")[0]
allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
print(json.dumps({"sizes": [e["size"] for e in allocs], "forward": [innermost(e) for e in allocs],
                  "python": [bool(e["frames"]) for e in allocs]}))
"""


def test_backward_allocations_carry_their_forward_call_as_pytorch_anomaly_mode_does():
    pytorch = run_python(FORWARD_FRAMES, env={"USE_MEMSNAP": "0"})
    memsnap = run_python(FORWARD_FRAMES, env={"USE_MEMSNAP": "1"})
    assert memsnap["sizes"] == pytorch["sizes"], "the same allocations on both allocators"
    # The allocations PyTorch links to a forward call: those of the backward pass.
    linked = [i for i, f in enumerate(pytorch["forward"]) if f is not None]
    assert len(linked) > 20, pytorch["forward"]
    same = [i for i in linked if memsnap["forward"][i] == pytorch["forward"][i]]
    differ = [(i, pytorch["forward"][i], memsnap["forward"][i]) for i in linked if i not in same]
    print(f"forward frames: {len(same)} of {len(linked)} backward allocations name PyTorch's forward call; "
          f"differing: {differ[:10]}")
    assert len(same) >= 0.9 * len(linked), differ
    # Forward allocations have frames of their own and no forward call.
    for i, has_python in enumerate(memsnap["python"]):
        if has_python:
            assert memsnap["forward"][i] is None, i
    assert any("modeling_gpt2.py" in f for f in (memsnap["forward"][i] for i in linked) if f)


def test_backward_stacks_read_in_memsnap_through_the_joining_frame(memsnap_torch, tmp_path):
    memsnap_torch.record_history(stacks="all", max_entries=100000, clear=True)
    try:
        layer = torch.nn.Linear(512, 512).cuda()
        out = layer(torch.randn(256, 512, device="cuda"))  # the forward call
        forward_line = sys._getframe().f_lineno - 1
        out.square().sum().backward()
        path = str(tmp_path / "backward.msgpack")
        memsnap_torch.dump_snapshot(path)
        snapshot = torch.cuda.memory._snapshot()
    finally:
        memsnap_torch.record_history("off", "none", 1)
    linked = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc" and e.get("forward_frames")]
    assert linked, "backward allocations carry forward_frames"
    here = f'File "{HERE}", line {forward_line}, in test_backward_stacks_read_in_memsnap_through_the_joining_frame'
    assert any(here in line for e in linked for line in e["forward_frames"]), linked[0]["forward_frames"]
    # stacks="all": the backward thread's C++ frames come first, as PyTorch's "frames".
    assert any("autograd" in f["name"] for e in linked for f in e["frames"]), linked[0]["frames"][:5]
    done = subprocess.run([memsnap_cli(), "trace", path, "--stacks", "--action", "alloc"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "<autograd backward>" in done.stdout and f"test_history.py:{forward_line}" in done.stdout


def test_code_objects_that_die_and_whose_addresses_are_reused_keep_their_own_names(memsnap_torch):
    """Functions made and dropped one after another: a new code object often takes a freed
    one's address, and each allocation must still name the function that made it."""
    torch.cuda.memory._record_memory_history(stacks="python", max_entries=100000)
    tensors = []
    try:
        for i in range(200):
            namespace = {"torch": torch}
            exec(compile(f"def made_{i}():\n    return torch.empty(4096 + {i}, device='cuda')\n",
                         f"<made {i}>", "exec"), namespace)
            tensors.append((i, namespace[f"made_{i}"]()))
            del namespace  # the function and its code object die here
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    allocs = {e["addr"]: e for e in snapshot["device_traces"][0] if e["action"] == "alloc"}
    for i, tensor in tensors:
        frames = allocs[tensor.data_ptr()]["frames"]
        assert frames[0]["name"] == f"made_{i}" and frames[0]["filename"] == f"<made {i}>", frames[0]
