// A fixed virtual address range with an allocator inside it.
//
// The range [base, base+size) is reserved once at a fixed address, so a
// recording and its replays see the same pointers. Allocations are carved out
// of it first-fit; physical memory is mapped granule by granule on demand and
// a granule is unmapped as soon as no live allocation touches it. Small
// allocations share granules, so a thousand 1 KiB buffers cost one granule,
// not a thousand.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "mneme/runtime/mapping_backend.hpp"

namespace mneme::runtime {

// 32 TiB: far below the kernel's top-down mmap area (shared libraries, the CUDA
// driver's own mappings near 0x7f..) and far above brk heaps.
inline constexpr uint64_t kDefaultBase = 0x200000000000ull;
inline constexpr uint64_t kDefaultSize = 64ull << 30;
// cudaMalloc guarantees 256-byte alignment; so do we.
inline constexpr uint64_t kMinAlignment = 256;

struct Allocation {
  uint64_t address = 0;
  uint64_t size = 0;            // bytes reserved (requested, rounded up to 256)
  uint64_t requested_size = 0;  // bytes asked for
  uint64_t sequence = 0;        // 1 for the first allocation of the space, then +1
};

struct AddressSpaceStats {
  uint64_t live_allocations = 0;
  uint64_t live_bytes = 0;
  uint64_t peak_live_bytes = 0;
  uint64_t mapped_bytes = 0;
  uint64_t peak_mapped_bytes = 0;
  uint64_t free_bytes = 0;          // unallocated bytes of the range
  uint64_t largest_free_block = 0;
  uint64_t allocations_total = 0;   // allocations made so far (= last sequence number)
  uint64_t frees_total = 0;
};

class AddressSpace {
 public:
  // Reserves the range through the backend. base must be a multiple of the
  // backend's granularity; size is rounded up to one.
  AddressSpace(std::unique_ptr<MappingBackend> backend, uint64_t base, uint64_t size);
  // Unmaps every granule still mapped and releases the range.
  ~AddressSpace();
  AddressSpace(const AddressSpace&) = delete;
  AddressSpace& operator=(const AddressSpace&) = delete;

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t granularity() const { return granularity_; }
  const MappingBackend& backend() const { return *backend_; }
  // Device `ordinal` reaches the range's memory too, mapped now and later
  // (MappingBackend::share_with).
  void share_with(int ordinal);

  // First-fit allocation. alignment is raised to 256 and, for allocations of a
  // granule or more, to the granularity (large buffers never straddle a
  // granule they do not need). Throws OutOfSpaceError.
  Allocation allocate(uint64_t size, uint64_t alignment = kMinAlignment);

  // Recreate an allocation at exactly [address, address+size) (replay of a
  // recorded layout). Throws OutOfRangeError outside the range and
  // AllocationError if any byte of it is already allocated.
  Allocation allocate_at(uint64_t address, uint64_t size);

  // Free the allocation starting at address. Throws AllocationError when no
  // live allocation starts there.
  void free(uint64_t address);

  // Address space only, whole granules, never mapped here: for an application that maps
  // memory itself (cuMemAddressReserve + cuMemMap). Throws OutOfSpaceError.
  uint64_t reserve_unmapped(uint64_t size, uint64_t alignment);
  // Gives such a reservation back; false when `address` starts none.
  bool release_unmapped(uint64_t address);

  // Live allocations in address order.
  std::vector<Allocation> live() const;
  // The live allocation containing address, if any.
  std::optional<Allocation> find(uint64_t address) const;
  // Mapped granules as [start, end) runs in address order.
  std::vector<std::pair<uint64_t, uint64_t>> mapped_ranges() const;
  AddressSpaceStats stats() const;

 private:
  Allocation commit(uint64_t address, uint64_t rounded, uint64_t requested,
                    std::map<uint64_t, uint64_t>::iterator block);
  void take_from_free_block(std::map<uint64_t, uint64_t>::iterator block, uint64_t address,
                            uint64_t size);
  void return_to_free_list(uint64_t address, uint64_t size);
  void map_granules(uint64_t address, uint64_t size);
  void unmap_granules(uint64_t address, uint64_t size);
  uint64_t largest_free_block() const;
  [[noreturn]] void throw_out_of_space(uint64_t requested, uint64_t rounded,
                                       uint64_t alignment) const;

  std::unique_ptr<MappingBackend> backend_;
  uint64_t base_;
  uint64_t size_;
  uint64_t granularity_;

  mutable std::mutex mutex_;  // the recorder calls in from application threads
  std::map<uint64_t, uint64_t> free_blocks_;        // start -> size, coalesced
  std::map<uint64_t, Allocation> live_;             // start -> allocation
  std::map<uint64_t, uint64_t> unmapped_;           // reservations: start -> size
  std::unordered_map<uint64_t, uint32_t> granule_users_;  // granule index -> live allocations touching it
  uint64_t next_sequence_ = 1;
  uint64_t live_bytes_ = 0;
  uint64_t peak_live_bytes_ = 0;
  uint64_t peak_mapped_bytes_ = 0;
  uint64_t frees_total_ = 0;
};

// "1.5 GiB", "256 B": sizes in messages.
std::string format_bytes(uint64_t bytes);
// "0x200000000000"
std::string format_address(uint64_t address);

}  // namespace mneme::runtime
