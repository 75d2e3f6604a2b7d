// What the allocator reports when a request cannot be satisfied, and who hears about it.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "allocator/device_backend.h"
#include "allocator/mempool_id.h"
#include "memsnap/errors.h"

namespace memsnap {

// The figures of a failed request (memsnap/errors.h: OutOfMemoryInfo; the error thrown is
// memsnap::OutOfMemoryError, declared there).
using OomInfo = OutOfMemoryInfo;

// Called once per out-of-memory error, after the allocator's lock has been released (so an
// observer may take a snapshot, allocate or free memory) and before the error is thrown.
// An out-of-memory error raised inside an observer (by its own allocation) does not run the
// observers again; an exception an observer throws is reported on stderr and swallowed, so
// the caller still gets the original error.
using OomObserver = std::function<void(const OomInfo&)>;

// Called when no cached block fits, before any new segment is reserved; returns true when it
// freed memory through the allocator (then the pools are searched again). Runs without the
// allocator's lock held.
using FreeMemoryCallback = std::function<bool()>;

}  // namespace memsnap
