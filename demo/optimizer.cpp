// The optimizer step and the loop around it, with a loader stream feeding batches.
#include "training_loop.h"

#include <string>

namespace demo {

void optimizer_step(Loop& loop, Model& model) {
  memsnap::ScopedAnnotation phase(loop.recorder, "optimizer");
  if (model.optimizer_state.empty()) {
    for (const Tensor& weight : model.weights) {
      model.optimizer_state.push_back(loop.allocate(weight.bytes, loop.compute_stream));  // m
      model.optimizer_state.push_back(loop.allocate(weight.bytes, loop.compute_stream));  // v
    }
  }
  // A fused update needs one scratch buffer the size of the largest weight.
  Tensor scratch = loop.allocate(model.weights.front().bytes, loop.compute_stream);
  loop.free(scratch);
}

Tensor load_batch(Loop& loop, size_t sequence_length) {
  // Filled on the loader stream, then used on the compute stream: record_stream keeps the
  // memory from being reused before the compute stream is done with it.
  Tensor batch = loop.allocate(sequence_length * loop.hidden * sizeof(float), loop.loader_stream);
  loop.allocator.record_stream(batch.data, loop.compute_stream);
  return batch;
}

void train(Loop& loop, Model& model, int steps) {
  static const size_t kSequenceLengths[] = {128, 512, 256, 1024, 384, 768};
  for (int step = 0; step < steps; ++step) {
    memsnap::ScopedAnnotation phase(loop.recorder, "step " + std::to_string(step));
    Tensor batch = load_batch(loop, kSequenceLengths[step % 6]);
    std::vector<Tensor> activations = forward(loop, model, batch);
    backward(loop, model, activations);
    optimizer_step(loop, model);
    loop.free(batch);
  }
}

}  // namespace demo
