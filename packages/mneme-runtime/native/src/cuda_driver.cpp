#include "mneme/runtime/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>

#include "mneme/runtime/errors.hpp"

namespace mneme::runtime::cuda {
namespace {

#define MNEME_STRINGIFY_EXPANDED(x) MNEME_STRINGIFY(x)
#define MNEME_STRINGIFY(x) #x

struct LoadResult {
  Driver driver;
  std::string error;  // empty when the driver is usable
};

LoadResult load() {
  LoadResult result;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    result.error = std::string("no CUDA driver: cannot load libcuda.so.1 (") +
                   (why ? why : "not found") +
                   "); install the NVIDIA driver or run on a machine with a GPU";
    return result;
  }
  Driver& d = result.driver;
#define MNEME_RESOLVE_REQUIRED(name)                                                       \
  d.name = reinterpret_cast<decltype(d.name)>(dlsym(library, MNEME_STRINGIFY_EXPANDED(name))); \
  if (d.name == nullptr) {                                                                 \
    result.error = "CUDA driver too old: libcuda.so.1 lacks " MNEME_STRINGIFY_EXPANDED(    \
        name) "; install a newer NVIDIA driver";                                          \
    return result;                                                                         \
  }
  MNEME_CUDA_DRIVER_FUNCTIONS(MNEME_RESOLVE_REQUIRED)
#undef MNEME_RESOLVE_REQUIRED
#define MNEME_RESOLVE_OPTIONAL(name) \
  d.name = reinterpret_cast<decltype(d.name)>(dlsym(library, MNEME_STRINGIFY_EXPANDED(name)));
  MNEME_CUDA_OPTIONAL_FUNCTIONS(MNEME_RESOLVE_OPTIONAL)
#undef MNEME_RESOLVE_OPTIONAL
  // The library stays loaded for the life of the process: the resolved
  // pointers are used until exit.
  const CUresult init = d.cuInit(0);
  if (init != CUDA_SUCCESS) {
    result.error = "no usable CUDA driver: " + describe(d, init, "cuInit") +
                   "; check that a GPU is visible (nvidia-smi, CUDA_VISIBLE_DEVICES)";
  }
  return result;
}

const LoadResult& loaded() {
  static const LoadResult result = load();  // thread-safe one-time init
  return result;
}

}  // namespace

const Driver& Driver::get() {
  const LoadResult& result = loaded();
  if (!result.error.empty()) throw NoDriverError(result.error);
  return result.driver;
}

bool Driver::available() noexcept {
  try {
    return loaded().error.empty();
  } catch (...) {
    return false;
  }
}

std::string describe(const Driver& driver, CUresult result, const char* call) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.cuGetErrorName == nullptr || driver.cuGetErrorName(result, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (driver.cuGetErrorString == nullptr ||
      driver.cuGetErrorString(result, &text) != CUDA_SUCCESS) {
    text = nullptr;
  }
  std::string message = std::string(call) + " failed: ";
  message += name ? name : "CUDA error " + std::to_string(static_cast<int>(result));
  if (text) message += std::string(" (") + text + ")";
  return message;
}

void check(const Driver& driver, CUresult result, const char* call) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  if (driver.cuGetErrorName(result, &name) != CUDA_SUCCESS) name = "CUDA_ERROR_UNKNOWN";
  throw DriverError(describe(driver, result, call), static_cast<int>(result), name);
}

}  // namespace mneme::runtime::cuda
