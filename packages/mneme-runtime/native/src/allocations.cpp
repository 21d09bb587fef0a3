// The allocation service: device allocations come from the fixed address range
// (AddressSpace on the CUDA VMM API) so that replay finds them at the same addresses;
// managed memory placed in the arena after it (managed_arena.hpp).
#include <cstdio>
#include <utility>

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

// Managed memory for the application (managed_arena.hpp): the driver's allocation made
// under a Placement, so that it lies in the arena; where it does not, host memory mapped
// in the arena stands in (said once). `allocate` makes the driver's allocation (false: it
// failed, nothing was allocated), `free` gives one back.
bool serve_managed(uint64_t size, uint64_t& address, const std::function<bool(uint64_t&)>& allocate,
                   const std::function<void(uint64_t)>& free) {
  auto& r = Recorder::get();
  RecorderLock lock(r);
  ManagedArena* arena = r.managed_arena();
  if (arena && r.managed_mode() == "host") {
    if ((address = arena->allocate_host(size))) {
      r.track_managed(address, size);
      return true;
    }
  } else if (arena) {
    bool made;
    {
      ManagedArena::Placement placing(*arena);
      made = allocate(address);
    }
    if (!made) return false;
    if (!arena->placed(address, size)) {
      uint64_t host = arena->allocate_host(size);
      static bool said = false;
      if (!std::exchange(said, true))
        std::fprintf(stderr,
                     "mneme record: the driver placed managed memory at 0x%llx, outside the recorder's range; %s\n",
                     static_cast<unsigned long long>(address),
                     host ? "host memory mapped in the range stands in (kernels reach it over the bus while "
                            "recording: slower, never wrong)"
                          : "it is recorded there (a replay process may find that address taken)");
      if (host) {
        free(address);
        address = host;
      }
    }
    r.track_managed(address, size);
    return true;
  }
  if (!allocate(address)) return false;
  r.track_managed(address, size);
  return true;
}

// A managed allocation freed: true when it was the arena's host memory (then freed
// here); the driver's own managed memory is freed by the caller, with the driver.
bool forget_managed(uint64_t address) {
  auto& r = Recorder::get();
  if (!r.active() || !address) return false;
  RecorderLock lock(r);
  if (!r.untrack_managed(address)) return false;
  if (!r.in_arena(address, 1)) return false;
  synchronize_device();  // no running kernel loses its memory
  return r.free_managed(address);
}

// Whether [ptr, ptr + count) is host memory standing in for managed memory (prefetch and
// advice have no meaning there: the driver would refuse them).
bool arena_owned(const void* ptr, size_t count) {
  auto& r = Recorder::get();
  if (!r.active() || !ptr) return false;
  RecorderLock lock(r);
  return r.in_arena(reinterpret_cast<uint64_t>(ptr), count ? count : 1);
}

}  // namespace mneme::recorder
