#include "history/tick_clock.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "history/history_recorder.h"

namespace {

using memsnap::now_ticks;
using memsnap::steady_time_us;
using memsnap::TicksToMicroseconds;

TEST(TickClock, ConvertsTicksToTheSteadyClockOfTheSameMoment) {
  // Each tick read lies between two steady-clock reads; converted, it must land there too
  // (give or take the rate's estimate: a few microseconds over these short spans).
  struct Sample {
    int64_t before_us;
    memsnap::Ticks ticks;
    int64_t after_us;
  };
  std::vector<Sample> samples;
  for (int i = 0; i < 5; ++i) {
    const int64_t before = steady_time_us();
    const memsnap::Ticks ticks = now_ticks();
    samples.push_back({before, ticks, steady_time_us()});
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const TicksToMicroseconds to_us;
  for (const Sample& s : samples) {
    EXPECT_GE(to_us(s.ticks), s.before_us - 20);
    EXPECT_LE(to_us(s.ticks), s.after_us + 20);
  }
}

TEST(TickClock, NeverRunsBackwardsOnOneThread) {
  memsnap::Ticks previous = now_ticks();
  for (int i = 0; i < 100000; ++i) {
    const memsnap::Ticks now = now_ticks();
    ASSERT_GE(now, previous);
    previous = now;
  }
}

}  // namespace
