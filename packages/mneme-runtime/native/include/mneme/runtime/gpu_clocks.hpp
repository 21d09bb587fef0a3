// GpuClocks: the SM clock and the energy counter of a GPU, from NVML, sampled around a
// measurement so that every reported time says at which clock it ran (boost in a short
// replay, lower under an application's sustained load) and what it cost in energy.
//
// libnvidia-ml.so.1 is dlopen-ed on first use: where it is missing (a machine without the
// driver, a container without NVML) available() is false and reason() says why.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace mneme::runtime {

struct GpuSample {
  uint32_t sm_clock_mhz = 0;    // current SM clock
  uint32_t power_mw = 0;        // power draw (0 where NVML does not report it)
  uint64_t energy_mj = 0;       // total energy since the driver loaded, millijoules
  bool has_energy = false;      // nvmlDeviceGetTotalEnergyConsumption answered (Volta+)
};

class GpuClocks {
 public:
  static GpuClocks& instance();
  // Loads and initialises NVML on first call; false (reason()) when it cannot.
  bool available();
  const std::string& reason();
  // The GPU of NVML index `index` now; false (reason()) when NVML cannot answer.
  bool sample(uint32_t index, GpuSample& out);
  // NVML's name of the GPU at `index` ("" when unknown).
  std::string name(uint32_t index);

 private:
  GpuClocks() = default;
  bool load();
  std::mutex mutex_;
  bool tried_ = false, loaded_ = false;
  std::string reason_;
};

}  // namespace mneme::runtime
