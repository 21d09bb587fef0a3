// HIP backend. Built only with ROCm installed (see CMakeLists.txt); not
// compiled or tested on the CUDA machines this project runs on today.
#include "mneme/runtime/hip_device.hpp"

#include <hip/hip_runtime_api.h>

#include <vector>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/errors.hpp"

namespace mneme::runtime::hip {
namespace {

void check(hipError_t result, const char* call) {
  if (result == hipSuccess) return;
  throw DriverError(std::string(call) + " failed: " + hipGetErrorName(result) + " (" +
                        hipGetErrorString(result) + ")",
                    static_cast<int>(result), hipGetErrorName(result));
}

template <typename T>
T from_handle(uintptr_t handle) {
  return reinterpret_cast<T>(handle);
}
template <typename T>
uintptr_t to_handle(T pointer) {
  return reinterpret_cast<uintptr_t>(pointer);
}
void* device_pointer(uint64_t address) { return reinterpret_cast<void*>(address); }

hipMemAllocationProp allocation_prop(int ordinal) {
  hipMemAllocationProp prop = {};
  prop.type = hipMemAllocationTypePinned;
  prop.location.type = hipMemLocationTypeDevice;
  prop.location.id = ordinal;
  return prop;
}

}  // namespace

std::shared_ptr<HipDevice> HipDevice::open(int ordinal) {
  int count = 0;
  const hipError_t init = hipGetDeviceCount(&count);
  if (init != hipSuccess) {
    throw NoDriverError(std::string("no usable HIP runtime: hipGetDeviceCount failed: ") +
                        hipGetErrorName(init) + "; check that a GPU is visible (rocm-smi)");
  }
  if (ordinal < 0 || ordinal >= count) {
    throw NoDeviceError("no HIP device " + std::to_string(ordinal) + ": this machine has " +
                        std::to_string(count) + " visible device(s)");
  }
  return std::shared_ptr<HipDevice>(new HipDevice(ordinal));
}

HipDevice::HipDevice(int ordinal) : ordinal_(ordinal) {
  select();
  hipDeviceProp_t prop;
  check(hipGetDeviceProperties(&prop, ordinal), "hipGetDeviceProperties");
  DeviceProperties& p = properties_;
  p.backend = "hip";
  p.ordinal = ordinal;
  p.name = prop.name;
  p.compute_capability_major = prop.major;
  p.compute_capability_minor = prop.minor;
  p.multiprocessor_count = prop.multiProcessorCount;
  p.max_threads_per_block = prop.maxThreadsPerBlock;
  p.warp_size = prop.warpSize;
  p.max_threads_per_multiprocessor = prop.maxThreadsPerMultiProcessor;  // (resident blocks: not said, 0)
  p.max_shared_memory_per_block = static_cast<int>(prop.sharedMemPerBlock);
  p.max_shared_memory_per_block_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  p.l2_cache_size = prop.l2CacheSize;
  p.clock_rate_khz = prop.clockRate;
  p.memory_clock_rate_khz = prop.memoryClockRate;
  p.memory_bus_width_bits = prop.memoryBusWidth;
  p.total_memory = prop.totalGlobalMem;
  check(hipDriverGetVersion(&p.driver_version), "hipDriverGetVersion");
  int vmm = 0;
  check(hipDeviceGetAttribute(&vmm, hipDeviceAttributeVirtualMemoryManagementSupported, ordinal),
        "hipDeviceGetAttribute");
  p.virtual_memory_management = vmm != 0;
  if (p.virtual_memory_management) {
    hipMemAllocationProp ap = allocation_prop(ordinal);
    size_t granularity = 0;
    check(hipMemGetAllocationGranularity(&granularity, &ap, hipMemAllocationGranularityMinimum),
          "hipMemGetAllocationGranularity");
    p.granularity = granularity;
    check(hipMemGetAllocationGranularity(&granularity, &ap,
                                         hipMemAllocationGranularityRecommended),
          "hipMemGetAllocationGranularity");
    p.recommended_granularity = granularity;
  }
}

void HipDevice::select() const { check(hipSetDevice(ordinal_), "hipSetDevice"); }

std::pair<uint64_t, uint64_t> HipDevice::memory_info() {
  select();
  size_t free_bytes = 0, total_bytes = 0;
  check(hipMemGetInfo(&free_bytes, &total_bytes), "hipMemGetInfo");
  return {free_bytes, total_bytes};
}

std::unique_ptr<MappingBackend> HipDevice::mapping_backend() {
  return std::make_unique<HipMappingBackend>(shared_from_this());
}

void HipDevice::synchronize() {
  select();
  check(hipDeviceSynchronize(), "hipDeviceSynchronize");
}

void HipDevice::copy_to_device(uint64_t dst, const void* src, size_t bytes) {
  select();
  check(hipMemcpyHtoD(device_pointer(dst), const_cast<void*>(src), bytes), "hipMemcpyHtoD");
}

void HipDevice::copy_from_device(void* dst, uint64_t src, size_t bytes) {
  select();
  check(hipMemcpyDtoH(dst, device_pointer(src), bytes), "hipMemcpyDtoH");
}

void HipDevice::copy_device_to_device(uint64_t dst, uint64_t src, size_t bytes) {
  select();
  check(hipMemcpyDtoD(device_pointer(dst), device_pointer(src), bytes), "hipMemcpyDtoD");
}

void HipDevice::fill(uint64_t dst, uint8_t value, size_t bytes) {
  select();
  check(hipMemsetD8(device_pointer(dst), value, bytes), "hipMemsetD8");
}

void HipDevice::copy_to_device_async(uint64_t dst, const void* src, size_t bytes,
                                     StreamHandle stream) {
  select();
  check(hipMemcpyHtoDAsync(device_pointer(dst), const_cast<void*>(src), bytes,
                           from_handle<hipStream_t>(stream)),
        "hipMemcpyHtoDAsync");
}

void HipDevice::copy_from_device_async(void* dst, uint64_t src, size_t bytes,
                                       StreamHandle stream) {
  select();
  check(hipMemcpyDtoHAsync(dst, device_pointer(src), bytes, from_handle<hipStream_t>(stream)),
        "hipMemcpyDtoHAsync");
}

void HipDevice::copy_device_to_device_async(uint64_t dst, uint64_t src, size_t bytes,
                                            StreamHandle stream) {
  select();
  check(hipMemcpyDtoDAsync(device_pointer(dst), device_pointer(src), bytes,
                           from_handle<hipStream_t>(stream)),
        "hipMemcpyDtoDAsync");
}

void HipDevice::fill_async(uint64_t dst, uint8_t value, size_t bytes, StreamHandle stream) {
  select();
  check(hipMemsetD8Async(device_pointer(dst), value, bytes, from_handle<hipStream_t>(stream)),
        "hipMemsetD8Async");
}

void* HipDevice::allocate_pinned(size_t bytes) {
  select();
  void* pointer = nullptr;
  check(hipHostMalloc(&pointer, bytes, hipHostMallocPortable), "hipHostMalloc");
  return pointer;
}

void HipDevice::free_pinned(void* pointer) noexcept { (void)hipHostFree(pointer); }

ModuleHandle HipDevice::load_module(const void* image, size_t bytes) {
  (void)bytes;  // code objects are self-describing ELF files
  select();
  hipModule_t module = nullptr;
  check(hipModuleLoadData(&module, image), "hipModuleLoadData");
  return to_handle(module);
}

void HipDevice::unload_module(ModuleHandle module) noexcept {
  (void)hipModuleUnload(from_handle<hipModule_t>(module));
}

FunctionHandle HipDevice::get_function(ModuleHandle module, const std::string& name) {
  hipFunction_t function = nullptr;
  check(hipModuleGetFunction(&function, from_handle<hipModule_t>(module), name.c_str()),
        "hipModuleGetFunction");
  return to_handle(function);
}

std::pair<uint64_t, uint64_t> HipDevice::get_global(ModuleHandle module,
                                                    const std::string& name) {
  hipDeviceptr_t address = nullptr;
  size_t bytes = 0;
  check(hipModuleGetGlobal(&address, &bytes, from_handle<hipModule_t>(module), name.c_str()),
        "hipModuleGetGlobal");
  return {reinterpret_cast<uint64_t>(address), bytes};
}

std::vector<ParamInfo> HipDevice::parameter_info(FunctionHandle) {
  throw Error("HIP cannot report kernel parameter layouts; take them from the recording's metadata");
}

FunctionAttributes HipDevice::function_attributes(FunctionHandle function) {
  auto attribute = [&](hipFunction_attribute which) {
    int value = 0;
    check(hipFuncGetAttribute(&value, which, from_handle<hipFunction_t>(function)),
          "hipFuncGetAttribute");
    return value;
  };
  FunctionAttributes a;
  a.num_registers = attribute(HIP_FUNC_ATTRIBUTE_NUM_REGS);
  a.local_size_bytes = attribute(HIP_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
  a.shared_size_bytes = attribute(HIP_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
  a.const_size_bytes = attribute(HIP_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
  a.max_threads_per_block = attribute(HIP_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  a.max_dynamic_shared_size_bytes = attribute(HIP_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  a.ptx_version = attribute(HIP_FUNC_ATTRIBUTE_PTX_VERSION);
  a.binary_version = attribute(HIP_FUNC_ATTRIBUTE_BINARY_VERSION);
  return a;
}

void HipDevice::set_max_dynamic_shared_memory(FunctionHandle, int) {
  // AMD GPUs have no opt-in limit: the full LDS is available to every launch.
}

int HipDevice::max_active_blocks_per_multiprocessor(FunctionHandle function, int block_threads,
                                                    size_t shared_bytes) {
  select();
  int blocks = 0;
  check(hipModuleOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, from_handle<hipFunction_t>(function),
                                                           block_threads, shared_bytes),
        "hipModuleOccupancyMaxActiveBlocksPerMultiprocessor");
  return blocks;
}

void HipDevice::launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_bytes,
                       StreamHandle stream, const void* args, size_t args_bytes, Dim3 cluster,
                       bool cooperative) {
  if (uint64_t(cluster.x) * cluster.y * cluster.z > 1)
    throw UserError("thread-block clusters are a CUDA launch attribute; AMD GPUs have none");
  // (hipModuleLaunchCooperativeKernel takes no packed argument buffer, which replay has)
  if (cooperative)
    throw UserError("a cooperative launch recorded with CUDA cannot be replayed on an AMD GPU");
  select();
  size_t size = args_bytes;
  void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(args),
                   HIP_LAUNCH_PARAM_BUFFER_SIZE, &size, HIP_LAUNCH_PARAM_END};
  check(hipModuleLaunchKernel(from_handle<hipFunction_t>(function), grid.x, grid.y, grid.z,
                              block.x, block.y, block.z, shared_bytes,
                              from_handle<hipStream_t>(stream), nullptr,
                              args_bytes ? extra : nullptr),
        "hipModuleLaunchKernel");
}

StreamHandle HipDevice::create_stream() {
  select();
  hipStream_t stream = nullptr;
  check(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking), "hipStreamCreateWithFlags");
  return to_handle(stream);
}

void HipDevice::destroy_stream(StreamHandle stream) noexcept {
  (void)hipStreamDestroy(from_handle<hipStream_t>(stream));
}

void HipDevice::synchronize_stream(StreamHandle stream) {
  check(hipStreamSynchronize(from_handle<hipStream_t>(stream)), "hipStreamSynchronize");
}

EventHandle HipDevice::create_event() {
  select();
  hipEvent_t event = nullptr;
  check(hipEventCreate(&event), "hipEventCreate");
  return to_handle(event);
}

void HipDevice::destroy_event(EventHandle event) noexcept {
  (void)hipEventDestroy(from_handle<hipEvent_t>(event));
}

void HipDevice::record_event(EventHandle event, StreamHandle stream) {
  check(hipEventRecord(from_handle<hipEvent_t>(event), from_handle<hipStream_t>(stream)),
        "hipEventRecord");
}

void HipDevice::synchronize_event(EventHandle event) {
  check(hipEventSynchronize(from_handle<hipEvent_t>(event)), "hipEventSynchronize");
}

float HipDevice::elapsed_ms(EventHandle start, EventHandle end) {
  float ms = 0;
  check(hipEventElapsedTime(&ms, from_handle<hipEvent_t>(start), from_handle<hipEvent_t>(end)),
        "hipEventElapsedTime");
  return ms;
}

// --- mapping backend -----------------------------------------------------------

HipMappingBackend::HipMappingBackend(std::shared_ptr<HipDevice> device)
    : device_(std::move(device)), granularity_(device_->properties().granularity) {
  if (!device_->properties().virtual_memory_management) {
    throw NoDeviceError("HIP device " + std::to_string(device_->ordinal()) +
                        " does not support virtual memory management; use another GPU");
  }
}

HipMappingBackend::~HipMappingBackend() {
  std::vector<uint64_t> left;
  for (const auto& [address, handle] : handles_) left.push_back(address);
  for (uint64_t address : left) {
    try {
      unmap_granule(address);
    } catch (...) {
    }
  }
}

std::string HipMappingBackend::name() const {
  return "HIP device " + std::to_string(device_->ordinal());
}

void HipMappingBackend::reserve(uint64_t base, uint64_t size) {
  void* got = nullptr;
  const hipError_t result = hipMemAddressReserve(&got, size, 0, device_pointer(base), 0);
  if (result != hipSuccess) {
    throw RangeUnavailableError("cannot reserve " + format_bytes(size) +
                                " of device address space at " + format_address(base) + ": " +
                                hipGetErrorName(result) + "; choose another base address");
  }
  if (reinterpret_cast<uint64_t>(got) != base) {
    (void)hipMemAddressFree(got, size);
    throw RangeUnavailableError("cannot reserve " + format_bytes(size) +
                                " of device address space at " + format_address(base) +
                                ": the runtime offered " +
                                format_address(reinterpret_cast<uint64_t>(got)) +
                                " instead; choose another base address");
  }
}

void HipMappingBackend::release(uint64_t base, uint64_t size) noexcept {
  (void)hipMemAddressFree(device_pointer(base), size);
}

void HipMappingBackend::map(uint64_t address, uint64_t size) {
  const hipMemAllocationProp prop = allocation_prop(device_->ordinal());
  std::vector<uint64_t> done;
  try {
    for (uint64_t granule = address; granule < address + size; granule += granularity_) {
      hipMemGenericAllocationHandle_t handle;
      check(hipMemCreate(&handle, granularity_, &prop, 0), "hipMemCreate");
      const hipError_t mapped = hipMemMap(device_pointer(granule), granularity_, 0, handle, 0);
      if (mapped != hipSuccess) {
        (void)hipMemRelease(handle);
        check(mapped, "hipMemMap");
      }
      handles_.emplace(granule, reinterpret_cast<uintptr_t>(handle));
      done.push_back(granule);
    }
    hipMemAccessDesc access = {};
    access.location = prop.location;
    access.flags = hipMemAccessFlagsProtReadWrite;
    check(hipMemSetAccess(device_pointer(address), size, &access, 1), "hipMemSetAccess");
  } catch (...) {
    for (uint64_t granule : done) {
      try {
        unmap_granule(granule);
      } catch (...) {
      }
    }
    throw;
  }
}

void HipMappingBackend::unmap(uint64_t address, uint64_t size) {
  for (uint64_t granule = address; granule < address + size; granule += granularity_) {
    unmap_granule(granule);
  }
}

void HipMappingBackend::unmap_granule(uint64_t address) {
  auto it = handles_.find(address);
  if (it == handles_.end()) return;
  auto handle = reinterpret_cast<hipMemGenericAllocationHandle_t>(it->second);
  handles_.erase(it);
  check(hipMemUnmap(device_pointer(address), granularity_), "hipMemUnmap");
  check(hipMemRelease(handle), "hipMemRelease");
}

}  // namespace mneme::runtime::hip
