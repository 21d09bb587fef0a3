// Managed memory at addresses replay can take again.
//
// cudaMallocManaged places memory where the driver likes, in the part of the address
// space where the host maps its libraries and heaps: in a replay process that address is
// often taken. The recorder instead serves managed allocations from a fixed range right
// after the recorded device range: host memory mapped there (MAP_FIXED_NOREPLACE) and
// registered with the driver for device access at the same address (unified addressing).
// The application's host code and kernels share it as they would managed memory (kernels
// read it over the bus while recording); replay maps device memory at exactly those
// addresses, inside its own reservation.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>

#include "mneme/runtime/cuda_driver.hpp"

namespace mneme::recorder {

class ManagedArena {
 public:
  // [base, base + size): the range allocations come from.
  ManagedArena(const mneme::runtime::cuda::Driver& driver, uint64_t base, uint64_t size)
      : driver_(driver), next_(base), end_(base + size) {}

  // The address of `bytes` of host memory the device reaches at the same address; 0 when
  // the range is full or the host or driver refuses (the caller falls back to the driver's
  // managed memory).
  uint64_t allocate(uint64_t bytes);
  // False when `address` is not an allocation of this arena.
  bool free(uint64_t address);
  // Whether [address, address + bytes) lies in one of the arena's allocations.
  bool contains(uint64_t address, uint64_t bytes = 1) const;

 private:
  const mneme::runtime::cuda::Driver& driver_;
  uint64_t next_, end_;
  std::map<uint64_t, uint64_t> mapped_;  // address -> mapped bytes
};

}  // namespace mneme::recorder
