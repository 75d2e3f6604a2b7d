// Timing for the tests that hold a run's time to a multiple of another's (a bound on how time
// grows, never an absolute time): both runs taken in turns on the same machine.
#pragma once

#include <algorithm>
#include <chrono>
#include <utility>

namespace memsnap::testing {

// The quickest of `runs` runs of each of `a` and `b`, in seconds, taken in turns: the least
// disturbed by other work on the machine, and both under the same load.
template <typename A, typename B>
std::pair<double, double> quickest_seconds_in_turns(A&& a, B&& b, int runs = 3) {
  const auto seconds = [](auto& fn) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::pair<double, double> best{1e300, 1e300};
  for (int i = 0; i < runs; ++i) {
    best.first = std::min(best.first, seconds(a));
    best.second = std::min(best.second, seconds(b));
  }
  return best;
}

}  // namespace memsnap::testing
