// The processes using a CUDA device and the memory each holds there, from NVML (the driver's
// management library, opened at run time: nothing links against it, and a machine without it
// answers with an empty list). For CudaBackend::device_processes.
#pragma once

#include <vector>

#include "allocator/device_backend.h"

namespace memsnap {

// The compute processes on CUDA device `device` (the runtime's numbering, matched to NVML's by
// PCI bus id) and the device memory each holds; empty when NVML is missing, refuses, or gives
// figures that cannot be right. Thread-safe.
std::vector<DeviceProcess> nvml_device_processes(int device);

}  // namespace memsnap
