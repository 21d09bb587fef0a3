// Opening a device of whichever vendor backend this build has.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mneme/runtime/device.hpp"

namespace mneme::runtime {

// Backends compiled into this build: always "cuda", plus "hip" where ROCm was
// installed at build time.
std::vector<std::string> available_backends();

// Open device `ordinal` of `backend` ("cuda" or "hip"). Throws NoDriverError
// when the backend's driver is missing or not compiled in.
std::shared_ptr<Device> open_device(const std::string& backend, int ordinal);

}  // namespace mneme::runtime
