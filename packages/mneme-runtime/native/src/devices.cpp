#include "mneme/runtime/devices.hpp"

#include "mneme/runtime/cuda_device.hpp"
#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/hip_device.hpp"

namespace mneme::runtime {

std::vector<std::string> available_backends() {
#ifdef MNEME_RUNTIME_WITH_HIP
  return {"cuda", "hip"};
#else
  return {"cuda"};
#endif
}

std::shared_ptr<Device> open_device(const std::string& backend, int ordinal) {
  if (backend == "cuda") return cuda::CudaDevice::open(ordinal);
  if (backend == "hip") {
#ifdef MNEME_RUNTIME_WITH_HIP
    return hip::HipDevice::open(ordinal);
#else
    throw NoDriverError(
        "this build of mneme-runtime has no HIP backend; rebuild it on a machine with ROCm "
        "installed (ROCM_PATH)");
#endif
  }
  throw UserError("unknown GPU backend '" + backend + "'; use 'cuda' or 'hip'");
}

}  // namespace mneme::runtime
