#include "history/cfi_unwinder.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "history/stack_capture.h"

#include "history/cfi_rules.h"
#include "history/raw_stack_read.h"
#include "history/stack_bounds.h"

namespace memsnap {
namespace {

// A FrameRule in one word, for the cache. Offsets beyond these widths (frames of
// megabytes) do not fit: such a rule is looked up again at every use.
struct PackedRule {
  static constexpr unsigned kCfaBits = 24, kRbpBits = 18, kReturnBits = 16;
  static constexpr bool fits(int64_t value, unsigned bits) {
    return value >= -(int64_t{1} << (bits - 1)) && value < (int64_t{1} << (bits - 1));
  }
  static std::optional<uint64_t> pack(const FrameRule& rule) {
    if (!fits(rule.cfa_offset, kCfaBits) || !fits(rule.rbp_offset, kRbpBits) ||
        !fits(rule.return_address_offset, kReturnBits))
      return std::nullopt;
    const auto field = [](int32_t value, unsigned bits) {
      return static_cast<uint64_t>(static_cast<uint32_t>(value)) & ((uint64_t{1} << bits) - 1);
    };
    return static_cast<uint64_t>(rule.kind) | uint64_t{rule.cfa_from_rbp} << 2 |
           uint64_t{rule.cfa_deref} << 3 | uint64_t{rule.rbp_saved} << 4 | uint64_t{rule.rbp_from_rbp} << 5 |
           field(rule.cfa_offset, kCfaBits) << 6 | field(rule.rbp_offset, kRbpBits) << (6 + kCfaBits) |
           field(rule.return_address_offset, kReturnBits) << (6 + kCfaBits + kRbpBits);
  }
  static FrameRule unpack(uint64_t word) {
    const auto field = [word](unsigned shift, unsigned bits) {  // sign-extended
      return static_cast<int32_t>(static_cast<int64_t>(word << (64 - shift - bits)) >> (64 - bits));
    };
    FrameRule rule;
    rule.kind = static_cast<FrameRule::Kind>(word & 3);
    rule.cfa_from_rbp = (word >> 2) & 1;
    rule.cfa_deref = (word >> 3) & 1;
    rule.rbp_saved = (word >> 4) & 1;
    rule.rbp_from_rbp = (word >> 5) & 1;
    rule.cfa_offset = field(6, kCfaBits);
    rule.rbp_offset = field(6 + kCfaBits, kRbpBits);
    rule.return_address_offset = field(6 + kCfaBits + kRbpBits, kReturnBits);
    return rule;
  }
};
static_assert(6 + PackedRule::kCfaBits + PackedRule::kRbpBits + PackedRule::kReturnBits == 64);

// Rules by code address, four to a set of one cache line: a model's step walks through
// thousands of distinct return addresses (PyTorch's dispatcher, autograd, the interpreter),
// and a probe that misses the processor's caches is most of a step's cost, so one line holds
// every candidate. A collision costs one more rule lookup, not a wrong answer (the key is
// compared).
class RuleCache {
 public:
  RuleCache() : unloaded_(unloaded_module_count()) {}

  FrameRule rule(uintptr_t pc) {
    // (A multiplicative hash: return addresses cluster, in a few large modules.)
    Set& set = sets_[(pc * 0x9E3779B97F4A7C15ull) >> (64 - kSetBits)];
    for (size_t way = 0; way < kWays; ++way)
      if (set.pc[way] == pc) return PackedRule::unpack(set.rule[way]);
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
  uint64_t generation() const { return generation_; }  // changes when rules are dropped

 private:
  static constexpr unsigned kSetBits = 12;  // 4,096 sets of 4: 256 KiB a thread
  static constexpr size_t kWays = 4;
  struct alignas(64) Set {
    uintptr_t pc[kWays] = {};  // 0: empty (no code lies at address 0)
    uint64_t rule[kWays] = {};
  };
  Set sets_[size_t{1} << kSetBits];
  uint64_t unloaded_;
  uint64_t generation_ = 0;
};

// One earlier walk, step by step: the registers before each step, the stack words each
// step read, and the return address it produced. A walk is a function of the registers it
// starts a step with, the rules (cached per address) and the words it reads; so when a new
// walk reaches a step with the same registers as a remembered one (at whatever depth: two
// operators' paths of different lengths reach the same caller), and every word the
// remembered walk read from there on still holds the same value, the rest of the new walk
// is the remembered one. Checking costs independent loads, where walking costs a chain of
// dependent ones: the outer frames a program's allocations share come almost for free.
struct WalkMemo {
  static constexpr size_t kMaxSteps = kMaxStackDepth + 16;  // skipped frames included
  struct Registers {
    uintptr_t pc, sp, bp;
  };
  struct Word {
    uintptr_t address, value;
  };
  // (What every step of a walk asks of every memo comes first, in one cache line.)
  uint64_t rules_generation = ~uint64_t{0};
  size_t steps = 0;
  size_t word_count = 0;
  // Within the walk under way: the first step whose stack pointer is not below the walk's
  // (steps go up the stack, in both walks); and words below stale_end are known to have
  // changed (one at stale_end - 1), so no step whose words start below it can be taken over.
  size_t cursor = 0;
  size_t stale_end = 0;
  // Ended by itself or at `stop`: nothing beyond `steps` to find. Otherwise it stopped for
  // want of room, and knows nothing past its `steps`.
  bool complete = false;
  StopCode stop;  // where the walk was to end: only walks with the same take it over
  uint64_t last_used = 0;
  // The caller's note on the frames this walk gave, cut with `note_skip` and `note_max`
  // (another cut is other frames: the note starts over).
  StackNote note;
  size_t note_skip = 0;
  size_t note_max = 0;
  // The registers before each step, one array each: the search for a step of a given stack
  // pointer reads the stack pointers alone.
  uintptr_t sp_before[kMaxSteps];
  uintptr_t pc_before[kMaxSteps];
  uintptr_t bp_before[kMaxSteps];
  uint16_t first_word[kMaxSteps];  // words read by step i start here
  uintptr_t produced[kMaxSteps];   // the return address step i found
  Word words[kMaxSteps * 3];

