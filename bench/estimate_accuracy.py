"""How close memsnap.estimate comes to a real training step, beside the estimators people use
(run on the GPU machine).

For each model, each in a fresh process:
  - memsnap: memsnap.estimate.estimate captures three training steps (AdamW) on fake CUDA tensors
    and replays them through memsnap's simulation of PyTorch's caching allocator (PyTorch's
    default settings, a device larger than the steps);
  - real: the same three steps on PyTorch's own allocator: peak allocated and peak reserved;
  - accelerate: `accelerate estimate-memory`'s training figure (its estimate_training_usage of
    the model's parameter bytes: the largest of model, gradients, optimizer and step);
  - MemTracker: PyTorch's torch.distributed._tools.mem_tracker over one step under
    FakeTensorMode (its peak "Total"; it refuses a second step in one session), set beside the
    real run's first step.
Then the largest batch that fits under a memory cap: GPT-2's peaks predicted at several batch
sizes, a cap set between two of them, memsnap's prediction of the largest that fits, and PyTorch's
allocator run under that cap (set_per_process_memory_fraction) at the two sizes around it.

    python3 bench/estimate_accuracy.py [MODEL ...] [--no-batch] [--only-memtracker]
                                          (models: gpt2 llama resnet50 vit; all by default)

Needs the memsnap package installed (bench/gpu/python_package.sh), transformers, torchvision and
timm; accelerate where installed.
"""
import json
import subprocess
import sys
import textwrap

MODELS = {
    # name: (imports and configuration, model expression, one batch's forward and backward)
    "gpt2": ("from transformers import GPT2Config, GPT2LMHeadModel\ncfg = GPT2Config()",
             "GPT2LMHeadModel(cfg)",
             "ids = torch.randint(0, cfg.vocab_size, (BATCH, 512), device='cuda')\n"
             "model(input_ids=ids, labels=ids).loss.backward()"),
    # A Llama-style decoder (RMSNorm, SwiGLU, rotary embeddings) with gradient checkpointing,
    # under bf16 autocast.
    "llama": ("from transformers import LlamaConfig, LlamaForCausalLM\n"
              "cfg = LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12,\n"
              "                  num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,\n"
              "                  max_position_embeddings=1024)",
              "LlamaForCausalLM(cfg)",
              "model.gradient_checkpointing_enable()\n"
              "ids = torch.randint(0, cfg.vocab_size, (BATCH, 1024), device='cuda')\n"
              "with torch.autocast('cuda', dtype=torch.bfloat16):\n"
              "    loss = model(input_ids=ids, labels=ids).loss\n"
              "loss.backward()"),
    "resnet50": ("import torchvision", "torchvision.models.resnet50()",
                 "x = torch.randn(BATCH, 3, 224, 224, device='cuda')\n"
                 "y = torch.randint(0, 1000, (BATCH,), device='cuda')\n"
                 "torch.nn.functional.cross_entropy(model(x), y).backward()"),
    "vit": ("import timm", "timm.create_model('vit_base_patch16_224')",
            "x = torch.randn(BATCH, 3, 224, 224, device='cuda')\n"
            "y = torch.randint(0, 1000, (BATCH,), device='cuda')\n"
            "torch.nn.functional.cross_entropy(model(x), y).backward()"),
}
BATCH = {"gpt2": 8, "llama": 8, "resnet50": 64, "vit": 32}
STEPS = 3
GIB = 1 << 30


def program(name: str, mode: str, batch: int, cap: int = 0, sizes=()) -> str:
    imports, build, forward = MODELS[name]
    common = f"""
import json, sys, time, torch
{imports}
def setup(BATCH={batch}):
    model = {build}.to("cuda")
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4), BATCH
def step(state):
    model, optimizer, BATCH = state
{textwrap.indent(forward, "    ")}
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""
    if mode == "memsnap":
        return common + f"""
import memsnap.estimate
started = time.process_time()
result = memsnap.estimate.estimate(step, setup=setup, device=512 << 30, steps={STEPS}, tune=False)
print(json.dumps({{"cpu_seconds": time.process_time() - started, "allocated": result.peak_allocated_bytes,
                   "reserved": result.peak_reserved_bytes}}))
"""
    if mode == "sizes":  # memsnap's prediction at several batch sizes, and under a cap
        return common + f"""
import memsnap.estimate
sizes = {list(sizes)}
peaks = {{b: memsnap.estimate.estimate(step, setup=lambda b=b: setup(b), device=512 << 30, steps={STEPS},
                                       tune=False).peak_reserved_bytes for b in sizes}}
print(json.dumps({{"peaks": peaks}}))
"""
    if mode == "capped":
        return common + f"""
import memsnap.estimate
sizes = {list(sizes)}
result = memsnap.estimate.estimate(step, setup=setup, device={cap}, steps={STEPS}, batch_sizes=sizes, tune=False)
print(json.dumps({{"largest": result.largest_fitting}}))
"""
    if mode == "real":
        return common + f"""
