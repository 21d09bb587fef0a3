#include "mneme/runtime/address_space.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "mneme/runtime/errors.hpp"

namespace mneme::runtime {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

bool is_power_of_two(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
uint64_t round_up(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }
uint64_t ceil_div(uint64_t v, uint64_t by) { return (v + by - 1) / by; }

}  // namespace

std::string format_bytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0) {
    std::snprintf(text, sizeof text, "%" PRIu64 " B", bytes);
  } else {
    std::snprintf(text, sizeof text, "%.4g %s", value, units[unit]);
  }
  return text;
}

std::string format_address(uint64_t address) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIx64, address);
  return text;
}

AddressSpace::AddressSpace(std::unique_ptr<MappingBackend> backend, uint64_t base,
                           uint64_t size)
    : backend_(std::move(backend)), base_(base), granularity_(backend_->granularity()) {
  if (!is_power_of_two(granularity_)) {
    throw Error("mapping granularity " + std::to_string(granularity_) +
                " is not a power of two");
  }
  if (base % granularity_ != 0) {
    throw AllocationError("address range base " + format_address(base) +
                          " is not a multiple of the mapping granularity (" +
                          format_bytes(granularity_) + ")");
  }
  if (size == 0) throw AllocationError("address range size must be positive");
  size_ = round_up(size, granularity_);
  if (base_ + size_ < base_) throw AllocationError("address range wraps around");
  backend_->reserve(base_, size_);
  free_blocks_.emplace(base_, size_);
}

AddressSpace::~AddressSpace() {
  for (const auto& [start, end] : mapped_ranges()) {
    try {
      backend_->unmap(start, end - start);
    } catch (...) {
      // Tearing down: the range release below frees what is left.
    }
  }
  backend_->release(base_, size_);
}

void AddressSpace::share_with(int ordinal) {
  std::lock_guard<std::mutex> lock(mutex_);
  backend_->share_with(ordinal);
}

Allocation AddressSpace::allocate(uint64_t size, uint64_t alignment) {
  if (size == 0) throw AllocationError("allocation size must be positive");
  if (!is_power_of_two(alignment)) {
    throw AllocationError("alignment " + std::to_string(alignment) +
                          " is not a power of two");
  }
  alignment = std::max(alignment, kMinAlignment);
  std::lock_guard lock(mutex_);
  if (size > size_) throw_out_of_space(size, size, alignment);
  const uint64_t rounded = round_up(size, kMinAlignment);
  if (rounded >= granularity_) alignment = std::max(alignment, granularity_);
  for (auto block = free_blocks_.begin(); block != free_blocks_.end(); ++block) {
    const uint64_t start = round_up(block->first, alignment);
    const uint64_t end = block->first + block->second;
    if (start < end && end - start >= rounded) {
      return commit(start, rounded, size, block);
    }
  }
  throw_out_of_space(size, rounded, alignment);
}

Allocation AddressSpace::allocate_at(uint64_t address, uint64_t size) {
  if (size == 0) throw AllocationError("allocation size must be positive");
  const uint64_t rounded = round_up(size, kMinAlignment);
  const uint64_t end = base_ + size_;
  if (address < base_ || address >= end || rounded > end - address) {
    throw OutOfRangeError("allocation [" + format_address(address) + ", " +
                          format_address(address + rounded) +
                          ") lies outside the reserved address range [" +
                          format_address(base_) + ", " + format_address(end) +
                          "): use the base address and range size the layout was recorded with");
  }
  std::lock_guard lock(mutex_);
  auto block = free_blocks_.upper_bound(address);
  if (block != free_blocks_.begin()) {
    --block;
    if (address + rounded <= block->first + block->second) {
      return commit(address, rounded, size, block);
    }
  }
  // Name one live allocation in the way, to make the conflict concrete.
  auto conflict = live_.lower_bound(address + rounded);
  std::string in_the_way;
  if (conflict != live_.begin()) {
    --conflict;
    if (conflict->first + conflict->second.size > address) {
      in_the_way = " (overlaps live allocation #" + std::to_string(conflict->second.sequence) +
                   " at " + format_address(conflict->first) + ", " +
                   format_bytes(conflict->second.size) + ")";
    }
  }
  throw AllocationError("cannot allocate " + format_bytes(rounded) + " at " +
                        format_address(address) + ": the range is not free" + in_the_way);
}

