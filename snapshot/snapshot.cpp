#include "snapshot/snapshot.h"

#include <algorithm>
#include <array>

namespace memsnap {
namespace {

constexpr std::array<std::string_view, 3> kBlockStateNames = {
    "active_allocated", "active_pending_free", "inactive"};

}  // namespace

size_t forward_joint(const std::vector<Frame>& frames, const std::vector<uint32_t>& stack) {
  size_t joint = 0;
  while (joint < stack.size() && !is_backward_of_forward(frames[stack[joint]])) ++joint;
  return joint;
}

std::string traceback_line(const Frame& frame) {
  return "  File \"" + frame.file + "\", line " + std::to_string(frame.line) + ", in " + frame.function + "\n";
}

std::string_view block_state_name(BlockState state) {
  return kBlockStateNames[static_cast<size_t>(state)];
}

std::optional<BlockState> block_state_from_name(std::string_view name) {
  for (size_t i = 0; i < kBlockStateNames.size(); ++i)
    if (kBlockStateNames[i] == name) return static_cast<BlockState>(i);
  return std::nullopt;
}

namespace {
constexpr std::array<std::string_view, 4> kOutsideKindNames = {"device", "managed", "pinned_host",
                                                               "registered_host"};
constexpr std::array<std::string_view, 3> kOutsideActionNames = {"alloc", "free", "oom"};
}  // namespace

std::string_view outside_kind_name(OutsideKind kind) { return kOutsideKindNames[static_cast<size_t>(kind)]; }

std::optional<OutsideKind> outside_kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kOutsideKindNames.size(); ++i)
    if (kOutsideKindNames[i] == name) return static_cast<OutsideKind>(i);
  return std::nullopt;
}

std::string_view outside_action_name(OutsideAction action) {
  return kOutsideActionNames[static_cast<size_t>(action)];
}

std::optional<OutsideAction> outside_action_from_name(std::string_view name) {
  for (size_t i = 0; i < kOutsideActionNames.size(); ++i)
    if (kOutsideActionNames[i] == name) return static_cast<OutsideAction>(i);
  return std::nullopt;
}

std::vector<int64_t> devices_of(const Snapshot& snapshot) {
  std::vector<int64_t> devices;
  for (size_t d = 0; d < snapshot.device_traces.size(); ++d) devices.push_back(static_cast<int64_t>(d));
  for (const SnapshotSegment& segment : snapshot.segments) devices.push_back(segment.device);
  for (const DeviceInfo& info : snapshot.devices) devices.push_back(info.index);
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  return devices;
}

int64_t busiest_device(const Snapshot& snapshot) {
  size_t busiest = 0;
  for (size_t d = 1; d < snapshot.device_traces.size(); ++d)
    if (snapshot.device_traces[d].size() > snapshot.device_traces[busiest].size()) busiest = d;
  return static_cast<int64_t>(busiest);
}

std::string missing_device_error(const Snapshot& snapshot, int64_t device) {
  const std::vector<int64_t> devices = devices_of(snapshot);
  if (std::binary_search(devices.begin(), devices.end(), device)) return "";
  std::string there;
  for (int64_t d : devices) there += (there.empty() ? "" : ", ") + std::to_string(d);
  return "no device " + std::to_string(device) + " in this snapshot" +
         (devices.empty() ? std::string(" (it describes none)") : " (devices: " + there + ")");
}

}  // namespace memsnap
