// An open-addressing hash map from an allocation's address to an object (its block, or the
// device that owns it), for the free path.
//
// std::unordered_map allocates a node per insert; this map stores entries inline (linear
// probing, backward-shift deletion, no tombstones), so allocate/free cost no malloc once it
// has grown. Addresses are never 0, which marks an empty slot. Not thread-safe: the caller
// shards it and holds the shard's lock.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memsnap {

struct Block;

template <typename T>
class AddressMap {
 public:
  AddressMap() : slots_(kInitialCapacity), mask_(kInitialCapacity - 1) {}

  // Returns false (and changes nothing) when `address` is already present. (Inlined into
  // every allocation; growing, the rare part, is not.)
  [[gnu::always_inline]] bool insert(uintptr_t address, T* value) {
    if ((size_ + 1) * 2 > mask_ + 1) grow();
    size_t i = slot_for(address);
    while (slots_[i].address != 0) {
      if (slots_[i].address == address) return false;
      i = (i + 1) & mask();
    }
    slots_[i] = {address, value};
    ++size_;
    return true;
  }

  T* find(uintptr_t address) const {
    for (size_t i = slot_for(address);; i = (i + 1) & mask()) {
      if (slots_[i].address == address) return slots_[i].value;
      if (slots_[i].address == 0) return nullptr;
    }
  }

  // Removes and returns the entry's value, or nullptr when absent.
  T* erase(uintptr_t address) {
    size_t i = slot_for(address);
    while (slots_[i].address != address) {
      if (slots_[i].address == 0) return nullptr;
      i = (i + 1) & mask();
    }
    T* found = slots_[i].value;
    // Shift later entries of the probe run back so that lookups never stop early.
    for (size_t j = (i + 1) & mask(); slots_[j].address != 0; j = (j + 1) & mask()) {
      const size_t home = slot_for(slots_[j].address);
      const bool movable = ((j - home) & mask()) >= ((j - i) & mask());
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = {};
    --size_;
    return found;
  }

  size_t size() const { return size_; }

  template <typename F>
  void for_each(F&& f) const {
    for (const Slot& slot : slots_)
      if (slot.address != 0) f(slot.address, slot.value);
  }

 private:
  struct Slot {
    uintptr_t address = 0;
    T* value = nullptr;
  };
  static constexpr size_t kInitialCapacity = 1024;

  size_t mask() const { return mask_; }
  size_t slot_for(uintptr_t address) const {
    // Addresses are multiples of 512: drop those bits, then mix (Fibonacci hashing).
    return static_cast<size_t>(((address >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & mask();
  }
  [[gnu::noinline]] void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    size_ = 0;
    for (const Slot& slot : old)
      if (slot.address != 0) insert(slot.address, slot.value);
  }

  std::vector<Slot> slots_;
  size_t mask_;  // slots_.size() - 1 (a power of two less one), read on every probe
  size_t size_ = 0;
};

using PointerMap = AddressMap<Block>;

}  // namespace memsnap
