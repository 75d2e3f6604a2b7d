#include "allocator/default_backend.h"

#include <cstdlib>
#include <string>

#include "allocator/simulated_backend.h"
#ifdef MEMSNAP_HAVE_CUDA
#include "allocator/cuda_backend.h"
#endif

namespace memsnap {

bool cuda_backend_built() {
#ifdef MEMSNAP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_device_available() {
#ifdef MEMSNAP_HAVE_CUDA
  return CudaBackend::available();
#else
  return false;
#endif
}

Result<std::shared_ptr<DeviceBackend>> make_default_backend() {
  using R = Result<std::shared_ptr<DeviceBackend>>;
  const char* requested = std::getenv("MEMSNAP_BACKEND");
  const std::string choice = requested ? requested : "";
  if (!choice.empty() && choice != "cuda" && choice != "simulated")
    return R::failure("MEMSNAP_BACKEND: expected 'cuda' or 'simulated'");
  if (choice == "simulated") return std::shared_ptr<DeviceBackend>(std::make_shared<SimulatedBackend>());
  if (choice == "cuda" && !cuda_backend_built())
    return R::failure("MEMSNAP_BACKEND=cuda: this memsnap was built without CUDA");
  if (choice == "cuda" && !cuda_device_available())
    return R::failure("MEMSNAP_BACKEND=cuda: no usable CUDA device");
#ifdef MEMSNAP_HAVE_CUDA
  if (cuda_device_available()) {
    try {
      return std::shared_ptr<DeviceBackend>(std::make_shared<CudaBackend>());
    } catch (const DeviceError& error) {
      if (choice == "cuda") return R::failure(error.what());
    }
  }
#endif
  return std::shared_ptr<DeviceBackend>(std::make_shared<SimulatedBackend>());
}

}  // namespace memsnap
