#include "managed_arena.hpp"

#include <sys/mman.h>

#include "interpose.hpp"

namespace mneme::recorder {

namespace {
constexpr uint64_t kAlignment = 2ull << 20;  // the device's mapping granularity
uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }
}  // namespace

uint64_t ManagedArena::allocate(uint64_t bytes) {
  uint64_t size = round_up(bytes ? bytes : 1, kAlignment);
  uint64_t at = round_up(next_, kAlignment);
  if (at + size > end_ || at + size < at) return 0;
  void* p = ::mmap(reinterpret_cast<void*>(at), size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return 0;
  if (reinterpret_cast<uint64_t>(p) != at) {  // kernels older than 4.17 ignore NOREPLACE
    ::munmap(p, size);
    return 0;
  }
  CUdeviceptr device = 0;
  if (driver_.cuMemHostRegister(p, size, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) != CUDA_SUCCESS) {
    ::munmap(p, size);
    return 0;
  }
  using DevicePointer = CUresult (*)(CUdeviceptr*, void*, unsigned int);
  static auto device_pointer = driver_function<DevicePointer>("cuMemHostGetDevicePointer_v2");
  if (!device_pointer || device_pointer(&device, p, 0) != CUDA_SUCCESS || device != at) {
    driver_.cuMemHostUnregister(p);  // the device would see it elsewhere: not usable
    ::munmap(p, size);
    return 0;
  }
  mapped_[at] = size;
  next_ = at + size;
  return at;
}

bool ManagedArena::free(uint64_t address) {
  auto it = mapped_.find(address);
  if (it == mapped_.end()) return false;
  void* p = reinterpret_cast<void*>(address);
  driver_.cuMemHostUnregister(p);
  ::munmap(p, it->second);
  mapped_.erase(it);
  return true;
}

bool ManagedArena::contains(uint64_t address, uint64_t bytes) const {
  auto it = mapped_.upper_bound(address);
  if (it == mapped_.begin()) return false;
  --it;
  return address >= it->first && address + bytes <= it->first + it->second;
}

}  // namespace mneme::recorder
