#include "mneme/runtime/host_mapping_backend.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/errors.hpp"

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

namespace mneme::runtime {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

HostMappingBackend::HostMappingBackend(uint64_t granularity) : granularity_(granularity) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (granularity == 0 || (granularity & (granularity - 1)) != 0 || granularity % page != 0) {
    throw AllocationError("host mapping granularity " + std::to_string(granularity) +
                          " must be a power-of-two multiple of the page size (" +
                          std::to_string(page) + ")");
  }
}

void HostMappingBackend::reserve(uint64_t base, uint64_t size) {
  void* want = reinterpret_cast<void*>(base);
  // MAP_FIXED_NOREPLACE refuses to clobber existing mappings; kernels older than
  // 4.17 ignore it and treat the address as a hint, hence the check below.
  void* got = mmap(want, size, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED) {
    throw RangeUnavailableError("cannot reserve " + format_bytes(size) + " of host address space at " +
                                format_address(base) + ": " + errno_text() +
                                "; choose another base address");
  }
  if (got != want) {
    munmap(got, size);
    throw RangeUnavailableError("cannot reserve " + format_bytes(size) + " of host address space at " +
                                format_address(base) + ": part of it is in use; choose another base address");
  }
}

void HostMappingBackend::release(uint64_t base, uint64_t size) noexcept {
  munmap(reinterpret_cast<void*>(base), size);
}

void HostMappingBackend::map(uint64_t address, uint64_t size) {
  if (mprotect(reinterpret_cast<void*>(address), size, PROT_READ | PROT_WRITE) != 0) {
    throw Error("mprotect(" + format_address(address) + ", " + format_bytes(size) +
                ") failed: " + errno_text());
  }
}

void HostMappingBackend::unmap(uint64_t address, uint64_t size) {
  void* p = reinterpret_cast<void*>(address);
  // DONTNEED drops the pages (the next map sees fresh zero pages), NONE makes
  // stray accesses fault like they would on an unmapped device range.
  if (madvise(p, size, MADV_DONTNEED) != 0 || mprotect(p, size, PROT_NONE) != 0) {
    throw Error("unmapping " + format_address(address) + ", " + format_bytes(size) +
                " failed: " + errno_text());
  }
}

}  // namespace mneme::runtime
