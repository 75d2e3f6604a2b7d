"""An out-of-memory is torch.OutOfMemoryError, with PyTorch's message and memsnap's reason; the
process lives on, and the snapshot asked for is written before the error reaches the caller."""
import glob
import inspect
import json
import os
import subprocess

import pytest
import torch

from conftest import memsnap_cli, run_python

GiB = 1 << 30


def test_a_request_larger_than_the_device_raises_and_the_process_goes_on(memsnap_torch):
    kept = torch.ones(1024, device="cuda")
    with pytest.raises(torch.OutOfMemoryError) as caught:
        torch.empty(1 << 41, dtype=torch.uint8, device="cuda")
    message = str(caught.value)
    assert message.startswith("CUDA out of memory. Tried to allocate 2048.00 GiB. GPU 0 has a total capacity of")
    # memsnap's verdict, on a line of its own: explain-oom's sentence for the same error.
    assert "\nmemsnap: The request alone (2.00 TiB) is larger than the device's total memory" in message
    assert isinstance(caught.value, RuntimeError)  # what older except clauses catch
    assert (kept + 1).sum().item() == 2048
    assert torch.cuda.memory_stats()["num_ooms"] >= 1


def halve_until_it_fits(model, optimizer, batch):
    """A batch-size finder: halve the batch at every out-of-memory error until three training
    steps in a row fit. Returns the batch, the errors met and the last one's message."""
    failures, fitted, last_message = 0, 0, ""
    while fitted < 3:
        try:
            x = torch.randn(batch, 4096, device="cuda")
            model(x).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            x = None
            fitted += 1
        except torch.OutOfMemoryError as error:
            failures, fitted, last_message, x = failures + 1, 0, str(error), None
            optimizer.zero_grad(set_to_none=True)
            batch //= 2
    return batch, failures, last_message


# The finder under a 2 GiB cap, in a fresh process (PyTorch's own allocator, or memsnap's).
BATCH_FINDER = """
import json, torch
{install}
""" + inspect.getsource(halve_until_it_fits) + """
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.empty_cache()
torch.cuda.set_per_process_memory_fraction(2 * (1 << 30) / total)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
batch, failures, last_message = halve_until_it_fits(model, optimizer, 1 << 17)
torch.cuda.synchronize()
torch.cuda.set_per_process_memory_fraction(1.0)
print(json.dumps({{"batch": batch, "failures": failures, "last_message": last_message,
                  "peak_reserved": torch.cuda.max_memory_reserved()}}))
"""


def test_a_batch_size_finder_ends_where_pytorchs_allocator_ends():
    pytorch = run_python(BATCH_FINDER.format(install=""))
    memsnap = run_python(BATCH_FINDER.format(install="import memsnap.torch; memsnap.torch.install()"))
    assert pytorch["failures"] >= 1
    assert (memsnap["batch"], memsnap["failures"], memsnap["peak_reserved"]) == \
        (pytorch["batch"], pytorch["failures"], pytorch["peak_reserved"]), (memsnap, pytorch)
    # The same first line up to the device's free memory, which other processes change.
    assert memsnap["last_message"].split(" GPU 0")[0] == pytorch["last_message"].split(" GPU 0")[0]
    # memsnap's verdict weighs the live tensors and the batch against the 2 GiB cap, named with
    # who set it (not a range inferred from the device's free memory). On the H200 the last
    # failure fits the cap, 1.69 GiB live and 256 MiB asked, and fails on 224 MiB in pieces.
    verdict = memsnap["last_message"].split("\n")[-1]
    assert verdict.startswith("memsnap: The live allocations (") and "a memory cap of 2.00 GiB" in verdict, verdict
    assert "set by torch.cuda.set_per_process_memory_fraction" in verdict, verdict
    assert "can have been" not in verdict and "Cannot judge" not in verdict, verdict


def test_training_goes_on_after_an_oom_under_a_memory_cap(memsnap_torch, tmp_path):
    total = torch.cuda.get_device_properties(0).total_memory
    memsnap_torch.record_history("all", stacks="python")  # explain-oom reads the failed request from the trace
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(2 * GiB / total)
    memsnap_torch.dump_snapshot_on_oom(str(tmp_path / "oom-{n}.msgpack"))
    observed = []
    torch._C._cuda_attach_out_of_memory_observer(
        lambda device, alloc, device_allocated, device_free: observed.append(
            (device, alloc, device_allocated, device_free, len(glob.glob(str(tmp_path / "*.msgpack"))))))
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        batch, failures, last_message = halve_until_it_fits(model, optimizer, 1 << 17)
        assert failures >= 1 and batch >= 1024
        assert "allowed;" in last_message and "memsnap: " in last_message
        torch.cuda.synchronize()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        memsnap_torch.dump_snapshot_on_oom(None)
        memsnap_torch.record_history("off")
    # PyTorch's observers: (device, bytes tried, the memory the device allows, free bytes), called
    # after memsnap's snapshot of the same error was written.
    assert len(observed) == failures
    device, alloc, allowed, free, snapshots_before = observed[0]
    assert device == 0 and alloc > 0
    assert allowed <= 2 * GiB + (1 << 20) and free > 0
    assert snapshots_before >= 1
    snapshots = sorted(glob.glob(str(tmp_path / "oom-*.msgpack")))
    assert len(snapshots) == failures
    cli = os.environ.get("MEMSNAP_CLI")
    if cli:
        # The last error's snapshot and its message give one verdict.
        last = max(snapshots, key=lambda path: int(os.path.basename(path)[len("oom-"):-len(".msgpack")]))
        done = subprocess.run([cli, "explain-oom", last, "--json"], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        explanation = json.loads(done.stdout)
        assert explanation["verdict"]["judged"], explanation["verdict"]
        assert last_message.split("\n")[-1] == "memsnap: " + explanation["verdict"]["sentence"]


def test_oom_snapshot_opens_in_the_viewer(memsnap_torch, tmp_path):
    cli = memsnap_cli()
    memsnap_torch.dump_snapshot_on_oom(str(tmp_path / "big-{n}.msgpack"))
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(1 << 41, dtype=torch.uint8, device="cuda")
    finally:
        memsnap_torch.dump_snapshot_on_oom(None)
    (snapshot,) = glob.glob(str(tmp_path / "big-*.msgpack"))
    done = subprocess.run([cli, "stats", snapshot, "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_oom_snapshot_folder_that_cannot_be_written_is_refused_at_once(memsnap_torch, tmp_path):
    with pytest.raises(ValueError, match="missing does not exist"):
        memsnap_torch.dump_snapshot_on_oom(str(tmp_path / "missing" / "oom-{n}.msgpack"))
    assert not (tmp_path / "missing").exists()


def test_a_pattern_without_n_says_when_it_replaces_the_last_snapshot(memsnap_torch, tmp_path, capfd):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(1 * GiB / total)
    memsnap_torch.dump_snapshot_on_oom(str(tmp_path / "oom.msgpack"))
    try:
        for _ in range(2):
            with pytest.raises(torch.OutOfMemoryError):
                torch.empty(2 * GiB, dtype=torch.uint8, device="cuda")
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        memsnap_torch.dump_snapshot_on_oom(None)
    lines = [line for line in capfd.readouterr().err.splitlines() if "snapshot written to" in line]
    assert len(lines) == 2, lines
    assert "replacing" not in lines[0]
    assert "replacing the snapshot of an earlier out-of-memory error: put {n} in the pattern" in lines[1]
    assert (tmp_path / "oom.msgpack").is_file()
