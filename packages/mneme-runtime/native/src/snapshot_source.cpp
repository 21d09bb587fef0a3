#include "snapshot_source.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace mneme::recorder {

namespace rt = mneme::runtime;

CudaSource::CudaSource(std::shared_ptr<rt::cuda::CudaDevice> device) : device_(std::move(device)), d_(device_->driver()) {
  rt::cuda::CudaDevice::Scope scope(*device_);
  rt::cuda::check(d_, d_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

void* CudaSource::allocate(size_t bytes) {
  try {
    return device_->allocate_pinned(bytes);
  } catch (const std::exception&) {
    return nullptr;  // the pipeline falls back to pageable memory
  }
}

void CudaSource::deallocate(void* pointer, size_t) noexcept { device_->free_pinned(pointer); }

void CudaSource::copy(void* destination, uint64_t source, size_t bytes) {
  rt::cuda::CudaDevice::Scope scope(*device_);
  rt::cuda::check(d_, d_.cuMemcpyDtoHAsync(destination, source, bytes, stream_), "cuMemcpyDtoHAsync");
}

class CudaSource::EventFence : public rt::Fence {
 public:
  EventFence(CudaSource* source, CUevent event) : source_(source), event_(event) {}
  ~EventFence() override {
    std::lock_guard<std::mutex> lock(source_->mutex_);
    source_->events_.push_back(event_);
  }

 protected:
  void wait_impl() override {
    rt::cuda::check(source_->d_, source_->d_.cuEventSynchronize(event_), "cuEventSynchronize");
  }

 private:
  CudaSource* source_;
  CUevent event_;
};

std::shared_ptr<rt::Fence> CudaSource::fence() {
  CUevent event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!events_.empty()) {
      event = events_.back();
      events_.pop_back();
    }
  }
  rt::cuda::CudaDevice::Scope scope(*device_);
  if (!event)
    rt::cuda::check(d_, d_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
  rt::cuda::check(d_, d_.cuEventRecord(event, stream_), "cuEventRecord");
  return std::make_shared<EventFence>(this, event);
}

void CudaSource::wait_all() {
  rt::cuda::CudaDevice::Scope scope(*device_);
  rt::cuda::check(d_, d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

void CudaSource::thread_started() { d_.cuCtxPushCurrent(device_->context()); }

bool CudaSource::digest(const std::vector<DigestRange>& ranges, uint64_t* out) {
  if (digest_failed_) return false;
  rt::cuda::CudaDevice::Scope scope(*device_);
  try {
    if (!digest_kernel_) {
      static const char kPtx[] =
#include "snapshot_digest_ptx.inc"
          ;
      rt::cuda::check(d_, d_.cuModuleLoadDataEx(&digest_module_, kPtx, 0, nullptr, nullptr), "loading the digest kernel");
      rt::cuda::check(d_, d_.cuModuleGetFunction(&digest_kernel_, digest_module_, "mneme_chunk_digest"),
                      "cuModuleGetFunction");
    }
    uint64_t words = 0;
    for (const auto& r : ranges) words += 2 * ((r.size + r.chunk - 1) / r.chunk);
    if (words * 8 > digest_bytes_) {
      if (digest_words_) d_.cuMemFreeHost(digest_words_);
      digest_words_ = nullptr;
      digest_bytes_ = std::max<uint64_t>(words * 8, 1 << 16);
      rt::cuda::check(d_, d_.cuMemHostAlloc(reinterpret_cast<void**>(&digest_words_), digest_bytes_,
                                            CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
    }
    uint64_t at = 0;
    for (const auto& r : ranges) {
      if (!r.size) continue;
      uint64_t address = r.address, size = r.size, chunk = r.chunk;
      uint64_t* dst = digest_words_ + at;  // the host pointer is the device's (unified addressing)
      void* params[] = {&address, &size, &chunk, &dst};
      unsigned grid = unsigned((size + chunk - 1) / chunk);
      rt::cuda::check(d_, d_.cuLaunchKernel(digest_kernel_, grid, 1, 1, 256, 1, 1, 0, stream_, params, nullptr),
                      "launching the digest kernel");
      at += 2 * uint64_t(grid);
    }
    rt::cuda::check(d_, d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    std::memcpy(out, digest_words_, words * 8);
    return true;
  } catch (const std::exception& e) {
    digest_failed_ = true;
    std::fprintf(stderr, "mneme record: chunk digests on the device are not available (%s); every epilogue "
                         "chunk is copied\n", e.what());
    return false;
  }
}

}  // namespace mneme::recorder
