// A PyTorchDocument for one part of a pickle decoded on its own, and taking such a part's
// records into the document of the whole (pytorch_parallel_read.h).
#include <vector>

#include "snapshot/pytorch_document.h"

namespace memsnap {

using pickle::Tag;
using pickle::Value;

void PyTorchDocument::set_part(uint64_t bytes) {
  part_ = true;
  entries_.reserve(static_cast<size_t>(bytes / 64));  // no huge pages: parts are small
}

void PyTorchDocument::finish_part() {
  // (The records stay where they are: a copy to trim them would touch fresh memory, and only
  // the few parts decoded ahead of the reading thread wait at once.)
  decltype(frame_ids_)().swap(frame_ids_);
  decltype(stack_ids_)().swap(stack_ids_);
  decltype(outer_stack_ids_)().swap(outer_stack_ids_);
  decltype(forward_suffixes_)().swap(forward_suffixes_);
  std::vector<uint32_t>().swap(scratch_frames_);
}

bool PyTorchDocument::can_adopt(const PyTorchDocument& part, const std::vector<Value>& values,
                                const std::vector<Value>& memo,
                                const std::vector<std::pair<uint64_t, Value>>& outer_strings) const {
  auto outer_is = [&](uint64_t index, uint32_t kind) {
    return index < memo.size() && memo[index].is(Tag::kLowered) && memo[index].lowered_kind() == kind;
  };
  for (const auto& [index, v] : outer_strings)
    if (index >= memo.size() || memo[index].tag() != v.tag() || store_.text(memo[index]) != part.store_.text(v))
      return false;
  for (const std::vector<uint32_t>& stack : part.stacks_) {
    if (stack.size() == 2 && stack[0] == kOuterStack) {
      if (!(outer_is(stack[1], kStackRecord) ||
            (stack[1] < memo.size() && (memo[stack[1]].is(Tag::kEmptyList) || memo[stack[1]].is(Tag::kNone)))))
        return false;
      continue;
    }
    for (const uint32_t id : stack)
      if ((id & kOuterFrame) != 0 && !outer_is(id & ~kOuterFrame, kFrameRecord)) return false;
  }
  // An outer memo entry that is still an object (complete, but not yet a record) would be
  // lowered, or marked shared, when one thread fetched it, in the middle of the part's
  // records; taken in whole, it would miss both. Such a part is read in order.
  for (const Value v : values) {
    if (v.is(Tag::kObject)) return false;
    if (v.is(Tag::kOuter) && (v.payload() >= memo.size() || memo[v.payload()].is(Tag::kObject))) return false;
  }
  return true;
}

bool PyTorchDocument::adopt_part(const PyTorchDocument& part, std::vector<Value>& values,
                                 const std::vector<Value>& memo,
                                 const std::vector<std::pair<uint64_t, Value>>& outer_strings) {
  if (!can_adopt(part, values, memo, outer_strings)) return false;
  const pickle::ValueStore& from = part.store_;
  constexpr uint32_t kUnset = ~uint32_t{0};
  std::vector<uint32_t> strings(from.string_count(), kUnset);
  auto string_id = [&](uint64_t id) {
    uint32_t& here = strings[static_cast<size_t>(id)];
    if (here == kUnset) here = store_.intern(from.text(static_cast<uint32_t>(id)));
    return here;
  };
  std::vector<uint32_t> frames(part.frames_.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    const FrameKey& key = part.frames_[i];
    frames[i] = intern_frame({string_id(key.name), string_id(key.file), key.line});
  }
  std::vector<StackIndex> stacks(part.stacks_.size());
  for (size_t i = 0; i < stacks.size(); ++i) {
    const std::vector<uint32_t>& stack = part.stacks_[i];
    if (stack.size() == 2 && stack[0] == kOuterStack) {
      const Value v = memo[stack[1]];
      stacks[i] = v.is(Tag::kLowered) ? static_cast<StackIndex>(v.lowered_index()) : kNoStackIndex;
      continue;
    }
    scratch_frames_.clear();
    for (const uint32_t id : stack)
      scratch_frames_.push_back((id & kOuterFrame) != 0 ? static_cast<uint32_t>(memo[id & ~kOuterFrame].lowered_index())
                                                        : frames[id]);
    stacks[i] = intern_stack(scratch_frames_);
  }
  const size_t first_entry = entries_.size();
  store_.charge(kEntryCost * part.entries_.size());
  for (TraceEntry entry : part.entries_) {
    if (entry.stack != kNoStackIndex) entry.stack = static_cast<int32_t>(stacks[static_cast<size_t>(entry.stack)]);
    entries_.push_back(entry);
  }
  for (Value& v : values) {
    switch (v.tag()) {
      case Tag::kString:
      case Tag::kBytes: v = Value::make(v.tag(), string_id(v.payload())); break;
      case Tag::kWideInt: {
        int64_t n = 0;
        from.get_int64(v, n);
        v = store_.integer(n);
        break;
      }
      case Tag::kWideUInt: {
        uint64_t n = 0;
        from.get_uint64(v, n);
        v = store_.unsigned_integer(n);
        break;
      }
      case Tag::kFloat: v = store_.floating(from.floating_value(v)); break;
      case Tag::kOuter: v = memo[v.payload()]; break;
      case Tag::kLowered:
        if (v.lowered_kind() == kFrameRecord) v = Value::lowered(kFrameRecord, frames[v.lowered_index()]);
        else if (v.lowered_kind() == kStackRecord)
          v = Value::lowered(kStackRecord, static_cast<uint64_t>(stacks[v.lowered_index()]));
        else if (v.lowered_kind() == kEntryRecord) v = Value::lowered(kEntryRecord, first_entry + v.lowered_index());
        break;
      default: break;
    }
  }
  return true;
}

}  // namespace memsnap
