#include "snapshot_source.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace mneme::recorder {

namespace rt = mneme::runtime;

CudaSource::CudaSource(std::shared_ptr<rt::cuda::CudaDevice> device) : d_(device->driver()) {
  lane_ = &open_lane(device);
}

CudaSource::Lane& CudaSource::open_lane(const std::shared_ptr<rt::cuda::CudaDevice>& device) {
  auto lane = std::make_unique<Lane>();
  lane->device = device;
  rt::cuda::CudaDevice::Scope scope(*device);
  rt::cuda::check(d_, d_.cuStreamCreate(&lane->stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  lanes_.push_back(std::move(lane));
  return *lanes_.back();
}

void CudaSource::use(const std::shared_ptr<rt::cuda::CudaDevice>& device) {
  for (auto& lane : lanes_)
    if (lane->device == device) {
      lane_ = lane.get();
      return;
    }
  lane_ = &open_lane(device);
}

// Pinned blocks are registered portable (CudaDevice::allocate_pinned): every GPU's
// copies land in them at full speed, whichever lane allocated them.
void* CudaSource::allocate(size_t bytes) {
  try {
    return lanes_.front()->device->allocate_pinned(bytes);
  } catch (const std::exception&) {
    return nullptr;  // the pipeline falls back to pageable memory
  }
}

void CudaSource::deallocate(void* pointer, size_t) noexcept { lanes_.front()->device->free_pinned(pointer); }

void CudaSource::copy(void* destination, uint64_t source, size_t bytes) {
  rt::cuda::CudaDevice::Scope scope(*lane_->device);
  rt::cuda::check(d_, d_.cuMemcpyDtoHAsync(destination, source, bytes, lane_->stream), "cuMemcpyDtoHAsync");
}

class CudaSource::EventFence : public rt::Fence {
 public:
  EventFence(CudaSource* source, Lane* lane, CUevent event) : source_(source), lane_(lane), event_(event) {}
  ~EventFence() override {
    std::lock_guard<std::mutex> lock(source_->mutex_);
    lane_->events.push_back(event_);
  }

 protected:
  void wait_impl() override {
    rt::cuda::check(source_->d_, source_->d_.cuEventSynchronize(event_), "cuEventSynchronize");
  }

 private:
  CudaSource* source_;
  Lane* lane_;
  CUevent event_;
};

std::shared_ptr<rt::Fence> CudaSource::fence() {
  Lane& lane = *lane_;
  CUevent event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!lane.events.empty()) {
      event = lane.events.back();
      lane.events.pop_back();
    }
  }
  rt::cuda::CudaDevice::Scope scope(*lane.device);
  if (!event)
    rt::cuda::check(d_, d_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
  rt::cuda::check(d_, d_.cuEventRecord(event, lane.stream), "cuEventRecord");
  return std::make_shared<EventFence>(this, &lane, event);
}

void CudaSource::wait_all() {
  rt::cuda::CudaDevice::Scope scope(*lane_->device);
  rt::cuda::check(d_, d_.cuStreamSynchronize(lane_->stream), "cuStreamSynchronize");
}

void CudaSource::thread_started() { d_.cuCtxPushCurrent(lanes_.front()->device->context()); }

bool CudaSource::digest(const std::vector<DigestRange>& ranges, uint64_t* out, uint8_t* zero) {
  if (digest_failed_) return false;
  Lane& lane = *lane_;
  rt::cuda::CudaDevice::Scope scope(*lane.device);
  try {
    if (!lane.digest_kernel) {
      static const char kPtx[] =
#include "snapshot_digest_ptx.inc"
          ;
      rt::cuda::check(d_, d_.cuModuleLoadDataEx(&lane.digest_module, kPtx, 0, nullptr, nullptr),
                      "loading the digest kernel");
      rt::cuda::check(d_, d_.cuModuleGetFunction(&lane.digest_kernel, lane.digest_module, "mneme_chunk_digest"),
                      "cuModuleGetFunction");
    }
    // Two digest words per chunk, then one all-zero flag byte per chunk.
    uint64_t words = 0;
    for (const auto& r : ranges) words += 2 * ((r.size + r.chunk - 1) / r.chunk);
    uint64_t bytes = words * 8 + words / 2;
    if (bytes > lane.digest_bytes) {
      if (lane.digest_words) d_.cuMemFreeHost(lane.digest_words);
      lane.digest_words = nullptr;
      lane.digest_bytes = std::max<uint64_t>(bytes, 1 << 16);
      rt::cuda::check(d_, d_.cuMemHostAlloc(reinterpret_cast<void**>(&lane.digest_words), lane.digest_bytes,
                                            CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
    }
    uint64_t at = 0;
    for (const auto& r : ranges) {
      if (!r.size) continue;
      uint64_t address = r.address, size = r.size, chunk = r.chunk;
      uint64_t* dst = lane.digest_words + at;  // the host pointer is the device's (unified addressing)
      uint8_t* flags = reinterpret_cast<uint8_t*>(lane.digest_words + words) + at / 2;
      void* params[] = {&address, &size, &chunk, &dst, &flags};
      unsigned grid = unsigned((size + chunk - 1) / chunk);
      rt::cuda::check(d_, d_.cuLaunchKernel(lane.digest_kernel, grid, 1, 1, 256, 1, 1, 0, lane.stream, params, nullptr),
                      "launching the digest kernel");
      at += 2 * uint64_t(grid);
    }
    rt::cuda::check(d_, d_.cuStreamSynchronize(lane.stream), "cuStreamSynchronize");
    std::memcpy(out, lane.digest_words, words * 8);
    std::memcpy(zero, lane.digest_words + words, words / 2);
    return true;
  } catch (const std::exception& e) {
    digest_failed_ = true;
    std::fprintf(stderr, "mneme record: chunk digests on the device are not available (%s); every epilogue "
                         "chunk and every prologue chunk of zeros is copied\n", e.what());
    return false;
  }
}

}  // namespace mneme::recorder
