#include "snapshot/snapshot_stacks.h"

#include <utility>

namespace memsnap {
namespace {

std::string frame_key(const std::string& function, const std::string& file, int64_t line) {
  std::string key = function;
  key += '\0';
  key += file;
  key += '\0';
  key += std::to_string(line);
  return key;
}

}  // namespace

SnapshotStackTables::SnapshotStackTables(Snapshot& snapshot) : snapshot_(snapshot) {
  for (size_t i = 0; i < snapshot_.frames.size(); ++i) {
    const Frame& frame = snapshot_.frames[i];
    frame_index_.try_emplace(frame_key(frame.function, frame.file, frame.line), static_cast<uint32_t>(i));
  }
  for (size_t i = 0; i < snapshot_.stacks.size(); ++i)
    stack_index_.try_emplace(snapshot_.stacks[i], static_cast<StackIndex>(i));
}

uint32_t SnapshotStackTables::intern_frame(SourceFrame frame) {
  auto [it, fresh] = frame_index_.try_emplace(frame_key(frame.function, frame.file, frame.line), 0);
  if (fresh) {
    it->second = static_cast<uint32_t>(snapshot_.frames.size());
    snapshot_.frames.push_back({std::move(frame.function), std::move(frame.file), frame.line});
  }
  return it->second;
}

size_t SnapshotStackTables::FramesHash::operator()(const std::vector<uint32_t>& frames) const {
  uint64_t hash = frames.size();
  for (const uint32_t frame : frames) hash = (hash ^ frame) * 0x9E3779B97F4A7C15ull;
  return static_cast<size_t>(hash ^ (hash >> 29));
}

StackIndex SnapshotStackTables::intern_stack(std::vector<uint32_t> frames) {
  auto [it, fresh] = stack_index_.try_emplace(frames, 0);
  if (fresh) {
    it->second = static_cast<StackIndex>(snapshot_.stacks.size());
    snapshot_.stacks.push_back(std::move(frames));
  }
  return it->second;
}

}  // namespace memsnap
