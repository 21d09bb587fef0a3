// The allocation service: device allocations come from the fixed address range
// (AddressSpace on the CUDA VMM API) so that replay finds them at the same addresses;
// managed memory from the arena after it (managed_arena.hpp).
#include "recorder.hpp"

#include "mneme/runtime/errors.hpp"

namespace mneme::recorder {

// Lets this thread map memory while a stream captures in global mode (where the driver
// would otherwise refuse the VMM calls and invalidate the application's capture).
class RelaxedCapture {
 public:
  RelaxedCapture() {
    if (exchange()) exchange()(&mode_);
  }
  ~RelaxedCapture() {
    if (exchange()) exchange()(&mode_);
  }

 private:
  using Exchange = CUresult (*)(CUstreamCaptureMode*);
  static Exchange exchange() {
    static auto fn = driver_function<Exchange>("cuThreadExchangeStreamCaptureMode");
    return fn;
  }
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// Whether the recorder serves an allocation now (recording: on every GPU, each from its
// own range).
bool served_here() { return Recorder::get().active(); }

cudaError_t serve(void** ptr, uint64_t size) {
  auto& r = Recorder::get();
  RecorderLock lock(r);
  RelaxedCapture relaxed;
  try {
    auto a = r.space().allocate(size ? size : 1);
    r.track(a.address, size);
    *ptr = reinterpret_cast<void*>(a.address);
    return cudaSuccess;
  } catch (const rt::OutOfSpaceError& e) {
    fatal("the recorded address space (-vass " + std::to_string(e.range_size >> 30) +
          " GiB) is too small: rerun with -vass " + std::to_string((e.needed_size + (1ull << 30) - 1) >> 30) + " or more", 75);
  } catch (const std::exception& e) {
    fatal(std::string("device allocation failed: ") + e.what());
  }
}

bool release(void* ptr) {
  auto& r = Recorder::get();
  RecorderLock lock(r);
  auto address = reinterpret_cast<uint64_t>(ptr);
  if (!ptr || !r.owns(address)) return false;
  // Freed inside a stream capture (cudaFreeAsync into a graph): the graph's allocation
  // keeps its address for every launch of the graph, so the memory stays mapped.
  if (r.capturing(0)) return true;
  auto* owner = r.slot_of(address);
  if (!owner) return false;
  {
    // never unmap memory a kernel may still use: the GPU whose memory it is finishes first
    rt::cuda::CudaDevice::Scope scope(*owner->device);
    synchronize_device();
  }
  owner->space->free(address);
  r.untrack(address);
  return true;
}

// A managed allocation freed: true when it was the arena's (then freed here).
bool forget_managed(uint64_t address) {
  auto& r = Recorder::get();
  if (!r.active() || !address) return false;
  RecorderLock lock(r);
  if (!r.untrack_managed(address)) return false;
  if (!r.in_arena(address, 1)) return false;
  synchronize_device();  // no running kernel loses its memory
  return r.free_managed(address);
}

bool arena_owned(const void* ptr, size_t count) {
  auto& r = Recorder::get();
  if (!r.active() || !ptr) return false;
  RecorderLock lock(r);
  return r.in_arena(reinterpret_cast<uint64_t>(ptr), count ? count : 1);
}

}  // namespace mneme::recorder