  void set_before(size_t step, const Registers& registers) {
    pc_before[step] = registers.pc;
    sp_before[step] = registers.sp;
    bp_before[step] = registers.bp;
  }

  StackNote* note_for(size_t skip, size_t max_frames) {
    if (note_skip != skip || note_max != max_frames) {
      note = StackNote{};
      note_skip = skip;
      note_max = max_frames;
    }
    return &note;
  }

  // The bits in which a remembered stack word differs from the stack now.
  MEMSNAP_READS_RAW_STACK static uintptr_t changed(const Word& word) {
    return *reinterpret_cast<const volatile uintptr_t*>(word.address) ^ word.value;
  }
  // The step of this walk that a walk now at `registers` can go on as, or kNone: the same
  // registers, and the words read from there on still hold. The words are checked from the
  // outermost in, where two call paths differ when they differ at all; the changed word
  // found is remembered, so that the steps after this one, which would read it too, are
  // passed over without a load (else a new walk inside a known one, whose outer frames
  // differ, would check the same words again at every step).
  MEMSNAP_READS_RAW_STACK size_t step_at(const Registers& registers) {
    while (cursor < steps && sp_before[cursor] < registers.sp) ++cursor;
    if (cursor >= steps || sp_before[cursor] != registers.sp || pc_before[cursor] != registers.pc ||
        bp_before[cursor] != registers.bp || first_word[cursor] < stale_end)
      return kNone;
    for (size_t w = word_count; w-- > first_word[cursor];) {
      if (changed(words[w]) != 0) {
        stale_end = w + 1;
        return kNone;
      }
    }
    return cursor;
  }
  static constexpr size_t kNone = ~size_t{0};
};

struct ThreadWalker {
  static constexpr size_t kMemos = 4;
  const StackBounds stack = thread_stack_bounds();
  RuleCache rules;
  WalkMemo storage[kMemos + 1];
  WalkMemo* memos[kMemos] = {&storage[0], &storage[1], &storage[2], &storage[3]};
  WalkMemo* scratch = &storage[kMemos];  // the walk under way
  uint64_t clock = 0;

  // Keeps the finished walk in scratch in place of the least recently used memo.
  void keep_scratch() {
    WalkMemo** oldest = &memos[0];
    for (WalkMemo*& memo : memos)
      if (memo->last_used < (*oldest)->last_used) oldest = &memo;
    std::swap(*oldest, scratch);
  }
};

ThreadWalker& thread_walker() {
  // On the heap: tens of KiB are too much for every thread's static TLS block.
  thread_local std::unique_ptr<ThreadWalker> walker = std::make_unique<ThreadWalker>();
  return *walker;
}

// Reads a word of the thread's stack at `address` into `value` and remembers it in `memo`;
// false when it lies outside the stack.
MEMSNAP_READS_RAW_STACK bool load(const StackBounds& stack, uintptr_t low, uintptr_t address,
                                  uintptr_t& value, WalkMemo& memo) {
  if (address < low || address < stack.low || address > stack.high - sizeof(uintptr_t) ||
      address % alignof(uintptr_t) != 0)
    return false;
  value = *reinterpret_cast<const volatile uintptr_t*>(address);
  memo.words[memo.word_count++] = {address, value};
  return true;
}

// Hands out the walk's return addresses: the first `skip` are dropped, at most `max` kept.
class FrameSink {
 public:
  FrameSink(uintptr_t* frames, size_t max, size_t skip) : frames_(frames), max_(max), skip_(skip) {}
  void add(uintptr_t pc) {
    if (skip_ > 0)
      --skip_;
    else if (count_ < max_)
      frames_[count_++] = pc;
  }
  void add_all(const uintptr_t* pcs, size_t count) {
    const size_t skipped = std::min(skip_, count);
    skip_ -= skipped;
    const size_t taken = std::min(count - skipped, max_ - count_);
    std::copy_n(pcs + skipped, taken, frames_ + count_);
    count_ += taken;
  }
  size_t count() const { return count_; }

