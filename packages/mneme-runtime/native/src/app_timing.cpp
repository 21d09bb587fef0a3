#include "app_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace mneme::recorder {
namespace rt = mneme::runtime;

namespace {
constexpr uint64_t kTakeEvery = 4096;        // launches between summaries (bounded memory)
constexpr size_t kMaxSamples = size_t(1) << 20;  // per key: plenty for a median

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

// Linear interpolation between order statistics (numpy's default, Python's "inclusive").
double quantile(const std::vector<float>& sorted, double q) {
  double at = q * double(sorted.size() - 1);
  size_t low = size_t(at);
  size_t high = std::min(low + 1, sorted.size() - 1);
  return sorted[low] + (at - double(low)) * (sorted[high] - sorted[low]);
}
}  // namespace

void AppTiming::on_launch() {
  std::vector<rt::KernelRecord> records;
  {
    std::lock_guard lock(mutex_);
    if (!started_) {
      started_ = true;
      const char* setting = std::getenv("MNEME_RECORD_APP_TIME");
      if (setting && std::strcmp(setting, "0") == 0) return;
      auto& timer = rt::KernelTimer::instance();
      enabled_ = timer.start();
      if (!enabled_)
        std::fprintf(stderr, "mneme record: in-app kernel times not measured: %s\n", timer.reason().c_str());
      return;
    }
    if (!enabled_ || ++launches_ % kTakeEvery) return;
  }
  records = rt::KernelTimer::instance().take();
  std::lock_guard lock(mutex_);
  absorb(records);
}

void AppTiming::instance(const std::string& static_hash, const std::string& dynamic_hash, LaunchKey key) {
  std::lock_guard lock(mutex_);
  if (enabled_) instances_.try_emplace(std::make_pair(static_hash, dynamic_hash), std::move(key));
}

void AppTiming::snapshot_begins() {
  std::lock_guard lock(mutex_);
  if (enabled_) windows_.push_back({rt::KernelTimer::instance().timestamp(), UINT64_MAX});
}

void AppTiming::snapshot_ends() {
  std::lock_guard lock(mutex_);
  if (enabled_ && !windows_.empty()) windows_.back().second = rt::KernelTimer::instance().timestamp();
}

bool AppTiming::in_snapshot(uint64_t start) const {
  auto it = std::upper_bound(windows_.begin(), windows_.end(), std::make_pair(start, UINT64_MAX));
  return it != windows_.begin() && start <= std::prev(it)->second;
}

void AppTiming::keep(Stats& s, float ms, bool snapshotted) {
  if (snapshotted) {
    ++s.snapshotted;
  } else if (s.ms.size() < kMaxSamples) {
    s.ms.push_back(ms);
  }
}

void AppTiming::absorb(const std::vector<rt::KernelRecord>& records) {
  for (const auto& r : records) {
    LaunchKey key{r.name, {r.grid[0], r.grid[1], r.grid[2]}, {r.block[0], r.block[1], r.block[2]}, r.dynamic_shared};
    Stats& s = stats_[key];
    float ms = float(r.duration_ms());
    bool snapshotted = in_snapshot(r.start_ns);
    // Records of several streams arrive out of order: the earliest start is the first.
    if (!s.have_first || r.start_ns < s.first_start) {
      if (s.have_first) keep(s, s.first_ms, s.first_ms < 0);
      s.have_first = true;
      s.first_start = r.start_ns;
      s.first_ms = snapshotted ? -1.0f : ms;
      if (snapshotted) ++s.snapshotted;
      continue;
    }
    keep(s, ms, snapshotted);
  }
}

std::string AppTiming::summary(const Stats& s) {
  std::vector<float> sorted = s.ms;
  std::sort(sorted.begin(), sorted.end());
  auto ms = [&](double q) { return sorted.empty() ? std::string("null") : number(quantile(sorted, q)); };
  std::string first = s.have_first && s.first_ms >= 0 ? number(s.first_ms) : "null";
  return std::string("{\"method\": \"") + rt::KernelTimer::method() + "\", \"median_ms\": " + ms(0.5) +
         ", \"p25_ms\": " + ms(0.25) + ", \"p75_ms\": " + ms(0.75) + ", \"min_ms\": " + ms(0.0) +
         ", \"max_ms\": " + ms(1.0) + ", \"launches\": " + std::to_string(sorted.size()) +
         ", \"first_ms\": " + first + ", \"snapshotted\": " + std::to_string(s.snapshotted) + "}";
}

void AppTiming::write(rt::RecordingWriter& writer) {
  {
    std::lock_guard lock(mutex_);
    if (!enabled_ || instances_.empty()) return;
  }
  auto records = rt::KernelTimer::instance().drain();
  std::lock_guard lock(mutex_);
  absorb(records);
  uint64_t dropped = rt::KernelTimer::instance().dropped();
  if (dropped)
    std::fprintf(stderr, "mneme record: CUPTI dropped %llu kernel records; in-app times use the others\n",
                 static_cast<unsigned long long>(dropped));
  for (const auto& [ids, key] : instances_) {
    auto it = stats_.find(key);
    if (it == stats_.end()) continue;  // no record of it (e.g. it ran in a forked child)
    if (!writer.has_instance(ids.first, ids.second)) continue;  // its launch failed: not stored
    try {
      writer.set_instance_attribute(ids.first, ids.second, "app_time", summary(it->second));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mneme record: in-app time of instance %s/%s not written: %s\n", ids.first.c_str(),
                   ids.second.c_str(), e.what());
    }
  }
}

}  // namespace mneme::recorder
