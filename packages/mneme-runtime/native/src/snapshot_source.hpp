// Device-to-host copies for the snapshot pipeline: cuMemcpyDtoHAsync on a non-blocking
// stream of the runtime's primary context into pinned blocks; fences are events. The
// driver API keeps the application's cudaGetLastError state untouched.
#pragma once

#include <cuda.h>

#include <memory>
#include <mutex>
#include <vector>

#include "mneme/runtime/cuda_device.hpp"
#include "mneme/runtime/snapshot_pipeline.hpp"

namespace mneme::recorder {

class CudaSource : public mneme::runtime::SnapshotSource {
 public:
  // Copies run on `device` until use() names another.
  explicit CudaSource(std::shared_ptr<mneme::runtime::cuda::CudaDevice> device);

  // Later copies, fences and digests run on `device` (the launch's GPU), on a stream of
  // its own: a GPU copies its own memory, and reaches another's only through peer access.
  void use(const std::shared_ptr<mneme::runtime::cuda::CudaDevice>& device);

  void* allocate(size_t bytes) override;
  void deallocate(void* pointer, size_t) noexcept override;
  void copy(void* destination, uint64_t source, size_t bytes) override;
  std::shared_ptr<mneme::runtime::Fence> fence() override;
  void wait_all() override;
  // Background threads keep the first GPU's context current for their event waits.
  void thread_started() override;
  // The chunk-digest kernel (snapshot_digest.cu, as PTX the driver JIT-compiles), one
  // launch per range on the copy stream, its results (digests and all-zero flags) in
  // mapped host memory.
  bool digest(const std::vector<DigestRange>& ranges, uint64_t* out, uint8_t* zero) override;

 private:
  class EventFence;
  // One GPU's stream, spare events and digest kernel.
  struct Lane {
    std::shared_ptr<mneme::runtime::cuda::CudaDevice> device;
    CUstream stream = nullptr;
    std::vector<CUevent> events;
    CUmodule digest_module = nullptr;
    CUfunction digest_kernel = nullptr;
    uint64_t* digest_words = nullptr;
    uint64_t digest_bytes = 0;
  };
  Lane& open_lane(const std::shared_ptr<mneme::runtime::cuda::CudaDevice>& device);

  const mneme::runtime::cuda::Driver& d_;
  std::mutex mutex_;  // the lanes' spare events
  std::vector<std::unique_ptr<Lane>> lanes_;
  Lane* lane_ = nullptr;  // in use
  bool digest_failed_ = false;
};

}  // namespace mneme::recorder
