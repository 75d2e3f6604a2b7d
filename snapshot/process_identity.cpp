#include "snapshot/process_identity.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "history/history_recorder.h"

namespace memsnap {
namespace {

// The variable's value when it is a whole number of at least `minimum`; nullopt when it is unset,
// and when it is anything else, after saying so once per process and variable.
std::optional<int64_t> read_count(const char* name, int64_t minimum, std::atomic<bool>& warned) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text, &end, 10);
  if (errno == 0 && end != text && *end == '\0' && value >= minimum) return value;
  if (!warned.exchange(true)) {
    std::string shown(text, std::min<size_t>(std::char_traits<char>::length(text), 40));
    std::fprintf(stderr, "memsnap: ignoring %s='%s' (not a whole number from %lld)\n", name, shown.c_str(),
                 static_cast<long long>(minimum));
  }
  return std::nullopt;
}

}  // namespace

JobPlace job_place(const JobPlace& given) {
  static std::atomic<bool> warned_rank{false}, warned_local{false}, warned_world{false}, warned_range{false};
  JobPlace place = given;
  if (!place.rank) place.rank = read_count("RANK", 0, warned_rank);
  if (!place.local_rank) place.local_rank = read_count("LOCAL_RANK", 0, warned_local);
  if (!place.world_size) place.world_size = read_count("WORLD_SIZE", 1, warned_world);
  if (place.rank && place.world_size && *place.rank >= *place.world_size) {
    if (!warned_range.exchange(true))
      std::fprintf(stderr, "memsnap: ignoring world size %lld: rank %lld is not below it\n",
                   static_cast<long long>(*place.world_size), static_cast<long long>(*place.rank));
    place.world_size.reset();
  }
  return place;
}

ProcessInfo current_process(const JobPlace& given) {
  ProcessInfo info;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) info.host = host;
  info.pid = getpid();
  const JobPlace place = job_place(given);
  info.rank = place.rank;
  info.local_rank = place.local_rank;
  info.world_size = place.world_size;
  return info;
}

ProcessInfo process_at_snapshot(const JobPlace& given) {
  ProcessInfo info = current_process(given);
  info.time_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  info.clock_offset_us = info.time_unix_us - steady_time_us();
  return info;
}

}  // namespace memsnap
