// Occurrence counts of the snapshot pipeline: repeats of instances it captured, or that an
// earlier recording into the database holds, counted in memory and written in batches.
#include <string>
#include <utility>
#include <vector>

#include "snapshot_pipeline_types.hpp"

namespace mneme::runtime {

bool SnapshotPipeline::knows(const std::string& static_hash, const std::string& dyn) const {
  std::lock_guard<std::mutex> lock(known_mutex_);
  return known_.count(static_hash + "/" + dyn) != 0;
}

bool SnapshotPipeline::count_repeat(const std::string& static_hash, const std::string& dyn) {
  std::shared_ptr<Instance> inst;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = known_.find(static_hash + "/" + dyn);
    if (it == known_.end()) return false;
    inst = it->second;
  }
  uint64_t batch = 0;
  {
    std::lock_guard<std::mutex> lock(inst->m);
    // Before the commit the count goes into the metadata the commit writes.
    uint64_t& count = inst->committed ? inst->unwritten : inst->occurrences;
    if (++count == kOccurrencesBatch && inst->committed) batch = std::exchange(inst->unwritten, 0);
  }
  if (batch) writer_.count_occurrences(static_hash, dyn, batch);
  std::lock_guard<std::mutex> s(stats_mutex_);
  ++stats_.repeats;
  return true;
}

bool SnapshotPipeline::count_earlier(const std::string& static_hash, const std::string& dyn) {
  const std::string key = static_hash + "/" + dyn;
  uint64_t batch = 0;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = earlier_.find(key);
    if (it != earlier_.end()) {
      if (++it->second == kOccurrencesBatch) batch = std::exchange(it->second, 0);
    } else if (writer_.has_instance(static_hash, dyn)) {  // a look at the disk the first time only
      earlier_[key] = 1;
    } else {
      return false;
    }
  }
  if (batch) writer_.count_occurrences(static_hash, dyn, batch);
  return true;
}

void SnapshotPipeline::write_occurrences() {
  std::vector<std::pair<std::string, uint64_t>> pending;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    for (auto& [key, count] : earlier_)
      if (count) pending.emplace_back(key, std::exchange(count, 0));
    for (auto& [key, inst] : known_) {
      std::lock_guard<std::mutex> m(inst->m);
      if (inst->committed && inst->unwritten) pending.emplace_back(key, std::exchange(inst->unwritten, 0));
    }
  }
  for (const auto& [key, count] : pending) {
    size_t slash = key.find('/');
    writer_.count_occurrences(key.substr(0, slash), key.substr(slash + 1), count);
  }
}

}  // namespace mneme::runtime
