// The processes using a CUDA device and the memory each holds there, from NVML (the driver's
// management library, opened at run time: nothing links against it, and a machine without it
// answers with an empty list). Needs no CUDA runtime: the device is named by its PCI bus id
// (CudaBackend::device_processes asks the runtime for it, `memsnap record` the driver).
#pragma once

#include <cstdint>
#include <vector>

#include "allocator/device_backend.h"

namespace memsnap {

// The compute processes on the device at PCI bus id `bus_id` ("0000:19:00.0", as CUDA gives it)
// and the device memory each holds; empty when NVML is missing, refuses, or gives figures that
// cannot be right (a process holding more than `bound` bytes, the device's total). Thread-safe.
std::vector<DeviceProcess> nvml_processes_at_bus_id(const char* bus_id, uint64_t bound);

}  // namespace memsnap
