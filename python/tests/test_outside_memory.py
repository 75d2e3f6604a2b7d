"""Memory outside the allocator, recorded in process while history is (outside_memory.h): other
libraries' device memory and pinned host memory, with the library and the Python frames that
asked, and the CUDA context as the remainder. Each test runs in a fresh process: CUPTI takes one
subscriber per process."""
import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from conftest import memsnap_cli, run_python

MiB = 1 << 20


def keep(path):
    """Copies a snapshot to MEMSNAP_TEST_KEEP, when set (bench/gpu/outside_memory_runs.sh)."""
    folder = os.environ.get("MEMSNAP_TEST_KEEP")
    if folder and os.path.exists(path):
        shutil.copy(path, os.path.join(folder, os.path.basename(path)))


def cli_json(*args):
    done = subprocess.run([memsnap_cli(), *args, "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def snapshot_json(path, tmp_path):
    """The snapshot with its frames written out (memsnap convert to .json)."""
    out = tmp_path / "snapshot.json"
    done = subprocess.run([memsnap_cli(), "convert", str(path), str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def frames_text(record):
    return " | ".join(f"{f.get('name')} {f.get('filename')}:{f.get('line')}" for f in record.get("frames", []))


def test_another_librarys_cuda_malloc_is_recorded_with_its_library_and_python_frames(tmp_path):
    cupy = pytest.importorskip("cupy")
    del cupy
    path = tmp_path / "cupy.msgpack"
    pickle_path = tmp_path / "cupy.pickle"
    dict_path = tmp_path / "cupy-dict.pickle"
    result = run_python(f"""
        import json, memsnap.torch
        memsnap.torch.install()
        import torch, cupy
        memsnap.torch.record_history("all", stacks="all")
        status = memsnap.torch.outside_memory_status()
        cupy.cuda.set_allocator(None)  # no pool: each array is one cudaMalloc
        def make_outside_array():
            return cupy.empty(256 << 20, dtype=cupy.uint8)
        held = make_outside_array()
        pinned = torch.empty(64 << 20, dtype=torch.uint8, pin_memory=True)
        mine = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")  # the allocator's own: not outside
        torch.cuda.synchronize()
        memsnap.torch.dump_snapshot({str(path)!r})
        torch.cuda.memory._dump_snapshot({str(pickle_path)!r})
        import pickle
        with open({str(dict_path)!r}, "wb") as f:  # as training scripts save snapshots themselves
            pickle.dump(torch.cuda.memory._snapshot(), f)
        print(json.dumps({{"status": status, "reserved": torch.cuda.memory_reserved()}}))
    """)
    assert result["status"] == {"recording": True, "unrecorded_reason": ""}, result
    keep(path)
    stats = cli_json("stats", str(path))
    outside = stats["outside_memory"]
    assert outside["recorded"] is True
    device = [l for l in outside["device_libraries"] if l["device"] == 0]
    cupy_bytes = sum(l["bytes"] for l in device if l["library"].startswith("cupy"))
    assert cupy_bytes == 256 * MiB, device
    # The allocator's 1 GiB segment is its own, not memory outside it.
    assert sum(l["bytes"] for l in device) < 1024 * MiB, device
    assert not any("_native" in l["library"] for l in device), device
    assert outside["pinned_host_bytes"] >= 64 * MiB, outside
    assert any("torch" in l["library"] or "c10" in l["library"] for l in outside["host_libraries"]), outside
    account = stats["device_memory"][0]
    assert account["libraries_bytes"] >= 256 * MiB, account
    # CuPy's array was made before the allocator's first segment (the 1 GiB tensor), with the
    # calls recorded: the process's memory then splits into it and the context as created.
    assert account["before_first_segment_libraries_bytes"] >= 256 * MiB, account
    assert account["before_first_segment_bytes"] - account["before_first_segment_libraries_bytes"] <= account["context_bytes"] + 64 * MiB, account
    snapshot = snapshot_json(path, tmp_path)
    live = snapshot["outside_memory"]["live"]
    array = [a for a in live if a["size"] == 256 * MiB and a["kind"] == "device"]
    assert len(array) == 1, live
    assert array[0]["api"] in ("cudaMalloc", "cuMemAlloc"), array[0]
    assert "make_outside_array" in frames_text(array[0]), frames_text(array[0])
    # PyTorch's pickle (_dump_snapshot) carries it too, under a key PyTorch's readers leave alone.
    with open(pickle_path, "rb") as f:
        loaded = pickle.load(f)
    assert isinstance(loaded.get("memsnap"), str), sorted(loaded)
    done = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", str(pickle_path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    # So does _snapshot()'s dictionary, pickled by the caller.
    for path_read in (pickle_path, dict_path):
        from_pickle = cli_json("stats", str(path_read))
        assert from_pickle["outside_memory"]["device_libraries"] == outside["device_libraries"], path_read
        assert from_pickle["device_memory"][0]["libraries_bytes"] >= 256 * MiB, (path_read, from_pickle["device_memory"])


def test_turned_off_by_the_environment_and_when_history_stops(tmp_path):
    result = run_python("""
        import json, memsnap.torch
        memsnap.torch.install()
        import torch
        memsnap.torch.record_history("all")
        on = memsnap.torch.outside_memory_status()
        memsnap.torch.record_history("off")
        off = memsnap.torch.outside_memory_status()
        print(json.dumps({"on": on, "off": off}))
    """, env={"MEMSNAP_OUTSIDE_MEMORY": "1"})
    assert result["on"]["recording"] is True and result["off"]["recording"] is False, result
    result = run_python("""
        import json, memsnap.torch
        memsnap.torch.install()
        import torch
        memsnap.torch.record_history("all")
        print(json.dumps(memsnap.torch.outside_memory_status()))
    """, env={"MEMSNAP_OUTSIDE_MEMORY": "0"})
    assert result["recording"] is False, result


def test_the_profiler_gets_cupti_and_the_snapshots_say_so(tmp_path):
    """CUPTI has one subscriber: torch.profiler would trace no kernel beside ours, so the
    recording gives CUPTI up when the profiler starts, and the snapshots say why they hold no
    memory outside the allocator from then on."""
    path = tmp_path / "after-profiler.msgpack"
    result = run_python(f"""
        import json, memsnap.torch
        memsnap.torch.install()
        import torch
        memsnap.torch.record_history("all")
        before = memsnap.torch.outside_memory_status()
        x = torch.randn(1024, 1024, device="cuda")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                y = x @ x
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        memsnap.torch.dump_snapshot({str(path)!r})
        print(json.dumps({{"kernels": len(kernels), "before": before,
                          "after": memsnap.torch.outside_memory_status()}}))
    """)
    assert result["before"]["recording"] is True, result
    assert result["kernels"] >= 3, result
    assert result["after"]["recording"] is False, result
    assert "torch.profiler took CUPTI's callbacks" in result["after"]["unrecorded_reason"], result
    outside = cli_json("stats", str(path))["outside_memory"]
    assert outside["recorded"] is False and "torch.profiler" in outside["unrecorded_reason"], outside


def test_a_training_step_with_nccl_cudnn_and_a_pinned_dataloader_adds_up(tmp_path):
    """The categories add up to what the driver says the process holds, NCCL's buffers carry the
    all_reduce that made them, and the remainder is the CUDA context: what the same process holds
    once its tensors, NCCL's communicator and the cache are gone (its context, with the kernels
    it loaded) is within 64 MiB of it. An empty CUDA process is measured beside (its context
    alone, then with one tensor made), for the size of a context that loaded no library's
    kernels: what the step's process held just before the allocator's first segment (its
    context as created) is within 64 MiB of the empty process's context."""
    empty = run_python("""
        import json, os, subprocess, torch
        def held_mib():
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True).stdout
            mine = [int(line.split(",")[1]) for line in out.splitlines() if line.split(",")[0].strip() == str(os.getpid())]
            return mine[0] if mine else None
        torch.cuda.set_device(0)
        torch.cuda.synchronize()  # a CUDA context and nothing else
        context = held_mib()
        torch.zeros(1, device="cuda")  # one segment, one kernel
        torch.cuda.synchronize()
        print(json.dumps({"context_mib": context, "mib": held_mib()}))
    """)
    path = tmp_path / "step.msgpack"
    after = tmp_path / "step-after-teardown.msgpack"
    result = run_python(f"""
        import gc, json, os, memsnap.torch
        memsnap.torch.install()
        import torch, torch.distributed as dist
        from torch.utils.data import DataLoader, TensorDataset
        memsnap.torch.record_history("all", stacks="all")
        torch.cuda.set_device(0)
        # (No device_id: NCCL's communicator is made lazily, by the first all_reduce.)
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1)
        torch.backends.cudnn.benchmark = True
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                                    torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
                                    torch.nn.Flatten(), torch.nn.Linear(64, 10)).cuda()
        optimizer = torch.optim.AdamW(model.parameters())
        data = TensorDataset(torch.randn(256, 3, 64, 64), torch.randint(0, 10, (256,)))
        loader = DataLoader(data, batch_size=32, pin_memory=True)
        def all_reduce_gradients():
            for p in model.parameters():
                dist.all_reduce(p.grad)
        for images, labels in loader:
            images, labels = images.cuda(non_blocking=True), labels.cuda(non_blocking=True)
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            all_reduce_gradients()
            optimizer.step()
            optimizer.zero_grad()
        torch.cuda.synchronize()
        memsnap.torch.dump_snapshot({str(path)!r})
        free, total = torch.cuda.mem_get_info()
        dist.destroy_process_group()
        del model, optimizer, loader, data, images, labels, loss
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        memsnap.torch.dump_snapshot({str(after)!r})
        print(json.dumps({{"pid": os.getpid(), "free": free, "total": total}}))
    """, timeout=300)
    keep(path)
    keep(after)
    stats = cli_json("stats", str(path))
    account = stats["device_memory"][0]
    assert account["this_process_bytes"] is not None, account  # NVML lists this process
    libraries = {l["library"]: l["bytes"] for l in account["libraries"]}
    assert any("nccl" in name for name in libraries), libraries
    assert account["context_bytes"] is not None, account
    # The categories add up to what the driver says the process holds: the device's used bytes
    # less the other processes' (within what the driver keeps unlisted, a few MiB).
    held = result["total"] - result["free"] - account["other_processes_bytes"]
    categories = account["reserved_bytes"] + account["libraries_bytes"] + account["context_bytes"]
    assert 0 <= held - categories <= 32 * MiB, (held, categories, account)
    # The remainder is the context: the same once everything else is gone.
    bare = cli_json("stats", str(after))["device_memory"][0]
    assert bare["context_bytes"] is not None, bare
    assert abs(account["context_bytes"] - bare["context_bytes"]) <= 64 * MiB, (account, bare)
    assert empty["mib"] is not None and account["context_bytes"] >= empty["mib"] * MiB - 64 * MiB, (account, empty)
    # Before the allocator's first segment: the context as created, as in the empty process.
    assert account["before_first_segment_bytes"] is not None, account
    assert empty["context_mib"] is not None, empty
    assert abs(account["before_first_segment_bytes"] - empty["context_mib"] * MiB) <= 64 * MiB, (account, empty)
    assert account["before_first_segment_bytes"] <= account["context_bytes"], account
    snapshot = snapshot_json(path, tmp_path)
    nccl = [a for a in snapshot["outside_memory"]["live"] if "nccl" in a["library"] and a["kind"] == "device"]
    assert nccl, snapshot["outside_memory"]["live"]
    assert all("all_reduce" in frames_text(a) for a in nccl), [frames_text(a) for a in nccl]
    print("whole step:", json.dumps({"account": account, "after_teardown": bare, "empty_process_mib": empty}))


def test_an_oom_caused_by_another_library_is_explained_as_such(tmp_path):
    pytest.importorskip("cupy")
    pattern = tmp_path / "oom-{n}.msgpack"
    # In a file of its own, so its frames are Python source lines the explanation can head with.
    (tmp_path / "greedy_library.py").write_text(
        "import cupy\n"
        "def library_takes_the_device(gib):\n"
        "    return [cupy.empty(1 << 30, dtype=cupy.uint8) for _ in range(gib)]\n")
    result = run_python(f"""
        import json, sys, memsnap.torch
        sys.path.insert(0, {str(tmp_path)!r})
        memsnap.torch.install()
        import torch, cupy, greedy_library
        memsnap.torch.record_history("all", stacks="all")
        memsnap.torch.dump_snapshot_on_oom({str(pattern)!r})
        cupy.cuda.set_allocator(None)
        free, total = torch.cuda.mem_get_info()
        held = greedy_library.library_takes_the_device(int(free // (1 << 30)) - 2)
        try:
            torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
            raised = False
        except torch.OutOfMemoryError:
            raised = True
        print(json.dumps({{"raised": raised, "held": len(held)}}))
    """)
    assert result["raised"], result
    written = sorted(tmp_path.glob("oom-*.msgpack"))
    assert written, result["_stderr"]
    keep(written[0])
    x = cli_json("explain-oom", str(written[0]))
    libraries = x["outside_libraries"]
    assert libraries and libraries[0]["library"].startswith("cupy"), x
    assert libraries[0]["bytes"] >= (result["held"] << 30), x
    # The library's allocations carry the Python line that made them.
    live = snapshot_json(written[0], tmp_path)["outside_memory"]["live"]
    assert any("greedy_library.py" in frames_text(a) for a in live if a["size"] == 1 << 30), live[:2]
    assert x["cause"] == "other_libraries", x
    done = subprocess.run([memsnap_cli(), "explain-oom", str(written[0])], capture_output=True, text=True)
    assert "because other libraries of this process held" in done.stdout, done.stdout
    assert "Nothing this program frees" not in done.stdout, done.stdout


def test_a_replay_takes_other_libraries_memory_as_it_changed(tmp_path):
    """Another library held most of the device early in the trace and gave it back before the
    error: the replay of that error has that much less room where the library held it."""
    pytest.importorskip("cupy")
    pattern = tmp_path / "later-{n}.msgpack"
    result = run_python(f"""
        import json, memsnap.torch
        memsnap.torch.install()
        import torch, cupy
        memsnap.torch.record_history("all", stacks="python")
        memsnap.torch.dump_snapshot_on_oom({str(pattern)!r})
        cupy.cuda.set_allocator(None)
        early = [cupy.empty(1 << 30, dtype=cupy.uint8) for _ in range(80)]  # 80 GiB, then given back
        x = torch.empty(10 << 30, dtype=torch.uint8, device="cuda")
        del x  # its segment stays cached
        del early
        y = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")
        free, total = torch.cuda.mem_get_info()
        try:
            torch.empty(free + (16 << 30), dtype=torch.uint8, device="cuda")  # more than free + the cache
            raised = False
        except torch.OutOfMemoryError:
            raised = True
        print(json.dumps({{"raised": raised}}))
    """)
    assert result["raised"], result
    written = sorted(tmp_path.glob("later-*.msgpack"))
    assert written, result["_stderr"]
    keep(written[0])
    replay = cli_json("replay", str(written[0]))
    device = replay["devices"][0]
    assert device["capacity_source"] == "reserved + device free at the recorded OOM", device["capacity_source"]
    assert "other libraries" in device["capacity_over_time"], device
    # CuPy's 80 GiB, placed on the trace by time: the room then was 80 GiB less than at the error.
    assert device["most_capacity_bytes"] == device["capacity_bytes"], device
    assert device["most_capacity_bytes"] - device["least_capacity_bytes"] == 80 << 30, device
    assert device["failed_allocs"] == 0 and device["reproduced_ooms"] == 1, device
