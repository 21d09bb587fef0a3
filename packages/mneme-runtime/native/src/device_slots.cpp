// The GPUs a recorded process works on (docs/record.md, "Several GPUs"): each gets a slot
// with its own fixed address range, opened when the application first allocates or
// launches on it, and the GPUs that can reach each other are granted access to each
// other's memory (the VMM API's peer access).
#include <cstdio>

#include "mneme/runtime/devices.hpp"
#include "recorder.hpp"

namespace mneme::recorder {

Recorder::DeviceSlot& Recorder::slot() {
  using CtxGetDevice = CUresult (*)(CUdevice*);
  static auto get_device = driver_function<CtxGetDevice>("cuCtxGetDevice");
  int ordinal = -1;
  if (slots_.empty()) {
    // The first GPU: the runtime's current one when a shared CUDA runtime is loaded (its
    // primary context made now, which the driver calls below share), else the current
    // context's (a driver-API program, the static runtime), else device 0.
    using RuntimeFree = cudaError_t (*)(void*);
    using RuntimeGetDevice = cudaError_t (*)(int*);
    auto runtime_free = reinterpret_cast<RuntimeFree>(dlsym(RTLD_NEXT, "cudaFree"));
    auto runtime_get_device = reinterpret_cast<RuntimeGetDevice>(dlsym(RTLD_NEXT, "cudaGetDevice"));
    if (runtime_free && runtime_get_device) {
      runtime_free(nullptr);
      runtime_get_device(&ordinal);
    }
  }
  CUdevice current = 0;
  if (ordinal < 0 && get_device && get_device(&current) == CUDA_SUCCESS) ordinal = current;
  if (ordinal < 0) ordinal = slots_.empty() ? 0 : slots_.front()->ordinal();
  for (auto& s : slots_)
    if (s->ordinal() == ordinal) return *s;
  return open_slot(ordinal);
}

Recorder::DeviceSlot& Recorder::open_slot(int ordinal) {
  // The managed arena sits right after the first range; each further GPU's range a
  // whole stride (range and arena) above the one before.
  uint64_t base = base_ + slots_.size() * (vass_ + managed_size_);
  auto slot = std::make_unique<DeviceSlot>();
  try {
    slot->device = std::dynamic_pointer_cast<rt::cuda::CudaDevice>(rt::open_device("cuda", ordinal));
    slot->space = std::make_unique<rt::AddressSpace>(std::make_unique<rt::cuda::CudaMappingBackend>(slot->device),
                                                     base, vass_);
    if (slots_.empty() && managed_size_ && managed_mode_ != "driver")
      arena_ = std::make_unique<mneme::recorder::ManagedArena>(slot->device->driver(), base_ + vass_, managed_size_);
  } catch (const std::exception& e) {
    fatal(std::string(e.what()) + " (choose another base with --vass-base, or a smaller -vass)");
  }
  // The VMM API's memory is reached by the devices cuMemSetAccess names, whatever
  // cudaDeviceEnablePeerAccess says: every pair of GPUs that can reach each other may.
  for (auto& other : slots_) {
    for (auto [from, to] : {std::pair{slot.get(), other.get()}, {other.get(), slot.get()}}) {
      try {
        to->space->share_with(from->ordinal());
      } catch (const std::exception&) {
        std::fprintf(stderr, "mneme record: device %d cannot reach the memory of device %d (no peer access)\n",
                     from->ordinal(), to->ordinal());
      }
    }
  }
  slots_.push_back(std::move(slot));
  return *slots_.back();
}

}  // namespace mneme::recorder
