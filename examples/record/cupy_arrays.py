"""CuPy arrays for `memsnap record`: CuPy's memory pool takes its memory with cudaMalloc (or
cudaMallocAsync), so the snapshot shows the pool's chunks and the stacks that grew it.

    memsnap record -o cupy.msgpack -- python3 examples/record/cupy_arrays.py
"""
import cupy


def make_batch(n):
    return cupy.random.standard_normal((n, 1024), dtype=cupy.float32)


def main():
    batches = [make_batch(4096 * (i + 1)) for i in range(4)]
    total = sum(float(b.sum()) for b in batches)
    del batches[1]
    gram = make_batch(8192) @ make_batch(8192).T
    pool = cupy.get_default_memory_pool()
    print(f"sum {total:.1f}, gram {gram.shape}, pool holds {pool.total_bytes() / 2**20:.0f} MiB")
    pool.free_all_blocks()  # gives the pool's unused chunks back: cudaFree
    print(f"after free_all_blocks the pool holds {pool.total_bytes() / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
