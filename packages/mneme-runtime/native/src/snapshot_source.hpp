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
  explicit CudaSource(std::shared_ptr<mneme::runtime::cuda::CudaDevice> device);

  void* allocate(size_t bytes) override;
  void deallocate(void* pointer, size_t) noexcept override;
  void copy(void* destination, uint64_t source, size_t bytes) override;
  std::shared_ptr<mneme::runtime::Fence> fence() override;
  void wait_all() override;
  // Background threads keep the context current for their event waits.
  void thread_started() override;
  // The chunk-digest kernel (snapshot_digest.cu, as PTX the driver JIT-compiles), one
  // launch per range on the copy stream, its results in mapped host memory.
  bool digest(const std::vector<DigestRange>& ranges, uint64_t* out) override;

 private:
  class EventFence;

  std::shared_ptr<mneme::runtime::cuda::CudaDevice> device_;
  const mneme::runtime::cuda::Driver& d_;
  CUstream stream_ = nullptr;
  std::mutex mutex_;
  std::vector<CUevent> events_;
  CUmodule digest_module_ = nullptr;
  CUfunction digest_kernel_ = nullptr;
  uint64_t* digest_words_ = nullptr;
  uint64_t digest_bytes_ = 0;
  bool digest_failed_ = false;
};

}  // namespace mneme::recorder
