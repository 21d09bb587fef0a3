#include "mneme/runtime/gpu_clocks.hpp"

#include <dlfcn.h>

namespace mneme::runtime {
namespace {

// The few NVML declarations used (nvml.h is not on every build machine): NVML's ABI,
// stable since the _v2 entry points.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

struct NvmlApi {
  NvmlReturn (*nvmlInit_v2)();
  NvmlReturn (*nvmlDeviceGetHandleByIndex_v2)(unsigned, NvmlDevice*);
  NvmlReturn (*nvmlDeviceGetClockInfo)(NvmlDevice, int, unsigned*);
  NvmlReturn (*nvmlDeviceGetName)(NvmlDevice, char*, unsigned);
  const char* (*nvmlErrorString)(NvmlReturn);
  // optional
  NvmlReturn (*nvmlDeviceGetTotalEnergyConsumption)(NvmlDevice, unsigned long long*);
  NvmlReturn (*nvmlDeviceGetPowerUsage)(NvmlDevice, unsigned*);
} nvml{};

std::string error_text(NvmlReturn r) {
  const char* text = nvml.nvmlErrorString ? nvml.nvmlErrorString(r) : nullptr;
  return text ? text : "NVML error " + std::to_string(r);
}

}  // namespace

GpuClocks& GpuClocks::instance() {
  static GpuClocks* clocks = new GpuClocks();
  return *clocks;
}

bool GpuClocks::load() {  // under mutex_
  if (tried_) return loaded_;
  tried_ = true;
  void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = ::dlerror();
    reason_ = std::string("NVML not available: cannot load libnvidia-ml.so.1 (") + (why ? why : "not found") + ")";
    return false;
  }
#define MNEME_NVML_RESOLVE(name, required)                                      \
  nvml.name = reinterpret_cast<decltype(nvml.name)>(::dlsym(library, #name));   \
  if (required && !nvml.name) {                                                 \
    reason_ = "NVML too old: libnvidia-ml.so.1 lacks " #name;                   \
    return false;                                                               \
  }
  MNEME_NVML_RESOLVE(nvmlInit_v2, true)
  MNEME_NVML_RESOLVE(nvmlDeviceGetHandleByIndex_v2, true)
  MNEME_NVML_RESOLVE(nvmlDeviceGetClockInfo, true)
  MNEME_NVML_RESOLVE(nvmlDeviceGetName, true)
  MNEME_NVML_RESOLVE(nvmlErrorString, true)
  MNEME_NVML_RESOLVE(nvmlDeviceGetTotalEnergyConsumption, false)
  MNEME_NVML_RESOLVE(nvmlDeviceGetPowerUsage, false)
#undef MNEME_NVML_RESOLVE
  NvmlReturn r = nvml.nvmlInit_v2();
  if (r != kNvmlSuccess) {
    reason_ = "NVML not usable: nvmlInit failed (" + error_text(r) + ")";
    return false;
  }
  loaded_ = true;
  return true;
}

bool GpuClocks::available() {
  std::lock_guard lock(mutex_);
  return load();
}

const std::string& GpuClocks::reason() {
  std::lock_guard lock(mutex_);
  load();
  return reason_;
}

bool GpuClocks::sample(uint32_t index, GpuSample& out) {
  std::lock_guard lock(mutex_);
  if (!load()) return false;
  NvmlDevice device = nullptr;
  NvmlReturn r = nvml.nvmlDeviceGetHandleByIndex_v2(index, &device);
  if (r != kNvmlSuccess) {
    reason_ = "NVML has no GPU " + std::to_string(index) + " (" + error_text(r) + ")";
    return false;
  }
  unsigned mhz = 0;
  if ((r = nvml.nvmlDeviceGetClockInfo(device, kNvmlClockSm, &mhz)) != kNvmlSuccess) {
    reason_ = "NVML cannot read the SM clock (" + error_text(r) + ")";
    return false;
  }
  out = GpuSample{};
  out.sm_clock_mhz = mhz;
  unsigned long long energy = 0;
  if (nvml.nvmlDeviceGetTotalEnergyConsumption &&
      nvml.nvmlDeviceGetTotalEnergyConsumption(device, &energy) == kNvmlSuccess) {
    out.energy_mj = energy;
    out.has_energy = true;
  }
  unsigned power = 0;
  if (nvml.nvmlDeviceGetPowerUsage && nvml.nvmlDeviceGetPowerUsage(device, &power) == kNvmlSuccess)
    out.power_mw = power;
  return true;
}

std::string GpuClocks::name(uint32_t index) {
  std::lock_guard lock(mutex_);
  if (!load()) return "";
  NvmlDevice device = nullptr;
  char text[96] = {0};
  if (nvml.nvmlDeviceGetHandleByIndex_v2(index, &device) != kNvmlSuccess ||
      nvml.nvmlDeviceGetName(device, text, sizeof text) != kNvmlSuccess)
    return "";
  return text;
}

}  // namespace mneme::runtime
