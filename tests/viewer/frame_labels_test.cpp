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

}  // namespace frame_labels_test