 private:
  uintptr_t* frames_;
  size_t max_;
  size_t skip_;
  size_t count_ = 0;
};

}  // namespace

__attribute__((noinline)) size_t capture_stack_cfi(uintptr_t* frames, size_t max_frames,
                                                   size_t skip, StackNote** note,
                                                   const StopCode& stop) {
  if (note != nullptr) *note = nullptr;
#if defined(__x86_64__)
  WalkMemo::Registers registers;
  // This function's own registers at one instruction: the walk starts from its frame.
  asm volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
               : "=r"(registers.pc), "=r"(registers.sp), "=r"(registers.bp));
  ThreadWalker& walker = thread_walker();
  const StackBounds& stack = walker.stack;
  if (stack.high == 0 || registers.sp < stack.low || registers.sp >= stack.high)
    return kUnsupportedStack;
  const size_t step_limit = std::min(skip + std::min(max_frames, kMaxStackDepth), WalkMemo::kMaxSteps);
  const uint64_t generation = walker.rules.generation();
  FrameSink sink(frames, max_frames, skip);
  WalkMemo& memo = *walker.scratch;
  memo.steps = memo.word_count = 0;
  memo.last_used = ++walker.clock;
  memo.note = StackNote{};
  memo.stop = stop;
  for (WalkMemo* earlier : walker.memos) earlier->cursor = earlier->stale_end = 0;
  auto finish = [&](bool complete) {
    memo.complete = complete;
    memo.rules_generation = generation;
    if (walker.rules.generation() == generation) {
      walker.keep_scratch();  // swaps pointers: `memo` is still this walk
      if (note != nullptr) *note = memo.note_for(skip, max_frames);
    }
    return sink.count();
  };

  for (size_t i = 0; i < step_limit; ++i) {
    for (WalkMemo* earlier : walker.memos) {
      // (Against the rules now: a lookup on the way may have dropped them.)
      if (earlier->rules_generation != walker.rules.generation() || !(earlier->stop == stop)) continue;
      const size_t at = earlier->step_at(registers);
      if (at == WalkMemo::kNone) continue;
      // The rest of this walk is the earlier one's from step `at`, if it knows enough of it.
      const size_t known = earlier->steps - at;
      if (!earlier->complete && known < step_limit - i) continue;
      const size_t taken = std::min(known, step_limit - i);
      earlier->last_used = walker.clock;
      sink.add_all(earlier->produced + at, taken);
      if (i == 0 && at == 0) {  // the same walk again: nothing new to remember
        if (note != nullptr) *note = earlier->note_for(skip, max_frames);
        return sink.count();
      }
      // A new walk that joins a known one: remember it whole.
      const size_t first_word = earlier->first_word[at];
      const size_t word_end = at + taken < earlier->steps ? earlier->first_word[at + taken] : earlier->word_count;
      for (size_t j = 0; j < taken; ++j) {
        memo.set_before(i + j, {earlier->pc_before[at + j], earlier->sp_before[at + j], earlier->bp_before[at + j]});
        memo.produced[i + j] = earlier->produced[at + j];
        memo.first_word[i + j] =
            static_cast<uint16_t>(memo.word_count + earlier->first_word[at + j] - first_word);
      }
      for (size_t w = first_word; w < word_end; ++w) memo.words[memo.word_count++] = earlier->words[w];
      memo.steps = i + taken;
      return finish(earlier->complete && taken == known);
    }
    memo.set_before(i, registers);
    memo.first_word[i] = static_cast<uint16_t>(memo.word_count);
    // A return address is just past its call; the call itself is what the rule is for.
    const FrameRule rule = walker.rules.rule(i == 0 ? registers.pc : registers.pc - 1);
    if (rule.kind == FrameRule::Kind::kUnsupported) return kUnsupportedStack;
    if (rule.kind != FrameRule::Kind::kStep) return finish(true);
    const uintptr_t sp = registers.sp;
    uintptr_t cfa = (rule.cfa_from_rbp ? registers.bp : sp) + static_cast<intptr_t>(rule.cfa_offset);
    if (rule.cfa_deref && !load(stack, sp, cfa, cfa, memo)) return finish(true);
    if (cfa <= sp) return finish(true);  // callers' frames lie above: a rule going down is wrong
    uintptr_t return_address = 0;
    if (!load(stack, sp, cfa + static_cast<intptr_t>(rule.return_address_offset), return_address, memo))
      return finish(true);
    if (rule.rbp_saved &&
        !load(stack, sp, (rule.rbp_from_rbp ? registers.bp : cfa) + static_cast<intptr_t>(rule.rbp_offset),
              registers.bp, memo))
      return finish(true);
    registers.sp = cfa;
    registers.pc = return_address;
    if (return_address == 0) return finish(true);
    memo.produced[i] = return_address;
    memo.steps = i + 1;
    sink.add(return_address);
    if (stop.holds_return_address(return_address)) return finish(true);
  }
  return finish(false);
#else
  (void)frames;
  (void)max_frames;
  (void)skip;
  return kUnsupportedStack;
#endif
}

}  // namespace memsnap
