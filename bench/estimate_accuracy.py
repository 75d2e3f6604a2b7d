"""How close memsnap.estimate comes to a real training step (run on the GPU machine).

For each model: a fresh process captures three training steps (AdamW) on fake CUDA tensors with
memsnap.estimate.capture and `memsnap replay --json` replays the capture through memsnap's
simulation of PyTorch's caching allocator (PyTorch's default settings); another fresh process
runs the same three steps for real on PyTorch's own allocator. The real run warms the cuBLAS
workspaces first, which the capture cannot see, and its allocated peak is counted above them;
its reserved peak is as PyTorch reports it, and the table gives the workspaces' reserve beside it.

    python3 bench/estimate_accuracy.py MEMSNAP_CLI [MODEL ...]   (gpt2 resnet50 vit)

Needs the memsnap package installed (bench/gpu/python_package.sh), transformers, torchvision, timm.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

MODELS = {
    # name: (imports, model expression, forward and backward of one batch)
    "gpt2": ("from transformers import GPT2Config, GPT2LMHeadModel\ncfg = GPT2Config()",
             "GPT2LMHeadModel(cfg)",
             "ids = torch.randint(0, cfg.vocab_size, (8, 512), device='cuda')\n"
             "model(input_ids=ids, labels=ids).loss.backward()"),
    "resnet50": ("import torchvision", "torchvision.models.resnet50()",
                 "x = torch.randn(64, 3, 224, 224, device='cuda')\n"
                 "y = torch.randint(0, 1000, (64,), device='cuda')\n"
                 "torch.nn.functional.cross_entropy(model(x), y).backward()"),
    "vit": ("import timm", "timm.create_model('vit_base_patch16_224')",
            "x = torch.randn(32, 3, 224, 224, device='cuda')\n"
            "y = torch.randint(0, 1000, (32,), device='cuda')\n"
            "torch.nn.functional.cross_entropy(model(x), y).backward()"),
}
STEPS = 3


def program(name: str, mode: str, out: str) -> str:
    imports, build, batch = MODELS[name]
    common = f"""
import json, time, torch
{imports}
def setup():
    model = {build}.to("cuda")
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)
def step(state):
    model, optimizer = state
{textwrap.indent(batch, "    ")}
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
"""
    if mode == "estimate":
        return common + f"""
import memsnap.estimate
started = time.process_time()
captured = memsnap.estimate.capture(step, setup=setup, steps={STEPS})
seconds = time.process_time() - started
captured.dump({out!r})
print(json.dumps({{"cpu_seconds": seconds, "peak_live": captured.peak_live_bytes}}))
"""
    return common + f"""
warm = torch.randn(64, 64, device="cuda", requires_grad=True)
(warm @ warm).sum().backward()
del warm
torch.cuda.synchronize()
base_allocated = torch.cuda.memory_allocated()
base_reserved = torch.cuda.memory_reserved()
state = setup()
for _ in range({STEPS}):
    step(state)
torch.cuda.synchronize()
stats = torch.cuda.memory_stats()
print(json.dumps({{"allocated": stats["allocated_bytes.all.peak"] - base_allocated,
                   "reserved": stats["reserved_bytes.all.peak"], "workspace_reserved": base_reserved}}))
"""


def run(code: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"child failed:\n{done.stderr[-3000:]}")
    return json.loads([line for line in done.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    cli = sys.argv[1]
    names = sys.argv[2:] or list(MODELS)
    print("| model | peak allocated: estimate / real | error | peak reserved: estimate (+ workspaces) / real "
          "| error | capture CPU time |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            path = os.path.join(folder, f"{name}.pickle")
            estimate = run(program(name, "estimate", path))
            replay = subprocess.run([cli, "replay", path, "--json"], capture_output=True, text=True, check=True)
            device = json.loads(replay.stdout)["devices"][0]
            real = run(program(name, "real", path))
            allocated = device["peak_allocated_bytes"]
            reserved = device["peak_reserved_bytes"] + real["workspace_reserved"]
            gib = 1 << 30
            print(f"| {name} | {allocated / gib:.3f} / {real['allocated'] / gib:.3f} GiB "
                  f"| {100 * (allocated / real['allocated'] - 1):+.2f}% "
                  f"| {device['peak_reserved_bytes'] / gib:.3f} (+{real['workspace_reserved'] / gib:.3f}) / "
                  f"{real['reserved'] / gib:.3f} GiB | {100 * (reserved / real['reserved'] - 1):+.2f}% "
                  f"| {estimate['cpu_seconds']:.1f} s |", flush=True)


if __name__ == "__main__":
    main()
