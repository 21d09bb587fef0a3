// The vendor-neutral device interface replay and recording use. CUDA
// implements it in cuda_device.hpp; HIP sits beside it in hip_device.hpp.
//
// Handles are opaque integers (the vendor's pointer-sized handle), so the
// interface needs no vendor header. Stream handle 0 is the default stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mneme/runtime/mapping_backend.hpp"

namespace mneme::runtime {

using ModuleHandle = uintptr_t;
using FunctionHandle = uintptr_t;
using StreamHandle = uintptr_t;
using EventHandle = uintptr_t;

struct DeviceProperties {
  std::string backend;  // "cuda" or "hip"
  int ordinal = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int multiprocessor_count = 0;
  int max_threads_per_block = 0;
  int warp_size = 0;
  int max_threads_per_multiprocessor = 0;  // resident threads an SM holds
  int max_blocks_per_multiprocessor = 0;   // resident blocks an SM holds
  int max_shared_memory_per_block = 0;        // without opt-in
  int max_shared_memory_per_block_optin = 0;  // with a function attribute
  int l2_cache_size = 0;
  int clock_rate_khz = 0;
  int memory_clock_rate_khz = 0;
  int memory_bus_width_bits = 0;
  uint64_t total_memory = 0;
  uint64_t granularity = 0;              // minimum physical mapping unit
  uint64_t recommended_granularity = 0;
  int driver_version = 0;                // e.g. 13000
  bool virtual_memory_management = false;
};

struct ParamInfo {
  uint64_t offset = 0;  // byte offset in the argument buffer
  uint64_t size = 0;
};

struct FunctionAttributes {
  int num_registers = 0;
  int local_size_bytes = 0;   // per thread (spills, stack)
  int shared_size_bytes = 0;  // static shared memory
  int const_size_bytes = 0;
  int max_threads_per_block = 0;
  int max_dynamic_shared_size_bytes = 0;
  int ptx_version = 0;     // major*10+minor
  int binary_version = 0;  // major*10+minor
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceProperties& properties() const = 0;
  // (free, total) bytes of device memory.
  virtual std::pair<uint64_t, uint64_t> memory_info() = 0;
  // A backend mapping this device's memory, for an AddressSpace. It keeps the
  // device (and its context) alive.
  virtual std::unique_ptr<MappingBackend> mapping_backend() = 0;
  virtual void synchronize() = 0;

  // Synchronous copies and fills.
  virtual void copy_to_device(uint64_t dst, const void* src, size_t bytes) = 0;
  virtual void copy_from_device(void* dst, uint64_t src, size_t bytes) = 0;
  virtual void copy_device_to_device(uint64_t dst, uint64_t src, size_t bytes) = 0;
  virtual void fill(uint64_t dst, uint8_t value, size_t bytes) = 0;
  // Asynchronous on a stream: host buffers must stay alive (and, to overlap,
  // be pinned) until the stream is synchronized.
  virtual void copy_to_device_async(uint64_t dst, const void* src, size_t bytes,
                                    StreamHandle stream) = 0;
  virtual void copy_from_device_async(void* dst, uint64_t src, size_t bytes,
                                      StreamHandle stream) = 0;
  virtual void copy_device_to_device_async(uint64_t dst, uint64_t src, size_t bytes,
                                           StreamHandle stream) = 0;
  virtual void fill_async(uint64_t dst, uint8_t value, size_t bytes, StreamHandle stream) = 0;

  // Page-locked host memory.
  virtual void* allocate_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* pointer) noexcept = 0;

  // Code: image is PTX text or a cubin/fatbin (HIP: a code object).
  virtual ModuleHandle load_module(const void* image, size_t bytes) = 0;
  virtual void unload_module(ModuleHandle module) noexcept = 0;
  virtual FunctionHandle get_function(ModuleHandle module, const std::string& name) = 0;
  // (address, bytes) of a module-scope variable.
  virtual std::pair<uint64_t, uint64_t> get_global(ModuleHandle module,
                                                   const std::string& name) = 0;
  virtual std::vector<ParamInfo> parameter_info(FunctionHandle function) = 0;
  virtual FunctionAttributes function_attributes(FunctionHandle function) = 0;
  virtual void set_max_dynamic_shared_memory(FunctionHandle function, int bytes) = 0;
  // Blocks of `block_threads` threads with `shared_bytes` of dynamic shared memory that
  // one multiprocessor holds at once with this function's resources (its occupancy): a
  // cooperative launch's blocks must all be resident, so its grid is at most this times
  // the multiprocessors.
  virtual int max_active_blocks_per_multiprocessor(FunctionHandle function, int block_threads,
                                                   size_t shared_bytes) = 0;
  // Launch with the kernel's parameters laid out in one buffer, as recorded; `cluster`
  // is the thread-block cluster shape (1,1,1: none); `cooperative`: a cooperative launch
  // (every block resident at once, so grid-wide synchronisation holds).
  virtual void launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_bytes,
                      StreamHandle stream, const void* args, size_t args_bytes, Dim3 cluster,
                      bool cooperative) = 0;

  virtual StreamHandle create_stream() = 0;
  virtual void destroy_stream(StreamHandle stream) noexcept = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;

  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) noexcept = 0;
  virtual void record_event(EventHandle event, StreamHandle stream) = 0;
  virtual void synchronize_event(EventHandle event) = 0;
  virtual float elapsed_ms(EventHandle start, EventHandle end) = 0;
};

}  // namespace mneme::runtime
