/* libmemsnap_torch.so: memsnap's caching allocator for PyTorch.
 *
 * The first two functions are what torch.cuda.memory.CUDAPluggableAllocator(path,
 * "memsnap_torch_malloc", "memsnap_torch_free") loads; the rest control history recording and
 * snapshots and are meant for ctypes (examples/torch_memsnap.py shows both).
 *
 * The allocator is created on first use with the settings of MEMSNAP_ALLOC_CONF (falling back
 * to PYTORCH_ALLOC_CONF, then PYTORCH_CUDA_ALLOC_CONF) on the CUDA backend. MEMSNAP_BACKEND=
 * simulated selects the simulated device instead — only for testing these entry points
 * without a GPU: PyTorch cannot use that memory. The recording variables MEMSNAP_HISTORY,
 * MEMSNAP_STACKS (cpp or none), MEMSNAP_MAX_ENTRIES, MEMSNAP_OOM_SNAPSHOT and
 * MEMSNAP_SNAPSHOT_AT_EXIT (history/recording_environment.h) apply from the first allocation;
 * a bad value fails it, with the variable named in the error.
 *
 * Functions returning int return 0 on success and -1 on failure, with the reason in
 * memsnap_torch_last_error() (per thread). The allocation functions report failures the way
 * PyTorch expects from an allocator: by throwing (an out-of-memory error carries PyTorch's
 * "Tried to allocate ..." message), which PyTorch turns into a Python exception.
 */
#ifndef MEMSNAP_TORCH_H
#define MEMSNAP_TORCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MEMSNAP_TORCH_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* stream is a cudaStream_t. */
MEMSNAP_TORCH_API void* memsnap_torch_malloc(ssize_t size, int device, void* stream);
MEMSNAP_TORCH_API void memsnap_torch_free(void* ptr, ssize_t size, int device, void* stream);

/* level: "off", "state", "alloc" or "all"; cpp_stacks: capture C++ stacks (0 or 1). */
MEMSNAP_TORCH_API int memsnap_torch_record_history(const char* level, size_t max_entries, int cpp_stacks);
/* Writes a snapshot (msgpack) atomically. */
MEMSNAP_TORCH_API int memsnap_torch_dump_snapshot(const char* path);
/* Writes a snapshot at every out-of-memory error; "{pid}", "{device}", "{n}" are filled in. */
MEMSNAP_TORCH_API int memsnap_torch_dump_snapshot_on_oom(const char* pattern);
/* Returns every cached, unused segment to the device. */
MEMSNAP_TORCH_API int memsnap_torch_empty_cache(void);
/* A memory_stats() value by PyTorch's key ("reserved_bytes.all.peak", ...); -1 when the
 * key or device is unknown. */
MEMSNAP_TORCH_API int64_t memsnap_torch_stat(const char* key, int device);
MEMSNAP_TORCH_API int memsnap_torch_reset_peak_stats(int device);
/* memory_summary() text; valid until the next call on this thread. */
MEMSNAP_TORCH_API const char* memsnap_torch_memory_summary(int device);
MEMSNAP_TORCH_API const char* memsnap_torch_last_error(void);

#ifdef __cplusplus
}
#endif

#endif /* MEMSNAP_TORCH_H */
