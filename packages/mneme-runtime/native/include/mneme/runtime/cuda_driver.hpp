// The CUDA driver API, loaded from libcuda.so.1 at run time so the module
// imports (and reports "no CUDA driver" cleanly) on machines without one.
#pragma once

#include <cuda.h>

#include <string>

namespace mneme::runtime::cuda {

// Every entry point we call. cuda.h maps names such as cuMemcpyHtoD to their
// current ABI version (cuMemcpyHtoD_v2); the loader resolves exactly that
// versioned symbol and types it with the header's own prototype.
#define MNEME_CUDA_DRIVER_FUNCTIONS(X)                                                   \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString)                  \
  X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)          \
  X(cuDeviceTotalMem) X(cuDeviceCanAccessPeer) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)           \
  X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxSynchronize) X(cuMemGetInfo)            \
  X(cuMemAddressReserve) X(cuMemAddressFree) X(cuMemCreate) X(cuMemRelease) X(cuMemMap)  \
  X(cuMemUnmap) X(cuMemSetAccess) X(cuMemGetAllocationGranularity) X(cuMemcpyHtoD)       \
  X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync)              \
  X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD8Async) X(cuMemHostAlloc)               \
  X(cuMemFreeHost) X(cuMemHostRegister) X(cuMemHostUnregister) X(cuModuleLoadDataEx) X(cuModuleUnload) X(cuModuleGetFunction)        \
  X(cuModuleGetGlobal) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuLaunchKernel)     \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate)           \
  X(cuEventDestroy) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)

// Entry points newer than the oldest driver we run on; null when absent.
#define MNEME_CUDA_OPTIONAL_FUNCTIONS(X) X(cuFuncGetParamInfo) X(cuLaunchKernelEx) \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

struct Driver {
#define MNEME_DECLARE_POINTER(name) decltype(&::name) name = nullptr;
  MNEME_CUDA_DRIVER_FUNCTIONS(MNEME_DECLARE_POINTER)
  MNEME_CUDA_OPTIONAL_FUNCTIONS(MNEME_DECLARE_POINTER)
#undef MNEME_DECLARE_POINTER

  // The process-wide driver, loaded and cuInit-ed on first use. Throws
  // NoDriverError (a user error) when libcuda.so.1 is missing, lacks an entry
  // point, or cuInit fails.
  static const Driver& get();
  // True when get() would succeed; never throws.
  static bool available() noexcept;
};

// "cuMemMap failed: CUDA_ERROR_INVALID_VALUE (invalid argument)".
std::string describe(const Driver& driver, CUresult result, const char* call);
// Throws DriverError unless result is CUDA_SUCCESS.
void check(const Driver& driver, CUresult result, const char* call);

}  // namespace mneme::runtime::cuda
