// A CUDA program without CUDA, for `memsnap record` in CI: it does what the CUDA driver does
// for an injection (loads CUDA_INJECTION64_PATH and calls its InitializeInjection) and then
// makes its "calls" through the fake CUPTI (fake_cupti.cpp), entry and exit, with the
// parameter structs CUPTI uses. Usage: fake_cuda_program SCENARIO (see main).
#define __CUDA_API_VERSION_INTERNAL 1  // the driver's parameter structs name versioned types

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <dlfcn.h>
#include <generated_cuda_meta.h>
#include <generated_cuda_runtime_api_meta.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Deliver = void (*)(CUpti_CallbackDomain, CUpti_CallbackId, CUpti_ApiCallbackSite, const void*, void*, CUcontext);
Deliver deliver = nullptr;
constexpr size_t kMiB = size_t{1} << 20;

template <typename Params, typename Result>
void call(CUpti_CallbackDomain domain, CUpti_CallbackId id, Params& params, Result result, int device,
          const std::function<void()>& during = {}) {
  auto* context = reinterpret_cast<CUcontext>(static_cast<uintptr_t>(device));
  deliver(domain, id, CUPTI_API_ENTER, &params, nullptr, context);
  if (during) during();
  deliver(domain, id, CUPTI_API_EXIT, &params, &result, context);
}

// cudaMalloc as the runtime makes it: the driver's cuMemAlloc inside.
void* cuda_malloc(size_t size, uintptr_t address, int device = 0, cudaError_t result = cudaSuccess) {
  void* out = nullptr;
  cudaMalloc_v3020_params params{&out, size};
  call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, params, result, device, [&] {
    CUdeviceptr inner = 0;
    cuMemAlloc_v2_params driver{&inner, size};
    const CUresult driver_result = result == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
    call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, driver, driver_result, device, [&] {
      if (result == cudaSuccess) inner = address;
    });
    out = reinterpret_cast<void*>(static_cast<uintptr_t>(inner));
  });
  return out;
}

void cuda_free(uintptr_t address, int device = 0) {
  cudaFree_v3020_params params{reinterpret_cast<void*>(address)};
  call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, params, cudaSuccess, device);
}

__attribute__((noinline)) void allocate_weights() {
  cuda_malloc(64 * kMiB, 0x7f0000000000);
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
}

void calls() {
  allocate_weights();
  cuda_malloc(512, 0x7f0004000000);
  cuda_malloc(3 * kMiB, 0x7f0004200000, 1);
  cuda_free(0x7f0004000000);
  cuda_free(0x1234);  // never allocated
  void* out = nullptr;
  auto* stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5000});
  cudaMallocAsync_v11020_params async{&out, 8 * kMiB, stream};
  call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, async, cudaSuccess, 0,
       [&] { out = reinterpret_cast<void*>(uintptr_t{0x7f0008000000}); });
  CUdeviceptr direct = 0;
  cuMemAlloc_v2_params driver{&direct, 2 * kMiB};
  call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, driver, CUDA_SUCCESS, 0,
       [&] { direct = 0x7f0010000000; });
  for (CUdeviceptr page = 0; page < 2; ++page) {
    cuMemMap_params map{0x7f0020000000 + page * 20 * kMiB, 20 * kMiB, 0, 1, 0};
    call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemMap, map, CUDA_SUCCESS, 0);
  }
  cuMemUnmap_params unmap{0x7f0020000000 + 20 * kMiB, 20 * kMiB};
  call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, unmap, CUDA_SUCCESS, 0);
}

