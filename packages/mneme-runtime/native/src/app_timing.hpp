// The application's own kernel times (issues 20 and 34): KernelTimer runs for the whole
// recording and sees every kernel the application launches, recorded or not. At exit:
//
// - each recorded instance gets its "app_time" attribute (docs/format.md): the launches of
//   that instance itself (same kernel, launch shape and arguments: CUPTI tags each launch
//   of a recorded kernel with the instance it belongs to), or, where no such launch was
//   timed, the launches of its key (kernel name, grid, block, dynamic shared memory);
// - the root gets "app_profile": every key the application launched, with its launches and
//   its share of the application's kernel time, which `mneme profile` and `mneme tune
//   --app` rank.
//
// Launches that were snapshotted run between device synchronisations and copies that
// change the cache, so they are counted apart; the first launch of a key (cold code and
// data) is kept apart too.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "mneme/runtime/kernel_timer.hpp"
#include "mneme/runtime/recording_writer.hpp"

namespace mneme::recorder {

// A kernel at one launch shape on one GPU (CUPTI's device id: the CUDA ordinal).
struct LaunchKey {
  std::string name;
  uint32_t grid[3], block[3], shared, device;
  auto tie() const {
    return std::tie(name, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, device);
  }
  bool operator<(const LaunchKey& o) const { return tie() < o.tie(); }
};

class AppTiming {
 public:
  // Every launch the recorder sees: the first starts collection (unless
  // MNEME_RECORD_APP_TIME=0); now and then the records so far are summarised.
  void on_launch();
  // A launch of a recorded instance (new or repeated): its app_time is written at exit.
  // Returns the tag its launches carry (0: launches are not tagged).
  uint64_t instance(const std::string& static_hash, const std::string& dynamic_hash, LaunchKey key);
  // Around a snapshotted launch: kernels of its key that start in between are perturbed.
  void snapshot_begins();
  void snapshot_ends();
  // At exit, after the instances are committed: writes each instance's app_time and the
  // root's app_profile.
  void write(mneme::runtime::RecordingWriter& writer);

 private:
  struct Stats {
    std::vector<float> ms;  // launches neither first nor snapshotted
    uint64_t snapshotted = 0;
    uint64_t first_start = UINT64_MAX;
    float first_ms = -1;  // < 0: the first launch was snapshotted
    bool have_first = false;
    // every launch, for the profile: unperturbed ones summed, perturbed ones apart
    uint64_t launches = 0;
    double unperturbed_ms = 0, perturbed_ms = 0;
  };
  // A launch of a key that has instances, kept until its tag is known (at exit).
  struct Tagged {
    uint32_t correlation;
    float ms;
    uint64_t start;
    bool snapshotted;
  };
  struct Known {
    LaunchKey key;
    uint64_t tag;
  };
  void absorb(const std::vector<mneme::runtime::KernelRecord>& records);
  void absorb_tags(const std::vector<mneme::runtime::LaunchTag>& tags);
  bool in_snapshot(uint64_t start) const;
  static void keep(Stats& s, float ms, bool snapshotted);
  static void add(Stats& s, float ms, uint64_t start, bool snapshotted);
  static std::string summary(const Stats& s, const char* scope, const Stats* key);
  std::string profile() const;

  std::mutex mutex_;
  bool started_ = false, enabled_ = false, tagging_ = false;
  uint64_t launches_ = 0;
  std::map<LaunchKey, Stats> stats_;
  std::map<std::pair<std::string, std::string>, Known> instances_;
  std::set<LaunchKey> instance_keys_;
  std::vector<Tagged> tagged_;
  std::unordered_map<uint32_t, uint64_t> tag_of_;  // CUPTI correlation id -> instance tag
  std::vector<std::pair<uint64_t, uint64_t>> windows_;  // snapshot [begin, end], in order
};

}  // namespace mneme::recorder
