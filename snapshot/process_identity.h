// Who a snapshot comes from: the host, the process, and its place in a distributed job (the
// variables torchrun and most launchers set, or what the caller knows from its framework).
#pragma once

#include <cstdint>
#include <optional>

#include "snapshot/snapshot.h"

namespace memsnap {

struct JobPlace {
  std::optional<int64_t> rank;        // this process's rank in the job
  std::optional<int64_t> local_rank;  // its rank on this host
  std::optional<int64_t> world_size;  // processes in the job
};

// `given`'s fields win; the others come from $RANK, $LOCAL_RANK and $WORLD_SIZE. A variable that
// is not a whole number in range (ranks from 0, a world size from 1, a rank below the world size)
// is left out, with one line on stderr the first time.
JobPlace job_place(const JobPlace& given = {});

// This process: host name, pid and job place; the time fields are left at 0.
ProcessInfo current_process(const JobPlace& given = {});
// The same with the time fields of a snapshot taken now: the Unix time, and the offset that
// turns the steady-clock times of its events (steady_time_us) into Unix times.
ProcessInfo process_at_snapshot(const JobPlace& given = {});

}  // namespace memsnap
