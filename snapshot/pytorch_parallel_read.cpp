#include "snapshot/pytorch_parallel_read.h"

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "snapshot/byte_source.h"

namespace memsnap {
namespace {

using pickle::Tag;
using pickle::Value;

constexpr unsigned kMaxThreads = 16;
// Each decoding thread holds about 1 MiB more at its peak (what it decodes, malloc's arena
// of its own): four threads, or one per 3 MiB of pickle past that, keep a read within 1.5x
// the file. (A 24 MiB PyTorch pickle on a 16-core VM, 8 threads: 31 ms, against 49 ms on 4,
// where the reading thread waited half the time for parts; 29.6 MiB held against 27.6 MiB
// on the 2-core machine.)
constexpr unsigned kBaseThreads = 4;
constexpr uint64_t kBytesPerThread = uint64_t{3} << 20;
constexpr uint64_t kBytesPerScanner = uint64_t{8} << 20;
// What a part decoded alone may build besides ReadBudget::kBytesPerInputByte for each of its bytes.
constexpr uint64_t kPartBaseBytes = uint64_t{1} << 20;

// The cores this process may run on (its affinity: taskset, a container's cpuset).
unsigned usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return static_cast<unsigned>(CPU_COUNT(&set));
  return std::thread::hardware_concurrency();
}

unsigned thread_count(uint64_t bytes, const PickleReadOptions& options) {
  if (options.threads != 0) return std::clamp(options.threads, 1u, kMaxThreads);
  const unsigned cores = usable_cores();
  const unsigned ours = cores > options.spare_cores ? cores - options.spare_cores : 1;
  const uint64_t worth = std::max<uint64_t>(kBaseThreads, bytes / kBytesPerThread);
  return static_cast<unsigned>(std::clamp<uint64_t>(std::min<uint64_t>(ours, worth), 1, kMaxThreads));
}

// The memo entries made before a part: the strings among them read where the scan saw them
// pickled, the rest left for the reading thread to fill in.
class OuterStrings final : public pickle::OuterMemo {
 public:
  OuterStrings(std::string_view pickle, const pickle::LayoutScanner& scan) : pickle_(pickle), scan_(scan) {}
  Value get(pickle::ValueStore& store, uint64_t index) override {
    // (The machine remembers what this said: an entry is asked for again only when others
    // took its place there, and then reads as the same value, its string interned.)
    const uint32_t offset = scan_.string_offset(index);
    std::optional<std::string_view> text;
    if (offset != pickle::LayoutScanner::kNotAString) text = pickle::pickled_string_at(pickle_, offset);
    if (!text) return Value::make(Tag::kOuter, index);
    const Value value = store.string(*text);
    strings.emplace_back(index, value);
    return value;
  }
  std::vector<std::pair<uint64_t, Value>> strings;  // read here: checked when the part is taken

 private:
  std::string_view pickle_;
  const pickle::LayoutScanner& scan_;
};

struct DecodedPart {
  pickle::ValueStore store;
  PyTorchDocument document{store};
  std::vector<Value> values;  // the items, then the part's memo entries
  size_t items = 0;
  std::vector<std::pair<uint64_t, Value>> outer_strings;
  bool ok = false;
};

// Null when the part cannot be decoded alone (damage, no memory): the reading thread then
// reads it itself, and names what is wrong. Never throws (it runs on threads of its own).
std::unique_ptr<DecodedPart> decode(std::string_view pickle, const pickle::PicklePart& part,
                                    const pickle::LayoutScanner& scan) noexcept {
  try {
    auto out = std::make_unique<DecodedPart>();
    // A part that would build more than its bytes can describe is left to the reading thread,
    // whose budget refuses it with the byte it was read to.
    ReadBudget budget(part.bytes(), kPartBaseBytes);
    out->store.set_budget(&budget);
    out->document.set_part(part.bytes());
    auto input = ByteSource::over_memory(pickle.substr(part.begin(), part.bytes()), UINT64_MAX);
    pickle::Machine machine(*input, out->store, &out->document);
    machine.expect_memo_entries(std::min(part.memo_count, part.bytes()));  // (a MEMOIZE is a byte)
    OuterStrings outer(pickle, scan);
    out->values = machine.run_part(part.memo_base, outer);
    out->items = out->values.size();
    out->values.insert(out->values.end(), machine.memo().begin(), machine.memo().end());
    out->outer_strings = std::move(outer.strings);
    out->ok = machine.memo().size() == part.memo_count && machine.memo_is_dense();
    // Held until the reading thread takes it: only the records, in as little memory as they
    // need (what the decoding used goes back to this thread, for its next part).
    out->values.shrink_to_fit();
    out->document.finish_part();
    out->store.set_budget(nullptr);
    out->store.drop_objects();
    return out;
  } catch (...) {
    return nullptr;
  }
}

class PartQueue final : public pickle::Splicer {
 public:
  PartQueue(std::string_view pickle, PyTorchDocument& document, unsigned threads,
            pickle::LayoutOptions layout, const ReleaseBytes& release, PickleReadStats& stats)
      : pickle_(pickle), document_(document), scan_(pickle, layout), release_(release), stats_(stats),
        window_(threads + 1), helps_(threads <= 2), threads_wanted_(threads) {}
  ~PartQueue() override { stop(); }

