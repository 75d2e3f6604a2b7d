#include "snapshot/mapped_file.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>

namespace memsnap {
namespace {

// The live mappings, for the signal handler: lock-free reads, slots claimed by compare and
// swap. A mapping that finds no free slot is not made (the caller reads the file).
struct Slot {
  std::atomic<uintptr_t> begin{0};  // 0: free
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> changed{false};
};
constexpr size_t kSlots = 64;
Slot slots[kSlots];

struct sigaction previous_bus;

void on_bus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& slot : slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    const uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= end) continue;
    // The file ends before this page: zeros from here to the mapping's end, and note it.
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t from = address & ~(page - 1);
    if (mmap(reinterpret_cast<void*>(from), end - from, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        MAP_FAILED)
      break;
    slot.changed.store(true, std::memory_order_release);
    return;
  }
  // Not a mapping of ours: as it would have gone without this handler.
  if (previous_bus.sa_flags & SA_SIGINFO) {
    if (previous_bus.sa_sigaction != nullptr) return previous_bus.sa_sigaction(signal, info, context);
  } else if (previous_bus.sa_handler != SIG_DFL && previous_bus.sa_handler != SIG_IGN && previous_bus.sa_handler != nullptr) {
    return previous_bus.sa_handler(signal);
  }
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigaction(SIGBUS, &fallback, nullptr);
  raise(SIGBUS);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &previous_bus);
  });
}

}  // namespace

std::unique_ptr<MappedFile> MappedFile::map(int fd, size_t bytes) {
  if (bytes == 0) return nullptr;
  install_handler();
  for (size_t i = 0; i < kSlots; ++i) {
    uintptr_t expected = 0;
    // Claimed with a placeholder first, so that no other mapping takes the slot meanwhile.
    if (!slots[i].begin.compare_exchange_strong(expected, 1)) continue;
    void* data = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      slots[i].begin.store(0, std::memory_order_release);
      return nullptr;
    }
    slots[i].changed.store(false, std::memory_order_relaxed);
    slots[i].end.store(reinterpret_cast<uintptr_t>(data) + bytes, std::memory_order_release);
    slots[i].begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return std::unique_ptr<MappedFile>(new MappedFile(fd, data, bytes, i));
  }
  return nullptr;
}

MappedFile::~MappedFile() {
  slots[slot_].begin.store(1, std::memory_order_release);  // still claimed, no longer matched
  munmap(data_, size_);
  slots[slot_].end.store(0, std::memory_order_release);
  slots[slot_].begin.store(0, std::memory_order_release);
}

bool MappedFile::changed() const {
  if (slots[slot_].changed.load(std::memory_order_acquire)) return true;
  struct stat info {};
  return fstat(fd_, &info) == 0 && static_cast<uint64_t>(info.st_size) < size_;
}

void MappedFile::release(uint64_t begin, uint64_t end) const {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t first = (begin + page - 1) / page * page;
  const uint64_t last = std::min<uint64_t>(end, size_) / page * page;
  if (last > first) madvise(static_cast<char*>(data_) + first, static_cast<size_t>(last - first), MADV_DONTNEED);
}

}  // namespace memsnap
