// Stacks read from the user's code down: noise hidden, PyTorch's dispatcher folded into one
// frame per operator, C++ names without their parameter lists, the Python line as headline;
// --all-frames shows every frame as recorded.
#include "viewer/frame_labels.h"

#include <gtest/gtest.h>

#include <optional>

#include <algorithm>
#include <string>
#include <vector>

#include "snapshot/snapshot_loader.h"

namespace frame_labels_test {

using memsnap::short_function_name;

TEST(FrameLabels, CppNamesLoseParametersAndTemplateArguments) {
  EXPECT_EQ(short_function_name("at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>)"),
            "at::detail::empty_cuda");
  EXPECT_EQ(short_function_name("c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<"
                                "c10::CompileTimeFunctionPointer<at::Tensor (c10::ArrayRef<c10::SymInt>), &at::f>, "
                                "at::Tensor, c10::guts::typelist::typelist<c10::ArrayRef<c10::SymInt> > >, at::Tensor "
                                "(c10::ArrayRef<c10::SymInt>)>::call(c10::OperatorKernel*, c10::DispatchKeySet)"),
            "c10::impl::wrap_kernel_functor_unboxed_<…>::call");
  EXPECT_EQ(short_function_name("at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA_empty(c10::ArrayRef<c10::SymInt>)"),
            "at::wrapper_CUDA_empty");
  EXPECT_EQ(short_function_name("std::vector<int, std::allocator<int> >::operator[](unsigned long) const"),
            "std::vector<…>::operator[]");
  EXPECT_EQ(short_function_name("Model::operator()(int) const"), "Model::operator()");
  EXPECT_EQ(short_function_name("bool operator<(Key const&, Key const&)"), "bool operator<");
  EXPECT_EQ(short_function_name("PyEval_EvalCode"), "PyEval_EvalCode");
  // Python names are names, not signatures.
  EXPECT_EQ(short_function_name("<module>"), "<module>");
  EXPECT_EQ(short_function_name("<lambda>"), "<lambda>");
  EXPECT_EQ(short_function_name("forward"), "forward");
  // Unbalanced text is left alone rather than cut wrongly.
  EXPECT_EQ(short_function_name("f<(x"), "f<(x");
}

TEST(FrameLabels, PythonFramesAreTheOnesFromPySources) {
  EXPECT_TRUE(memsnap::frame_is_python({"forward", "/models/modeling_gpt2.py", 57}));
  EXPECT_FALSE(memsnap::frame_is_python({"at::native::empty_cuda", "EmptyTensor.cpp", 0}));
  EXPECT_FALSE(memsnap::frame_is_noise({"PyTorchModel.forward", "model.py", 3}))
      << "a Python function named Py... is the user's";
  EXPECT_TRUE(memsnap::frame_is_noise({"_PyEval_EvalFrameDefault", "??", 0}));
  EXPECT_TRUE(memsnap::frame_is_dispatcher({"at::(anonymous namespace)::wrapper_CUDA_empty(int)", "RegisterCUDA_0.cpp", 0}))
      << "PyTorch 2.11 records generated files without their folder";
  EXPECT_EQ(memsnap::frame_label({"at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>)", "??", 0}),
            "empty_memory_format [dispatcher]");
  EXPECT_EQ(memsnap::frame_label({"at::native::empty_cuda(long)", "/src/EmptyTensor.cpp", 12}),
            "at::native::empty_cuda (EmptyTensor.cpp:12)");
  EXPECT_EQ(memsnap::frame_label({"at::native::empty_cuda(long)", "/src/EmptyTensor.cpp", 12}, {true}),
            "at::native::empty_cuda(long) (EmptyTensor.cpp:12)");
}

// A resnet-style allocation recorded by PyTorch 2.11 with stacks="all": 30 frames.
TEST(FrameLabels, APyTorchStackWithCppFramesReadsInSevenLines) {
  const auto loaded = memsnap::load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h100/oom_all_stacks.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const memsnap::Snapshot& s = loaded.value().snapshot;
  std::optional<memsnap::TraceEntry> alloc;
  for (const memsnap::TraceEntry& e : s.device_traces.at(0))
    if (e.action == memsnap::TraceAction::kAlloc) { alloc = e; break; }
  ASSERT_TRUE(alloc.has_value());
  std::vector<std::string> labels;
  for (uint32_t f : memsnap::visible_frames_outermost_first(s, alloc->stack, {})) labels.push_back(memsnap::frame_label(s.frames[f]));
  EXPECT_EQ(labels, (std::vector<std::string>{
                        "<module> (oom_snapshot.py:8)",
                        "torch::autograd::THPVariable_empty (python_torch_functions_2.cpp)",
                        "empty_memory_format [dispatcher]",
                        "at::native::empty_cuda",
                        "at::detail::empty_cuda",
                        "at::detail::empty_cuda",
                        "at::detail::empty_generic",
                    }));
  const std::optional<uint32_t> headline = memsnap::headline_frame(s, alloc->stack, {});
  ASSERT_TRUE(headline);
  EXPECT_EQ(memsnap::frame_label(s.frames[*headline]), "<module> (oom_snapshot.py:8)");
  EXPECT_EQ(memsnap::visible_frames_outermost_first(s, alloc->stack, {true}).size(),
            s.stacks.at(static_cast<size_t>(alloc->stack)).size());
}

// A backward allocation joined to its forward call (PyTorch's forward_frames) is named by that
// call, as a backward of it.
TEST(FrameLabels, BackwardAllocationsAreNamedByTheirForwardCall) {
  const auto loaded = memsnap::load_snapshot(std::string(MEMSNAP_TEST_DATA_DIR) + "/pytorch-2.11-h100/forward_frames.pickle");
  ASSERT_TRUE(loaded) << loaded.error();
  const memsnap::Snapshot& s = loaded.value().snapshot;
  std::vector<std::string> forward, backward;
  for (const memsnap::TraceEntry& e : s.device_traces.at(0)) {
    if (e.action != memsnap::TraceAction::kAlloc) continue;
    const std::string label = memsnap::headline_label(s, e.stack);
    (label.rfind("backward of ", 0) == 0 ? backward : forward).push_back(label);
  }
  ASSERT_FALSE(forward.empty());
  ASSERT_FALSE(backward.empty());
  EXPECT_EQ(forward.front(), "forward (linear.py:134)");
  EXPECT_NE(std::find(backward.begin(), backward.end(), "backward of forward (linear.py:134)"), backward.end());
  // The mean's gradient: its forward call is the script's own line.
  EXPECT_NE(std::find(backward.begin(), backward.end(), "backward of forward_frames (make_pytorch_test_snapshots.py:61)"),
            backward.end());
  for (const memsnap::TraceEntry& e : s.device_traces.at(0)) {
    if (e.action == memsnap::TraceAction::kAlloc && memsnap::headline_label(s, e.stack).rfind("backward of ", 0) == 0) {
      EXPECT_EQ(memsnap::call_site_label(s, e.stack).rfind("backward of ", 0), 0u);
    }
  }
}

// The frames that start a process or a thread say nothing about who allocated: the C library's
// (named, or unsymbolized as libc.so.6+0x...; glibc's unexported start_thread reads as the
// symbol before it), the loader's, the interpreter binary's, and the C++ and autograd thread
// plumbing. A backward allocation's stack starts at the autograd node, a C++ program's at main.
TEST(FrameLabels, ProcessAndThreadStartFramesFoldAway) {
  memsnap::Snapshot s;
  const std::vector<std::string> start = {
      "_start", "_start+0x24", "__libc_start_call_main", "libc.so.6+0x2a1c9", "__clone3", "__clone+0x44", "clone+0x43",
      "start_thread", "pthread_condattr_setpshared+0x1b0", "execute_native_thread_routine",
      "std::thread::_State_impl<std::thread::_Invoker<std::tuple<void (torch::autograd::Engine::*)(), torch::autograd::Engine*> > >::_M_run()",
      "torch::autograd::Engine::thread_init(int, std::shared_ptr<torch::autograd::ReadyQueue> const&, bool)",
      "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&)",
      "python3.12+0x18216e", "libpython3.12.so.1.0+0x2b50d2", "ld-linux-x86-64.so.2+0x1f2a0"};
  for (const std::string& function : start) {
    EXPECT_TRUE(memsnap::frame_is_noise({function, "", 0})) << function;
  }
  // Names that only contain such a word are the user's.
  for (const char* function : {"restart_thread_pool", "my::clone", "cloned_weights", "python3_loader::load+0x10", "clone(Model const&)",
                                      "at::native::clone(at::Tensor const&, std::optional<c10::MemoryFormat>)"}) {
    EXPECT_FALSE(memsnap::frame_is_noise({function, "", 0})) << function;
  }
  // Innermost first: the allocation, the autograd node, the engine's plumbing, the thread start.
  s.frames = {{"at::native::empty_cuda(c10::ArrayRef<long>)+0x42", "", 0},
              {"torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor>&&)", "Functions.cpp", 12},
              {"torch::autograd::Engine::evaluate_function(std::shared_ptr<torch::autograd::GraphTask>&)", "engine.cpp", 30}};
  for (const std::string& function : start) s.frames.push_back({function, "", 0});
  s.stacks.emplace_back();
  for (uint32_t f = 0; f < s.frames.size(); ++f) s.stacks[0].push_back(f);
  std::vector<std::string> labels;
  for (uint32_t f : memsnap::visible_frames_outermost_first(s, 0, {})) labels.push_back(memsnap::frame_label(s.frames[f]));
  EXPECT_EQ(labels, (std::vector<std::string>{"torch::autograd::Engine::evaluate_function (engine.cpp:30)",
                                              "torch::autograd::generated::MmBackward0::apply (Functions.cpp:12)",
                                              "at::native::empty_cuda"}));
}

TEST(FrameLabels, ShortNamesLoseCloneSuffixesAndOffsets) {
  EXPECT_EQ(short_function_name("void at::native::(anonymous namespace)::addmm_out_cuda_impl(at::Tensor&, at::Tensor const&) [clone .isra.0]"),
            "void at::native::addmm_out_cuda_impl");
  EXPECT_EQ(short_function_name("at::empty(c10::ArrayRef<long>, c10::TensorOptions) [clone .constprop.0]+0x110"), "at::empty");
  EXPECT_EQ(short_function_name("Foo::bar() const [clone .cold]"), "Foo::bar");
  EXPECT_EQ(short_function_name("python3.12+0x18216e"), "python3.12+0x18216e") << "a module and offset is all there is";
}

// Views colour and name an allocation by its call site: the Python line where there is one, and
// for a C++ stack the innermost frame with its caller (every site of a C++ program may allocate
// through one helper).
TEST(FrameLabels, ACppCallSiteNamesTheHelpersCaller) {
  memsnap::Snapshot s;
  s.frames = {{"demo::Loop::allocate(unsigned long)", "model.cpp", 7}, {"demo::forward(demo::Loop&)", "model.cpp", 30},
              {"demo::backward(demo::Loop&)", "model.cpp", 40}, {"main", "main.cpp", 106}, {"_start+0x20", "", 0},
              {"forward", "model.py", 12}, {"<module>", "train.py", 3}};
  s.stacks = {{0, 1, 3, 4}, {0, 2, 3, 4}, {0, 5, 6}, {4}};
  EXPECT_EQ(memsnap::site_label(s, 0), "demo::Loop::allocate (model.cpp:7) <- demo::forward (model.cpp:30)");
  EXPECT_EQ(memsnap::site_label(s, 1), "demo::Loop::allocate (model.cpp:7) <- demo::backward (model.cpp:40)");
  EXPECT_EQ(memsnap::site_label(s, 2), "forward (model.py:12)") << "the Python line alone";
  EXPECT_EQ(memsnap::site_label(s, 3), "") << "nothing visible";
  EXPECT_EQ(memsnap::site_label(s, memsnap::kNoStackIndex), "");
}

}  // namespace frame_labels_test