  // Starts the scan and the decoders; false (and none left running) when the system will
  // not give threads, and the machine then reads alone.
  bool start() {
    try {
      threads_.emplace_back([this] { scan(); });
      for (unsigned i = 1; i < threads_wanted_; ++i) threads_.emplace_back([this] { decode_parts(); });
      return true;
    } catch (const std::system_error&) {
      stop();
      return false;
    }
  }

  // Once the machine is done: waits for the threads.
  void finish() {
    stop();
    stats_.scans_ahead_kept = scan_.scans_ahead_kept();
  }

  uint64_t next_mark(uint64_t offset) override {
    std::unique_lock lock(mutex_);
    for (;;) {
      while (passed_ < slots_.size() && slots_[passed_].part.mark < offset) pass(passed_++);
      if (passed_ < slots_.size()) return slots_[passed_].part.mark;
      if (scan_done_) return UINT64_MAX;
      changed_.wait(lock);
    }
  }

  std::optional<Piece> piece(uint64_t offset, const pickle::Machine& machine) override {
    std::unique_lock lock(mutex_);
    if (passed_ >= slots_.size() || slots_[passed_].part.mark != offset) return std::nullopt;
    const size_t index = passed_;
    const pickle::PicklePart part = slots_[index].part;
    if (slots_[index].state == State::kWaiting) decode_slot(index, lock);
    while (slots_[index].state == State::kClaimed) {
      // With a single other decoder, decode a later part meanwhile rather than wait idle;
      // with more, this thread's own work (taking parts in order) is what the read waits on.
      if (const std::optional<size_t> other = helps_ ? waiting_slot() : std::nullopt) decode_slot(*other, lock);
      else changed_.wait(lock);
    }
    std::unique_ptr<DecodedPart> decoded = std::move(slots_[index].result);
    pass(index);
    passed_ = index + 1;
    lock.unlock();
    if (part.mark >= read_released_ + kReleaseStep) {
      release_(0, part.mark);
      read_released_ = part.mark;
    }
    current_.reset();
    if (!decoded || !decoded->ok || machine.memo().size() != part.memo_base ||
        !document_.adopt_part(decoded->document, decoded->values, machine.memo(), decoded->outer_strings)) {
      ++stats_.parts_read_in_order;
      return std::nullopt;
    }
    ++stats_.parts_decoded_alone;
    current_ = std::move(decoded);
    const std::span<const Value> values(current_->values);
    return Piece{values.first(current_->items), values.subspan(current_->items), part.end};
  }

 private:
  enum class State { kWaiting, kClaimed, kDone, kPassed };
  struct Slot {
    pickle::PicklePart part;
    State state = State::kWaiting;
    std::unique_ptr<DecodedPart> result;
  };

  // The first part not yet taken within the window ahead of the reading thread.
  std::optional<size_t> waiting_slot() const {
    const size_t end = std::min(slots_.size(), passed_ + window_);
    for (size_t i = passed_; i < end; ++i)
      if (slots_[i].state == State::kWaiting) return i;
    return std::nullopt;
  }

  // Decodes slots_[index] with the lock released meanwhile.
  void decode_slot(size_t index, std::unique_lock<std::mutex>& lock) {
    slots_[index].state = State::kClaimed;
    const pickle::PicklePart part = slots_[index].part;
    lock.unlock();
    std::unique_ptr<DecodedPart> decoded = decode(pickle_, part, scan_);
    release_(part.begin(), part.end);  // read again only if the reading thread reads it itself
    lock.lock();
    if (slots_[index].state != State::kPassed) {  // else the reader went past it meanwhile
      slots_[index].result = std::move(decoded);
      slots_[index].state = State::kDone;
    }
    changed_.notify_all();
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
  }

