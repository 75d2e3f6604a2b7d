// memsnap-demo --ranks N: a simulated distributed job that leaves one snapshot per rank.
#pragma once

#include <cstddef>
#include <string>

namespace demo {

struct JobOptions {
  std::string folder;  // rank{R}.msgpack go here
  int ranks = 8;
  int steps = 6;
  size_t max_entries = 100000;
  bool oom = false;  // the middle rank runs out of memory
};

int run_job(const JobOptions& options);

}  // namespace demo
