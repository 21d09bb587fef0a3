#include "app_timing.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "recorder_settings.hpp"
#include "stream_predecessors.hpp"  // json_escaped

namespace mneme::recorder {
namespace rt = mneme::runtime;

namespace {
constexpr uint64_t kTakeEvery = 4096;            // launches between summaries (bounded memory)
constexpr size_t kMaxSamples = size_t(1) << 20;  // per key: plenty for a median
constexpr size_t kMaxTagged = size_t(1) << 23;   // launches of instances' keys awaiting their tag
constexpr std::string_view kOwnPrefix = "mneme_";  // snapshot_digest.cu's kernels

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

// The median of `ms` (a sorted copy), or -1 when it is empty.
double median_of(const std::vector<float>& ms) {
  if (ms.empty()) return -1;
  std::vector<float> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  return quantile(sorted, 0.5);
}

std::string dims(const uint32_t (&d)[3]) {
  return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
}
}  // namespace

void AppTiming::on_launch() {
  std::vector<rt::KernelRecord> records;
  {
    std::lock_guard lock(mutex_);
    if (!started_) {
      started_ = true;
      const auto& s = settings();
      if (!s.app_time) return;
      auto& timer = rt::KernelTimer::instance();
      enabled_ = timer.start();
      if (!enabled_)
        std::fprintf(stderr, "mneme record: in-app kernel times not measured: %s\n", timer.reason().c_str());
      else if (s.tags != "0")
        tagging_ = timer.tag_launches(s.tags);
      return;
    }
    if (!enabled_ || ++launches_ % kTakeEvery) return;
  }
  records = rt::KernelTimer::instance().take();
  auto tags = rt::KernelTimer::instance().take_tags();
  std::lock_guard lock(mutex_);
  absorb(records);
  absorb_tags(tags);
}

uint64_t AppTiming::instance(const std::string& static_hash, const std::string& dynamic_hash, LaunchKey key) {
  std::lock_guard lock(mutex_);
  if (!enabled_) return 0;
  auto [it, added] = instances_.try_emplace(std::make_pair(static_hash, dynamic_hash), Known{key, 0});
  if (added) {
    it->second.tag = instances_.size();  // 1, 2, ...: 0 is no tag
    instance_keys_.insert(std::move(key));
  }
  return tagging_ ? it->second.tag : 0;
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

// One launch into its statistics: records of several streams arrive out of order, so the
// earliest start so far is the first launch.
void AppTiming::add(Stats& s, float ms, uint64_t start, bool snapshotted) {
  ++s.launches;
  (snapshotted ? s.perturbed_ms : s.unperturbed_ms) += ms;
  if (!s.have_first || start < s.first_start) {
    if (s.have_first) keep(s, s.first_ms, s.first_ms < 0);
    s.have_first = true;
    s.first_start = start;
    s.first_ms = snapshotted ? -1.0f : ms;
    if (snapshotted) ++s.snapshotted;
    return;
  }
  keep(s, ms, snapshotted);
}

void AppTiming::absorb(const std::vector<rt::KernelRecord>& records) {
  for (const auto& r : records) {
    // The recorder's own kernels (its snapshot digests) are no part of the application.
    if (r.name.compare(0, kOwnPrefix.size(), kOwnPrefix) == 0) continue;
    LaunchKey key{r.name, {r.grid[0], r.grid[1], r.grid[2]}, {r.block[0], r.block[1], r.block[2]}, r.dynamic_shared,
                  r.device};
    float ms = float(r.duration_ms());
    bool snapshotted = in_snapshot(r.start_ns);
    Stats& s = stats_[key];
    add(s, ms, r.start_ns, snapshotted);
    if (tagging_ && tagged_.size() < kMaxTagged && instance_keys_.count(key))
      tagged_.push_back({r.correlation, ms, r.start_ns, snapshotted});
  }
}

void AppTiming::absorb_tags(const std::vector<rt::LaunchTag>& tags) {
  for (const auto& t : tags) tag_of_[t.correlation] = t.tag;
}

// "scope": what the statistics are over: "instance" (its own launches) or "key" (every
// launch of its kernel and launch shape); with "instance", `key` adds the key's median.
std::string AppTiming::summary(const Stats& s, const char* scope, const Stats* key) {
  std::vector<float> sorted = s.ms;
  std::sort(sorted.begin(), sorted.end());
  auto ms = [&](double q) { return sorted.empty() ? std::string("null") : number(quantile(sorted, q)); };
  std::string first = s.have_first && s.first_ms >= 0 ? number(s.first_ms) : "null";
  std::string out = std::string("{\"method\": \"") + rt::KernelTimer::method() + "\", \"median_ms\": " + ms(0.5) +
                    ", \"p25_ms\": " + ms(0.25) + ", \"p75_ms\": " + ms(0.75) + ", \"min_ms\": " + ms(0.0) +
                    ", \"max_ms\": " + ms(1.0) + ", \"launches\": " + std::to_string(sorted.size()) +
                    ", \"first_ms\": " + first + ", \"snapshotted\": " + std::to_string(s.snapshotted) +
                    ", \"scope\": \"" + scope + "\"";
  if (key) {
    double median = median_of(key->ms);
    out += ", \"key_median_ms\": " + (median < 0 ? std::string("null") : number(median)) +
           ", \"key_launches\": " + std::to_string(key->launches);
  }
  return out + "}";
}

// Every key the application launched, largest total first. A snapshotted launch's time is
// perturbed (synchronisations, copies, cold caches): it counts at its key's median
// unperturbed time where there is one.
std::string AppTiming::profile() const {
  struct Row {
    const LaunchKey* key;
    const Stats* stats;
    double total_ms;
    double median_ms;
  };
  std::vector<Row> rows;
  double kernel_ms = 0;
  uint64_t launches = 0;
  for (const auto& [key, s] : stats_) {
    double median = median_of(s.ms);
    double total = median >= 0 ? s.unperturbed_ms + double(s.snapshotted) * median : s.unperturbed_ms + s.perturbed_ms;
    rows.push_back({&key, &s, total, median});
    kernel_ms += total;
    launches += s.launches;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.total_ms > b.total_ms; });
  std::multimap<LaunchKey, std::pair<std::string, std::string>> ids;
  for (const auto& [pair, known] : instances_) ids.emplace(known.key, pair);
  std::string out = std::string("{\"method\": \"") + rt::KernelTimer::method() +
                    "\", \"kernel_ms\": " + number(kernel_ms) + ", \"launches\": " + std::to_string(launches) +
                    ", \"dropped\": " + std::to_string(rt::KernelTimer::instance().dropped()) +
                    ", \"instances_tagged\": " + (tagging_ ? "true" : "false") + ", \"kernels\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out += i ? ", " : "";
    out += "{\"name\": \"" + json_escaped(r.key->name) + "\", \"device\": " + std::to_string(r.key->device) +
           ", \"grid\": " + dims(r.key->grid) + ", \"block\": " + dims(r.key->block) +
           ", \"shared_mem\": " + std::to_string(r.key->shared) + ", \"launches\": " +
           std::to_string(r.stats->launches) + ", \"snapshotted\": " + std::to_string(r.stats->snapshotted) +
           ", \"total_ms\": " + number(r.total_ms) +
           ", \"median_ms\": " + (r.median_ms >= 0 ? number(r.median_ms) : std::string("null")) + ", \"instances\": [";
    auto [from, to] = ids.equal_range(*r.key);
    for (auto it = from; it != to; ++it)
      out += std::string(it == from ? "" : ", ") + "\"" + it->second.first + "/" + it->second.second + "\"";
    out += "]}";
  }
  return out + "]}";
}

