"""PyTorch's memory API, answered by memsnap with PyTorch's meanings."""
import torch

from conftest import run_python

MiB = 1 << 20


def test_memory_stats_has_every_key_pytorchs_allocator_reports(memsnap_torch):
    pytorch_keys = run_python("""
        import json, torch
        x = torch.ones(1 << 20, device="cuda")
        print(json.dumps({"keys": sorted(torch.cuda.memory_stats())}))
    """)["keys"]
    torch.ones(1 << 20, device="cuda")
    assert sorted(torch.cuda.memory_stats()) == pytorch_keys


def test_allocated_reserved_peaks_and_their_reset(memsnap_torch):
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    a = torch.empty(30 * MiB, dtype=torch.uint8, device="cuda")
    b = torch.empty(3 * MiB + 1, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_allocated() - base == 30 * MiB + (3 * MiB + 512)
    assert torch.cuda.max_memory_allocated() >= torch.cuda.memory_allocated()
    reserved = torch.cuda.memory_reserved()
    assert reserved >= 30 * MiB + 20 * MiB  # a 30 MiB segment and a 20 MiB one for 3 MiB
    del a
    assert torch.cuda.memory_reserved() == reserved  # cached, not returned
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == reserved - 30 * MiB
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() < peak
    assert "Allocated memory" in torch.cuda.memory_summary()
    del b


def test_memory_fraction_caps_what_the_allocator_reserves(memsnap_torch):
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.01)
    try:
        try:
            torch.empty(int(total * 0.02), dtype=torch.uint8, device="cuda")
            raised = False
        except torch.OutOfMemoryError as error:
            raised = "allowed" in str(error)
        assert raised
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
    free, device_total = torch.cuda.mem_get_info()
    assert device_total == total and 0 < free <= total


RECORD_STREAM_SCENARIO = """
    import json, torch
    {install}
    torch.ones(1, device="cuda")
    side = torch.cuda.Stream()
    x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    address = x.data_ptr()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # about a second of the side stream's time
        x.add_(1)
    x.record_stream(side)
    busy_after_launch = not side.query()
    del x
    stats = torch.cuda.memory_stats()
    busy_after_free = not side.query()
    y = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    reused = y.data_ptr() == address
    busy_at_end = not side.query()
    side.synchronize()
    del y
    z = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    print(json.dumps({{
        "busy": [busy_after_launch, busy_after_free, busy_at_end], "reused": reused,
        "active_after_free": stats["active_bytes.all.current"], "allocated_after_free": stats["allocated_bytes.all.current"],
        "reused_once_done": z.data_ptr() == address,
    }}))
"""


def test_record_stream_keeps_memory_until_the_other_stream_is_done():
    # The same program on PyTorch's allocator and on memsnap's, each in a fresh process: while the
    # side stream still runs, the freed block stays active and is not handed out again.
    pytorch = run_python(RECORD_STREAM_SCENARIO.format(install=""))
    memsnap = run_python(RECORD_STREAM_SCENARIO.format(install="import memsnap.torch; memsnap.torch.install()"))
    for key in ("reused", "active_after_free", "allocated_after_free", "reused_once_done"):
        assert memsnap[key] == pytorch[key], (key, memsnap, pytorch)
    if pytorch["busy"][2]:  # the side stream was still running when y was allocated
        assert not memsnap["reused"] and memsnap["active_after_free"] >= 8 << 20, (memsnap, pytorch)


def test_raw_allocation_entry_points(memsnap_torch):
    ptr = torch.cuda.caching_allocator_alloc(1 * MiB)
    assert ptr != 0
    torch.cuda.caching_allocator_delete(ptr)
