#!/usr/bin/env python3
"""A real PyTorch training loop on PyTorch's own CUDA caching allocator and on memsnap's
(libmemsnap_torch.so through CUDAPluggableAllocator), side by side on one GPU.

    python3 bench/torch_training_compare.py --lib build/torch_plugin/libmemsnap_torch.so \
        --model resnet --steps 60 --rounds 3 [--snapshot resnet.msgpack]

Each run is its own process (the allocator must be chosen before CUDA starts), alternating
PyTorch and memsnap for --rounds rounds. It prints, for the same seeds and deterministic
kernels: whether every step's loss is bitwise the same, peak reserved bytes (PyTorch's
max_memory_reserved vs memsnap's reserved_bytes.all.peak) and the median step time after
warm-up, as ratios measured in this one run. With --snapshot, one more memsnap run records
history with C++ stacks and writes the snapshot (its step time is reported too).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def build_model(name, torch):
    nn = torch.nn
    if name == "resnet":
        try:
            import torchvision
            return torchvision.models.resnet50(num_classes=1000), "torchvision resnet50"
        except ImportError:
            pass

        def block(cin, cout, stride):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
        channels = 64
        for width, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            layers += [block(channels, width, stride), block(width, width, 1)]
            channels = width
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000)]
        return nn.Sequential(*layers), "resnet18-like (torchvision missing)"
    layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096, batch_first=True)
    return nn.Sequential(nn.Embedding(32000, 1024), nn.TransformerEncoder(layer, num_layers=8),
                         nn.Linear(1024, 32000)), "transformer encoder, 8 layers, d=1024"


def batch_for(name, step, torch):
    generator = torch.Generator(device="cuda").manual_seed(1000 + step)
    if name == "resnet":
        x = torch.randn(64, 3, 224, 224, device="cuda", generator=generator)
        y = torch.randint(0, 1000, (64,), device="cuda", generator=generator)
        return x, y
    length = [128, 256, 384, 512][step % 4]  # varying lengths, as real batches have
    x = torch.randint(0, 32000, (16, length), device="cuda", generator=generator)
    return x, x


def worker(args):
    import ctypes
    lib = None
    if args.worker == "floor":
        import torch
        path, malloc_name, free_name = args.floor.split(":")
        torch.cuda.memory.change_current_allocator(
            torch.cuda.memory.CUDAPluggableAllocator(path, malloc_name, free_name))
    if args.worker == "memsnap":
        import torch
        allocator = torch.cuda.memory.CUDAPluggableAllocator(args.lib, "memsnap_torch_malloc", "memsnap_torch_free")
        torch.cuda.memory.change_current_allocator(allocator)
        lib = ctypes.CDLL(args.lib)
        lib.memsnap_torch_stat.restype = ctypes.c_int64
        lib.memsnap_torch_stat.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.memsnap_torch_record_history.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        lib.memsnap_torch_dump_snapshot.argtypes = [ctypes.c_char_p]
        lib.memsnap_torch_last_error.restype = ctypes.c_char_p
        if args.record:
            assert lib.memsnap_torch_record_history(b"all", 1000000, 1) == 0, lib.memsnap_torch_last_error()
    import torch
    torch.manual_seed(0)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)
    model, description = build_model(args.model, torch)
    model = model.cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    losses, times = [], []
    for step in range(args.steps):
        x, y = batch_for(args.model, step, torch)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
            loss = loss_fn(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        losses.append(loss.item().hex())
    if args.worker == "floor":
        peak, allocs = -1, -1
    elif lib is not None:
        peak = lib.memsnap_torch_stat(b"reserved_bytes.all.peak", 0)
        allocs = lib.memsnap_torch_stat(b"num_device_alloc", 0)
        if args.snapshot:
            assert lib.memsnap_torch_dump_snapshot(args.snapshot.encode()) == 0, lib.memsnap_torch_last_error()
    else:
        peak = torch.cuda.max_memory_reserved()
        allocs = torch.cuda.memory_stats()["num_device_alloc"]
    print(json.dumps({"losses": losses, "times": times, "peak_reserved": peak, "device_mallocs": allocs,
                      "model": description}))


def run(args, kind, record=False, snapshot=None):
    command = [sys.executable, __file__, "--worker", kind, "--lib", args.lib, "--model", args.model,
               "--steps", str(args.steps)]
    if record:
        command.append("--record")
    if kind == "floor":
        command += ["--floor", args.floor]
    if snapshot:
        command += ["--snapshot", snapshot]
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"{kind} run failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", required=True)
    parser.add_argument("--model", choices=["resnet", "transformer"], default="resnet")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--snapshot")
    parser.add_argument("--floor", help="LIB:MALLOC:FREE of a minimal pluggable allocator, run as a "
                        "third kind to show what PyTorch's pluggable-allocator path costs by itself")
    parser.add_argument("--worker", choices=["pytorch", "memsnap", "floor"])
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    args.lib = os.path.abspath(args.lib)
    if args.worker:
        return worker(args)

    kinds = ("pytorch", "memsnap", "floor") if args.floor else ("pytorch", "memsnap")
    results = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            results[kind].append(run(args, kind))
    step = {k: statistics.median(t for r in runs for t in r["times"][args.warmup:]) for k, runs in results.items()}
    peak = {k: runs[0]["peak_reserved"] for k, runs in results.items() if k != "floor"}
    same_peak_each_round = {k: len({r["peak_reserved"] for r in runs}) == 1 for k, runs in results.items()
                            if k != "floor"}
    same_losses = all(r["losses"] == results["pytorch"][0]["losses"] for runs in results.values() for r in runs)
    print(f"model: {results['pytorch'][0]['model']}, {args.steps} steps (median step time after {args.warmup}), "
          f"{args.rounds} rounds, alternating")
    print(f"losses bitwise identical in every run: {same_losses} (last loss {float.fromhex(results['memsnap'][0]['losses'][-1]):.6f})")
    print(f"peak reserved   pytorch {peak['pytorch'] / 2**20:10.1f} MiB   memsnap {peak['memsnap'] / 2**20:10.1f} MiB"
          f"   memsnap/pytorch {peak['memsnap'] / peak['pytorch']:.4f}   (stable across rounds: {same_peak_each_round})")
    print(f"device mallocs  pytorch {results['pytorch'][0]['device_mallocs']:10d}       memsnap {results['memsnap'][0]['device_mallocs']:10d}")
    print(f"step time       pytorch {step['pytorch'] * 1e3:10.3f} ms    memsnap {step['memsnap'] * 1e3:10.3f} ms"
          f"    memsnap/pytorch {step['memsnap'] / step['pytorch']:.4f}")
    # Each round's two runs are neighbours in time, so their ratio cancels slow drifts (clocks,
    # temperature) that the pooled medians above do not.
    paired = [statistics.median(m["times"][args.warmup:]) / statistics.median(p["times"][args.warmup:])
              for p, m in zip(results["pytorch"], results["memsnap"])]
    print(f"per-round memsnap/pytorch: {' '.join(f'{r:.4f}' for r in paired)}   median {statistics.median(paired):.4f}"
          f"   min {min(paired):.4f}   max {max(paired):.4f}")
    if args.floor:
        print(f"step time       floor   {step['floor'] * 1e3:10.3f} ms (a minimal pluggable allocator: "
              f"PyTorch's pluggable path alone costs {step['floor'] / step['pytorch']:.4f} x PyTorch; "
              f"memsnap/floor {step['memsnap'] / step['floor']:.4f})")
    if args.snapshot:
        recorded = run(args, "memsnap", record=True, snapshot=args.snapshot)
        recorded_step = statistics.median(recorded["times"][args.warmup:])
        print(f"with history (all, C++ stacks): step {recorded_step * 1e3:.3f} ms "
              f"({recorded_step / step['memsnap']:.4f} x memsnap without), snapshot {args.snapshot}, "
              f"losses identical: {recorded['losses'] == results['pytorch'][0]['losses']}")


if __name__ == "__main__":
    main()
