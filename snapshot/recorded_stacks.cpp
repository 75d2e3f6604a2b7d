#include "snapshot/recorded_stacks.h"

#include <utility>

#include "history/symbolizer.h"

namespace memsnap {

std::vector<uint32_t> RecordedStackSymbolizer::symbolize(const std::vector<uintptr_t>& words) {
  std::vector<std::vector<uintptr_t>> runs;
  std::vector<uintptr_t> run;
  for (uintptr_t word : words) {
    if (!is_interpreter_token(word)) continue;
    if (is_interpreter_frame(word)) {
      run.push_back(word);
    } else {
      runs.push_back(std::move(run));
      run.clear();
    }
  }
  if (!run.empty()) runs.push_back(std::move(run));
  if (interpreter_ == nullptr) runs.clear();

  std::vector<uint32_t> frames;
  size_t next_run = 0;
  const auto emit_run = [&] {
    for (uintptr_t token : runs[next_run]) frames.push_back(interpreter_frame(token));
    ++next_run;
  };
  bool in_memsnap = true;  // innermost frames belong to the allocator and recorder
  for (uintptr_t address : words) {
    if (is_interpreter_token(address)) continue;
    for (AddressFrame& frame : frames_at(address)) {
      if (in_memsnap && frame.in_memsnap) continue;
      in_memsnap = false;
      if (next_run < runs.size() && frame.evaluation_loop) {
        emit_run();
        continue;
      }
      if (frame.index == AddressFrame::kNotInTable) frame.index = tables_.intern_frame(frame.frame);
      frames.push_back(frame.index);
    }
  }
  while (next_run < runs.size()) emit_run();
  return frames;
}

std::vector<RecordedStackSymbolizer::AddressFrame>& RecordedStackSymbolizer::frames_at(uintptr_t address) {
  auto [it, fresh] = address_frames_.try_emplace(address);
  if (fresh) {
    for (SourceFrame& frame : process_symbolizer().frames_at(address)) {
      AddressFrame& kept = it->second.emplace_back();
      kept.in_memsnap = frame.function.rfind("memsnap::", 0) == 0;
      kept.evaluation_loop = interpreter_ != nullptr && interpreter_->is_evaluation_loop(frame.function);
      kept.frame = std::move(frame);
    }
  }
  return it->second;
}

uint32_t RecordedStackSymbolizer::interpreter_frame(uintptr_t token) {
  auto [it, fresh] = token_frames_.try_emplace(token, 0);
  if (fresh) it->second = tables_.intern_frame(interpreter_->resolve(token));
  return it->second;
}

}  // namespace memsnap
