#include "viewer/frame_labels.h"

#include <algorithm>
#include <array>

namespace memsnap {
namespace {

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

std::string_view base_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Capture machinery, the C runtime's start of a process or a thread, and the C++ runtime's
// and PyTorch's thread plumbing, anywhere in a function's name. (An unsymbolized libc frame at a
// thread's start reads as whatever exported symbol precedes it, such as
// pthread_condattr_setpshared.)
constexpr std::array<std::string_view, 10> kNoiseFunctions = {
    "unwind::unwind", "CapturedTraceback::gather", "gather_with_cpp", "__libc_start_main",
    "__libc_init_first", "CUDACachingAllocator::", "std::thread::_State_impl", "std::thread::_Invoker",
    "torch::autograd::Engine::thread_init", "torch::autograd::Engine::thread_main"};
// C functions that start a process or a thread, by their whole name (with an offset or a
// parameter list at most): common words, so never matched inside other names.
constexpr std::array<std::string_view, 8> kStartFunctions = {
    "_start", "__libc_start_call_main", "start_thread", "__clone", "__clone3", "clone3",
    "pthread_condattr_setpshared", "execute_native_thread_routine"};
// Unsymbolized frames ("module+0xoffset") of the C library, the loader and the Python
// interpreter's own binary or library: process and thread start-up, and the interpreter loop.
constexpr std::array<std::string_view, 5> kNoiseModules = {"libc.so", "libpthread.so", "ld-linux", "python3", "libpython3"};
// CPython's own C functions (its API and internals, and the static helpers that call into
// extension functions), by how their names begin.
constexpr std::array<std::string_view, 10> kInterpreterPrefixes = {
    "Py", "_Py", "cfunction_", "method_vectorcall", "slot_tp_", "vectorcall_", "pymain_",
    "run_mod", "run_eval_code_obj", "object_vacall"};
constexpr std::array<std::string_view, 9> kNoiseFiles = {
    "pythonrun.c", "Modules/main.c", "Objects/call.c", "Objects/methodobject.c",
    "pycore_ceval.h", "ceval.c", "cpython/abstract.h", "Python/generated_cases.c.h",
    "Objects/descrobject.c"};

// PyTorch's operator dispatch between a Python call and the kernel that allocates.
constexpr std::array<std::string_view, 16> kDispatcherFunctions = {
    "c10::impl::wrap_kernel_functor_unboxed_",
    "c10::impl::make_boxed_from_unboxed_functor",
    "c10::impl::BoxedKernelWrapper",
    "c10::impl::call_functor_with_args_from_stack",
    "c10::impl::detail::WrapFunctionIntoFunctor_",
    "c10::BoxedKernel::",
    "c10::KernelFunction::",
    "c10::Dispatcher::",
    "c10::OperatorHandle::",
    "c10::TypedOperatorHandle",
    "at::_ops::",
    "at::redispatch::",
    "torch::autograd::VariableType::",
    "torch::ADInplaceOrView::",
    "at::autocast::",
    "at::functionalization::",
};

// "module+0x1a2b" (the module's base name): a frame the symbolizer could not name.
bool is_unsymbolized_in(std::string_view function, std::string_view module) {
  const size_t plus = function.find("+0x");
  return plus != std::string_view::npos && starts_with(function, module) &&
         function.find_first_of("(:", 0) > plus;
}

bool is_start_function(std::string_view function) {
  // Older C libraries start threads in clone(); a C++ function of that name has parameters.
  if (function == "clone" || starts_with(function, "clone+0x")) return true;
  for (std::string_view name : kStartFunctions)
    if (starts_with(function, name) &&
        (function.size() == name.size() || starts_with(function.substr(name.size()), "+0x") || function[name.size()] == '('))
      return true;
  return false;
}

bool is_interpreter_function(std::string_view function) {
  for (std::string_view prefix : kInterpreterPrefixes)
    if (starts_with(function, prefix)) return true;
  return false;
}

// "at::_ops::empty_memory_format::call(...)" -> "empty_memory_format"; empty otherwise.
std::string operator_of(std::string_view function) {
  constexpr std::string_view kOps = "at::_ops::";
  const size_t at = function.find(kOps);
  if (at == std::string_view::npos) return "";
  const std::string_view rest = function.substr(at + kOps.size());
  const size_t end = rest.find("::");
  return end == std::string_view::npos ? "" : std::string(rest.substr(0, end));
}

// The index just past the parenthesis group that closes at `close` (scanning backwards).
size_t open_paren_for(std::string_view text, size_t close) {
  int depth = 0;
  for (size_t i = close + 1; i-- > 0;) {
    if (text[i] == ')') ++depth;
    if (text[i] == '(' && --depth == 0) return i;
  }
  return std::string_view::npos;
}

}  // namespace

std::string short_function_name(std::string_view function) {
  // Only C++ signatures are shortened: Python names ("<module>", "forward") have no "::" or "(".
  if (!contains(function, "::") && !contains(function, "(")) return std::string(function);
  std::string name(function);
  // "(anonymous namespace)::" says nothing a reader needs.
  for (size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;)
    name.erase(at, std::string_view("(anonymous namespace)::").size());
  // An offset from the symbol ("+0x42", where the line is not known), the compiler's clone
  // suffixes (" [clone .isra.0]", " [clone .cold]"), trailing qualifiers, then the parameters.
  if (const size_t plus = name.rfind("+0x"); plus != std::string::npos && plus > 0 &&
      name.find_first_not_of("0123456789abcdefABCDEF", plus + 3) == std::string::npos)
    name.erase(plus);
  for (bool trimmed = true; trimmed;) {
    trimmed = false;
    if (name.size() > 8 && name.back() == ']') {
      const size_t clone = name.rfind(" [clone .");
      if (clone != std::string::npos && name.find(']', clone) == name.size() - 1) {
        name.erase(clone);
        trimmed = true;
      }
    }
    for (std::string_view suffix : {" const", " volatile", " &&", " &"}) {
      if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
        name.erase(name.size() - suffix.size());
        trimmed = true;
      }
    }
  }
  if (!name.empty() && name.back() == ')') {
    const size_t open = open_paren_for(name, name.size() - 1);
    if (open != std::string::npos && open > 0) name.erase(open);
  }
  // Template arguments become "<…>", keeping "operator<" and friends intact.
  std::string out;
  out.reserve(name.size());
  int depth = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool is_operator = i >= 8 && name.compare(i - 8, 8, "operator") == 0;
    if (c == '<' && !is_operator) {
      if (depth++ == 0) out += "<…>";
      continue;
    }
    if (c == '>' && depth > 0 && !is_operator) {
      --depth;
      continue;
    }
    if (depth == 0) out += c;
  }
  if (depth != 0) return std::string(function);  // unbalanced: leave it as it was
  return out.empty() ? std::string(function) : out;
}

