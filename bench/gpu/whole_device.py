# Run THERE (the GPU machine), with the memsnap package installed (bench/gpu/python_package.sh):
#   python3 bench/gpu/whole_device.py OUT.msgpack
# A process on memsnap.torch with memory outside the allocator (1 GiB from CuPy's pool, which
# takes it with cudaMalloc) writes a snapshot, then prints what torch and nvidia-smi say of the
# same moment, to check the snapshot's device figures against (`memsnap stats OUT.msgpack`).
# Made tests/data/memsnap-h200/whole_device.msgpack.
import json, os, subprocess, sys
import memsnap.torch
memsnap.torch.install()
import torch, cupy
out = sys.argv[1]
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
y = torch.randn(4096, 4096, device="cuda") @ torch.randn(4096, 4096, device="cuda")  # cuBLAS workspace
outside = cupy.empty(1 << 30, dtype=cupy.uint8)  # 1 GiB through CuPy's pool: cudaMalloc outside memsnap
torch.cuda.synchronize()
memsnap.torch.dump_snapshot(out)
free, total = torch.cuda.mem_get_info()
print(json.dumps({"pid": os.getpid(), "torch_reserved": torch.cuda.memory_reserved(), "free": free, "total": total,
                  "cupy_pool": cupy.get_default_memory_pool().total_bytes()}))
print(subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"], capture_output=True, text=True).stdout)