void AppTiming::write(rt::RecordingWriter& writer) {
  {
    std::lock_guard lock(mutex_);
    if (!enabled_) return;
  }
  auto records = rt::KernelTimer::instance().drain();
  auto tags = rt::KernelTimer::instance().take_tags();
  std::lock_guard lock(mutex_);
  absorb(records);
  absorb_tags(tags);
  uint64_t dropped = rt::KernelTimer::instance().dropped();
  if (dropped)
    std::fprintf(stderr, "mneme record: CUPTI dropped %llu kernel records; in-app times use the others\n",
                 static_cast<unsigned long long>(dropped));
  // Each instance's own launches, by their tags.
  std::unordered_map<uint64_t, Stats> own;
  std::sort(tagged_.begin(), tagged_.end(), [](const Tagged& a, const Tagged& b) { return a.start < b.start; });
  for (const auto& t : tagged_) {
    auto it = tag_of_.find(t.correlation);
    if (it != tag_of_.end()) add(own[it->second], t.ms, t.start, t.snapshotted);
  }
  for (const auto& [ids, known] : instances_) {
    auto it = stats_.find(known.key);
    if (it == stats_.end()) continue;  // no record of it (e.g. it ran in a forked child)
    if (!writer.has_instance(ids.first, ids.second)) continue;  // its launch failed: not stored
    // Its own launches where one was timed unperturbed; else its key's, said so.
    auto mine = own.find(known.tag);
    bool by_instance = mine != own.end() && !mine->second.ms.empty();
    std::string value = by_instance ? summary(mine->second, "instance", &it->second) : summary(it->second, "key", nullptr);
    try {
      writer.set_instance_attribute(ids.first, ids.second, "app_time", value);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mneme record: in-app time of instance %s/%s not written: %s\n", ids.first.c_str(),
                   ids.second.c_str(), e.what());
    }
  }
  if (stats_.empty()) return;
  try {
    writer.set_root_attribute("app_profile", profile());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mneme record: the application's profile not written: %s\n", e.what());
  }
}

}  // namespace mneme::recorder