bool frame_is_noise(const Frame& frame) {
  for (std::string_view name : kNoiseFunctions)
    if (contains(frame.function, name)) return true;
  if (is_start_function(frame.function)) return true;
  for (std::string_view module : kNoiseModules)
    if (is_unsymbolized_in(frame.function, module)) return true;
  if (!frame_is_python(frame) && is_interpreter_function(frame.function)) return true;
  for (std::string_view file : kNoiseFiles)
    if (contains(frame.file, file)) return true;
  return false;
}

bool frame_is_dispatcher(const Frame& frame) {
  for (std::string_view name : kDispatcherFunctions)
    if (contains(frame.function, name)) return true;
  // The generated registration wrappers (RegisterCUDA_0.cpp, RegisterBackendSelect.cpp, ...);
  // PyTorch records C++ file names without folders.
  if (starts_with(base_name(frame.file), "Register") && !frame_is_python(frame)) return true;
  return contains(frame.file, "core/boxing/");
}

bool frame_is_python(const Frame& frame) {
  const std::string_view file = frame.file;
  return file.size() > 3 && file.compare(file.size() - 3, 3, ".py") == 0;
}

std::string frame_label(const Frame& frame, const FrameFilter& filter) {
  std::string label;
  if (frame.function.empty()) {
    label = "??";
  } else if (filter.keep_all || frame_is_python(frame)) {  // a Python name is never a C++ signature
    label = frame.function;
  } else if (frame_is_dispatcher(frame)) {
    const std::string op = operator_of(frame.function);
    label = (op.empty() ? short_function_name(frame.function) : op) + " [dispatcher]";
    return label;  // one label per operator, wherever its plumbing was compiled
  } else {
    label = short_function_name(frame.function);
  }
  const std::string_view file = base_name(frame.file);
  if (!file.empty() && file != "??") {
    label += " (";
    label += file;
    if (frame.line > 0) label += ":" + std::to_string(frame.line);
    label += ")";
  }
  return label;
}

