"""One process on two GPUs: memsnap serves both devices, with PyTorch's per-device statistics,
peer copies between them, and one snapshot holding both. Skipped with fewer than two GPUs
(bench/gpu/python_package.sh on the nvidia-h200-x2 machine runs it)."""
import json
import os
import subprocess

import pytest
import torch

MiB = 1 << 20


def test_two_gpus_in_one_process(memsnap_torch, tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs two GPUs, this machine has {torch.cuda.device_count()}")
    torch.cuda.reset_peak_memory_stats(0)
    torch.cuda.reset_peak_memory_stats(1)
    before = [torch.cuda.memory_allocated(d) for d in (0, 1)]
    a = torch.full((64 * MiB,), 3, dtype=torch.uint8, device="cuda:0")
    b = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda:1")
    b.copy_(a)  # device to device, peer access where the GPUs have it
    c = torch.empty(96 * MiB, dtype=torch.uint8, device="cuda:1")
    torch.cuda.synchronize(1)
    assert int(b.to(torch.int64).sum()) == 3 * 64 * MiB
    assert torch.cuda.memory_allocated(0) - before[0] == 64 * MiB
    assert torch.cuda.memory_allocated(1) - before[1] == 160 * MiB
    assert memsnap_torch.memory_stats(1)["allocated_bytes.all.current"] == torch.cuda.memory_allocated(1)
    path = tmp_path / "two-devices.msgpack"
    memsnap_torch.dump_snapshot(str(path))
    cli = os.environ.get("MEMSNAP_CLI")
    if cli:
        done = subprocess.run([cli, "stats", str(path), "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        stats = json.loads(done.stdout)
        assert stats["devices"] == 2
        assert {s["device"] for s in stats["by_stream"]} == {0, 1}
    del a, b, c
