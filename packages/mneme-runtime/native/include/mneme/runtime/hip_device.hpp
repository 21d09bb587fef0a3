// Device and MappingBackend on HIP (ROCm), beside the CUDA ones. The header
// needs no ROCm (handles are opaque); hip_device.cpp is compiled only where
// ROCm's headers are installed (MNEME_RUNTIME_WITH_HIP), i.e. never on our
// CUDA build and CI machines, and links libamdhip64 directly.
#pragma once

#include <memory>
#include <unordered_map>

#include "mneme/runtime/device.hpp"

namespace mneme::runtime::hip {

class HipDevice : public Device, public std::enable_shared_from_this<HipDevice> {
 public:
  static std::shared_ptr<HipDevice> open(int ordinal);
  ~HipDevice() override = default;

  int ordinal() const { return ordinal_; }

  const DeviceProperties& properties() const override { return properties_; }
  std::pair<uint64_t, uint64_t> memory_info() override;
  std::unique_ptr<MappingBackend> mapping_backend() override;
  void synchronize() override;

  void copy_to_device(uint64_t dst, const void* src, size_t bytes) override;
  void copy_from_device(void* dst, uint64_t src, size_t bytes) override;
  void copy_device_to_device(uint64_t dst, uint64_t src, size_t bytes) override;
  void fill(uint64_t dst, uint8_t value, size_t bytes) override;
  void copy_to_device_async(uint64_t dst, const void* src, size_t bytes,
                            StreamHandle stream) override;
  void copy_from_device_async(void* dst, uint64_t src, size_t bytes,
                              StreamHandle stream) override;
  void copy_device_to_device_async(uint64_t dst, uint64_t src, size_t bytes,
                                   StreamHandle stream) override;
  void fill_async(uint64_t dst, uint8_t value, size_t bytes, StreamHandle stream) override;

  void* allocate_pinned(size_t bytes) override;
  void free_pinned(void* pointer) noexcept override;

  ModuleHandle load_module(const void* image, size_t bytes) override;
  void unload_module(ModuleHandle module) noexcept override;
  FunctionHandle get_function(ModuleHandle module, const std::string& name) override;
  std::pair<uint64_t, uint64_t> get_global(ModuleHandle module, const std::string& name) override;
  // HIP has no cuFuncGetParamInfo counterpart: the recorder's metadata must
  // carry the layout; this throws.
  std::vector<ParamInfo> parameter_info(FunctionHandle function) override;
  FunctionAttributes function_attributes(FunctionHandle function) override;
  void set_max_dynamic_shared_memory(FunctionHandle function, int bytes) override;
  int max_active_blocks_per_multiprocessor(FunctionHandle function, int block_threads,
                                           size_t shared_bytes) override;
  void launch(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_bytes,
              StreamHandle stream, const void* args, size_t args_bytes, Dim3 cluster,
              bool cooperative) override;

  StreamHandle create_stream() override;
  void destroy_stream(StreamHandle stream) noexcept override;
  void synchronize_stream(StreamHandle stream) override;

  EventHandle create_event() override;
  void destroy_event(EventHandle event) noexcept override;
  void record_event(EventHandle event, StreamHandle stream) override;
  void synchronize_event(EventHandle event) override;
  float elapsed_ms(EventHandle start, EventHandle end) override;

 private:
  explicit HipDevice(int ordinal);
  void select() const;  // hipSetDevice: HIP's current device is per thread

  int ordinal_;
  DeviceProperties properties_;
};

// hipMemAddressReserve / hipMemCreate / hipMemMap / hipMemSetAccess, one
// physical handle per granule (as on CUDA).
class HipMappingBackend : public MappingBackend {
 public:
  explicit HipMappingBackend(std::shared_ptr<HipDevice> device);
  ~HipMappingBackend() override;

  std::string name() const override;
  uint64_t granularity() const override { return granularity_; }
  void reserve(uint64_t base, uint64_t size) override;
  void release(uint64_t base, uint64_t size) noexcept override;
  void map(uint64_t address, uint64_t size) override;
  void unmap(uint64_t address, uint64_t size) override;

 private:
  void unmap_granule(uint64_t address);

  std::shared_ptr<HipDevice> device_;
  uint64_t granularity_;
  std::unordered_map<uint64_t, uintptr_t> handles_;  // granule address -> hipMemGenericAllocationHandle_t
};

}  // namespace mneme::runtime::hip
