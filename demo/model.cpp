// Parameters, the forward pass and the backward pass.
#include "training_loop.h"

namespace demo {

Tensor Loop::allocate(size_t bytes, memsnap::StreamId stream) {
  return {allocator.allocate(bytes, 0, stream), bytes};
}

void Loop::free(Tensor& tensor) {
  allocator.deallocate(tensor.data);
  tensor = {};
}

Model build_model(Loop& loop) {
  Model model;
  for (size_t layer = 0; layer < loop.layers; ++layer) {
    model.weights.push_back(loop.allocate(loop.hidden * loop.hidden * sizeof(float), loop.compute_stream));
    model.weights.push_back(loop.allocate(loop.hidden * sizeof(float), loop.compute_stream));  // bias
  }
  return model;
}

std::vector<Tensor> forward(Loop& loop, const Model& model, const Tensor& batch) {
  memsnap::ScopedAnnotation phase(loop.recorder, "forward");
  std::vector<Tensor> activations;
  const size_t rows = batch.bytes / (loop.hidden * sizeof(float));
  for (size_t layer = 0; layer < model.weights.size() / 2; ++layer) {
    // The layer's output and the mask of its activation function are kept for backward.
    activations.push_back(loop.allocate(rows * loop.hidden * sizeof(float), loop.compute_stream));
    activations.push_back(loop.allocate(rows * loop.hidden, loop.compute_stream));
  }
  return activations;
}

void backward(Loop& loop, Model& model, std::vector<Tensor>& activations) {
  memsnap::ScopedAnnotation phase(loop.recorder, "backward");
  if (model.gradients.empty())
    for (const Tensor& weight : model.weights)
      model.gradients.push_back(loop.allocate(weight.bytes, loop.compute_stream));
  // Walk the layers backwards: each needs a temporary gradient of its input, and its saved
  // activations can go once used.
  while (!activations.empty()) {
    Tensor input_gradient = loop.allocate(activations.back().bytes * 4, loop.compute_stream);
    loop.free(activations.back());
    activations.pop_back();
    loop.free(activations.back());
    activations.pop_back();
    loop.free(input_gradient);
  }
}

void release_model(Loop& loop, Model& model) {
  for (auto* tensors : {&model.weights, &model.gradients, &model.optimizer_state})
    for (Tensor& tensor : *tensors) loop.free(tensor);
}

}  // namespace demo