// Waits until the recorder reports a snapshot written (the signal's is written by a thread).
bool wait_for_report(size_t lines) {
  const char* report = std::getenv("MEMSNAP_RECORD_REPORT");
  for (int i = 0; report != nullptr && i < 1000; ++i) {
    std::ifstream in(report);
    size_t seen = 0;
    for (std::string line; std::getline(in, line);) ++seen;
    if (seen >= lines) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fake_cuda_program calls|calls-folder-goes|nothing|oom|ooms|signal|term|fork|exec|threads\n");
    return 2;
  }
  const char* injection = std::getenv("CUDA_INJECTION64_PATH");
  const char* cupti = std::getenv("MEMSNAP_RECORD_CUPTI");
  if (injection == nullptr || cupti == nullptr) {
    std::fprintf(stderr, "fake_cuda_program: run me under memsnap record --cupti FAKE\n");
    return 2;
  }
  void* recorder = dlopen(injection, RTLD_NOW | RTLD_LOCAL);
  if (recorder == nullptr) {
    std::fprintf(stderr, "fake_cuda_program: %s\n", dlerror());
    return 2;
  }
  reinterpret_cast<int (*)()>(dlsym(recorder, "InitializeInjection"))();
  void* fake = dlopen(cupti, RTLD_NOW | RTLD_LOCAL);  // the recorder's handle: the same library
  deliver = fake != nullptr ? reinterpret_cast<Deliver>(dlsym(fake, "fake_cupti_deliver")) : nullptr;
  if (deliver == nullptr) {
    std::fprintf(stderr, "fake_cuda_program: %s has no fake_cupti_deliver\n", cupti);
    return 2;
  }
  const std::string scenario = argv[1];
  if (scenario == "calls") {
    calls();
  } else if (scenario == "calls-folder-goes") {
    // The folder the snapshot goes to disappears while the program runs.
    calls();
    const char* folder = std::getenv("FAKE_REMOVE_FOLDER");
    if (folder == nullptr || rmdir(folder) != 0) return 8;
  } else if (scenario == "nothing") {
    // CUDA initialized (the recorder started), no allocation: a launcher asking for devices.
  } else if (scenario == "oom") {
    cuda_malloc(10 * kMiB, 0x7f0000000000);
    if (cuda_malloc(size_t{1} << 40, 0, 0, cudaErrorMemoryAllocation) != nullptr) return 3;
    std::printf("the program goes on after its out-of-memory error\n");
    cuda_free(0x7f0000000000);
  } else if (scenario == "ooms") {
    for (int i = 0; i < 5; ++i)
      if (cuda_malloc(size_t{1} << 40, 0, 0, cudaErrorMemoryAllocation) != nullptr) return 3;
  } else if (scenario == "signal") {
    cuda_malloc(10 * kMiB, 0x7f0000000000);
    raise(SIGUSR1);
    if (!wait_for_report(1)) return 4;
    cuda_malloc(20 * kMiB, 0x7f0001000000);
  } else if (scenario == "term") {
    cuda_malloc(10 * kMiB, 0x7f0000000000);
    raise(SIGTERM);
    return 5;  // not reached: the signal ends the program after its snapshot
  } else if (scenario == "fork") {
    cuda_malloc(10 * kMiB, 0x7f0000000000);
    const pid_t child = fork();
    if (child == 0) {
      cuda_malloc(30 * kMiB, 0x7f0002000000);  // not recorded: a forked child has no CUDA
      std::exit(0);                             // and writes no snapshot
    }
    int status = 0;
    waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 6;
  } else if (scenario == "exec") {
    // Replaces itself with the "calls" scenario: the new program inherits the injection's
    // variables and is recorded by its own injection; what this image recorded dies with it
    // (exec runs no exit handlers).
    cuda_malloc(30 * kMiB, 0x7f0002000000);
    char calls[] = "calls";
    char* args[] = {argv[0], calls, nullptr};
    execv("/proc/self/exe", args);
    return 7;
  } else if (scenario == "threads") {
    std::vector<std::thread> threads;
    for (uintptr_t t = 0; t < 8; ++t)
      threads.emplace_back([t] {
        for (uintptr_t i = 0; i < 500; ++i) {
          const uintptr_t address = 0x7e0000000000 + (t << 32) + i * 4096;
          cuda_malloc(4096, address, static_cast<int>(t % 2));
          if (i % 5 != 0) cuda_free(address, static_cast<int>(t % 2));
        }
      });
    for (std::thread& thread : threads) thread.join();
  } else {
    std::fprintf(stderr, "fake_cuda_program: unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  return 0;
}
