// The launch swapper's report at exit (launch_report.hpp).
#include "launch_report.hpp"

#include <algorithm>
#include <fstream>
#include <unordered_map>

namespace mneme::apply {

using mneme::runtime::KernelRecord;

namespace {

// The CUPTI durations of the planned kernels (the original's name, or the tuned code's
// entry point), in the GPU's order, with the recorded-configuration ones apart.
std::map<std::string, Durations> cupti_durations(const std::map<std::string, Plan>& plans,
                                                 const std::vector<KernelRecord>& records) {
  std::unordered_map<std::string, const Plan*> by_name;
  for (const auto& [name, p] : plans) {
    by_name[name] = &p;
    by_name[p.function] = &p;
  }
  std::vector<const KernelRecord*> mine;
  for (const auto& r : records)
    if (by_name.count(r.name)) mine.push_back(&r);
  std::sort(mine.begin(), mine.end(), [](auto* a, auto* b) { return a->start_ns < b->start_ns; });
  std::map<std::string, Durations> out;
  for (const KernelRecord* r : mine) {
    const Plan& p = *by_name[r->name];
    Durations& d = out[p.kernel];
    d.all.push_back(r->duration_ms());
    Dims grid{{r->grid[0], r->grid[1], r->grid[2]}}, block{{r->block[0], r->block[1], r->block[2]}};
    if (grid == p.recorded_grid && block == p.recorded_block && r->dynamic_shared == p.recorded_shared)
      d.same_config.push_back(r->duration_ms());
  }
  return out;
}

}  // namespace

void write_report(const std::string& path, const std::map<std::string, Plan>& plans,
                  const std::vector<KernelRecord>& records, const KernelTotals* totals, bool timing, bool cupti,
                  const std::string& cupti_unusable) {
  std::map<std::string, Durations> gpu = cupti_durations(plans, records);
  std::ofstream out(path);
  out << "mneme-apply-report 2\n";
  std::string fallback;  // why events timed a kernel, if any did
  for (const auto& [name, p] : plans) {
    Durations events;
    for (const auto& [ms, same] : p.event_times) {
      events.all.push_back(ms);
      if (same) events.same_config.push_back(ms);
    }
    // CUPTI's times when it saw every timed launch; else the events', said so.
    auto it = gpu.find(name);
    bool use_cupti = cupti && it != gpu.end() && it->second.all.size() >= events.all.size();
    if (timing && !use_cupti && fallback.empty())
      fallback = !cupti ? cupti_unusable
                         : "CUPTI recorded " + std::to_string(it == gpu.end() ? 0 : it->second.all.size()) +
                               " of " + std::to_string(events.all.size()) + " launches of " + name;
    const Durations& d = use_cupti ? it->second : events;
    out << "kernel " << name << " launches " << p.launches << " swapped " << p.swapped << " refused "
        << p.refused << " same_config " << p.same_config << " method " << (use_cupti ? "cupti" : "events")
        << " timed " << d.all.size() << " time_s " << Durations::total(d.all) * 1e-3 << " first_ms "
        << (d.all.empty() ? 0 : d.all.front()) << " median_ms " << Durations::steady(d.all)
        << " same_config_timed " << d.same_config.size() << " same_config_time_s "
        << Durations::total(d.same_config) * 1e-3 << " same_config_median_ms "
        << Durations::steady(d.same_config) << " other_dims " << p.other_dims << " other_args " << p.other_args
        << " over_bound " << p.over_bound << " attributes " << p.attributes << " cupti_launches "
        << (cupti && it != gpu.end() ? it->second.all.size() : 0);
    if (!p.swapped_on.empty()) {  // per GPU: "0:40,1:40"
      out << " swapped_on ";
      const char* sep = "";
      for (const auto& [device, count] : p.swapped_on) {
        out << sep << device << ":" << count;
        sep = ",";
      }
    }
    out << "\n";
    if (!p.load_error.empty()) out << "load_error " << name << " " << p.load_error << "\n";
  }
  if (totals) {
    out << "total kernel_ms " << totals->ms << " launches " << totals->launches << "\n";
    for (const auto& [device, sums] : totals->per_device)  // (CUPTI's device ids: the driver's ordinals)
      out << "total_device " << device << " kernel_ms " << sums.first << " launches " << sums.second << "\n";
  }
  if (!fallback.empty()) out << "fallback " << fallback << "\n";
}

}  // namespace mneme::apply
