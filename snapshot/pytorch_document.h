// Turns a PyTorch-shaped snapshot document held in a ValueStore (from a pickle or JSON)
// into the Snapshot model, checking every field's type and naming the path of anything
// wrong (`segments[3].blocks[2].state: unknown block state 'x'`). Also the Lowering that
// shrinks trace entries, frames and stacks into records while a pickle streams in.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "snapshot/pickle_machine.h"
#include "snapshot/snapshot.h"

namespace memsnap {

class PyTorchDocument final : public pickle::Lowering {
 public:
  explicit PyTorchDocument(pickle::ValueStore& store);
  pickle::Value lower(pickle::ValueStore& store, pickle::Value object) override;
  // Reserves for the trace entries an input of this size likely holds (PyTorch writes
  // 80-90 bytes per entry).
  void expect_input_bytes(uint64_t bytes);
  // Builds the snapshot from the document's root; throws std::runtime_error.
  Snapshot convert(pickle::Value root);
  // Throws, as convert would, when `segment` (element `index` of the snapshot's segments, just
  // read) is not one: a reader that knows where it is checks each as it comes.
  void check_segment(pickle::Value segment, size_t index) const;

  // A document for one part of a pickle (`bytes` long) decoded on its own (Machine::run_part): its frames
  // and stacks may name memo entries made before the part (Tag::kOuter), and trace entries
  // that need more than the part (forward_frames) are left unlowered.
  void set_part(uint64_t bytes);
  // A part's document once decoded: keeps only what adopt_part reads (its frames, stacks
  // and trace entries), in no more memory than they take.
  void finish_part();
  // Makes a part's values this document's: adds the part's frames, stacks and trace entries
  // and rewrites `values` (what the part's machine produced: items, memo entries) into this
  // document's store. `memo`: the memo entries before the part, as this document's machine
  // holds them; `outer_strings`: the ones the part read as strings, which must hold the same
  // text here. False, with nothing added, when a value is one this document cannot take.
  bool adopt_part(const PyTorchDocument& part, std::vector<pickle::Value>& values,
                  const std::vector<pickle::Value>& memo,
                  const std::vector<std::pair<uint64_t, pickle::Value>>& outer_strings);

 private:
  enum LoweredKind : uint32_t { kFrameRecord = 1, kStackRecord = 2, kEntryRecord = 3, kBlockRecord = 4 };
  // In a part's document (set_part): a frame id naming an outer memo entry (its index below
  // the bit), and a stack that is an outer memo entry's, stored as {kOuterStack, index}.
  static constexpr uint32_t kOuterFrame = uint32_t{1} << 31;
  static constexpr uint32_t kOuterStack = ~uint32_t{0};
  struct FrameKey {
    uint32_t name, file;
    int64_t line;
    bool operator==(const FrameKey&) const = default;
  };
  struct FrameKeyHash {
    size_t operator()(const FrameKey& k) const {
      return std::hash<uint64_t>()((uint64_t{k.name} << 32 | k.file) ^ static_cast<uint64_t>(k.line) * 0x9E3779B97F4A7C15ull);
    }
  };

  pickle::Value field(const pickle::Object& dict, uint32_t key) const;
  bool has_field(const pickle::Object& dict, uint32_t key) const;
  // Parsers shared by the streaming lowering (quiet: `error` null, failure = not lowered)
  // and the conversion (every failure named).
  bool parse_frame(const pickle::Object& dict, uint32_t& frame, std::string* error);
  bool parse_stack(pickle::Value frames, StackIndex& stack, std::string* error);
  bool parse_entry(const pickle::Object& dict, TraceEntry& entry, std::string* error);
  // A segment's block as PyTorch writes it (address, size, requested_size, state and frames,
  // nothing else), lowered while streaming: a snapshot without a trace is mostly blocks, and a
  // record of 40 bytes holds one where its dict took some 200. False (quiet) for anything else,
  // which the conversion reads (and names what is wrong with).
  struct BlockRecord {
    uint64_t address, size, requested_size;
    int64_t stack;
    BlockState state;
  };
  bool parse_block(const pickle::Object& dict, BlockRecord& block);
  // The stack continued by a "forward_frames" list (traceback lines of the forward call, as
  // PyTorch records them for backward allocations under anomaly mode) past a
  // kBackwardOfForwardFunction frame; unchanged when there is none. Lines that are not
  // traceback lines become frames of their own text.
  StackIndex with_forward_frames(StackIndex stack, pickle::Value forward_frames);
  uint32_t forward_frame(std::string_view line);
  uint32_t intern_frame(const FrameKey& key);
  StackIndex intern_stack(const std::vector<uint32_t>& frames);