  void pass(size_t index) {
    slots_[index].result.reset();
    slots_[index].state = State::kPassed;
    changed_.notify_all();
  }

  void scan() {
    try {
      scan_with_callbacks();
    } catch (...) {
      // Out of memory: the parts found so far stand, the machine reads the rest itself.
    }
    std::lock_guard lock(mutex_);
    scan_done_ = true;
    changed_.notify_all();
  }

  void scan_with_callbacks() {
    scan_.scan(
        [this](const pickle::PicklePart& part) {
          std::lock_guard lock(mutex_);
          if (stopping_) return false;
          // Parts come in file order; one that does not (it held a part found earlier) is read
          // in order by the machine.
          if (slots_.empty() || part.mark > slots_.back().part.mark) slots_.push_back(Slot{part, State::kWaiting, nullptr});
          changed_.notify_all();
          return true;
        },
        [this](uint64_t begin, uint64_t end) {  // (from any scanning thread)
          release_(begin, end);
          std::lock_guard lock(mutex_);
          return !stopping_;
        });
  }

  void decode_parts() {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (stopping_) return;
      if (const std::optional<size_t> index = waiting_slot()) {
        decode_slot(*index, lock);
        continue;
      }
      const bool more = !scan_done_ || std::any_of(slots_.begin() + static_cast<std::ptrdiff_t>(passed_), slots_.end(),
                                                   [](const Slot& s) { return s.state == State::kWaiting; });
      if (!more) return;
      changed_.wait(lock);
    }
  }

  std::string_view pickle_;
  PyTorchDocument& document_;
  pickle::LayoutScanner scan_;
  ReleaseBytes release_;
  // Pages are let go in steps: each release interrupts every core this process runs on.
  static constexpr uint64_t kReleaseStep = uint64_t{512} << 10;
  uint64_t read_released_ = 0;  // by the reading thread
  PickleReadStats& stats_;  // counted by the reading thread only
  const size_t window_;  // parts decoded ahead of the reading thread, at most
  const bool helps_;     // whether the reading thread decodes parts ahead of its own
  const unsigned threads_wanted_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Slot> slots_;  // in file order
  size_t passed_ = 0;       // slots before this one the reading thread has gone past
  bool scan_done_ = false;
  bool stopping_ = false;
  std::unique_ptr<DecodedPart> current_;  // the piece handed out last
  std::vector<std::thread> threads_;      // last: started once everything above exists
};

}  // namespace

bool reads_in_parallel(uint64_t bytes, const PickleReadOptions& options) {
  return bytes >= options.min_bytes && thread_count(bytes, options) > 1;
}

Value run_with_parts(std::string_view pickle, pickle::Machine& machine, PyTorchDocument& document,
                     const PickleReadOptions& options, const ReleaseBytes& release) {
  const unsigned threads = thread_count(pickle.size(), options);
  pickle::LayoutOptions layout = options.layout;
  if (layout.min_part_bytes == 0) layout.min_part_bytes = uint64_t{32} << 10;
  // Parts small enough that the few decoded ahead of the reading thread hold little memory.
  if (layout.max_part_bytes == 0)
    layout.max_part_bytes = std::clamp<uint64_t>(pickle.size() / (32 * threads), uint64_t{128} << 10, uint64_t{512} << 10);
  // With eight threads or more, one scan is what the decoding waits on (on the 16-core VM,
  // 27 ms of a 31 ms read): a scan per four threads, on 8 MiB or more each, on threads of
  // their own that end where the next one starts.
  if (layout.scanners == 0)
    layout.scanners = static_cast<unsigned>(std::clamp<uint64_t>(std::min<uint64_t>(threads / 4, pickle.size() / kBytesPerScanner), 1, 4));
  PickleReadStats unused;
  PartQueue parts(pickle, document, threads, layout, release, options.stats ? *options.stats : unused);
  if (!parts.start()) return machine.run();
  machine.set_splicer(&parts);
  const Value root = machine.run();
  machine.set_splicer(nullptr);
  parts.finish();
  return root;
}

}  // namespace memsnap
