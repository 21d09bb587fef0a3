// What a launch's snapshot copies: every live allocation and device global of the launch's
// GPU (or, with --capture reachable, those the launch can reach through pointers), other
// GPUs' memory the launch reaches (peer regions), one region per address.
#include "recorder.hpp"

#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace mneme::recorder {

// Every live allocation and every registered device global: what a snapshot copies.
void Recorder::regions_now(std::vector<rt::RegionSpec>& regions, std::vector<uint64_t>& sources,
                           const DeviceSlot& here, const std::string& args, bool reachable_only, void* module,
                           void** fatbin) {
  regions.clear();
  sources.clear();
  std::vector<std::pair<uint64_t, uint64_t>> globals;
  for (const auto& g : globals_) {  // registered through the shared runtime: it is there
    if (fatbin && g.fatbin != fatbin) continue;  // another module's: replay cannot bind it
    REAL(cudaGetSymbolAddress);
    void* address = nullptr;
    if (real_cudaGetSymbolAddress(&address, g.host_var) != cudaSuccess || !address) continue;
    regions.push_back({"global", reinterpret_cast<uint64_t>(address), g.size, g.name});
    sources.push_back(reinterpret_cast<uint64_t>(address));
    globals.emplace_back(reinterpret_cast<uint64_t>(address), g.size);
  }
  // Only the kernel's own module: replay binds globals by name in the module it loads,
  // and other modules may hold globals of the same name.
  auto loaded = module ? modules_.find(module) : modules_.end();
  if (loaded != modules_.end()) {
    std::vector<std::string> absent;  // declared, but not in the loaded code: not asked again
    for (const auto& name : loaded->second.globals) {
      uint64_t address = 0, size = 0;
      if (!global_address(module, loaded->second.api, name, address, size) || !address) {
        absent.push_back(name);
        continue;
      }
      regions.push_back({"global", address, size, name});
      sources.push_back(address);
      globals.emplace_back(address, size);
    }
    for (const auto& name : absent) loaded->second.globals.erase(name);
  }
  // Allocation start addresses the launch reaches: wanted with --capture reachable, and
  // always to find which of other GPUs' allocations are this launch's peer memory.
  bool peers = false;
  for (const auto* pool : {&live_, &mapped_})
    for (const auto& [address, size] : *pool)
      if (const DeviceSlot* owner = slot_of(address); owner && owner != &here) peers = true;
  std::set<uint64_t> reached;
  if (reachable_only || peers) reached = reachable(here, args, globals);
  for (const auto& [pool, kind] : {std::pair{&live_, "heap"}, {&managed_, "managed"}, {&mapped_, "mapped"}}) {
    for (const auto& [address, size] : *pool) {
      const DeviceSlot* owner = pool == &managed_ ? nullptr : slot_of(address);
      if (owner && owner != &here) {  // another GPU's memory: reached through a peer pointer
        if (reached.count(address)) {
          regions.push_back({MNEME_RECORDING_PEER_KIND, address, size, "", owner->ordinal()});
          sources.push_back(address);
        }
        continue;
      }
      if (reachable_only && !reached.count(address)) continue;
      // memory the application mapped into a reservation the range served is heap memory
      regions.push_back({pool == &mapped_ && owner ? "heap" : kind, address, size, ""});
      sources.push_back(address);
    }
  }
  drop_repeated_regions(regions, sources);
}

// One region per address: a global registered twice (one variable in several fatbinaries
// of a library, or a runtime variable the module lookups found again) resolves to one
// address, and a snapshot holding it twice is one no reader accepts. The larger wins.
void Recorder::drop_repeated_regions(std::vector<rt::RegionSpec>& regions, std::vector<uint64_t>& sources) {
  std::map<uint64_t, size_t> first;  // address -> index of the region kept
  std::vector<bool> keep(regions.size(), true);
  for (size_t i = 0; i < regions.size(); ++i) {
    auto [at, inserted] = first.emplace(regions[i].address, i);
    if (inserted) continue;
    size_t& kept = at->second;
    bool larger = regions[i].size > regions[kept].size;
    keep[larger ? kept : i] = false;
    if (larger) kept = i;
  }
  size_t out = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    if (!keep[i]) continue;
    regions[out] = regions[i];
    sources[out] = sources[i];
    ++out;
  }
  regions.resize(out);
  sources.resize(out);
}

// The allocations a launch can reach: those an 8-byte word of the argument buffer or of a
// device global points into, then, transitively, those that 8-byte words stored in reached
// allocations point into. Pointers the kernel computes from integers are not seen
// (docs/record.md, "--capture reachable").
std::set<uint64_t> Recorder::reachable(const DeviceSlot& here, const std::string& args,
                                       const std::vector<std::pair<uint64_t, uint64_t>>& globals) {
  std::map<uint64_t, uint64_t> all(live_);
  all.insert(managed_.begin(), managed_.end());
  all.insert(mapped_.begin(), mapped_.end());
  auto owner = [&all](uint64_t value) -> std::optional<uint64_t> {
    auto it = all.upper_bound(value);
    if (it == all.begin()) return std::nullopt;
    --it;
    if (value >= it->first && value < it->first + std::max<uint64_t>(it->second, 1)) return it->first;
    return std::nullopt;
  };
  std::set<uint64_t> found;
  std::vector<uint64_t> pending;
  auto scan = [&](const unsigned char* bytes, size_t n) {
    for (size_t at = 0; at + 8 <= n; at += 8) {
      uint64_t value;
      std::memcpy(&value, bytes + at, 8);
      if (auto start = owner(value); start && found.insert(*start).second) pending.push_back(*start);
    }
  };
  // Arguments are packed at their own offsets: look at every 4-byte step for 8-byte words.
  for (size_t at = 0; at + 8 <= args.size(); at += 4) {
    uint64_t value;
    std::memcpy(&value, args.data() + at, 8);
    if (auto start = owner(value); start && found.insert(*start).second) pending.push_back(*start);
  }
  const auto& d = here.device->driver();
  std::vector<unsigned char> buffer;
  constexpr uint64_t kPiece = 64ull << 20;
  auto read_and_scan = [&](uint64_t address, uint64_t size) {
    for (uint64_t done = 0; done < size; done += kPiece) {
      uint64_t n = std::min(kPiece, size - done);
      buffer.resize(n);
      if (d.cuMemcpyDtoH(buffer.data(), address + done, n) != CUDA_SUCCESS) return;
      scan(buffer.data(), n);
    }
  };
  rt::cuda::CudaDevice::Scope scope(*here.device);
  for (const auto& [address, size] : globals) read_and_scan(address, size);
  while (!pending.empty()) {
    uint64_t start = pending.back();
    pending.pop_back();
    read_and_scan(start, all[start]);
  }
  return found;
}

}  // namespace mneme::recorder
