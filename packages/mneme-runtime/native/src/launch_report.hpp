// What the launch swapper (libmneme_apply.so) writes at exit to MNEME_APPLY_REPORT
// ("mneme-apply-report 2", read by mneme.tune.apply): per planned kernel its launches, how
// many ran the tuned code and why the others did not, and their times, CUPTI's when it saw
// every timed launch, else the events' (the `fallback` line says why); with
// MNEME_APPLY_TOTAL, every kernel of the process summed, in all and per GPU.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launch_plan.hpp"
#include "mneme/runtime/kernel_timer.hpp"

namespace mneme::apply {

// Every kernel of the process that CUPTI timed, summed.
struct KernelTotals {
  double ms = 0;
  unsigned long long launches = 0;
  std::map<uint32_t, std::pair<double, unsigned long long>> per_device;  // ms, launches per GPU

  void add(const mneme::runtime::KernelRecord& r) {
    ms += r.duration_ms();
    ++launches;
    per_device[r.device].first += r.duration_ms();
    ++per_device[r.device].second;
  }
};

// `records`: CUPTI's records of the planned kernels (their names or their tuned entry
// points'); `totals`: null unless every kernel was timed; `timing`: launches of planned
// kernels were timed; `cupti`: CUPTI collected, else `cupti_unusable` says why not.
void write_report(const std::string& path, const std::map<std::string, Plan>& plans,
                  const std::vector<mneme::runtime::KernelRecord>& records, const KernelTotals* totals, bool timing,
                  bool cupti, const std::string& cupti_unusable);

}  // namespace mneme::apply
