// What `memsnap record` hands the recorder it injects into the program: environment variables,
// so they reach every CUDA process the command starts (children and exec'd programs too).
// The CLI builds them from its options and checks them with the same parser.
//
//   MEMSNAP_RECORD_OUTPUT=PATTERN   the snapshot written at exit (default
//                                   memsnap-record-{pid}.msgpack; "off": none)
//   MEMSNAP_RECORD_OOM=PATTERN      a snapshot at each failed allocation (default
//                                   memsnap-record-{pid}-oom-{n}.msgpack; "off": none)
//   MEMSNAP_RECORD_OOM_LIMIT=N      at most N of those per process (default 10: a program that
//                                   retries, or a library probing what fits, fails many times)
//   MEMSNAP_RECORD_STACKS=cpp|none  C++ stacks for each call (default cpp)
//   MEMSNAP_RECORD_MAX_ENTRIES=N    calls kept per device (default 1,000,000)
//   MEMSNAP_RECORD_SIGNAL=NAME      a snapshot when the program gets this signal: USR1 or USR2
//                                   (the program goes on), HUP, INT, QUIT or TERM (it then ends
//                                   as the signal would end it); written to MEMSNAP_RECORD_OUTPUT
//   MEMSNAP_RECORD_CUPTI=PATH       the CUPTI library (default: searched, cupti_library.h)
//   MEMSNAP_RECORD_REPORT=PATH      an existing file to which each snapshot's path is appended, a line
//                                   each, or "!" and why a snapshot was lost
//
// Patterns take snapshot_file.h's placeholders ({pid}, {n}, {host}, {rank}, ...), and a name
// ending in .pickle is written as PyTorch's snapshot pickle.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "allocator/result.h"

namespace memsnap {

struct RecordSettings {
  std::string output = "memsnap-record-{pid}.msgpack";  // "": none
  std::string oom_output = "memsnap-record-{pid}-oom-{n}.msgpack";  // "": none
  size_t oom_limit = 10;
  bool stacks = true;
  size_t max_entries = 1000000;
  int signal = 0;  // 0: none
  std::string cupti_library;  // "": searched
  std::string report;         // "": none
};

// Reads the variables through `lookup` (getenv by default; nullptr: unset).
Result<RecordSettings> record_settings(const std::function<const char*(const char*)>& lookup = nullptr);

// "USR1", "SIGUSR1", "usr1" -> SIGUSR1, for the signals a snapshot may be taken on; nullopt else.
std::optional<int> record_signal_from_name(std::string_view name);
std::string_view record_signal_name(int signal);  // "USR1"
// Whether the program ends after the snapshot taken on `signal` (HUP, INT, QUIT, TERM).
bool record_signal_ends_program(int signal);

}  // namespace memsnap
