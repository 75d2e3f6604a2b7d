// memsnap_record_overhead: what `memsnap record` costs a CUDA program per call. Times pairs of
// allocation and free through the runtime — cudaMalloc/cudaFree (the driver's own path, tens
// of microseconds) and cudaMallocAsync/cudaFreeAsync from the stream-ordered pool (a few
// microseconds, where a recorder's cost shows most) — and prints microseconds per pair.
// bench/record_overhead.sh runs it plain and under `memsnap record`, interleaved, and prints
// the difference per call.
//
//   memsnap_record_overhead [PAIRS] [both|sync|async]   (default 20000 pairs of both kinds)
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

// Sizes a training step asks for: from 512 B to 48 MiB.
size_t size_of(size_t i) { return size_t{512} << (i * 7 % 17); }

template <typename Fn>
double microseconds_per_pair(size_t pairs, Fn&& pair) {
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < pairs; ++i) pair(i);
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
  return elapsed.count() / static_cast<double>(pairs);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t pairs = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  const std::string kinds = argc > 2 ? argv[2] : "both";
  if (pairs == 0 || (kinds != "both" && kinds != "sync" && kinds != "async")) {
    std::fprintf(stderr, "usage: memsnap_record_overhead [PAIRS > 0] [both|sync|async]\n");
    return 2;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  // Warm up both paths (the pool keeps what it was given, so later async pairs do not grow it).
  for (size_t i = 0; i < 64; ++i) {
    void* p = nullptr;
    check(cudaMalloc(&p, size_of(i)), "cudaMalloc");
    check(cudaFree(p), "cudaFree");
    check(cudaMallocAsync(&p, size_of(i), stream), "cudaMallocAsync");
    check(cudaFreeAsync(p, stream), "cudaFreeAsync");
  }
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");

  if (kinds != "async") {
    const double sync_pair = microseconds_per_pair(pairs, [](size_t i) {
      void* p = nullptr;
      check(cudaMalloc(&p, size_of(i)), "cudaMalloc");
      check(cudaFree(p), "cudaFree");
    });
    std::printf("cudaMalloc+cudaFree %.3f us/pair\n", sync_pair);
  }
  if (kinds != "sync") {
    const double async_pair = microseconds_per_pair(pairs, [stream](size_t i) {
      void* p = nullptr;
      check(cudaMallocAsync(&p, size_of(i), stream), "cudaMallocAsync");
      check(cudaFreeAsync(p, stream), "cudaFreeAsync");
    });
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::printf("cudaMallocAsync+cudaFreeAsync %.3f us/pair\n", async_pair);
  }
  return 0;
}
