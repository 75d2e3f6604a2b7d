// A toy training loop that uses the allocator the way a deep-learning framework does:
// parameters that live for the whole run, activations whose size follows the batch, gradients,
// optimizer state created on the first step, and a data-loading stream whose buffers are
// handed to the compute stream. Each phase is a named function in its own file so that the
// snapshot's stacks read like a program, not like an allocator.
#pragma once

#include <cstddef>
#include <vector>

#include "allocator/caching_allocator.h"
#include "history/history_recorder.h"

namespace demo {

struct Tensor {
  void* data = nullptr;
  size_t bytes = 0;
};

struct Model {
  std::vector<Tensor> weights;
  std::vector<Tensor> gradients;        // made on the first backward pass
  std::vector<Tensor> optimizer_state;  // two per weight (Adam), made on the first step
};

struct Loop {
  memsnap::CachingAllocator& allocator;
  memsnap::HistoryRecorder& recorder;
  memsnap::StreamId compute_stream = 0;
  memsnap::StreamId loader_stream = 0;
  size_t hidden = 1024;  // width of every layer
  size_t layers = 8;

  Tensor allocate(size_t bytes, memsnap::StreamId stream);
  void free(Tensor& tensor);
};

Model build_model(Loop& loop);
Tensor load_batch(Loop& loop, size_t sequence_length);
std::vector<Tensor> forward(Loop& loop, const Model& model, const Tensor& batch);
void backward(Loop& loop, Model& model, std::vector<Tensor>& activations);
void optimizer_step(Loop& loop, Model& model);
void train(Loop& loop, Model& model, int steps);
void release_model(Loop& loop, Model& model);

}  // namespace demo
