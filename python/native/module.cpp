// memsnap._native: the functions behind memsnap.torch (python/src/memsnap/torch.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "allocator/device_stats.h"
#include "history/recording_environment.h"
#include "python/native/fit_estimate_binding.h"
#include "python/native/outside_memory.h"
#include "python/native/python_frames.h"
#include "python/native/record_function_annotations.h"
#include "python/native/torch_allocator.h"
#include "python/native/torch_snapshot.h"
#include "snapshot/environment_recording.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_file.h"

namespace memsnap::pytorch {
namespace py = pybind11;
namespace {

TorchAllocator& require_installed() {
  TorchAllocator* allocator = installed_allocator();
  if (allocator == nullptr)
    throw std::runtime_error("memsnap is not PyTorch's allocator: call memsnap.torch.install() first");
  if (c10::cuda::CUDACachingAllocator::get() != allocator)
    throw std::runtime_error("memsnap is not PyTorch's allocator any more: " +
                             c10::cuda::CUDACachingAllocator::get()->name() + " serves this process");
  return *allocator;
}

uint32_t action_bits(const std::vector<std::string>& names) {
  uint32_t bits = 0;
  for (const std::string& name : names) {
    const std::optional<TraceAction> action = trace_action_from_name(name);
    if (!action) throw std::invalid_argument("unknown trace action '" + name + "' in skip_actions");
    bits |= 1u << static_cast<unsigned>(*action);
  }
  return bits;
}

// level: off|state|alloc|all; stacks: all|python|cpp|none; context (which records carry a
// stack, as PyTorch's `context`): state|alloc|all.
void record_history(const std::string& level, const std::string& stacks, size_t max_entries,
                    bool clear, const std::vector<std::string>& skip_actions, const std::string& context) {
  const std::optional<HistoryLevel> parsed = history_level_from_name(level);
  if (!parsed) throw std::invalid_argument("level must be one of off, state, alloc, all; got '" + level + "'");
  HistorySettings settings;
  settings.level = *parsed;
  const std::optional<StackChoice> choice = stack_choice_from_name(stacks);
  if (!choice) throw std::invalid_argument("stacks must be one of all, python, cpp, none; got '" + stacks + "'");
  settings.cpp_stacks = *choice == StackChoice::kAll || *choice == StackChoice::kCpp;
  settings.interpreter_stacks = *choice == StackChoice::kAll || *choice == StackChoice::kPython;
  if (settings.interpreter_stacks && !python::frames_supported())
    throw std::runtime_error(python::frames_unsupported_reason() +
                             "; use stacks=\"cpp\" or stacks=\"none\"");
  if (max_entries == 0) throw std::invalid_argument("max_entries must be at least 1");
  settings.max_entries = max_entries;
  settings.skipped_actions = action_bits(skip_actions);
  if (context == "state") settings.stack_context = StackContext::kState;
  else if (context == "alloc") settings.stack_context = StackContext::kAlloc;
  else if (context == "all") settings.stack_context = StackContext::kAll;
  else throw std::invalid_argument("context must be one of state, alloc, all; got '" + context + "'");
  TorchAllocator& torch = require_installed();
  const bool outside = settings.level != HistoryLevel::kOff && outside_memory_wanted();
  HistoryRecorder& recorder = torch.recorder();
  py::gil_scoped_release unlocked;
  if (clear) recorder.clear();
  recorder.configure(settings);
  torch.forget_context_recorder();  // memsnap's own frames answer the snapshots
  // Memory outside the allocator is recorded while history is (outside_memory.h).
  if (outside) {
    const std::string reason = start_outside_memory(
        settings.interpreter_stacks ? recorder.interpreter_frames() : nullptr, max_entries);
    static bool said = false;
    if (!reason.empty() && !said) {
      said = true;
      std::fprintf(stderr, "memsnap: memory outside the allocator is not recorded: %s\n", reason.c_str());
    }
  } else {
    stop_outside_memory();
  }
}

py::dict history_settings() {
  const HistorySettings settings = require_installed().recorder().settings(0);
  py::dict out;
  out["level"] = std::string(history_level_name(settings.level));
  out["stacks"] = settings.cpp_stacks ? (settings.interpreter_stacks ? "all" : "cpp")
                                      : (settings.interpreter_stacks ? "python" : "none");
  out["max_entries"] = settings.max_entries;
  return out;
}

// memsnap.torch.dump_snapshot (msgpack, or PyTorch's pickle for a .pickle path) and
// torch.cuda.memory._dump_snapshot (PyTorch's pickle, whatever the name ends in).
void dump(const std::string& path, bool always_pickle) {
  TorchAllocator& torch = require_installed();
  std::optional<std::string> error;
  {
    py::gil_scoped_release unlocked;
    SnapshotOptions options = torch.snapshot_options();
    options.mark_in_trace = !always_pickle;  // PyTorch's _dump_snapshot marks nothing
    error = always_pickle ? dump_pytorch_pickle(torch.allocator(), &torch.recorder(), path, options)
                          : dump_snapshot(torch.allocator(), &torch.recorder(), path, options);
  }
  if (error) throw std::runtime_error(*error);
}

py::dict torch_layout_snapshot(bool include_traces) {
  TorchAllocator& torch = require_installed();
  Snapshot snapshot;
  {
    py::gil_scoped_release unlocked;
    SnapshotOptions options = torch.snapshot_options();
    options.include_traces = include_traces;
    options.mark_in_trace = false;  // as PyTorch's _snapshot()
    // Memory outside the allocator rides in the dictionary's 'memsnap' string (pickle_extras.h),
    // so a snapshot pickled by its caller (pickle.dump(_snapshot(), f)) keeps it too.
    snapshot = take_snapshot(torch.allocator(), &torch.recorder(), options);
  }
  return to_torch_snapshot(snapshot);
}

py::dict memory_stats(int device) {
  TorchAllocator& torch = require_installed();
  CachingAllocator& allocator = torch.allocator();
  if (device < 0 || device >= allocator.device_count())
    throw std::out_of_range("no CUDA device " + std::to_string(device));
  py::dict out;
  for (const auto& [key, value] : to_memory_stats(allocator.device_stats(device))) out[py::str(key)] = value;
  return out;
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "memsnap's native side for memsnap.torch";
  python::watch_code_objects();  // (the GIL is held here, as the watcher needs)
  add_fit_estimate_functions(m);
  m.def("install", [](std::optional<std::string> settings) { install(settings); },
        py::arg("settings") = py::none());
  m.def("is_installed", [] {
    TorchAllocator* mine = installed_allocator();
    return mine != nullptr && c10::cuda::CUDACachingAllocator::get() == mine;
  });
  m.def("settings", [] { return require_installed().config().source; });
  m.def("apply_settings", [](const std::string& request) {
    TorchAllocator& torch = require_installed();
    py::gil_scoped_release unlocked;
    torch.apply_settings(request);
  }, py::arg("request"));
  m.def("recording_environment", [] {
    const Result<RecordingEnvironment> environment = recording_environment();
    if (!environment) throw py::value_error(environment.error());
    if (auto problem = recording_output_problem(environment.value())) throw py::value_error(*problem);
    py::dict out;
    out["level"] = std::string(history_level_name(environment->level));
    out["stacks"] = environment->stacks ? py::object(py::str(std::string(stack_choice_name(*environment->stacks))))
                                        : py::object(py::none());
    out["max_entries"] = environment->max_entries;
    out["oom_snapshot"] = environment->oom_snapshot;
    out["snapshot_at_exit"] = environment->snapshot_at_exit;
    return out;
  });
  m.def("record_history", &record_history, py::arg("level"), py::arg("stacks"),
        py::arg("max_entries"), py::arg("clear") = false,
        py::arg("skip_actions") = std::vector<std::string>{}, py::arg("context") = std::string("all"));
  m.def("follow_record_functions", &follow_record_functions, py::arg("on"));
  m.def("history_settings", &history_settings);
  m.def("yield_cupti_to_profiler", [] {
    stop_outside_memory(
        "torch.profiler took CUPTI's callbacks, which a process has one of, to trace the GPU; memory outside "
        "the allocator was recorded until the profiler started (set MEMSNAP_OUTSIDE_MEMORY=0 to leave CUPTI to "
        "the profiler from the start)");
  });
  m.def("outside_memory_status", [] {
    py::dict out;
    out["recording"] = outside_memory_recording();
    out["unrecorded_reason"] = outside_memory_unrecorded_reason();
    return out;
  });
  m.def("dump_snapshot", [](const std::string& path) { dump(path, false); }, py::arg("path"));
  m.def("dump_pickle", [](const std::string& path) { dump(path, true); }, py::arg("path"));
  m.def("dump_snapshot_on_oom", [](std::string pattern) {
    TorchAllocator& torch = require_installed();
    if (!pattern.empty())
      if (auto problem = dump_pattern_problem(pattern, torch.snapshot_options())) throw py::value_error(*problem);
    torch.set_oom_snapshot_pattern(std::move(pattern));
  });
  m.def("set_job_place", [](std::optional<int64_t> rank, std::optional<int64_t> world_size) {
    if (rank && *rank < 0) throw std::invalid_argument("rank must be at least 0, not " + std::to_string(*rank));
    if (world_size && (*world_size < 1 || (rank && *rank >= *world_size)))
      throw std::invalid_argument("world size " + std::to_string(*world_size) + " does not hold rank " +
                                  (rank ? std::to_string(*rank) : std::string("0")));
    JobPlace place;
    place.rank = rank;
    place.world_size = world_size;
    require_installed().set_job_place(place);
  }, py::arg("rank"), py::arg("world_size"));
  m.def("annotate", [](const std::string& name, bool start) {
    require_installed().recorder().annotate(name, start);
  });
  m.def("torch_snapshot", &torch_layout_snapshot, py::arg("include_traces") = true);
  m.def("memory_stats", &memory_stats, py::arg("device"));
  m.def("watching_code_objects", [] { return python::watch_code_objects(); });
  m.def("python_frames_supported", [] {
    return py::make_tuple(python::frames_supported(), python::frames_unsupported_reason());
  });
}

}  // namespace memsnap::pytorch
