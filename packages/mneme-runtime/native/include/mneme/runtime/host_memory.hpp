// Host memory for device copies, made resident ahead of use.
//
// Page-locking memory with cuMemHostAlloc faults and locks it 4 KiB page by page inside
// the driver: 1.9 GB/s on the H100 host, and parallel calls serialize. Mapping the memory
// on transparent huge pages, faulting it in from several threads at once and then
// registering it (cuMemHostRegister) measured 22 GB/s there, with the same copy speed
// (docs/record.md: "Staging memory"). Pageable staging gets the same head start: its
// pages are resident before the first copy lands in them.
#pragma once

#include <cstddef>

namespace mneme::runtime {

// The size map_resident() maps for `bytes`: rounded up to 2 MiB.
size_t resident_size(size_t bytes);

// Anonymous, zeroed, 2 MiB-aligned memory of resident_size(bytes), every page faulted
// in (by up to 16 threads for large sizes), on huge pages where the kernel allows
// (madvise mode included). Throws Error when the memory cannot be mapped.
void* map_resident(size_t bytes);

// Releases what map_resident(bytes) returned.
void unmap_resident(void* pointer, size_t bytes) noexcept;

}  // namespace mneme::runtime
