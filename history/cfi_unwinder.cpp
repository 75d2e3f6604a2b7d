#include "history/cfi_unwinder.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>
#include <type_traits>

#include "history/stack_capture.h"

#include "history/cfi_rule_cache.h"
#include "history/cfi_rules.h"
#include "history/raw_stack_read.h"
#include "history/stack_bounds.h"

namespace memsnap {
namespace {

// One earlier walk, step by step: the registers before each step, the stack words each
// step read, and the return address it produced. A walk is a function of the registers it
// starts a step with, the rules (cached per address) and the words it reads; so when a new
// walk reaches a step with the same registers as a remembered one (at whatever depth: two
// operators' paths of different lengths reach the same caller), and every word the
// remembered walk read from there on still holds the same value, the rest of the new walk
// is the remembered one. Checking costs independent loads, where walking costs a chain of
// dependent ones: the outer frames a program's allocations share come almost for free.
//
// Only what the rest of the walk depends on is compared. Code built without frame pointers
// uses %rbp as an ordinary register: the word a function saved it in holds whatever its
// caller kept there (a loop counter, a tensor), different at every call, though no step
// above reads %rbp. Such a word, and %rbp before a step, count only where a later step
// computes its CFA or finds the saved %rbp from %rbp before a step restores it.
struct WalkMemo {
  static constexpr size_t kMaxSteps = kMaxStackDepth + 16;  // skipped frames included
  struct Registers {
    uintptr_t pc, sp, bp;
  };
  struct Word {
    uintptr_t address, value;
  };
  uint64_t rules_generation = ~uint64_t{0};
  size_t steps = 0;
  size_t word_count = 0;
  // Ended by itself or at `stop`: nothing beyond `steps` to find. Otherwise it stopped for
  // want of room, and knows nothing past its `steps`.
  bool complete = false;
  // Whether the way the walk ended depends on %rbp after its last step (a step that failed
  // after reading it).
  bool end_reads_bp = false;
  StopCode stop;  // where the walk was to end: only walks with the same take it over
  // During walk number `stale_walk`, words below stale_end are known to have changed (one
  // at stale_end - 1): no step whose words start below it can be taken over.
  uint64_t stale_walk = 0;
  size_t stale_end = 0;
  // The caller's note on the frames this walk gave, cut with `note_skip` and `note_max`
  // (another cut is other frames: the note starts over).
  StackNote note;
  size_t note_skip = 0;
  size_t note_max = 0;
  // bp_flags: kReadsBp, the step's rule reads %rbp before it; kSetsBp, its rule sets %rbp
  // from a stack word (the saved_bp-th word of the step, kNoWord once left out); kBpMatters,
  // the rest of the walk depends on %rbp before the step.
  static constexpr uint8_t kReadsBp = 1, kSetsBp = 2, kBpMatters = 4;
  static constexpr uint8_t kNoWord = 0xFF;
  // One step, together: checking whether a walk joins this one at a step reads one record,
  // not a line of each of six arrays (a memo is far from the caches when it is checked).
  struct Step {
    Registers before;
    uint16_t first_word;  // the words the step read start here
    uint8_t bp_flags;
    uint8_t saved_bp;
  };
  Step record[kMaxSteps];
  // The return address step i found, apart: a walk taken over hands them all out, eight to
  // a line.
  uintptr_t produced[kMaxSteps];
  Word words[kMaxSteps * 3];

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
  // Whether this walk's first `count` steps gave the return addresses `other`'s gave.
  bool same_start(const WalkMemo& other, size_t count) const {
    return std::equal(produced, produced + count, other.produced);
  }