Allocation AddressSpace::commit(uint64_t address, uint64_t rounded, uint64_t requested,
                                std::map<uint64_t, uint64_t>::iterator block) {
  // Map first: if the device has no physical memory left, nothing changed.
  map_granules(address, rounded);
  take_from_free_block(block, address, rounded);
  Allocation allocation{address, rounded, requested, next_sequence_++};
  live_.emplace(address, allocation);
  live_bytes_ += rounded;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
  return allocation;
}

uint64_t AddressSpace::reserve_unmapped(uint64_t size, uint64_t alignment) {
  if (size == 0) throw AllocationError("reservation size must be positive");
  alignment = std::max(is_power_of_two(alignment) ? alignment : 1, granularity_);
  const uint64_t rounded = round_up(size, granularity_);  // its granules are its own
  std::lock_guard lock(mutex_);
  for (auto block = free_blocks_.begin(); block != free_blocks_.end(); ++block) {
    const uint64_t start = round_up(block->first, alignment);
    const uint64_t end = block->first + block->second;
    if (start < end && end - start >= rounded) {
      take_from_free_block(block, start, rounded);
      unmapped_.emplace(start, rounded);
      return start;
    }
  }
  throw_out_of_space(size, rounded, alignment);
}

bool AddressSpace::release_unmapped(uint64_t address) {
  std::lock_guard lock(mutex_);
  auto it = unmapped_.find(address);
  if (it == unmapped_.end()) return false;
  return_to_free_list(it->first, it->second);
  unmapped_.erase(it);
  return true;
}

void AddressSpace::free(uint64_t address) {
  std::lock_guard lock(mutex_);
  auto it = live_.find(address);
  if (it == live_.end()) {
    throw AllocationError("cannot free " + format_address(address) +
                          ": no live allocation starts there");
  }
  const uint64_t size = it->second.size;
  live_.erase(it);
  live_bytes_ -= size;
  ++frees_total_;
  return_to_free_list(address, size);
  unmap_granules(address, size);
}

void AddressSpace::take_from_free_block(std::map<uint64_t, uint64_t>::iterator block,
                                        uint64_t address, uint64_t size) {
  const uint64_t block_start = block->first;
  const uint64_t block_end = block->first + block->second;
  free_blocks_.erase(block);
  if (address > block_start) free_blocks_.emplace(block_start, address - block_start);
  if (address + size < block_end) free_blocks_.emplace(address + size, block_end - address - size);
}

void AddressSpace::return_to_free_list(uint64_t address, uint64_t size) {
  auto next = free_blocks_.lower_bound(address);
  if (next != free_blocks_.end() && next->first == address + size) {
    size += next->second;
    next = free_blocks_.erase(next);
  }
  if (next != free_blocks_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == address) {
      prev->second += size;
      return;
    }
  }
  free_blocks_.emplace(address, size);
}

void AddressSpace::map_granules(uint64_t address, uint64_t size) {
  const uint64_t first = (address - base_) / granularity_;
  const uint64_t last = (address + size - 1 - base_) / granularity_;
  // Map each run of granules no live allocation uses yet with one call.
  std::vector<std::pair<uint64_t, uint64_t>> mapped_runs;  // granule index ranges
  try {
    uint64_t g = first;
    while (g <= last) {
      if (granule_users_.count(g)) {
        ++g;
        continue;
      }
      uint64_t run_end = g;
      while (run_end + 1 <= last && !granule_users_.count(run_end + 1)) ++run_end;
      backend_->map(base_ + g * granularity_, (run_end - g + 1) * granularity_);
      mapped_runs.emplace_back(g, run_end);
      g = run_end + 1;
    }
  } catch (...) {
    for (const auto& [g0, g1] : mapped_runs) {
      try {
        backend_->unmap(base_ + g0 * granularity_, (g1 - g0 + 1) * granularity_);
      } catch (...) {
      }
    }
    throw;
  }
  for (uint64_t g = first; g <= last; ++g) ++granule_users_[g];
  peak_mapped_bytes_ = std::max(peak_mapped_bytes_, granule_users_.size() * granularity_);
}

