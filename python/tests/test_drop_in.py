"""memsnap as PyTorch's allocator by PyTorch's own definition: what PyTorch's test_cuda.py memory
tests ask of an allocator beside its caching policy (bench/gpu/pytorch_suite.sh runs those
tests themselves). Each test here runs a program in a fresh process on memsnap and, where the
answer is PyTorch's, on PyTorch's own allocator too."""
import json

from conftest import memsnap_cli, run_python

MEMSNAP = "import memsnap.torch\nmemsnap.torch.install()\n"


def both(code: str) -> tuple[dict, dict]:
    """The program's JSON on PyTorch's allocator, then on memsnap's."""
    return run_python(code), run_python(MEMSNAP + code)


def test_settings_changed_while_running_place_memory_as_pytorch_does():
    code = """
import json, torch
mb = 1 << 20
def take(n):
    return torch.empty(n * mb, dtype=torch.uint8, device="cuda")
kept, sizes = [take(1)], []
for settings in ["", "roundup_power2_divisions:4", "garbage_collection_threshold:0.5,max_split_size_mb:40",
                 "expandable_segments:True", "expandable_segments:False,max_split_size_mb:64",
                 "roundup_power2_divisions:[64:8,>:1]"]:
    torch.cuda.memory._set_allocator_settings(settings)
    before = torch.cuda.memory_stats()["active_bytes.all.allocated"]
    kept.append(take(84))
    kept.append(take(3))
    sizes.append(torch.cuda.memory_stats()["active_bytes.all.allocated"] - before)
    del kept[0]
stats = torch.cuda.memory_stats()
segments = sorted((s["total_size"], s["is_expandable"]) for s in torch.cuda.memory_snapshot())
print(json.dumps({"sizes": sizes, "reserved": stats["reserved_bytes.all.current"],
                  "segments": segments, "max_split_size": stats["max_split_size"]}))
"""
    pytorch, memsnap = both(code)
    for key in ("sizes", "reserved", "segments", "max_split_size"):
        assert memsnap[key] == pytorch[key], (key, memsnap[key], pytorch[key])


