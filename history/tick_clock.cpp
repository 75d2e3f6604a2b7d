#include "history/tick_clock.h"

#include <chrono>
#include <cmath>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace memsnap {
namespace tick_clock_detail {

bool cpu_has_invariant_tsc() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (static_cast<unsigned>(__get_cpuid_max(0x80000000u, nullptr)) < 0x80000007u) return false;
  __cpuid(0x80000007u, eax, ebx, ecx, edx);
  return (edx & (1u << 8)) != 0;  // "TscInvariant": constant rate, runs in every C-state
#else
  return false;
#endif
}

uint64_t steady_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace tick_clock_detail

namespace {

struct TickAnchor {
  Ticks ticks;
  int64_t ns;
};

// One (ticks, ns) pair read as close together as possible: the pair whose reads bracket
// the steady-clock read most tightly out of a few tries.
TickAnchor read_anchor() {
  TickAnchor best{now_ticks(), static_cast<int64_t>(tick_clock_detail::steady_ns())};
  Ticks best_width = ~Ticks{0};
  for (int attempt = 0; attempt < 5; ++attempt) {
    const Ticks before = now_ticks();
    const auto ns = static_cast<int64_t>(tick_clock_detail::steady_ns());
    const Ticks after = now_ticks();
    if (after >= before && after - before < best_width) {
      best_width = after - before;
      best = {before + (after - before) / 2, ns};
    }
  }
  return best;
}

const TickAnchor& first_anchor() {
  static const TickAnchor anchor = read_anchor();
  return anchor;
}

// Taken when the library loads, so the line through the two anchors spans the process's
// life rather than only the time since the first conversion.
[[maybe_unused]] const TickAnchor& kLoadTimeAnchor = first_anchor();

}  // namespace

TicksToMicroseconds::TicksToMicroseconds() {
  const TickAnchor& first = first_anchor();
  const TickAnchor now = read_anchor();
  anchor_ticks_ = now.ticks;
  anchor_ns_ = now.ns;
  ns_per_tick_ = 1.0;
  if (tick_clock_detail::use_tsc()) {
    // Less than a millisecond apart, the reads' jitter would dominate the rate: then wait
    // out the millisecond (only a conversion in a very young process pays this).
    TickAnchor later = now;
    while (later.ns - first.ns < 1'000'000) later = read_anchor();
    anchor_ticks_ = later.ticks;
    anchor_ns_ = later.ns;
    const double ticks = static_cast<double>(static_cast<int64_t>(later.ticks - first.ticks));
    if (ticks > 0) ns_per_tick_ = static_cast<double>(later.ns - first.ns) / ticks;
  }
}

int64_t TicksToMicroseconds::operator()(Ticks ticks) const {
  const double delta = static_cast<double>(static_cast<int64_t>(ticks - anchor_ticks_));
  return (anchor_ns_ + static_cast<int64_t>(std::llround(delta * ns_per_tick_))) / 1000;
}

}  // namespace memsnap
