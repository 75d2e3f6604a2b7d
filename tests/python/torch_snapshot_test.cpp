// The dictionary torch.cuda.memory._snapshot() returns under memsnap.torch, pickled as
// _dump_snapshot pickles it, reads back through memsnap's PyTorch reader (the one checked
// against real PyTorch pickles) as the snapshot it came from: segments, blocks, frames, the
// trace with its out-of-memory entry, annotations, settings.
#include <pybind11/pybind11.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "allocator/caching_allocator.h"
#include "allocator/simulated_backend.h"
#include "history/history_recorder.h"
#include "python/native/torch_snapshot.h"
#include "snapshot/snapshot_builder.h"
#include "snapshot/snapshot_loader.h"

namespace torch_snapshot_test {
namespace py = pybind11;

std::vector<std::string> functions(const memsnap::Snapshot& s, memsnap::StackIndex stack) {
  std::vector<std::string> out;
  if (stack < 0) return out;
  for (uint32_t f : s.stacks.at(static_cast<size_t>(stack))) {
    const memsnap::Frame& frame = s.frames[f];
    out.push_back(frame.function + "@" + (frame.file.empty() ? "??" : frame.file) + ":" +
                  std::to_string(frame.line));
  }
  return out;
}

__attribute__((noinline)) void* allocate_from_here(memsnap::CachingAllocator& allocator, size_t bytes,
                                                   memsnap::StreamId stream = 0) {
  void* p = allocator.allocate(bytes, 0, stream);
  asm volatile("" ::: "memory");
  return p;
}

TEST(TorchLayoutSnapshot, PickledReadsBackAsTheSnapshotItCameFrom) {
  if (!Py_IsInitialized()) Py_Initialize();
  memsnap::SimulatedBackend::Options options;
  options.capacity_bytes = size_t{256} << 20;
  auto backend = std::make_shared<memsnap::SimulatedBackend>(options);
  memsnap::AllocatorConfig config = memsnap::parse_allocator_config("max_split_size_mb:64").value();
  memsnap::CachingAllocator allocator(backend, config);
  memsnap::HistoryRecorder recorder(allocator);
  recorder.configure({memsnap::HistoryLevel::kAll, 1000, true});
  std::vector<void*> held;
  {
    memsnap::ScopedAnnotation phase(recorder, "forward");
    for (size_t i = 1; i <= 5; ++i) held.push_back(allocate_from_here(allocator, i * 700000, i % 2));
    held.push_back(allocate_from_here(allocator, 40u << 20));
  }
  allocator.deallocate(held[1]);
  held.erase(held.begin() + 1);
  EXPECT_THROW(allocate_from_here(allocator, size_t{1} << 30), memsnap::OutOfMemoryError);
  const memsnap::Snapshot original = memsnap::take_snapshot(allocator, &recorder);

  py::dict dict = memsnap::pytorch::to_torch_snapshot(original);
  py::bytes pickled = py::module_::import("pickle").attr("dumps")(dict);
  const auto loaded = memsnap::load_snapshot_from_memory(std::string(pickled));
  ASSERT_TRUE(loaded) << loaded.error();
  ASSERT_EQ(loaded.value().format, memsnap::SnapshotFormat::kPickle);
  const memsnap::Snapshot& back = loaded.value().snapshot;

  ASSERT_EQ(back.segments.size(), original.segments.size());
  size_t active_blocks = 0;
  for (size_t s = 0; s < original.segments.size(); ++s) {
    const auto& want = original.segments[s];
    const auto& got = back.segments[s];
    EXPECT_EQ(got.address, want.address);
    EXPECT_EQ(got.total_size, want.total_size);
    EXPECT_EQ(got.allocated_size, want.allocated_size);
    EXPECT_EQ(got.active_size, want.active_size);
    EXPECT_EQ(got.requested_size, want.requested_size);
    EXPECT_EQ(got.stream, want.stream);
    EXPECT_EQ(got.segment_type, want.segment_type);
    EXPECT_EQ(got.is_expandable, want.is_expandable);
    ASSERT_EQ(got.blocks.size(), want.blocks.size());
    for (size_t b = 0; b < want.blocks.size(); ++b) {
      EXPECT_EQ(got.blocks[b].address, want.blocks[b].address);
      EXPECT_EQ(got.blocks[b].size, want.blocks[b].size);
      EXPECT_EQ(got.blocks[b].requested_size, want.blocks[b].requested_size);
      EXPECT_EQ(got.blocks[b].state, want.blocks[b].state);
      if (want.blocks[b].state != memsnap::BlockState::kInactive) {
        ++active_blocks;
        EXPECT_EQ(functions(back, got.blocks[b].stack), functions(original, want.blocks[b].stack));
        EXPECT_FALSE(functions(back, got.blocks[b].stack).empty());
      }
    }
  }
  EXPECT_EQ(active_blocks, held.size());

  ASSERT_EQ(back.device_traces.size(), 1u);
  const auto& want_trace = original.device_traces[0];
  const auto& got_trace = back.device_traces[0];
  ASSERT_EQ(got_trace.size(), want_trace.size());
  bool saw_oom = false;
  for (size_t i = 0; i < want_trace.size(); ++i) {
    EXPECT_EQ(got_trace[i].action, want_trace[i].action) << i;
    EXPECT_EQ(got_trace[i].address, want_trace[i].address) << i;
    EXPECT_EQ(got_trace[i].size, want_trace[i].size) << i;
    EXPECT_EQ(got_trace[i].stream, want_trace[i].stream) << i;
    EXPECT_EQ(got_trace[i].time_us, want_trace[i].time_us + original.process.clock_offset_us) << i;
    EXPECT_EQ(functions(back, got_trace[i].stack), functions(original, want_trace[i].stack)) << i;
    saw_oom |= want_trace[i].action == memsnap::TraceAction::kOom;
  }
  EXPECT_TRUE(saw_oom);

  ASSERT_EQ(back.external_annotations.size(), 2u);
  EXPECT_EQ(back.external_annotations[0].name, "forward");
  EXPECT_EQ(back.external_annotations[0].stage, "START");
  EXPECT_EQ(back.external_annotations[1].stage, "END");
  bool saw_split = false;
  for (const auto& [key, value] : back.allocator_settings)
    saw_split |= key == "max_split_size" && value == std::to_string(64u << 20);
  EXPECT_TRUE(saw_split);
  for (void* p : held) allocator.deallocate(p);
}

}  // namespace torch_snapshot_test
