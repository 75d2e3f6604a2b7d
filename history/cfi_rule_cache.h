// The stack walker's cache of frame rules (cfi_rules.h) by code address, one per thread;
// included by cfi_unwinder.cpp alone.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "history/cfi_rules.h"

namespace memsnap {

// A FrameRule in one word, for the cache, laid out so that each field is one sign-extending
// move: the CFA offset in the low 32 bits, the saved %rbp's offset in the next 16, the return
// address's in the next 8, the kind and flags in the top byte. A rule whose offsets do not
// fit (frames of more than 32 KiB between %rbp's slot and the CFA) is looked up again at
// every use.
struct PackedRule {
  static std::optional<uint64_t> pack(const FrameRule& rule) {
    if (rule.rbp_offset != static_cast<int16_t>(rule.rbp_offset) ||
        rule.return_address_offset != static_cast<int8_t>(rule.return_address_offset))
      return std::nullopt;
    const uint64_t flags = static_cast<uint64_t>(rule.kind) | uint64_t{rule.cfa_from_rbp} << 2 |
                           uint64_t{rule.cfa_deref} << 3 | uint64_t{rule.rbp_saved} << 4 |
                           uint64_t{rule.rbp_from_rbp} << 5;
    return uint64_t{static_cast<uint32_t>(rule.cfa_offset)} |
           uint64_t{static_cast<uint16_t>(rule.rbp_offset)} << 32 |
           uint64_t{static_cast<uint8_t>(rule.return_address_offset)} << 48 | flags << 56;
  }
  static FrameRule unpack(uint64_t word) {
    const auto flags = static_cast<unsigned>(word >> 56);
    FrameRule rule;
    rule.kind = static_cast<FrameRule::Kind>(flags & 3);
    rule.cfa_from_rbp = (flags >> 2) & 1;
    rule.cfa_deref = (flags >> 3) & 1;
    rule.rbp_saved = (flags >> 4) & 1;
    rule.rbp_from_rbp = (flags >> 5) & 1;
    rule.cfa_offset = static_cast<int32_t>(static_cast<uint32_t>(word));
    rule.rbp_offset = static_cast<int16_t>(static_cast<uint16_t>(word >> 32));
    rule.return_address_offset = static_cast<int8_t>(static_cast<uint8_t>(word >> 48));
    return rule;
  }
};

// Rules by code address, four to a set of one cache line: a model's step walks through
// thousands of distinct return addresses (PyTorch's dispatcher, autograd, the interpreter),
// and a probe that misses the processor's caches is most of a step's cost, so one line holds
// every candidate. A collision costs one more rule lookup, not a wrong answer (the key is
// compared).
class RuleCache {
 public:
  RuleCache() : unloaded_(unloaded_module_count()) {}

  FrameRule rule(uintptr_t pc) {
    Set& set = set_of(pc);
    // Every way compared and the match selected without a branch: which way holds an
    // address differs from step to step, and a mispredicted branch costs more than the probe.
    static_assert(kWays == 4);
    const bool match[kWays] = {set.pc[0] == pc, set.pc[1] == pc, set.pc[2] == pc, set.pc[3] == pc};
    uint64_t packed = match[1] ? set.rule[1] : set.rule[0];
    packed = match[2] ? set.rule[2] : packed;
    packed = match[3] ? set.rule[3] : packed;
    if (__builtin_expect(match[0] | match[1] | match[2] | match[3], 1)) return PackedRule::unpack(packed);
    return miss(set, pc);
  }
  uint64_t generation() const { return generation_; }  // changes when rules are dropped

 private:
  static constexpr unsigned kSetBits = 12;  // 4,096 sets of 4: 256 KiB a thread
  static constexpr size_t kWays = 4;
  struct alignas(64) Set {
    uintptr_t pc[kWays] = {};  // 0: empty (no code lies at address 0)
    uint64_t rule[kWays] = {};
  };

  // (A multiplicative hash: return addresses cluster, in a few large modules.)
  Set& set_of(uintptr_t pc) { return sets_[(pc * 0x9E3779B97F4A7C15ull) >> (64 - kSetBits)]; }

  __attribute__((noinline)) FrameRule miss(Set& set, uintptr_t pc) {
    // A miss is the slow path anyway: see whether modules were unloaded since the rules
    // were read, and start over if so.
    const uint64_t unloaded = unloaded_module_count();
    if (unloaded != unloaded_) {
      unloaded_ = unloaded;
      ++generation_;
      for (Set& s : sets_) s = Set{};
    }
    const FrameRule found = find_frame_rule(pc);
    if (const std::optional<uint64_t> packed = PackedRule::pack(found)) {
      // The newest first; the oldest of the set makes room.
      std::copy_backward(set.pc, set.pc + kWays - 1, set.pc + kWays);
      std::copy_backward(set.rule, set.rule + kWays - 1, set.rule + kWays);
      set.pc[0] = pc;
      set.rule[0] = *packed;
    }
    return found;
  }

  Set sets_[size_t{1} << kSetBits];
  uint64_t unloaded_;
  uint64_t generation_ = 0;
};

}  // namespace memsnap
