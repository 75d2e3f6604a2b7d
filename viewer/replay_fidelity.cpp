#include "viewer/replay_fidelity.h"

#include "allocator/counted.h"

namespace memsnap {

bool records_segments(const DeviceReplay& d) {
  return !d.recorded_segment_allocs.empty() || d.recorded_segment_frees > 0 || d.final_segments_recorded > 0;
}

ReplayFidelity replay_fidelity(const DeviceReplay& d, bool capacity_given) {
  ReplayFidelity out;
  const auto fail = [&](std::string why) {
    out.shortfall = std::move(why);
    return out;
  };
  if (!d.start.problems.empty()) return fail("the trace contradicts the snapshot (" + d.start.problems.front() + ")");
  if (d.unknown_frees > 0)
    return fail(counted(d.unknown_frees, "free") + " of blocks the trace never allocated, or allocations at addresses "
                "still live: the trace lost events");
  if (!d.invariant_problems.empty()) return fail("the allocator's invariants broke in the replay");
  if (capacity_given) {
    out.reproduced = true;
    out.words = "the trace is consistent with the snapshot";
    return out;
  }
  if (d.failed_allocs > 0)
    return fail(counted(d.failed_allocs, "allocation") + " that succeeded in the recording failed in the replay");
  if (d.reproduced_ooms < d.recorded_ooms)
    return fail("the recorded out-of-memory error did not recur (" + std::to_string(d.recorded_ooms - d.reproduced_ooms) +
                " of " + std::to_string(d.recorded_ooms) + ")");
  const size_t recorded = d.recorded_segment_allocs.size();
  if (d.matched_segment_allocs != recorded || d.replayed_segment_allocs.size() != recorded)
    return fail("it made " + counted(d.replayed_segment_allocs.size(), "segment allocation") + " where the recording made " +
                std::to_string(recorded) + ", " + std::to_string(d.matched_segment_allocs) +
                " of them alike (the first difference at the " + std::to_string(d.first_segment_mismatch + 1) + ". one)");
  if (d.final_segments_matched != d.final_segments_recorded)
    return fail(std::to_string(d.final_segments_recorded - d.final_segments_matched) + " of the snapshot's " +
                counted(d.final_segments_recorded, "segment") + " came out otherwise at the end");
  out.reproduced = true;
  out.words = "the replay under the recorded settings reproduced the recording (" +
              counted(recorded, "segment allocation") + " alike" +
              (d.recorded_ooms ? ", the out-of-memory error recurred" : "") + ")";
  return out;
}

}  // namespace memsnap
