// The narrow interface through which layers such as history recording or replay accounting
// watch the allocator, instead of flags scattered through the policy (STYLE.md, "Layers,
// not flags"). Calls are made with the device's allocator lock held, in the order the
// events happen; an observer must be quick and must not call back into the allocator.
#pragma once

#include "allocator/allocator_config.h"
#include "allocator/block.h"
#include "allocator/memory_cap.h"
#include "allocator/out_of_memory.h"

namespace memsnap {

class AllocatorObserver {
 public:
  virtual ~AllocatorObserver() = default;
  virtual void on_alloc(int /*device*/, const Block& /*block*/) {}
  // The program freed the block; it may still be in use on other streams.
  virtual void on_free_requested(int /*device*/, const Block& /*block*/) {}
  // The block's bytes are reusable (called before it merges with free neighbours).
  virtual void on_free_completed(int /*device*/, const Block& /*block*/) {}
  virtual void on_segment_alloc(int /*device*/, const Segment& /*segment*/) {}
  virtual void on_segment_free(int /*device*/, const Segment& /*segment*/) {}
  // Expandable segments: pages [address, address + bytes) of `segment` were mapped (the
  // allocation that needed them follows) or unmapped.
  virtual void on_segment_map(int /*device*/, const Segment& /*segment*/, uintptr_t /*address*/,
                              size_t /*bytes*/) {}
  virtual void on_segment_unmap(int /*device*/, const Segment& /*segment*/, uintptr_t /*address*/,
                                size_t /*bytes*/) {}
  virtual void on_oom(int /*device*/, const OomInfo& /*info*/) {}
  // The settings changed while running (DeviceCachingAllocator::set_config); `config` holds
  // from the next event on. `request` is what the program asked for, when known
  // (_set_allocator_settings' string; update_allocator_config of the old settings with it gives
  // `config`).
  virtual void on_settings_changed(int /*device*/, const AllocatorConfig& /*config*/,
                                   const std::string& /*request*/) {}
  // The cap on reserved memory was set or removed (memory_cap.h); it holds from the next event.
  virtual void on_memory_cap_changed(int /*device*/, const std::optional<MemoryCap>& /*cap*/) {}
};

}  // namespace memsnap
