// Managed memory at addresses replay can take again, running at device speed.
//
// cudaMallocManaged places memory where the driver likes, in the part of the address
// space where the host maps its libraries and heaps: in a replay process that address is
// often taken. The recorder keeps a fixed range right after the recorded device range for
// it; replay maps device memory at exactly those addresses, inside its own reservation.
//
// The driver's managed memory is placed there (measured on the H100/H200 hosts: the
// driver reserves a managed allocation's addresses with an anonymous PROT_NONE mmap and
// maps the UVM device over it with MAP_FIXED; the reservations it makes while the
// recorder allocates on the application's behalf are moved into the range). So the
// application gets real managed memory: pages migrate, prefetch and advice work, kernels
// run at device speed. Where a driver's allocation lands elsewhere anyway, host memory
// mapped in the range and registered with the driver stands in (kernels reach it over
// the bus: slower, never wrong). docs/record.md, "Managed memory".
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
      : driver_(driver), base_(base), next_(base), end_(base + size) {}

  // While one lives, the driver's address reservations made on this thread (an anonymous
  // PROT_NONE mmap without an address) are taken from the range.
  class Placement {
   public:
    explicit Placement(ManagedArena& arena);
    ~Placement();
    Placement(const Placement&) = delete;
    Placement& operator=(const Placement&) = delete;

   private:
    ManagedArena* outer_;
  };

  // Whether [address, address + bytes) lies in the range (a placed driver allocation).
  bool placed(uint64_t address, uint64_t bytes) const {
    return address >= base_ && address + bytes <= end_ && address + bytes >= address;
  }

  // The stand-in: `bytes` of host memory the device reaches at the same address; 0 when
  // the range is full or the host or driver refuses.
  uint64_t allocate_host(uint64_t bytes);
  // False when `address` is not a host allocation of this arena.
  bool free_host(uint64_t address);
  // Whether [address, address + bytes) lies in one of the arena's host allocations.
  bool hosts(uint64_t address, uint64_t bytes = 1) const;

  // The next free address of the range for a mapping of `bytes` (2 MiB aligned), mapped
  // with `flags`; MAP_FAILED when the range is full or taken. Used by the mmap wrapper.
  void* reserve(uint64_t bytes, int prot, int flags);

 private:
  const mneme::runtime::cuda::Driver& driver_;
  uint64_t base_, next_, end_;
  std::map<uint64_t, uint64_t> host_;  // address -> mapped bytes
};

}  // namespace mneme::recorder
