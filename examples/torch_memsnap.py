#!/usr/bin/env python3
"""Run a PyTorch program on memsnap's allocator and snapshot it with C++ stacks.

    MEMSNAP_TORCH_LIB=build/torch_plugin/libmemsnap_torch.so python3 examples/torch_memsnap.py
    memsnap stats torch_memsnap.msgpack      # or: memsnap serve torch_memsnap.msgpack

The allocator must be chosen before PyTorch touches the GPU. Settings come from
MEMSNAP_ALLOC_CONF (or PYTORCH_CUDA_ALLOC_CONF), with PyTorch's grammar.
"""
import ctypes
import os
import sys

import torch


def load_memsnap(path):
    """Makes memsnap PyTorch's CUDA allocator and returns the library for its controls."""
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "memsnap_torch_malloc", "memsnap_torch_free")
    torch.cuda.memory.change_current_allocator(allocator)
    lib = ctypes.CDLL(path)
    lib.memsnap_torch_record_history.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
    lib.memsnap_torch_dump_snapshot.argtypes = [ctypes.c_char_p]
    lib.memsnap_torch_dump_snapshot_on_oom.argtypes = [ctypes.c_char_p]
    lib.memsnap_torch_stat.restype = ctypes.c_int64
    lib.memsnap_torch_stat.argtypes = [ctypes.c_char_p, ctypes.c_int]
    lib.memsnap_torch_last_error.restype = ctypes.c_char_p
    return lib


def check(status, lib):
    if status != 0:
        sys.exit("memsnap: " + lib.memsnap_torch_last_error().decode())


def main():
    path = os.environ.get("MEMSNAP_TORCH_LIB", "build/torch_plugin/libmemsnap_torch.so")
    out = sys.argv[1] if len(sys.argv) > 1 else "torch_memsnap.msgpack"
    lib = load_memsnap(os.path.abspath(path))
    check(lib.memsnap_torch_record_history(b"all", 100000, 1), lib)
    check(lib.memsnap_torch_dump_snapshot_on_oom(b"torch_memsnap_oom_{pid}_{n}.msgpack"), lib)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    for step in range(20):
        batch = torch.randn(64 * (1 + step % 4), 1024, device="cuda")
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    check(lib.memsnap_torch_dump_snapshot(out.encode()), lib)
    peak = lib.memsnap_torch_stat(b"reserved_bytes.all.peak", 0)
    print(f"loss {loss.item():.6f}; peak reserved {peak / 2**20:.1f} MiB; snapshot {out}")


if __name__ == "__main__":
    main()
