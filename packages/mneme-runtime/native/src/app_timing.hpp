// The application's own time for every recorded instance (issue 20): KernelTimer runs for
// the whole recording; at exit the durations of the launches of each recorded instance's
// key (kernel name, grid, block, dynamic shared memory) are summarised into the
// instance's "app_time" attribute (docs/format.md). Launches that were snapshotted run
// between device synchronisations and copies that change the cache, so they are counted
// apart; the first launch of a key (cold code and data) is kept apart too.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "mneme/runtime/kernel_timer.hpp"
#include "mneme/runtime/recording_writer.hpp"

namespace mneme::recorder {

struct LaunchKey {
  std::string name;
  uint32_t grid[3], block[3], shared;
  auto tie() const { return std::tie(name, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared); }
  bool operator<(const LaunchKey& o) const { return tie() < o.tie(); }
};

class AppTiming {
 public:
  // Every launch the recorder sees: the first starts collection (unless
  // MNEME_RECORD_APP_TIME=0); now and then the records so far are summarised.
  void on_launch();
  // A launch of a recorded instance (new or repeated): its app_time is written at exit.
  void instance(const std::string& static_hash, const std::string& dynamic_hash, LaunchKey key);
  // Around a snapshotted launch: kernels of its key that start in between are perturbed.
  void snapshot_begins();
  void snapshot_ends();
  // At exit, after the instances are committed: writes each instance's app_time.
  void write(mneme::runtime::RecordingWriter& writer);

 private:
  struct Stats {
    std::vector<float> ms;  // launches neither first nor snapshotted
    uint64_t snapshotted = 0;
    uint64_t first_start = UINT64_MAX;
    float first_ms = -1;  // < 0: the first launch was snapshotted
    bool have_first = false;
  };
  void absorb(const std::vector<mneme::runtime::KernelRecord>& records);
  bool in_snapshot(uint64_t start) const;
  void keep(Stats& s, float ms, bool snapshotted);
  static std::string summary(const Stats& s);

  std::mutex mutex_;
  bool started_ = false, enabled_ = false;
  uint64_t launches_ = 0;
  std::map<LaunchKey, Stats> stats_;
  std::map<std::pair<std::string, std::string>, LaunchKey> instances_;
  std::vector<std::pair<uint64_t, uint64_t>> windows_;  // snapshot [begin, end], in order
};

}  // namespace mneme::recorder
