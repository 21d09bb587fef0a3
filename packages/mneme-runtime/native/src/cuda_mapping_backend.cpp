// CudaMappingBackend: an AddressSpace's pages on a CUDA device through the driver's virtual
// memory management (reserve a fixed range, map physical memory on demand, share a
// mapping with another GPU). The device itself is cuda_device.cpp.
#include <algorithm>
#include <vector>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/cuda_device.hpp"
#include "mneme/runtime/errors.hpp"

namespace mneme::runtime::cuda {

CudaMappingBackend::CudaMappingBackend(std::shared_ptr<CudaDevice> device)
    : device_(std::move(device)) {
  const DeviceProperties& p = device_->properties();
  if (!p.virtual_memory_management) {
    throw NoDeviceError("CUDA device " + std::to_string(p.ordinal) + " (" + p.name +
                        ") does not support virtual memory management; use another GPU");
  }
  allocation_ = {};
  allocation_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  allocation_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  allocation_.location.id = device_->device();
  CUmemAccessDesc own = {};
  own.location = allocation_.location;
  own.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  access_ = {own};
  granularity_ = p.granularity;
}

CudaMappingBackend::~CudaMappingBackend() {
  // The address space unmaps everything before releasing; this only runs if
  // a block outlived it (an error path).
  while (!blocks_.empty()) {
    try {
      release_block(blocks_.begin());  // (takes the block out of blocks_ before any driver call)
    } catch (...) {
    }
  }
}

std::string CudaMappingBackend::name() const {
  return "CUDA device " + std::to_string(device_->properties().ordinal);
}

void CudaMappingBackend::reserve(uint64_t base, uint64_t size) {
  const Driver& d = device_->driver();
  CudaDevice::Scope scope(*device_);
  CUdeviceptr got = 0;
  const CUresult result = d.cuMemAddressReserve(&got, size, 0, base, 0);
  if (result != CUDA_SUCCESS) {
    throw RangeUnavailableError("cannot reserve " + format_bytes(size) + " of device address space at " +
                                format_address(base) + ": " +
                                describe(d, result, "cuMemAddressReserve") +
                                "; choose another base address or a smaller range");
  }
  if (got != base) {
    d.cuMemAddressFree(got, size);
    throw RangeUnavailableError("cannot reserve " + format_bytes(size) + " of device address space at " +
                                format_address(base) + ": the driver offered " +
                                format_address(got) +
                                " instead (part of the range is in use); choose another base address");
  }
}

void CudaMappingBackend::release(uint64_t base, uint64_t size) noexcept {
  try {
    CudaDevice::Scope scope(*device_);
    device_->driver().cuMemAddressFree(base, size);
  } catch (...) {
  }
}

std::map<uint64_t, CudaMappingBackend::Block>::iterator CudaMappingBackend::block_of(uint64_t granule) {
  auto it = blocks_.upper_bound(granule);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  return granule < it->first + it->second.size ? it : blocks_.end();
}

void CudaMappingBackend::map_block(uint64_t address, uint64_t size) {
  const Driver& d = device_->driver();
  CUmemGenericAllocationHandle handle;
  cuda::check(d, d.cuMemCreate(&handle, size, &allocation_, 0), "cuMemCreate");
  const CUresult mapped = d.cuMemMap(address, size, 0, handle, 0);
  if (mapped != CUDA_SUCCESS) {
    d.cuMemRelease(handle);
    cuda::check(d, mapped, "cuMemMap");
  }
  blocks_.emplace(address, Block{handle, size, size / granularity_});
}

void CudaMappingBackend::release_block(std::map<uint64_t, Block>::iterator block) {
  const Driver& d = device_->driver();
  const uint64_t address = block->first, size = block->second.size;
  const CUmemGenericAllocationHandle handle = block->second.handle;
  blocks_.erase(block);
  cuda::check(d, d.cuMemUnmap(address, size), "cuMemUnmap");
  // Physical memory goes back to the device once unmapped and released.
  cuda::check(d, d.cuMemRelease(handle), "cuMemRelease");
}

void CudaMappingBackend::map(uint64_t address, uint64_t size) {
  const Driver& d = device_->driver();
  CudaDevice::Scope scope(*device_);
  std::vector<uint64_t> created, revived;
  try {
    uint64_t granule = address;
    const uint64_t end = address + size;
    while (granule < end) {
      auto held = block_of(granule);
      if (held != blocks_.end()) {  // still mapped in a block not yet released
        ++held->second.mapped;
        revived.push_back(granule);
        granule += granularity_;
        continue;
      }
      uint64_t run_end = granule + granularity_;
      while (run_end < end && block_of(run_end) == blocks_.end()) run_end += granularity_;
      // the run's edge granules alone, its interior in large blocks
      for (uint64_t at = granule; at < run_end;) {
        uint64_t n = granularity_;
        if (at != granule && at + granularity_ < run_end)
          n = std::min(kBlockBytes / granularity_ * granularity_, run_end - granularity_ - at);
        map_block(at, n);
        created.push_back(at);
        at += n;
      }
      granule = run_end;
    }
    // One access call covers the whole run (granules taken up again included).
    cuda::check(d, d.cuMemSetAccess(address, size, access_.data(), access_.size()), "cuMemSetAccess");
  } catch (...) {
    for (uint64_t g : revived) {
      auto held = block_of(g);
      if (held != blocks_.end()) --held->second.mapped;
    }
    for (uint64_t at : created) {
      try {
        auto block = blocks_.find(at);
        if (block != blocks_.end()) release_block(block);
      } catch (...) {
      }
    }
    throw;
  }
}

void CudaMappingBackend::share_with(int ordinal) {
  const Driver& d = device_->driver();
  const int own = device_->properties().ordinal;
  if (ordinal == own) return;
  for (const auto& a : access_)
    if (a.location.id == ordinal) return;
  CUdevice peer;
  cuda::check(d, d.cuDeviceGet(&peer, ordinal), "cuDeviceGet");
  int reachable = 0;
  cuda::check(d, d.cuDeviceCanAccessPeer(&reachable, peer, device_->device()), "cuDeviceCanAccessPeer");
  if (!reachable)
    throw UserError("CUDA device " + std::to_string(ordinal) + " cannot access the memory of device " +
                    std::to_string(own) + " (no peer access between them)");
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = peer;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // Runs of adjacent blocks mapped already: one access call each.
  CudaDevice::Scope scope(*device_);
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    const uint64_t start = it->first;
    uint64_t end = start + it->second.size;
    for (++it; it != blocks_.end() && it->first == end; ++it) end += it->second.size;
    cuda::check(d, d.cuMemSetAccess(start, end - start, &desc, 1), "cuMemSetAccess");
  }
  access_.push_back(desc);
}

void CudaMappingBackend::unmap(uint64_t address, uint64_t size) {
  CudaDevice::Scope scope(*device_);
  for (uint64_t granule = address; granule < address + size;) {
    auto block = block_of(granule);
    if (block == blocks_.end()) {
      granule += granularity_;
      continue;
    }
    // the granules of [granule, address + size) in this block
    const uint64_t stop = std::min(address + size, block->first + block->second.size);
    const uint64_t n = (stop - granule + granularity_ - 1) / granularity_;
    block->second.mapped -= std::min(n, block->second.mapped);
    if (block->second.mapped == 0) release_block(block);
    granule += n * granularity_;
  }
}

}  // namespace mneme::runtime::cuda
