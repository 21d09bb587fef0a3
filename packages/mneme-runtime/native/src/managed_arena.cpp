#include "managed_arena.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "interpose.hpp"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

namespace mneme::recorder {

namespace {
constexpr uint64_t kAlignment = 2ull << 20;  // the device's mapping granularity
uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

// The arena whose Placement is alive on this thread.
thread_local ManagedArena* t_placing = nullptr;

using MmapFn = void* (*)(void*, size_t, int, int, int, off_t);

// glibc's mmap; the system call itself until it is known (a lookup may map memory).
void* system_mmap(void* address, size_t bytes, int prot, int flags, int fd, off_t offset) {
  static std::atomic<MmapFn> next{nullptr};
  static std::atomic<bool> looking{false};
  MmapFn fn = next.load(std::memory_order_acquire);
  if (!fn && !looking.exchange(true)) {
    fn = reinterpret_cast<MmapFn>(dlvsym(RTLD_NEXT, "mmap", "GLIBC_2.2.5"));
    next.store(fn, std::memory_order_release);
  }
  if (fn) return fn(address, bytes, prot, flags, fd, offset);
  return reinterpret_cast<void*>(syscall(SYS_mmap, address, bytes, prot, flags, fd, offset));
}

// A reservation the driver makes for managed memory: no file, no access, no address.
bool driver_reservation(void* address, int prot, int flags, int fd) {
  return !address && fd == -1 && prot == PROT_NONE && (flags & MAP_ANONYMOUS) && !(flags & MAP_FIXED);
}

void* mapped(void* address, size_t bytes, int prot, int flags, int fd, off_t offset) {
  if (t_placing && driver_reservation(address, prot, flags, fd)) {
    void* placed = t_placing->reserve(bytes, prot, flags);
    if (placed != MAP_FAILED) return placed;
  }
  return system_mmap(address, bytes, prot, flags, fd, offset);
}
}  // namespace

ManagedArena::Placement::Placement(ManagedArena& arena) : outer_(t_placing) { t_placing = &arena; }
ManagedArena::Placement::~Placement() { t_placing = outer_; }

void* ManagedArena::reserve(uint64_t bytes, int prot, int flags) {
  uint64_t at = round_up(next_, kAlignment);
  if (!bytes || at + bytes > end_ || at + bytes < at) return MAP_FAILED;
  void* p = system_mmap(reinterpret_cast<void*>(at), bytes, prot, flags | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) return MAP_FAILED;
  if (reinterpret_cast<uint64_t>(p) != at) {  // kernels older than 4.17 ignore NOREPLACE
    ::munmap(p, bytes);
    return MAP_FAILED;
  }
  next_ = at + bytes;
  return p;
}

uint64_t ManagedArena::allocate_host(uint64_t bytes) {
  uint64_t size = round_up(bytes ? bytes : 1, kAlignment);
  void* p = reserve(size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS);
  if (p == MAP_FAILED) return 0;
  uint64_t at = reinterpret_cast<uint64_t>(p);
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
  host_[at] = size;
  return at;
}

bool ManagedArena::free_host(uint64_t address) {
  auto it = host_.find(address);
  if (it == host_.end()) return false;
  void* p = reinterpret_cast<void*>(address);
  driver_.cuMemHostUnregister(p);
  ::munmap(p, it->second);
  host_.erase(it);
  return true;
}

bool ManagedArena::hosts(uint64_t address, uint64_t bytes) const {
  auto it = host_.upper_bound(address);
  if (it == host_.begin()) return false;
  --it;
  return address >= it->first && address + bytes <= it->first + it->second;
}

}  // namespace mneme::recorder

// Every mmap of the process passes here (the driver's among them); only the driver's
// managed-memory reservations made under a Placement are moved (managed_arena.hpp).
extern "C" {
void* mmap(void* address, size_t bytes, int prot, int flags, int fd, off_t offset) {
  return mneme::recorder::mapped(address, bytes, prot, flags, fd, offset);
}
void* mmap64(void* address, size_t bytes, int prot, int flags, int fd, off_t offset) {
  return mneme::recorder::mapped(address, bytes, prot, flags, fd, offset);
}
}
