// Device and MappingBackend on the CUDA driver API (primary context, VMM).
#pragma once

#include <cuda.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mneme/runtime/cuda_driver.hpp"
#include "mneme/runtime/device.hpp"

namespace mneme::runtime::cuda {

class CudaDevice : public Device, public std::enable_shared_from_this<CudaDevice> {
 public:
  // Retains the primary context of device `ordinal` (the one the CUDA runtime
  // of a recorded application uses too). Throws NoDriverError/NoDeviceError.
  static std::shared_ptr<CudaDevice> open(int ordinal);
  ~CudaDevice() override;

  const Driver& driver() const { return driver_; }
  CUdevice device() const { return device_; }
  CUcontext context() const { return context_; }

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

  // Makes this device's context current for a scope, restoring the caller's.
  class Scope {
   public:
    explicit Scope(const CudaDevice& device);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const Driver& driver_;
  };

 private:
  CudaDevice(const Driver& driver, int ordinal, CUdevice device, CUcontext context);
  void query_properties(int ordinal);
  // Arguments as kernelParams (`params`) or a packed buffer (`extra`), one of the two.
  void launch_with_attributes(FunctionHandle function, Dim3 grid, Dim3 block, unsigned shared_bytes,
                              StreamHandle stream, void** params, void** extra, Dim3 cluster, bool cooperative);
  void check(CUresult result, const char* call) const { cuda::check(driver_, result, call); }

  const Driver& driver_;
  CUdevice device_;
  CUcontext context_;
  DeviceProperties properties_;
  std::mutex pinned_mutex_;
  std::unordered_map<void*, size_t> registered_;  // allocate_pinned's mappings -> bytes
};

// Physical memory of one device mapped into reserved ranges with
// cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess. A run of granules
// mapped at once gets physical blocks of up to kBlockBytes (a 106 GB pool is ~100
// driver calls, not 53,000 granules of 2 MiB: seconds per replay of a JAX instance);
// its first and last granules, the ones a neighbouring allocation may share, are
// blocks of their own. A block goes back to the device once all its granules are
// unmapped (the driver unmaps only whole mappings); until then a granule unmapped in
// it is taken up again by a later map of the same address.
class CudaMappingBackend : public MappingBackend {
 public:
  explicit CudaMappingBackend(std::shared_ptr<CudaDevice> device);
  ~CudaMappingBackend() override;

  std::string name() const override;
  uint64_t granularity() const override { return granularity_; }
  void reserve(uint64_t base, uint64_t size) override;
  void release(uint64_t base, uint64_t size) noexcept override;
  void map(uint64_t address, uint64_t size) override;
  void unmap(uint64_t address, uint64_t size) override;
  // Peer access through the VMM API (cuCtxEnablePeerAccess does not cover cuMemMap'd
  // memory): every mapping grants `ordinal` read/write access as well.
  void share_with(int ordinal) override;

 private:
  struct Block {
    CUmemGenericAllocationHandle handle;
    uint64_t size;
    uint64_t mapped;  // its granules the address space has mapped
  };
  static constexpr uint64_t kBlockBytes = 1ull << 30;
  std::map<uint64_t, Block>::iterator block_of(uint64_t granule);
  void map_block(uint64_t address, uint64_t size);
  void release_block(std::map<uint64_t, Block>::iterator block);

  std::shared_ptr<CudaDevice> device_;
  CUmemAllocationProp allocation_;
  std::vector<CUmemAccessDesc> access_;  // this device first, then the devices shared with
  uint64_t granularity_;
  std::map<uint64_t, Block> blocks_;  // start address -> physical block
};

}  // namespace mneme::runtime::cuda
