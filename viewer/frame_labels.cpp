#include "viewer/frame_labels.h"

#include <array>
#include <string_view>

namespace memsnap {
namespace {

constexpr std::array<std::string_view, 9> kNoiseFunctions = {
    "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "_start",
    "__libc_start_main", "PyEval_", "PyObject_", "PyFunction_", "__libc_init_first"};
constexpr std::array<std::string_view, 10> kNoiseFiles = {
    "core/boxing", "/Register", "/Redispatch", "pythonrun.c", "Modules/main.c",
    "Objects/call.c", "Objects/methodobject.c", "pycore_ceval.h", "ceval.c",
    "cpython/abstract.h"};

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string frame_label(const Frame& frame) {
  std::string label = frame.function.empty() ? "??" : frame.function;
  const std::string_view file = base_name(frame.file);
  if (!file.empty() && file != "??") {
    label += " (";
    label += file;
    if (frame.line > 0) label += ":" + std::to_string(frame.line);
    label += ")";
  }
  return label;
}

bool frame_is_noise(const Frame& frame) {
  for (std::string_view name : kNoiseFunctions)
    if (frame.function.find(name) != std::string::npos) return true;
  for (std::string_view file : kNoiseFiles)
    if (frame.file.find(file) != std::string::npos) return true;
  // The allocator's own frames in PyTorch's C++ stacks.
  return frame.function.find("CUDACachingAllocator::") != std::string::npos;
}

std::vector<uint32_t> visible_frames_outermost_first(const Snapshot& snapshot, StackIndex stack,
                                                      const FrameFilter& filter) {
  std::vector<uint32_t> out;
  if (stack < 0 || static_cast<size_t>(stack) >= snapshot.stacks.size()) return out;
  const std::vector<uint32_t>& frames = snapshot.stacks[static_cast<size_t>(stack)];
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    if (*it >= snapshot.frames.size()) continue;
    if (!filter.keep_all && frame_is_noise(snapshot.frames[*it])) continue;
    out.push_back(*it);
  }
  return out;
}

}  // namespace memsnap