  // Once the walk is done: which steps depend on %rbp before them, and the saved-%rbp words
  // nothing depends on left out of the words to check.
  void settle_bp() {
    bool matters = end_reads_bp;  // after the last step
    bool keep_word[kMaxSteps];
    for (size_t step = steps; step-- > 0;) {
      keep_word[step] = matters;
      uint8_t& flags = record[step].bp_flags;
      matters = (flags & kReadsBp) || (!(flags & kSetsBp) && matters);
      flags = static_cast<uint8_t>((flags & ~kBpMatters) | (matters ? kBpMatters : 0));
    }
    size_t kept = 0;
    for (size_t step = 0; step < steps; ++step) {
      Step& at = record[step];
      const size_t begin = at.first_word;
      const size_t end = step + 1 < steps ? record[step + 1].first_word : word_count;
      at.first_word = static_cast<uint16_t>(kept);
      for (size_t w = begin; w < end; ++w)
        if (keep_word[step] || w - begin != at.saved_bp) words[kept++] = words[w];
      if (!keep_word[step]) at.saved_bp = kNoWord;
    }
    word_count = kept;
  }
  // Whether walk number `walk`, now at `registers`, can go on as this walk from `step`: the
  // same registers there, and the words read from there on still hold. The words are
  // checked from the outermost in, where two call paths differ when they differ at all; the
  // changed word found is remembered, so that later steps, which would read it too, are
  // passed over without a load.
  MEMSNAP_READS_RAW_STACK bool continues(size_t step, const Registers& registers, uint64_t walk) {
    if (step >= steps) return false;
    const Step& at = record[step];
    if (at.before.sp != registers.sp || at.before.pc != registers.pc ||
        ((at.bp_flags & kBpMatters) && at.before.bp != registers.bp) ||
        (stale_walk == walk && at.first_word < stale_end))
      return false;
    // Four words to a branch: a walk that goes on as this one is the common case, and its
    // check is then independent loads with one test per group.
    size_t w = word_count;
    for (; w >= at.first_word + 4u; w -= 4) {
      if ((changed(words[w - 1]) | changed(words[w - 2]) | changed(words[w - 3]) |
           changed(words[w - 4])) != 0)
        return mark_stale(w, w - 4, walk);
    }
    for (; w > at.first_word; --w)
      if (changed(words[w - 1]) != 0) return mark_stale(w, w - 1, walk);
    return true;
  }
  // Words [begin, end) hold one that changed: the outermost of them marks the stale ones.
  MEMSNAP_READS_RAW_STACK bool mark_stale(size_t end, size_t begin, uint64_t walk) {
    size_t outermost = begin;  // (read again, a word may have changed back: then the first)
    for (size_t w = end; w > begin; --w) {
      if (changed(words[w - 1]) != 0) {
        outermost = w - 1;
        break;
      }
    }
    stale_walk = walk;
    stale_end = outermost + 1;
    return false;
  }
};

// Where a remembered walk had given registers: a hint, checked against the walk itself
// before use (its slot may have been overwritten by another walk since).
struct JoinHint {
  uintptr_t pc = 0;
  uintptr_t sp = 0;
  uint16_t memo = 0;
  uint16_t step = 0;
  uint32_t key = 0;  // keyed hints: part of the caller's key (ThreadWalker::key_check)
};

// Memory for memos, mapped at once and paged in as memos are made: a thread that walks a
// few paths uses the pages of a few memos.
class MemoStorage {
 public:
  explicit MemoStorage(size_t count) : bytes_(count * sizeof(WalkMemo)) {
    static_assert(std::is_trivially_destructible_v<WalkMemo>);
    void* memory = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    memos_ = static_cast<WalkMemo*>(memory);
    make(0);
  }
  ~MemoStorage() { munmap(memos_, bytes_); }
  MemoStorage(const MemoStorage&) = delete;
  MemoStorage& operator=(const MemoStorage&) = delete;

  void make(size_t index) { new (&memos_[index]) WalkMemo; }
  WalkMemo& operator[](size_t index) { return memos_[index]; }

