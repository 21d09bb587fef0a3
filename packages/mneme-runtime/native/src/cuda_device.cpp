#include "mneme/runtime/cuda_device.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/host_memory.hpp"

namespace mneme::runtime::cuda {
namespace {

template <typename T>
T from_handle(uintptr_t handle) {
  return reinterpret_cast<T>(handle);
}
template <typename T>
uintptr_t to_handle(T pointer) {
  return reinterpret_cast<uintptr_t>(pointer);
}

}  // namespace

// --- context scope -----------------------------------------------------------

CudaDevice::Scope::Scope(const CudaDevice& device) : driver_(device.driver_) {
  cuda::check(driver_, driver_.cuCtxPushCurrent(device.context_), "cuCtxPushCurrent");
}

CudaDevice::Scope::~Scope() {
  CUcontext popped;
  driver_.cuCtxPopCurrent(&popped);
}

// --- device ------------------------------------------------------------------

std::shared_ptr<CudaDevice> CudaDevice::open(int ordinal) {
  const Driver& driver = Driver::get();
  int count = 0;
  cuda::check(driver, driver.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count) {
    throw NoDeviceError("no CUDA device " + std::to_string(ordinal) + ": this machine has " +
                        std::to_string(count) + " visible device(s); pick an ordinal below " +
                        std::to_string(count) + " or check CUDA_VISIBLE_DEVICES");
  }
  CUdevice device;
  cuda::check(driver, driver.cuDeviceGet(&device, ordinal), "cuDeviceGet");
  CUcontext context;
  cuda::check(driver, driver.cuDevicePrimaryCtxRetain(&context, device),
              "cuDevicePrimaryCtxRetain");
  std::shared_ptr<CudaDevice> result(new CudaDevice(driver, ordinal, device, context));
  return result;
}

CudaDevice::CudaDevice(const Driver& driver, int ordinal, CUdevice device, CUcontext context)
    : driver_(driver), device_(device), context_(context) {
  try {
    query_properties(ordinal);
  } catch (...) {
    driver_.cuDevicePrimaryCtxRelease(device_);
    throw;
  }
}

CudaDevice::~CudaDevice() { driver_.cuDevicePrimaryCtxRelease(device_); }

void CudaDevice::query_properties(int ordinal) {
  DeviceProperties& p = properties_;
  p.backend = "cuda";
  p.ordinal = ordinal;
  char name[256] = {};
  check(driver_.cuDeviceGetName(name, sizeof name - 1, device_), "cuDeviceGetName");
  p.name = name;
  auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    check(driver_.cuDeviceGetAttribute(&value, which, device_), "cuDeviceGetAttribute");
    return value;
  };
  p.compute_capability_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  p.compute_capability_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  p.multiprocessor_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  p.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  p.warp_size = attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
  p.max_threads_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  p.max_blocks_per_multiprocessor = attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  p.max_shared_memory_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
  p.max_shared_memory_per_block_optin =
      attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  p.l2_cache_size = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  p.clock_rate_khz = attribute(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
  p.memory_clock_rate_khz = attribute(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
  p.memory_bus_width_bits = attribute(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
  p.virtual_memory_management =
      attribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) != 0;
  size_t total = 0;
  check(driver_.cuDeviceTotalMem(&total, device_), "cuDeviceTotalMem");
  p.total_memory = total;
  check(driver_.cuDriverGetVersion(&p.driver_version), "cuDriverGetVersion");
  if (p.virtual_memory_management) {
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device_;
    size_t granularity = 0;
    check(driver_.cuMemGetAllocationGranularity(&granularity, &prop,
                                                CU_MEM_ALLOC_GRANULARITY_MINIMUM),
          "cuMemGetAllocationGranularity");
    p.granularity = granularity;
    check(driver_.cuMemGetAllocationGranularity(&granularity, &prop,
                                                CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity");
    p.recommended_granularity = granularity;
  }
}

std::pair<uint64_t, uint64_t> CudaDevice::memory_info() {
  Scope scope(*this);
  size_t free_bytes = 0, total_bytes = 0;
  check(driver_.cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo");
  return {free_bytes, total_bytes};
}

std::unique_ptr<MappingBackend> CudaDevice::mapping_backend() {
  return std::make_unique<CudaMappingBackend>(shared_from_this());
}

void CudaDevice::synchronize() {
  Scope scope(*this);
  check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
}

void CudaDevice::copy_to_device(uint64_t dst, const void* src, size_t bytes) {
  Scope scope(*this);
  check(driver_.cuMemcpyHtoD(dst, src, bytes), "cuMemcpyHtoD");
}

void CudaDevice::copy_from_device(void* dst, uint64_t src, size_t bytes) {
  Scope scope(*this);
  check(driver_.cuMemcpyDtoH(dst, src, bytes), "cuMemcpyDtoH");
}

void CudaDevice::copy_device_to_device(uint64_t dst, uint64_t src, size_t bytes) {
  Scope scope(*this);
  check(driver_.cuMemcpyDtoD(dst, src, bytes), "cuMemcpyDtoD");
}

void CudaDevice::fill(uint64_t dst, uint8_t value, size_t bytes) {
  Scope scope(*this);
  check(driver_.cuMemsetD8(dst, value, bytes), "cuMemsetD8");
}

void CudaDevice::copy_to_device_async(uint64_t dst, const void* src, size_t bytes,
                                      StreamHandle stream) {
  Scope scope(*this);
  check(driver_.cuMemcpyHtoDAsync(dst, src, bytes, from_handle<CUstream>(stream)),
        "cuMemcpyHtoDAsync");
}

void CudaDevice::copy_from_device_async(void* dst, uint64_t src, size_t bytes,
                                        StreamHandle stream) {
  Scope scope(*this);
  check(driver_.cuMemcpyDtoHAsync(dst, src, bytes, from_handle<CUstream>(stream)),
        "cuMemcpyDtoHAsync");
}

void CudaDevice::copy_device_to_device_async(uint64_t dst, uint64_t src, size_t bytes,
                                             StreamHandle stream) {
  Scope scope(*this);
  check(driver_.cuMemcpyDtoDAsync(dst, src, bytes, from_handle<CUstream>(stream)),
        "cuMemcpyDtoDAsync");
}

void CudaDevice::fill_async(uint64_t dst, uint8_t value, size_t bytes, StreamHandle stream) {
  Scope scope(*this);
  check(driver_.cuMemsetD8Async(dst, value, bytes, from_handle<CUstream>(stream)),
        "cuMemsetD8Async");
}

void* CudaDevice::allocate_pinned(size_t bytes) {
  Scope scope(*this);
  // Resident huge-page memory registered with the driver (host_memory.hpp: an order of
  // magnitude faster to page-lock); cuMemHostAlloc where registration is refused.
  void* pointer = nullptr;
  try {
    pointer = map_resident(bytes);
  } catch (const Error&) {
  }
  if (pointer) {
    if (driver_.cuMemHostRegister(pointer, resident_size(bytes), CU_MEMHOSTREGISTER_PORTABLE) == CUDA_SUCCESS) {
      std::lock_guard<std::mutex> lock(pinned_mutex_);
      registered_[pointer] = resident_size(bytes);
      return pointer;
    }
    unmap_resident(pointer, bytes);
    pointer = nullptr;
  }
  check(driver_.cuMemHostAlloc(&pointer, bytes, CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc");
  return pointer;
}

// The noexcept releases below run from destructors, possibly after the driver
// shut down at exit: failures are ignored, never thrown.
void CudaDevice::free_pinned(void* pointer) noexcept {
  size_t registered = 0;
  {
    std::lock_guard<std::mutex> lock(pinned_mutex_);
    auto it = registered_.find(pointer);
    if (it != registered_.end()) {
      registered = it->second;
      registered_.erase(it);
    }
  }
  try {
    Scope scope(*this);
    if (registered) driver_.cuMemHostUnregister(pointer);
    else driver_.cuMemFreeHost(pointer);
  } catch (...) {
  }
  if (registered) unmap_resident(pointer, registered);
}

ModuleHandle CudaDevice::load_module(const void* image, size_t bytes) {
  // PTX must be NUL-terminated; a trailing NUL is harmless after a cubin.
  std::vector<char> text(static_cast<const char*>(image), static_cast<const char*>(image) + bytes);
  text.push_back('\0');
  char error_log[8192] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {error_log, reinterpret_cast<void*>(sizeof error_log - 1)};
  Scope scope(*this);
  CUmodule module = nullptr;
  const CUresult result = driver_.cuModuleLoadDataEx(&module, text.data(), 2, options, values);
  if (result != CUDA_SUCCESS) {
    std::string message = describe(driver_, result, "cuModuleLoadDataEx");
    if (error_log[0] != '\0') message += ": " + std::string(error_log);
    const char* name = nullptr;
    driver_.cuGetErrorName(result, &name);
    throw DriverError(message, static_cast<int>(result), name ? name : "");
  }
  return to_handle(module);
}

void CudaDevice::unload_module(ModuleHandle module) noexcept {
  try {
    Scope scope(*this);
    driver_.cuModuleUnload(from_handle<CUmodule>(module));
  } catch (...) {
  }
}

FunctionHandle CudaDevice::get_function(ModuleHandle module, const std::string& name) {
  Scope scope(*this);
  CUfunction function = nullptr;
  const CUresult result =
      driver_.cuModuleGetFunction(&function, from_handle<CUmodule>(module), name.c_str());
  if (result == CUDA_ERROR_NOT_FOUND) {
    throw DriverError("the module has no kernel named '" + name + "'", result,
                      "CUDA_ERROR_NOT_FOUND");
  }
  check(result, "cuModuleGetFunction");
  return to_handle(function);
}

std::pair<uint64_t, uint64_t> CudaDevice::get_global(ModuleHandle module,
                                                     const std::string& name) {
  Scope scope(*this);
  CUdeviceptr address = 0;
  size_t bytes = 0;
  const CUresult result =
      driver_.cuModuleGetGlobal(&address, &bytes, from_handle<CUmodule>(module), name.c_str());
  if (result == CUDA_ERROR_NOT_FOUND) {
    throw DriverError("the module has no global named '" + name + "'", result,
                      "CUDA_ERROR_NOT_FOUND");
  }
  check(result, "cuModuleGetGlobal");
  return {address, bytes};
}

std::vector<ParamInfo> CudaDevice::parameter_info(FunctionHandle function) {
  if (driver_.cuFuncGetParamInfo == nullptr) {
    throw NoDriverError(
        "CUDA driver too old: cuFuncGetParamInfo needs driver 12.4 or newer; install a newer "
        "NVIDIA driver");
  }
  Scope scope(*this);
  std::vector<ParamInfo> params;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    const CUresult result =
        driver_.cuFuncGetParamInfo(from_handle<CUfunction>(function), index, &offset, &size);
    // The driver signals "past the last parameter" with INVALID_VALUE.
    if (result == CUDA_ERROR_INVALID_VALUE) break;
    check(result, "cuFuncGetParamInfo");
    params.push_back({offset, size});
  }
  return params;
}

FunctionAttributes CudaDevice::function_attributes(FunctionHandle function) {
  Scope scope(*this);
  auto attribute = [&](CUfunction_attribute which) {
    int value = 0;
    check(driver_.cuFuncGetAttribute(&value, which, from_handle<CUfunction>(function)),
          "cuFuncGetAttribute");
    return value;
  };
  FunctionAttributes a;
  a.num_registers = attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
  a.local_size_bytes = attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  a.shared_size_bytes = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  a.const_size_bytes = attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  a.max_threads_per_block = attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  a.max_dynamic_shared_size_bytes = attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  a.ptx_version = attribute(CU_FUNC_ATTRIBUTE_PTX_VERSION);
  a.binary_version = attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
  return a;
}

void CudaDevice::set_max_dynamic_shared_memory(FunctionHandle function, int bytes) {
  Scope scope(*this);
  check(driver_.cuFuncSetAttribute(from_handle<CUfunction>(function),
                                   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
        "cuFuncSetAttribute");
}

int CudaDevice::max_active_blocks_per_multiprocessor(FunctionHandle function, int block_threads,
                                                     size_t shared_bytes) {
  if (!driver_.cuOccupancyMaxActiveBlocksPerMultiprocessor)
    throw UserError("this CUDA driver has no cuOccupancyMaxActiveBlocksPerMultiprocessor");
  Scope scope(*this);
  int blocks = 0;
  check(driver_.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, from_handle<CUfunction>(function),
                                                            block_threads, shared_bytes),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

void CudaDevice::launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_bytes,
                        StreamHandle stream, const void* args, size_t args_bytes, Dim3 cluster,
                        bool cooperative) {
  size_t size = args_bytes;
  // The driver reads but never writes the buffer; `extra` is untyped void*.
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(args),
                   CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  Scope scope(*this);
  if (cooperative) {
    // A cooperative launch takes its arguments as kernelParams, as cuLaunchCooperativeKernel
    // does (the packed buffer, `extra`, is not documented for it): pointers into the buffer
    // at the offsets the driver gives.
    std::vector<void*> params;
    if (args_bytes)
      for (const ParamInfo& p : parameter_info(function))
        params.push_back(static_cast<char*>(const_cast<void*>(args)) + p.offset);
    launch_with_attributes(function, grid, block, shared_bytes, stream, params.empty() ? nullptr : params.data(),
                           nullptr, cluster, true);
    return;
  }
  if (uint64_t(cluster.x) * cluster.y * cluster.z > 1) {
    launch_with_attributes(function, grid, block, shared_bytes, stream, nullptr, args_bytes ? extra : nullptr,
                           cluster, false);
    return;
  }
  check(driver_.cuLaunchKernel(from_handle<CUfunction>(function), grid.x, grid.y, grid.z, block.x,
                               block.y, block.z, shared_bytes, from_handle<CUstream>(stream),
                               nullptr, args_bytes ? extra : nullptr),
        "cuLaunchKernel");
}

// A launch with launch attributes (cuLaunchKernelEx): in thread-block clusters, and/or
// cooperative (CU_LAUNCH_ATTRIBUTE_COOPERATIVE: every block resident at once, so
// cooperative_groups' grid sync holds; cuLaunchCooperativeKernel takes no packed buffer).
// Clusters of more than eight blocks are "non-portable": the function must allow them
// first, as the recorded application did.
void CudaDevice::launch_with_attributes(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_bytes,
                                        StreamHandle stream, void** params, void** extra, Dim3 cluster,
                                        bool cooperative) {
  bool clustered = uint64_t(cluster.x) * cluster.y * cluster.z > 1;
  if (!driver_.cuLaunchKernelEx)
    throw UserError(clustered ? "this CUDA driver has no cuLaunchKernelEx: a launch in thread-block clusters needs CUDA 12"
                              : "this CUDA driver has no cuLaunchKernelEx: a cooperative replay launch needs CUDA 12");
  auto f = from_handle<CUfunction>(function);
  if (uint64_t(cluster.x) * cluster.y * cluster.z > 8)
    check(driver_.cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1), "cuFuncSetAttribute");
  CUlaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (clustered) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = cluster.x;
    attributes[count].value.clusterDim.y = cluster.y;
    attributes[count].value.clusterDim.z = cluster.z;
    ++count;
  }
  if (cooperative) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[count].value.cooperative = 1;
    ++count;
  }
  CUlaunchConfig config{};
  config.gridDimX = grid.x; config.gridDimY = grid.y; config.gridDimZ = grid.z;
  config.blockDimX = block.x; config.blockDimY = block.y; config.blockDimZ = block.z;
  config.sharedMemBytes = shared_bytes;
  config.hStream = from_handle<CUstream>(stream);
  config.attrs = attributes;
  config.numAttrs = count;
  check(driver_.cuLaunchKernelEx(&config, f, params, extra), "cuLaunchKernelEx");
}

StreamHandle CudaDevice::create_stream() {
  Scope scope(*this);
  CUstream stream = nullptr;
  check(driver_.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  return to_handle(stream);
}

void CudaDevice::destroy_stream(StreamHandle stream) noexcept {
  try {
    Scope scope(*this);
    driver_.cuStreamDestroy(from_handle<CUstream>(stream));
  } catch (...) {
  }
}

void CudaDevice::synchronize_stream(StreamHandle stream) {
  Scope scope(*this);
  check(driver_.cuStreamSynchronize(from_handle<CUstream>(stream)), "cuStreamSynchronize");
}

EventHandle CudaDevice::create_event() {
  Scope scope(*this);
  CUevent event = nullptr;
  check(driver_.cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate");
  return to_handle(event);
}

void CudaDevice::destroy_event(EventHandle event) noexcept {
  try {
    Scope scope(*this);
    driver_.cuEventDestroy(from_handle<CUevent>(event));
  } catch (...) {
  }
}

void CudaDevice::record_event(EventHandle event, StreamHandle stream) {
  Scope scope(*this);
  check(driver_.cuEventRecord(from_handle<CUevent>(event), from_handle<CUstream>(stream)),
        "cuEventRecord");
}

void CudaDevice::synchronize_event(EventHandle event) {
  Scope scope(*this);
  check(driver_.cuEventSynchronize(from_handle<CUevent>(event)), "cuEventSynchronize");
}

float CudaDevice::elapsed_ms(EventHandle start, EventHandle end) {
  Scope scope(*this);
  float ms = 0;
  check(driver_.cuEventElapsedTime(&ms, from_handle<CUevent>(start), from_handle<CUevent>(end)),
        "cuEventElapsedTime");
  return ms;
}

}  // namespace mneme::runtime::cuda
