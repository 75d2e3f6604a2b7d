"""install() makes memsnap PyTorch's allocator for the process, before CUDA memory exists,
and refuses clearly afterwards."""
from conftest import run_python


def test_installed_allocator_serves_tensors_and_pytorch_reports_it():
    result = run_python("""
        import json, torch, memsnap.torch
        memsnap.torch.install()
        x = torch.ones(1000, 1000, device="cuda")
        y = (x @ x).sum().item()
        print(json.dumps({"installed": memsnap.torch.is_installed(), "y": y,
                          "allocated": torch.cuda.memory_allocated(),
                          "name": torch.cuda.memory.get_allocator_backend(),
                          "memsnap_allocated": memsnap.torch.memory_stats()["allocated_bytes.all.current"]}))
    """)
    assert result["installed"]
    assert result["y"] == 1000.0 ** 3
    # The 4,000,000-byte tensor, rounded to 512 bytes, plus whatever cuBLAS took: what memsnap holds.
    assert result["allocated"] == result["memsnap_allocated"] >= 4_000_256


def test_install_after_pytorch_allocated_refuses_and_names_the_memory():
    result = run_python("""
        import json, torch, memsnap.torch
        x = torch.ones(1 << 20, device="cuda")
        try:
            memsnap.torch.install()
            print(json.dumps({"error": None}))
        except RuntimeError as error:
            print(json.dumps({"error": str(error), "still_works": (x + 1).sum().item()}))
    """)
    assert result["error"] is not None
    assert "must run before PyTorch allocates CUDA memory" in result["error"]
    assert "cuda:0" in result["error"]
    assert result["still_works"] == 2 * (1 << 20)


def test_install_after_cuda_init_without_memory_works():
    result = run_python("""
        import json, torch, memsnap.torch
        torch.cuda.init()
        torch.cuda.synchronize()
        memsnap.torch.install()
        x = torch.zeros(4096, device="cuda")
        print(json.dumps({"installed": memsnap.torch.is_installed(),
                          "device_allocs": torch.cuda.memory_stats()["num_device_alloc"]}))
    """)
    assert result["installed"]
    assert result["device_allocs"] == 1


def test_install_rejects_bad_settings_with_the_key():
    result = run_python("""
        import json, torch, memsnap.torch
        try:
            memsnap.torch.install("max_split_size_mb:lots")
        except ValueError as error:
            print(json.dumps({"error": str(error)}))
    """)
    assert "max_split_size_mb" in result["error"]


def test_installed_before_torch_a_failure_is_said_and_torch_still_imports():
    result = run_python("""
        import json, memsnap.torch
        memsnap.torch.install("max_split_size_mb:lots")  # waits for torch
        import torch
        print(json.dumps({"installed": memsnap.torch.is_installed(),
                          "works": torch.ones(3, device="cuda").sum().item()}))
    """)
    assert not result["installed"] and result["works"] == 3
    assert "memsnap: not installed:" in result["_stderr"] and "max_split_size_mb" in result["_stderr"]


def test_settings_apply_and_change_while_running_as_in_pytorch():
    result = run_python("""
        import json, torch, memsnap.torch
        memsnap.torch.install("expandable_segments:True")
        x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        before = [s["is_expandable"] for s in torch.cuda.memory._snapshot()["segments"]]
        torch.cuda.memory._set_allocator_settings("expandable_segments:False")
        y = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")
        after = {s["address"]: s["is_expandable"] for s in torch.cuda.memory._snapshot()["segments"]}
        try:
            torch._C._accelerator_setAllocatorSettings("max_split_size_mb:2")
            refused = None
        except ValueError as error:
            refused = str(error)
        print(json.dumps({"before": before, "y_expandable": after[y.data_ptr()],
                          "refused": refused, "backend": torch.cuda.get_allocator_backend()}))
    """)
    assert result["before"] and all(result["before"])
    assert result["y_expandable"] is False  # new segments follow the changed setting
    assert "max_split_size_mb" in result["refused"]  # PyTorch's own parser judged it
    assert result["backend"] == "native"


def test_recording_turned_on_from_the_environment_with_no_code(tmp_path):
    """MEMSNAP_HISTORY, MEMSNAP_STACKS, MEMSNAP_MAX_ENTRIES and MEMSNAP_SNAPSHOT_AT_EXIT: the
    program only installs; its history is recorded and written when it ends."""
    at_exit = tmp_path / "at-exit.pickle"
    result = run_python("""
        import json, torch, memsnap.torch
        memsnap.torch.install()
        def allocate_in_a_named_function():
            return torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
        kept = allocate_in_a_named_function()
        print(json.dumps({"settings": memsnap.torch.history_settings()}))
    """, env={"MEMSNAP_HISTORY": "all", "MEMSNAP_STACKS": "python", "MEMSNAP_MAX_ENTRIES": "5000",
              "MEMSNAP_SNAPSHOT_AT_EXIT": str(at_exit)})
    assert result["settings"] == {"level": "all", "stacks": "python", "max_entries": 5000}
    import pickle
    with open(at_exit, "rb") as file:
        snapshot = pickle.load(file)
    allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
    named = [e for e in allocs if e["frames"] and e["frames"][0]["name"] == "allocate_in_a_named_function"]
    assert named and named[-1]["size"] >= 3 << 20, allocs[-3:]


def test_a_bad_recording_variable_is_one_line_naming_it_and_nothing_is_installed():
    result = run_python("""
        import json, torch, memsnap.torch
        try:
            memsnap.torch.install()
        except ValueError as error:
            print(json.dumps({"error": str(error), "installed": memsnap.torch.is_installed()}))
    """, env={"MEMSNAP_HISTORY": "all", "MEMSNAP_MAX_ENTRIES": "lots"})
    assert result["error"].startswith("MEMSNAP_MAX_ENTRIES=lots: expected"), result["error"]
    assert "\n" not in result["error"] and not result["installed"]
