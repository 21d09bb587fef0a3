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
  // a granule outlived it (an error path).
  std::vector<uint64_t> left;
  for (const auto& [address, handle] : handles_) left.push_back(address);
  for (uint64_t address : left) {
    try {
      unmap_granule(address);
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

void CudaMappingBackend::map(uint64_t address, uint64_t size) {
  const Driver& d = device_->driver();
  CudaDevice::Scope scope(*device_);
  std::vector<uint64_t> done;
  try {
    for (uint64_t granule = address; granule < address + size; granule += granularity_) {
      CUmemGenericAllocationHandle handle;
      cuda::check(d, d.cuMemCreate(&handle, granularity_, &allocation_, 0), "cuMemCreate");
      const CUresult mapped = d.cuMemMap(granule, granularity_, 0, handle, 0);
      if (mapped != CUDA_SUCCESS) {
        d.cuMemRelease(handle);
        cuda::check(d, mapped, "cuMemMap");
      }
      handles_.emplace(granule, handle);
      done.push_back(granule);
    }
    // One access call covers the whole run of fresh mappings.
    cuda::check(d, d.cuMemSetAccess(address, size, access_.data(), access_.size()), "cuMemSetAccess");
  } catch (...) {
    for (uint64_t granule : done) {
      try {
        unmap_granule(granule);
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
  // Runs of adjacent granules mapped already: one access call each.
  std::vector<uint64_t> granules;
  for (const auto& [address, handle] : handles_) granules.push_back(address);
  std::sort(granules.begin(), granules.end());
  CudaDevice::Scope scope(*device_);
  for (size_t i = 0; i < granules.size();) {
    size_t j = i + 1;
    while (j < granules.size() && granules[j] == granules[j - 1] + granularity_) ++j;
    cuda::check(d, d.cuMemSetAccess(granules[i], (j - i) * granularity_, &desc, 1), "cuMemSetAccess");
    i = j;
  }
  access_.push_back(desc);
}

void CudaMappingBackend::unmap(uint64_t address, uint64_t size) {
  CudaDevice::Scope scope(*device_);
  for (uint64_t granule = address; granule < address + size; granule += granularity_) {
    unmap_granule(granule);
  }
}

void CudaMappingBackend::unmap_granule(uint64_t address) {
  const Driver& d = device_->driver();
  auto it = handles_.find(address);
  if (it == handles_.end()) return;
  const CUmemGenericAllocationHandle handle = it->second;
  handles_.erase(it);
  cuda::check(d, d.cuMemUnmap(address, granularity_), "cuMemUnmap");
  // Physical memory goes back to the device once unmapped and released.
  cuda::check(d, d.cuMemRelease(handle), "cuMemRelease");
}

}  // namespace mneme::runtime::cuda