std::vector<uint32_t> visible_frames_outermost_first(const Snapshot& snapshot, StackIndex stack,
                                                      const FrameFilter& filter) {
  std::vector<uint32_t> out;
  if (stack < 0 || static_cast<size_t>(stack) >= snapshot.stacks.size()) return out;
  const std::vector<uint32_t>& frames = snapshot.stacks[static_cast<size_t>(stack)];
  // Outermost first: a run of dispatcher frames is represented by its first (outermost)
  // at::_ops frame, else by its outermost frame; the rest of the run is dropped.
  bool in_run = false;
  size_t run_at = 0;  // where the run's representative sits in `out`
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    if (*it >= snapshot.frames.size()) continue;
    const Frame& frame = snapshot.frames[*it];
    if (filter.keep_all) {
      out.push_back(*it);
      continue;
    }
    if (frame_is_noise(frame)) continue;
    if (!frame_is_dispatcher(frame)) {
      in_run = false;
      out.push_back(*it);
      continue;
    }
    if (!in_run) {
      in_run = true;
      run_at = out.size();
      out.push_back(*it);
    } else if (operator_of(snapshot.frames[out[run_at]].function).empty() &&
               !operator_of(frame.function).empty()) {
      out[run_at] = *it;
    }
  }
  return out;
}

namespace {

// Where the headline sits among a stack's visible frames (outermost first): the innermost
// Python frame when there is one, else the innermost frame.
std::optional<size_t> headline_position(const Snapshot& snapshot, const std::vector<uint32_t>& frames) {
  if (frames.empty()) return std::nullopt;
  for (size_t i = frames.size(); i-- > 0;)
    if (frame_is_python(snapshot.frames[frames[i]])) return i;
  return frames.size() - 1;
}

// The headline's label; a backward allocation's headline is the forward call, outer to the
// joining frame.
std::string headline_text(const Snapshot& snapshot, const std::vector<uint32_t>& frames, size_t at,
                          const FrameFilter& filter) {
  const bool backward = std::any_of(frames.begin() + static_cast<std::ptrdiff_t>(at), frames.end(),
                                    [&](uint32_t frame) { return is_backward_of_forward(snapshot.frames[frame]); });
  return (backward ? "backward of " : "") + frame_label(snapshot.frames[frames[at]], filter);
}

}  // namespace

std::optional<uint32_t> headline_frame(const Snapshot& snapshot, StackIndex stack,
                                       const FrameFilter& filter) {
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, filter);
  const std::optional<size_t> at = headline_position(snapshot, frames);
  if (!at) return std::nullopt;
  return frames[*at];
}

std::string headline_label(const Snapshot& snapshot, StackIndex stack, const FrameFilter& filter) {
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, filter);
  const std::optional<size_t> at = headline_position(snapshot, frames);
  return at ? headline_text(snapshot, frames, *at, filter) : std::string();
}

std::string site_label(const Snapshot& snapshot, StackIndex stack, const FrameFilter& filter) {
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, filter);
  const std::optional<size_t> at = headline_position(snapshot, frames);
  if (!at) return std::string();
  std::string label = headline_text(snapshot, frames, *at, filter);
  if (!frame_is_python(snapshot.frames[frames[*at]]) && *at > 0)
    label += " <- " + frame_label(snapshot.frames[frames[*at - 1]], filter);
  return label;
}

std::string call_site_label(const Snapshot& snapshot, StackIndex stack) {
  if (stack == kNoStackIndex) return "<no stack recorded>";
  const std::vector<uint32_t> frames = visible_frames_outermost_first(snapshot, stack, {});
  const std::optional<size_t> at = headline_position(snapshot, frames);
  if (!at) return "<no visible frames>";
  std::string label = headline_text(snapshot, frames, *at, {});
  if (*at > 0) label += " <- " + frame_label(snapshot.frames[frames[*at - 1]]);
  return label;
}

}  // namespace memsnap
