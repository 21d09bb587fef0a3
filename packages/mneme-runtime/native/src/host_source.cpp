// HostSource (snapshot_pipeline.hpp): host memory as the pipeline's "device", for tests
// and tools; its copies are done when issued.
#include <algorithm>
#include <cstring>
#include <string>

#include "mneme/runtime/snapshot_pipeline.hpp"

namespace mneme::runtime {
namespace {

class DoneFence : public Fence {
 public:
  DoneFence() { mark_done(); }

 protected:
  void wait_impl() override {}
};

}  // namespace

void* HostSource::allocate(size_t) { return nullptr; }  // the pipeline's ordinary memory
void HostSource::deallocate(void*, size_t) noexcept {}
void HostSource::copy(void* destination, uint64_t source, size_t bytes) {
  std::memcpy(destination, reinterpret_cast<const void*>(source), bytes);
}
std::shared_ptr<Fence> HostSource::fence() { return std::make_shared<DoneFence>(); }
bool HostSource::digest(const std::vector<DigestRange>& ranges, uint64_t* out, uint8_t* zero) {
  for (const auto& r : ranges)
    for (uint64_t off = 0; off < r.size; off += r.chunk) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(r.address) + off;
      uint64_t n = std::min(r.chunk, r.size - off);
      std::string hex = chunk_digest(p, n);
      *out++ = std::stoull(hex.substr(0, 16), nullptr, 16);
      *out++ = std::stoull(hex.substr(16), nullptr, 16);
      *zero++ = all_zero(p, n) ? 1 : 0;
    }
  return true;
}

}  // namespace mneme::runtime