 private:
  size_t bytes_;
  WalkMemo* memos_;
};

#ifndef MEMSNAP_WALK_MEMOS
#define MEMSNAP_WALK_MEMOS 256
#endif

struct ThreadWalker {
  // Walks remembered. A model's step makes a few hundred distinct call paths, each again at
  // every layer and every step, from the same stack depth: with room for them all, a path
  // walked before is checked (independent loads) instead of walked (a chain of dependent
  // ones, each step's rule likely evicted by the model's work since). Pages of a memo are
  // touched only as deep as its walks go.
  static constexpr size_t kMemos = MEMSNAP_WALK_MEMOS;
  static constexpr unsigned kHintSetBits = 11;  // 2,048 sets of kHintWays hints, 192 KiB
  static constexpr size_t kHintWays = 4;
  static constexpr size_t kHintStride = 4;  // past the first steps, hints are probed at every 4th
  const StackBounds stack = thread_stack_bounds();
  RuleCache rules;
  // kMemos memos and the walk under way (`scratch`), each made when the clock's hand first
  // reaches it: the pages of memos never used are never touched.
  MemoStorage storage{kMemos + 1};
  uint16_t scratch = 0;
  uint16_t made = 1;  // memos made: 0 .. made - 1
  // Replacement by the clock: the hand passes over memos taken over since it last passed.
  uint16_t hand = 0;
  uint8_t taken_over[kMemos + 1] = {};
  uint64_t clock = 0;
  // The walk under way looks up its registers here, one probe every kHintStride steps,
  // instead of searching every memo at every step: most steps of a model's walks were never
  // walked from the same registers, and a search per memo per step cost more than the
  // walking it saved. A set keeps the walks last remembered through its registers, the
  // newest first: paths that share their first frames (every allocation made from one
  // function, from one depth) name their own walks there side by side, where one hint each
  // had them overwrite each other's, and each walk walked its first steps again.
  struct HintSet {
    JoinHint way[kHintWays];
  };
  HintSet hints[size_t{1} << kHintSetBits];
  // The walks last remembered or found under a caller's key (capture_stack's path_key) from
  // the registers a walk starts with, two to a set: where the key names the call path (the
  // interpreter's innermost frames do, mostly), a walk is found whole before its first step,
  // however many other paths share its first frames. A hint that names the wrong walk costs
  // one check.
  static constexpr unsigned kKeyBits = 11;  // 2,048 sets, 128 KiB
  struct alignas(64) KeySet {
    JoinHint way[2];
  };
  KeySet keyed[size_t{1} << kKeyBits];
  // Walks made and steps walked (not taken over), for cfi_walk_counts.
  CfiWalkCounts counts;

  HintSet& hint_set(uintptr_t pc, uintptr_t sp) {
    return hints[static_cast<size_t>(((pc ^ (sp << 16)) * 0x9E3779B97F4A7C15ull) >> (64 - kHintSetBits))];
  }
  // Step `step` of walk `memo` was at (pc, sp): its hint goes first in its set, in place of
  // the memo's own earlier one there, or else of the oldest.
  void leave_hint(uintptr_t pc, uintptr_t sp, uint16_t memo, uint16_t step) {
    JoinHint* way = hint_set(pc, sp).way;
    size_t drop = 0;
    while (drop + 1 < kHintWays && !(way[drop].memo == memo && way[drop].pc == pc && way[drop].sp == sp))
      ++drop;
    for (; drop > 0; --drop) way[drop] = way[drop - 1];
    way[0] = {pc, sp, memo, step};
  }
  // A walk went on as `hint`, found at `at` in its set: it goes first, so that a path walked
  // again and again is found at the first probe (unless the walk has rewritten the set).
  void promote_hint(const JoinHint& hint, size_t at) {
    const JoinHint& found = hint_set(hint.pc, hint.sp).way[at];
    if (found.memo == hint.memo && found.step == hint.step && found.pc == hint.pc && found.sp == hint.sp)
      leave_hint(hint.pc, hint.sp, hint.memo, hint.step);
  }
  static uint32_t key_check(uint64_t key) { return static_cast<uint32_t>(key ^ (key >> 32)) | 1; }
  KeySet& key_set(uint64_t key, uintptr_t pc, uintptr_t sp) {
    const uint64_t mixed = (key ^ pc ^ (sp << 16)) * 0x9E3779B97F4A7C15ull;
    return keyed[static_cast<size_t>(mixed >> (64 - kKeyBits))];
  }
  // `memo`, which starts at `start`, is the walk under `key` now.
  void remember_key(uint64_t key, const WalkMemo::Registers& start, uint16_t memo) {
    KeySet& set = key_set(key, start.pc, start.sp);
    const JoinHint entry{start.pc, start.sp, memo, 0, key_check(key)};
    const auto same = [&](const JoinHint& way) {
      return way.key == entry.key && way.pc == entry.pc && way.sp == entry.sp && way.memo == entry.memo;
    };
    if (same(set.way[0])) return;
    set.way[1] = set.way[0];  // the older of the two makes room (or trades places)
    set.way[0] = entry;
  }

