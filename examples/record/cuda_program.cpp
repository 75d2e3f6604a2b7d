// A CUDA C++ program that allocates the ways programs do — the runtime's cudaMalloc,
// cudaMallocAsync and cudaMallocManaged, the driver's cuMemAlloc and its virtual memory calls
// — and runs out of memory once on purpose, then carries on. Nothing in it knows memsnap:
//
//   memsnap record -o run.msgpack -- ./memsnap_record_example
//   memsnap stats run.msgpack
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const char* text = nullptr;
  cuGetErrorString(result, &text);
  std::fprintf(stderr, "%s: %s\n", what, text != nullptr ? text : "?");
  std::exit(1);
}

constexpr size_t kMiB = size_t{1} << 20;

__attribute__((noinline)) std::vector<void*> load_weights() {
  std::vector<void*> layers;
  for (int i = 0; i < 12; ++i) {
    void* layer = nullptr;
    check(cudaMalloc(&layer, 36 * kMiB), "cudaMalloc");
    layers.push_back(layer);
  }
  return layers;
}

__attribute__((noinline)) void run_step(cudaStream_t stream) {
  std::vector<void*> activations;
  for (int i = 0; i < 24; ++i) {
    void* activation = nullptr;
    check(cudaMallocAsync(&activation, (3 + i % 5) * kMiB, stream), "cudaMallocAsync");
    activations.push_back(activation);
  }
  for (void* activation : activations) check(cudaFreeAsync(activation, stream), "cudaFreeAsync");
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

__attribute__((noinline)) void try_too_much() {
  void* huge = nullptr;
  const cudaError_t error = cudaMalloc(&huge, size_t{1} << 44);  // 16 TiB: no GPU has it
  std::printf("cudaMalloc(16 TiB): %s (the program goes on)\n", cudaGetErrorString(error));
  cudaGetLastError();  // clears the error
}

__attribute__((noinline)) CUdeviceptr map_pages(size_t* mapped, CUmemGenericAllocationHandle* handle) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  check(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "granularity");
  *mapped = 10 * granularity;
  CUdeviceptr base = 0;
  check(cuMemAddressReserve(&base, *mapped, 0, 0, 0), "cuMemAddressReserve");
  check(cuMemCreate(handle, *mapped, &prop, 0), "cuMemCreate");
  check(cuMemMap(base, *mapped, 0, *handle, 0), "cuMemMap");
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(cuMemSetAccess(base, *mapped, &access, 1), "cuMemSetAccess");
  return base;
}

}  // namespace

int main() {
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");

  std::vector<void*> weights = load_weights();
  for (int step = 0; step < 3; ++step) run_step(stream);

  void* managed = nullptr;
  check(cudaMallocManaged(&managed, 8 * kMiB), "cudaMallocManaged");
  CUdeviceptr direct = 0;
  check(cuMemAlloc(&direct, 5 * kMiB), "cuMemAlloc");
  size_t mapped = 0;
  CUmemGenericAllocationHandle handle = 0;
  const CUdeviceptr pages = map_pages(&mapped, &handle);

  try_too_much();

  check(cuMemUnmap(pages, mapped), "cuMemUnmap");
  check(cuMemRelease(handle), "cuMemRelease");
  check(cuMemAddressFree(pages, mapped), "cuMemAddressFree");
  check(cuMemFree(direct), "cuMemFree");
  check(cudaFree(managed), "cudaFree");
  for (size_t i = 0; i < weights.size() / 2; ++i) check(cudaFree(weights[i]), "cudaFree");
  std::printf("done: %zu weight layers still allocated at exit\n", weights.size() - weights.size() / 2);
  return 0;
}