void AddressSpace::unmap_granules(uint64_t address, uint64_t size) {
  const uint64_t first = (address - base_) / granularity_;
  const uint64_t last = (address + size - 1 - base_) / granularity_;
  uint64_t run_start = 0;
  bool in_run = false;
  auto flush = [&](uint64_t run_end) {
    backend_->unmap(base_ + run_start * granularity_, (run_end - run_start + 1) * granularity_);
    in_run = false;
  };
  for (uint64_t g = first; g <= last; ++g) {
    auto it = granule_users_.find(g);
    if (--it->second == 0) {
      granule_users_.erase(it);
      if (!in_run) {
        run_start = g;
        in_run = true;
      }
    } else if (in_run) {
      flush(g - 1);
    }
  }
  if (in_run) flush(last);
}

std::vector<Allocation> AddressSpace::live() const {
  std::lock_guard lock(mutex_);
  std::vector<Allocation> result;
  result.reserve(live_.size());
  for (const auto& [address, allocation] : live_) result.push_back(allocation);
  return result;
}

std::optional<Allocation> AddressSpace::find(uint64_t address) const {
  std::lock_guard lock(mutex_);
  auto it = live_.upper_bound(address);
  if (it == live_.begin()) return std::nullopt;
  --it;
  if (address < it->first + it->second.size) return it->second;
  return std::nullopt;
}

std::vector<std::pair<uint64_t, uint64_t>> AddressSpace::mapped_ranges() const {
  std::vector<uint64_t> granules;
  {
    std::lock_guard lock(mutex_);
    granules.reserve(granule_users_.size());
    for (const auto& [g, users] : granule_users_) granules.push_back(g);
  }
  std::sort(granules.begin(), granules.end());
  std::vector<std::pair<uint64_t, uint64_t>> runs;
  for (uint64_t g : granules) {
    const uint64_t start = base_ + g * granularity_;
    if (!runs.empty() && runs.back().second == start) {
      runs.back().second += granularity_;
    } else {
      runs.emplace_back(start, start + granularity_);
    }
  }
  return runs;
}

uint64_t AddressSpace::largest_free_block() const {
  uint64_t largest = 0;
  for (const auto& [start, size] : free_blocks_) largest = std::max(largest, size);
  return largest;
}

AddressSpaceStats AddressSpace::stats() const {
  std::lock_guard lock(mutex_);
  AddressSpaceStats s;
  s.live_allocations = live_.size();
  s.live_bytes = live_bytes_;
  s.peak_live_bytes = peak_live_bytes_;
  s.mapped_bytes = granule_users_.size() * granularity_;
  s.peak_mapped_bytes = peak_mapped_bytes_;
  s.free_bytes = size_ - live_bytes_;
  s.largest_free_block = largest_free_block();
  s.allocations_total = next_sequence_ - 1;
  s.frees_total = frees_total_;
  return s;
}

void AddressSpace::throw_out_of_space(uint64_t requested, uint64_t rounded,
                                      uint64_t alignment) const {
  // Appending the request (plus worst-case alignment padding) to a range of
  // today's size always fits it, so that is the size to suggest.
  const uint64_t needed = round_up(size_ + rounded + alignment, kGiB);
  const uint64_t free_bytes = size_ - live_bytes_;
  throw OutOfSpaceError(
      "cannot allocate " + format_bytes(requested) + ": the reserved address range holds " +
          format_bytes(size_) + " (" + format_bytes(free_bytes) +
          " free, largest free block " + format_bytes(largest_free_block()) +
          "); use a range of at least " + std::to_string(ceil_div(needed, kGiB)) +
          " GiB (--vass " + std::to_string(ceil_div(needed, kGiB)) + ")",
      requested, size_, needed);
}

}  // namespace mneme::runtime
