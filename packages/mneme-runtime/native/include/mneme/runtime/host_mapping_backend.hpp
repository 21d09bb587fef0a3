// MappingBackend on the process's own memory (mmap/mprotect/madvise): the page
// manager's bookkeeping runs for real, with real mappings, on a machine
// without a GPU.
#pragma once

#include "mneme/runtime/mapping_backend.hpp"

namespace mneme::runtime {

class HostMappingBackend : public MappingBackend {
 public:
  // granularity: a power-of-two multiple of the page size (2 MiB mimics an H100).
  explicit HostMappingBackend(uint64_t granularity);

  std::string name() const override { return "host memory"; }
  uint64_t granularity() const override { return granularity_; }
  void reserve(uint64_t base, uint64_t size) override;
  void release(uint64_t base, uint64_t size) noexcept override;
  void map(uint64_t address, uint64_t size) override;
  void unmap(uint64_t address, uint64_t size) override;

 private:
  uint64_t granularity_;
};

}  // namespace mneme::runtime
