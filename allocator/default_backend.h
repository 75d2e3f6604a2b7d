// Picks the device backend for programs that do not choose one: CUDA when memsnap was built
// with it and a GPU is usable, otherwise the simulated device (so demos and tools run on
// machines without a GPU). MEMSNAP_BACKEND=cuda|simulated overrides the choice.
#pragma once

#include <memory>

#include "allocator/device_backend.h"
#include "allocator/result.h"

namespace memsnap {

bool cuda_backend_built();
bool cuda_device_available();

// Fails with a one-line reason when MEMSNAP_BACKEND asks for something unavailable.
Result<std::shared_ptr<DeviceBackend>> make_default_backend();

}  // namespace memsnap
