// The mapping calls the page manager needs, separated from its bookkeeping so
// the bookkeeping runs (and is tested) on host memory as well as on a GPU.
#pragma once

#include <cstdint>
#include <string>

#include "mneme/runtime/errors.hpp"

namespace mneme::runtime {

class MappingBackend {
 public:
  virtual ~MappingBackend() = default;

  // Short description for messages, e.g. "CUDA device 0" or "host memory".
  virtual std::string name() const = 0;

  // Physical mapping unit in bytes (2 MiB on an H100). Reserved ranges and
  // every map/unmap call are multiples of it.
  virtual uint64_t granularity() const = 0;

  // Reserve [base, base+size) without backing it. Must reserve exactly at
  // base or throw RangeUnavailableError.
  virtual void reserve(uint64_t base, uint64_t size) = 0;

  // Give a reserved range back; everything in it has been unmapped.
  virtual void release(uint64_t base, uint64_t size) noexcept = 0;

  // Back [address, address+size) with fresh physical memory, readable and
  // writable. Contents are unspecified (like cudaMalloc).
  virtual void map(uint64_t address, uint64_t size) = 0;

  // Drop the physical memory of [address, address+size); the range stays
  // reserved. Only ranges given to map() earlier are unmapped, but a range
  // mapped in one call may be unmapped granule by granule.
  virtual void unmap(uint64_t address, uint64_t size) = 0;

  // Lets device `ordinal` read and write this memory too (several GPUs of one process):
  // what is mapped now and every later mapping. Throws when that device cannot reach it.
  virtual void share_with(int ordinal);
};

inline void MappingBackend::share_with(int ordinal) {
  throw UserError(name() + " cannot be shared with device " + std::to_string(ordinal));
}

}  // namespace mneme::runtime