  void mark_taken_over(uint16_t memo) { taken_over[memo] = 1; }

  // Keeps the finished walk in scratch in place of a memo not taken over lately, and leaves
  // a hint for each of its steps (and under `key`, unless 0).
  void keep_scratch(uint64_t key) {
    const WalkMemo& kept = storage[scratch];
    for (size_t step = 0; step < kept.steps; ++step) {
      const WalkMemo::Registers& before = kept.record[step].before;
      leave_hint(before.pc, before.sp, scratch, static_cast<uint16_t>(step));
    }
    if (key != 0 && kept.steps > 0) remember_key(key, kept.record[0].before, scratch);
    ++counts.remembered;
    taken_over[scratch] = 0;
    // (At most two turns: the first clears every mark it passes.)
    for (;;) {
      hand = static_cast<uint16_t>((hand + 1) % (kMemos + 1));
      if (hand == scratch) continue;
      if (hand == made) {  // (the hand reaches each memo first in order)
        storage.make(made++);
        break;
      }
      if (taken_over[hand] == 0) break;
      taken_over[hand] = 0;
    }
    scratch = hand;
  }
};

// A thread's walker lives in one huge page where the system gives them on request: its
// rules span 64 small pages, and a program's work between two allocations evicts their
// translations too, so a walk through cold rules missed the TLB at every step.
struct WalkerDelete {
  void operator()(ThreadWalker* walker) const {
    walker->~ThreadWalker();
    std::free(walker);
  }
};

std::unique_ptr<ThreadWalker, WalkerDelete> new_walker() {
  constexpr size_t kHugePage = size_t{2} << 20;
  static_assert(sizeof(ThreadWalker) <= kHugePage);
  void* memory = std::aligned_alloc(kHugePage, kHugePage);
  if (memory != nullptr) {
    madvise(memory, kHugePage, MADV_HUGEPAGE);  // (a hint: without it, small pages serve)
  } else {
    constexpr size_t kLine = 64;
    memory = std::aligned_alloc(kLine, (sizeof(ThreadWalker) + kLine - 1) / kLine * kLine);
    if (memory == nullptr) throw std::bad_alloc();
  }
  return std::unique_ptr<ThreadWalker, WalkerDelete>(new (memory) ThreadWalker);
}

ThreadWalker& thread_walker() {
  // On the heap: its hundreds of KiB are too much for every thread's static TLS block.
  thread_local std::unique_ptr<ThreadWalker, WalkerDelete> walker = new_walker();
  return *walker;
}

// Reads a word of the thread's stack at `address` into `value` and remembers it in `memo`
// (at `word_count`, which it advances); false when it lies outside the stack.
MEMSNAP_READS_RAW_STACK inline bool load(const StackBounds& stack, uintptr_t low, uintptr_t address,
                                         uintptr_t& value, WalkMemo& memo, size_t& word_count) {
  if (address < low || address < stack.low || address > stack.high - sizeof(uintptr_t) ||
      address % alignof(uintptr_t) != 0)
    return false;
  value = *reinterpret_cast<const volatile uintptr_t*>(address);
  memo.words[word_count++] = {address, value};
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
  size_t count() const { return count_; }

 private:
  uintptr_t* frames_;
  size_t max_;
  size_t skip_;
  size_t count_ = 0;
};

}  // namespace

CfiWalkCounts cfi_walk_counts() { return thread_walker().counts; }

__attribute__((noinline)) size_t capture_stack_cfi(uintptr_t* frames, size_t max_frames,
                                                   size_t skip, StackNote** note,
                                                   const StopCode& stop, uint64_t path_key,
                                                   uint64_t note_owner) {
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
  const uint64_t walk = ++walker.clock;
  ++walker.counts.walks;
  const WalkMemo::Registers start = registers;
  FrameSink sink(frames, max_frames, skip);
  WalkMemo& memo = walker.storage[walker.scratch];
  memo.note = StackNote{};
  memo.stop = stop;
  // (Kept in locals, not in the memo, while the walk runs: stores into the memo's arrays
  // would otherwise make the compiler reload them at every step.)
  size_t steps = 0;
  size_t word_count = 0;
  auto finish = [&](bool complete, bool end_reads_bp = false) {
    memo.steps = steps;
    memo.word_count = word_count;
    memo.complete = complete;
    memo.end_reads_bp = end_reads_bp;
    memo.settle_bp();
    memo.rules_generation = generation;
    // (A walk described by rules dropped on the way is not kept: its storage stays scratch.)
    if (walker.rules.generation() == generation) {
      walker.keep_scratch(path_key);  // `memo` stays this walk; the next one gets other storage
      if (note != nullptr) *note = memo.note_for(skip, max_frames);
    }
    return sink.count();
  };

  // Whether the walk, now at step `i`, goes on as the remembered one `hint` names: if so it is
  // taken over and what capture_stack_cfi returns is returned, else kNotTakenOver. (A plain
  // word: an optional's flag byte, stored and read back as part of a wider load, cost a
  // store-forwarding stall at every walk.)
  constexpr size_t kNotTakenOver = kNotedStack - 1;
  auto take_over = [&](const JoinHint& hint, size_t i) -> size_t {
    WalkMemo& earlier = walker.storage[hint.memo];
    // (Against the rules now: a lookup on the way may have dropped them.)
    if (earlier.rules_generation != walker.rules.generation() || earlier.stop != stop ||
        !earlier.continues(hint.step, registers, walk))
      return kNotTakenOver;
    // The rest of this walk is the earlier one's from step `at`, if it knows enough of it.
    const size_t at = hint.step;
    const size_t known = earlier.steps - at;
    if (!earlier.complete && known < step_limit - i) return kNotTakenOver;
    const size_t taken = std::min(known, step_limit - i);
    walker.mark_taken_over(hint.memo);
    const bool same_walk = at == i && memo.same_start(earlier, i);
    if (same_walk) {
      // The same walk again (its first steps, if any, walked afresh because the hints for
      // where it starts named other walks): nothing new to remember, but the key now names it.
      if (path_key != 0) walker.remember_key(path_key, start, hint.memo);
      if (note != nullptr) {
        *note = earlier.note_for(skip, max_frames);
        // The caller has these frames already (its note says so): they are not handed out.
        if (note_owner != 0 && (*note)->owner == note_owner) return kNotedStack;
      }
    }
    for (size_t j = 0; j < taken; ++j) sink.add(earlier.produced[at + j]);
    if (same_walk) return sink.count();
    // A new walk that joins a known one: remember it whole.
    const size_t first_word = earlier.record[at].first_word;
    const size_t word_end = at + taken < earlier.steps ? earlier.record[at + taken].first_word : earlier.word_count;
    for (size_t j = 0; j < taken; ++j) {
      WalkMemo::Step& step = memo.record[i + j];
      step = earlier.record[at + j];
      step.first_word = static_cast<uint16_t>(word_count + step.first_word - first_word);
      memo.produced[i + j] = earlier.produced[at + j];
    }
    std::copy(earlier.words + first_word, earlier.words + word_end, memo.words + word_count);
    word_count += word_end - first_word;
    steps = i + taken;
    return finish(earlier.complete && taken == known, taken == known && earlier.end_reads_bp);
  };

  if (path_key != 0) {
    const uint32_t check = ThreadWalker::key_check(path_key);
    for (const JoinHint& hint : walker.key_set(path_key, start.pc, start.sp).way)
      if (hint.key == check && hint.pc == start.pc && hint.sp == start.sp && hint.memo != walker.scratch)
        if (const size_t count = take_over(hint, 0); count != kNotTakenOver) return count;
  }
  for (size_t i = 0; i < step_limit; ++i) {
    // (Every step near the start, where walks from one place part: the step after they part
    // finds the walk that went the same way. Then between probes: once two walks meet they go
    // on together, so a join found a few steps late is found all the same.)
    if (i <= ThreadWalker::kHintStride || i % ThreadWalker::kHintStride == 0) {
      const ThreadWalker::HintSet& set = walker.hint_set(registers.pc, registers.sp);
      const auto names_a_walk_here = [&](const JoinHint& hint) {
        return hint.pc == registers.pc && hint.sp == registers.sp && hint.memo != walker.scratch;
      };
      for (size_t way = 0; way < ThreadWalker::kHintWays; ++way) {
        const JoinHint hint = set.way[way];
        if (!names_a_walk_here(hint)) continue;
        if (const size_t count = take_over(hint, i); count != kNotTakenOver) {
          if (way > 0) walker.promote_hint(hint, way);
          return count;
        }
      }
    }
    ++walker.counts.steps_walked;
    WalkMemo::Step& at = memo.record[i];
    at.before = registers;
    at.first_word = static_cast<uint16_t>(word_count);
    // A return address is just past its call; the call itself is what the rule is for.
    const FrameRule rule = walker.rules.rule(i == 0 ? registers.pc : registers.pc - 1);
    if (rule.kind == FrameRule::Kind::kUnsupported) return kUnsupportedStack;
    if (rule.kind != FrameRule::Kind::kStep) return finish(true);
    const bool reads_bp = rule.cfa_from_rbp || (rule.rbp_saved && rule.rbp_from_rbp);
    at.bp_flags = static_cast<uint8_t>((reads_bp ? WalkMemo::kReadsBp : 0) |
                                       (rule.rbp_saved ? WalkMemo::kSetsBp : 0));
    const uintptr_t sp = registers.sp;
    uintptr_t cfa = (rule.cfa_from_rbp ? registers.bp : sp) + static_cast<intptr_t>(rule.cfa_offset);
    // (A step that fails ends the walk the way it does because of what it read, %rbp too.)
    if (rule.cfa_deref && !load(stack, sp, cfa, cfa, memo, word_count)) return finish(true, reads_bp);
    if (cfa <= sp) return finish(true, reads_bp);  // callers' frames lie above: a rule going down is wrong
    uintptr_t return_address = 0;
    if (!load(stack, sp, cfa + static_cast<intptr_t>(rule.return_address_offset), return_address, memo,
              word_count))
      return finish(true, reads_bp);
    at.saved_bp = static_cast<uint8_t>(word_count - at.first_word);
    if (rule.rbp_saved &&
        !load(stack, sp, (rule.rbp_from_rbp ? registers.bp : cfa) + static_cast<intptr_t>(rule.rbp_offset),
              registers.bp, memo, word_count))
      return finish(true, reads_bp);
    if (!rule.rbp_saved) at.saved_bp = WalkMemo::kNoWord;
    registers.sp = cfa;
    registers.pc = return_address;
    if (return_address == 0) return finish(true);
    memo.produced[i] = return_address;
    steps = i + 1;
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