def test_a_settings_change_is_recorded_and_replayed_exactly(tmp_path):
    path = tmp_path / "changed.msgpack"
    run_python(MEMSNAP + f"""
import json, torch
torch.cuda.memory._record_memory_history(max_entries=100000)
mb = 1 << 20
kept = [torch.empty(84 * mb, dtype=torch.uint8, device="cuda") for _ in range(3)]
del kept[1]
torch.cuda.memory._set_allocator_settings("roundup_power2_divisions:4,max_split_size_mb:64")
kept += [torch.empty(n * mb, dtype=torch.uint8, device="cuda") for n in (70, 84, 5, 130)]
del kept[0]
kept += [torch.empty(n * mb, dtype=torch.uint8, device="cuda") for n in (60, 84)]
memsnap.torch.dump_snapshot({str(path)!r})
print(json.dumps({{}}))
""")
    import subprocess
    done = subprocess.run([memsnap_cli(), "replay", str(path), "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    replay = json.loads(done.stdout)
    assert replay["recorded_settings"], replay
    assert replay["matched_segment_allocs"] == replay["recorded_segment_allocs"] > 0, replay


def test_caching_turned_off_goes_straight_to_the_device():
    code = """
import json, torch
def requested(size, stream):
    start = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
    ptr = torch._C._cuda_cudaCachingAllocator_raw_alloc(size, stream)
    end = torch.cuda.memory_stats()["requested_bytes.all.allocated"]
    torch._C._cuda_cudaCachingAllocator_raw_delete(ptr)
    return end - start
torch.cuda.init()
stream = torch._C._cuda_getCurrentRawStream(0)
torch.cuda.caching_allocator_enable(False)
off = requested(1 << 20, stream)
x = torch.ones(1000, device="cuda")  # plain cudaMalloc, freed with cudaFree
off_tensor = torch.cuda.memory_allocated()
torch.cuda.caching_allocator_enable(True)
del x
on = requested(1 << 20, stream)
print(json.dumps({"off": off, "off_tensor": off_tensor, "on": on}))
"""
    pytorch, memsnap = both(code)
    for key in ("off", "off_tensor", "on"):
        assert memsnap[key] == pytorch[key], (key, memsnap[key], pytorch[key])
    assert memsnap["off"] == 0 and memsnap["on"] == 1 << 20


def test_the_profiler_sees_every_allocation_as_on_pytorchs_allocator():
    code = """
import json, torch
from torch.profiler import profile, ProfilerActivity
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)).cuda()
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(64, 512, device="cuda")
def step():
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
step(); torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True,
             record_shapes=True, with_stack=True) as prof:
    step(); step(); torch.cuda.synchronize()
events = [(e.name, e.device_memory_usage) for e in prof.events() if e.name == "[memory]"]
from torch.profiler._memory_profiler import MemoryProfileTimeline
timeline = MemoryProfileTimeline(prof._memory_profile())
print(json.dumps({"memory_events": events,
                  "timeline": [(action.name, size) for _, action, _, size in timeline.timeline]}))
"""
    pytorch, memsnap = both(code)
    assert len(pytorch["memory_events"]) > 4
    assert memsnap["memory_events"] == pytorch["memory_events"]
    assert memsnap["timeline"] == pytorch["timeline"]


def test_snapshots_carry_metadata_free_stacks_and_compile_contexts_as_pytorchs():
    code = """
import json, torch
out = {}
for context in ("alloc", "all", "state"):
    torch.cuda.memory._set_memory_metadata("metadata " + context)
    torch.cuda.memory._record_memory_history(context=context)
    def thealloc():
        return torch.rand(3, 4, device="cuda")
    def thefree(x):
        del x
    thefree(thealloc())
    snapshot = torch.cuda.memory._snapshot()
    text = json.dumps(snapshot)
    out[context] = {"thealloc": "thealloc" in text, "thefree": "thefree" in text,
                    "metadata": sorted({e["user_metadata"] for e in snapshot["device_traces"][0]}),
                    "compile": sorted({e["compile_context"] for e in snapshot["device_traces"][0]})}
    torch.cuda.memory._record_memory_history(None)
    torch.cuda.memory._set_memory_metadata("")
    torch.cuda.empty_cache()
print(json.dumps(out))
"""
    pytorch, memsnap = both(code)
    for context in ("alloc", "all", "state"):
        assert memsnap[context] == pytorch[context], (context, memsnap[context], pytorch[context])


def test_an_exabyte_is_refused_as_pytorch_refuses_it():
    code = """
import json, torch
try:
    torch.empty(1 << 61, dtype=torch.int8, device="cuda")
except torch.OutOfMemoryError as error:
    print(json.dumps({"message": str(error).splitlines()[0]}))
"""
    pytorch, memsnap = both(code)
    assert memsnap["message"] == pytorch["message"] == "CUDA out of memory. Tried to allocate more than 1EB memory."


def test_the_backend_is_native():
    memsnap = run_python(MEMSNAP + """
import json, torch
print(json.dumps({"backend": torch.cuda.get_allocator_backend(), "installed": memsnap.torch.is_installed()}))
""")
    assert memsnap == {"backend": "native", "installed": True, "_stderr": memsnap["_stderr"]}


def test_installed_before_torch_is_imported_it_waits_and_yields_to_an_asked_for_backend():
    code = """
import json, os
import memsnap.torch
memsnap.torch.install()
waiting = memsnap.torch.is_installed()
os.environ["PYTORCH_ALLOC_CONF"] = "{conf}"
import torch
x = torch.ones(10, device="cuda")
print(json.dumps({{"waiting": waiting, "installed": memsnap.torch.is_installed(),
                  "backend": torch.cuda.get_allocator_backend(), "sum": x.sum().item()}}))
"""
    native = run_python(code.format(conf="max_split_size_mb:64"))
    assert (native["waiting"], native["installed"], native["backend"]) == (False, True, "native")
    yielded = run_python(code.format(conf="backend:cudaMallocAsync"))
    assert (yielded["installed"], yielded["backend"], yielded["sum"]) == (False, "cudaMallocAsync", 10)
    assert "memsnap is not installed" in yielded["_stderr"]
