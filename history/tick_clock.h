// The clock of the history trace: read on every recorded event, so it must cost a few
// nanoseconds everywhere. steady_clock goes through clock_gettime, which is cheap only
// where the kernel's clocksource can be read from user space; on virtual machines whose
// clocksource is not the TSC it is a system call costing hundreds of nanoseconds (PyTorch
// avoids the same cost with its "approximate clock"). So events store raw ticks of the
// invariant TSC where the CPU has one, and ticks become steady-clock microseconds only
// when read, by a line through two (ticks, steady time) pairs: one taken when the clock
// was first used, one taken at conversion. Without an invariant TSC, ticks are steady-clock
// nanoseconds and the conversion is exact.
#pragma once

#include <cstdint>

namespace memsnap {

namespace tick_clock_detail {
bool cpu_has_invariant_tsc();
uint64_t steady_ns();
// Inline: a call around one instruction read on every recorded event is measurable.
inline uint64_t read_tsc() {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#else
  return steady_ns();
#endif
}
// Decided on first use (a function-local static, so a static initializer in another file
// that records an event cannot see it undecided).
inline bool use_tsc() {
  static const bool use = cpu_has_invariant_tsc();
  return use;
}
}  // namespace tick_clock_detail

using Ticks = uint64_t;

inline Ticks now_ticks() {
  return tick_clock_detail::use_tsc() ? tick_clock_detail::read_tsc()
                                    : tick_clock_detail::steady_ns();
}

// Steady-clock microseconds (the same base as steady_time_us()) of the moment a tick count
// was read. Ticks from before this process first used the clock are extrapolated.
class TicksToMicroseconds {
 public:
  TicksToMicroseconds();  // anchors the conversion at the present moment
  int64_t operator()(Ticks ticks) const;

 private:
  Ticks anchor_ticks_;
  int64_t anchor_ns_;
  double ns_per_tick_;
};

}  // namespace memsnap