  // conversion
  const pickle::Object& dict_at(pickle::Value v, const std::string& where) const;
  const pickle::Object& list_at(pickle::Value v, const std::string& where) const;
  uint64_t uint_field(const pickle::Object& dict, uint32_t key, const std::string& where,
                      uint64_t fallback, bool required = false) const;
  int64_t int_field(const pickle::Object& dict, uint32_t key, const std::string& where,
                    int64_t fallback) const;
  std::optional<int64_t> optional_int_field(const pickle::Object& dict, uint32_t key, const std::string& where) const;
  std::string string_field(const pickle::Object& dict, uint32_t key, const std::string& where,
                           std::string fallback) const;
  StackIndex stack_field(const pickle::Object& dict, uint32_t key, const std::string& where);
  SnapshotSegment convert_segment(pickle::Value v, const std::string& where);
  SnapshotBlock convert_block(pickle::Value v, uint64_t expected_address, const std::string& where);
  DeviceTrace convert_trace(pickle::Value v, const std::string& where);
  void convert_extras(const pickle::Object& root, Snapshot& out);
  // What only memsnap's JSON export holds beside PyTorch's keys (memsnap_json_extras.cpp): the
  // trace state changes, the driver's figures, memory outside the allocator.
  void convert_memsnap_extras(const pickle::Object& root, Snapshot& out);

  pickle::ValueStore& store_;
  // Interned key names.
  uint32_t k_action_, k_addr_, k_device_free_, k_size_, k_stream_, k_time_us_, k_frames_, k_name_,
      k_filename_, k_line_, k_segments_, k_device_traces_, k_allocator_settings_,
      k_external_annotations_, k_device_, k_address_, k_total_size_, k_allocated_size_,
      k_active_size_, k_requested_size_, k_segment_type_, k_segment_pool_id_, k_is_expandable_,
      k_blocks_, k_state_, k_history_, k_real_size_, k_stage_, k_source_, k_format_, k_process_, k_devices_,
      k_statistics_, k_host_, k_pid_, k_rank_, k_local_rank_, k_world_size_, k_time_unix_us_, k_clock_offset_us_, k_index_,
      k_total_memory_, k_forward_frames_, k_memsnap_, k_memory_cap_, k_library_;
  std::vector<FrameKey> frames_;
  std::unordered_map<FrameKey, uint32_t, FrameKeyHash> frame_ids_;
  std::vector<std::vector<uint32_t>> stacks_;
  std::unordered_map<std::string, StackIndex> stack_ids_;  // by the frame ids' bytes
  // In a part: the stacks that are outer memo entries, by index (most of a memsnap-written
  // pickle's entries name their stack that way, each one a lookup here).
  std::unordered_map<uint32_t, StackIndex> outer_stack_ids_;
  DeviceTrace entries_;
  std::vector<BlockRecord> blocks_;
  bool pytorch_source_ = true;  // a PyTorch file, not memsnap's JSON export
  std::vector<uint32_t> scratch_frames_;
  // A forward_frames list's frames, innermost first after the joining frame, by its object
  // (PyTorch shares one list among the events of one autograd node).
  std::unordered_map<uint64_t, std::vector<uint32_t>> forward_suffixes_;
  // A trace entry's record, charged to the store's budget: a DeviceTrace row (24 bytes) and
  // a growing table's spare room.
  static constexpr uint64_t kEntryCost = 32;
  static constexpr size_t kMaxForwardFrames = 256;        // of one forward call, innermost kept
  static constexpr size_t kMaxJoinedFrames = size_t{1} << 25;  // in all joined stacks (128 MiB)
  size_t joined_frames_ = 0;
  uint64_t joined_bytes_ = 0;  // what they were charged
  // The action a string id names (-1 unknown, -2 not looked up yet): one lookup per
  // distinct string instead of a name comparison per entry.
  std::vector<int8_t> action_by_string_;
  std::optional<TraceAction> action_named(pickle::Value name);
  bool part_ = false;
  bool can_adopt(const PyTorchDocument& part, const std::vector<pickle::Value>& values,
                 const std::vector<pickle::Value>& memo,
                 const std::vector<std::pair<uint64_t, pickle::Value>>& outer_strings) const;
};

}  // namespace memsnap