total = torch.cuda.get_device_properties(0).total_memory
if {cap}:
    torch.cuda.set_per_process_memory_fraction({cap} / total)
state = setup()
try:
    first = 0
    for index in range({STEPS}):
        step(state)
        if index == 0:
            first = torch.cuda.max_memory_allocated()
    torch.cuda.synchronize()
    print(json.dumps({{"ran": True, "allocated": torch.cuda.max_memory_allocated(),
                       "reserved": torch.cuda.max_memory_reserved(), "first_allocated": first}}))
except torch.OutOfMemoryError:
    print(json.dumps({{"ran": False}}))
"""
    if mode == "accelerate":
        return f"""
import json, torch
{imports}
from accelerate.commands.estimate import estimate_training_usage
model = {build}
size = sum(p.numel() * p.element_size() for p in model.parameters())
usage = estimate_training_usage(size, "float32")
print(json.dumps({{"allocated": max(usage.values())}}))
"""
    if mode == "memtracker":
        return common + f"""
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker
with FakeTensorMode(), torch.device("cuda"):
    model = {build}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:  # one step: it refuses to track a module called again in the same session
        step((model, optimizer, {batch}))
    peak = max(v["Total"] for v in tracker.get_tracker_snapshot("peak").values())
print(json.dumps({{"allocated": peak}}))
"""
    raise ValueError(mode)


def run(code: str, failures_ok: bool = False):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        if failures_ok:
            last = [line for line in done.stderr.strip().splitlines() if line.strip()]
            return {"error": (last[-1] if last else f"exit {done.returncode}")[:90]}
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def error(predicted: float, measured: float) -> str:
    return f"{100 * (predicted / measured - 1):+.2f}%"


def other(result: dict, measured: int) -> str:
    if "error" in result:
        return f"fails ({result['error']})"
    return f"{result['allocated'] / GIB:.3f} GiB ({error(result['allocated'], measured)})"


def accuracy(names) -> None:
    only_memtracker = "--only-memtracker" in sys.argv
    if only_memtracker:
        print("| model | real: first step's peak allocated | MemTracker, one step (error) |\n|---|---|---|")
    else:
        print("| model | real: peak allocated / reserved | memsnap: allocated (error) | memsnap: reserved (error) "
              "| memsnap CPU time | accelerate (vs allocated) | MemTracker, one step (vs the real first step) |")
        print("|---|---|---|---|---|---|---|")
    for name in names:
        batch = BATCH[name]
        real = run(program(name, "real", batch))
        tracker = run(program(name, "memtracker", batch), failures_ok=True)
        if only_memtracker:
            print(f"| {name} (batch {batch}) | {real['first_allocated'] / GIB:.3f} GiB "
                  f"| {other(tracker, real['first_allocated'])} |", flush=True)
            continue
        mine = run(program(name, "memsnap", batch))
        accelerate = run(program(name, "accelerate", batch), failures_ok=True)
        print(f"| {name} (batch {batch}) | {real['allocated'] / GIB:.3f} / {real['reserved'] / GIB:.3f} GiB "
              f"| {mine['allocated'] / GIB:.3f} GiB ({error(mine['allocated'], real['allocated'])}) "
              f"| {mine['reserved'] / GIB:.3f} GiB ({error(mine['reserved'], real['reserved'])}) "
              f"| {mine['cpu_seconds']:.1f} s | {other(accelerate, real['allocated'])} "
              f"| {other(tracker, real['first_allocated'])} |", flush=True)


def largest_batch() -> None:
    sizes = [4, 8, 12, 16]
    peaks = {int(b): p for b, p in run(program("gpt2", "sizes", 8, sizes=sizes))["peaks"].items()}
    cap = (peaks[8] + peaks[12]) // 2
    predicted = run(program("gpt2", "capped", 8, cap, sizes))["largest"]
    ran = {b: run(program("gpt2", "real", b, cap))["ran"] for b in (8, 12)}
    print(f"\nGPT-2, batch sizes {sizes} x 512 tokens, predicted peak reserved "
          + ", ".join(f"{b}: {peaks[b] / GIB:.2f} GiB" for b in sizes)
          + f"; cap {cap / GIB:.2f} GiB: memsnap predicts the largest that fits is {predicted}; "
          + "PyTorch's allocator under the cap: " + ", ".join(f"batch {b} {'runs' if ran[b] else 'runs out of memory'}"
                                                            for b in (8, 12)), flush=True)


def main() -> None:
    names = [name for name in sys.argv[1:] if name in MODELS] or list(MODELS)
    accuracy(names)
    if "--no-batch" not in sys.argv and "--only-memtracker" not in sys.argv:
        largest_batch()


if __name__ == "__main__":
    main()
