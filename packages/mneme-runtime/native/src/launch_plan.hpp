// The plan `mneme run --apply` hands the launch swapper (libmneme_apply.so): what it reads
// from MNEME_APPLY_PLAN (the line format launch_swap.cpp describes, written by
// mneme.tune.apply), and whether a launch of a planned kernel can take the tuned code.
#pragma once

#include <cuda.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace mneme::apply {

// One line on stderr ("mneme run: ..."), then exit with `code`.
[[noreturn]] void fatal(const std::string& message, int code = 70);

struct Dims {
  unsigned v[3] = {1, 1, 1};
  bool operator==(const Dims& o) const { return v[0] == o.v[0] && v[1] == o.v[1] && v[2] == o.v[2]; }
  unsigned long long threads() const { return 1ull * v[0] * v[1] * v[2]; }
};

struct Plan {
  std::string kernel, cubin, function, grid_rule = "cover";
  Dims recorded_grid, recorded_block, tuned_grid, tuned_block;
  unsigned long long recorded_shared = 0, tuned_shared = 0, shared_per_thread = 0, bound = 0;
  bool dims_exact = false;
  std::vector<std::pair<unsigned, std::string>> args;        // index, raw bytes
  std::vector<std::pair<std::string, size_t>> globals;       // name, size
  // The tuned code, loaded lazily into each context on the first launch there that it
  // applies to (a multi-GPU application launches the kernel on every GPU).
  struct Loaded {
    CUmodule module = nullptr;
    CUfunction tuned = nullptr;
    bool failed = false;  // said once; that context's launches run the original
    std::vector<std::pair<CUdeviceptr, CUdeviceptr>> global_pairs;  // application's, module's
  };
  std::map<CUcontext, Loaded> loaded;
  // what happened, for the report
  unsigned long long launches = 0, swapped = 0, refused = 0, same_config = 0;
  std::map<int, unsigned long long> swapped_on;  // swapped launches per GPU ordinal
  // launches that ran the original code, by why: the recorded dimensions were compiled in
  // and this launch has others; a specialised argument differs; the block exceeds the
  // compiled-in bound; launch attributes other than COOPERATIVE (clusters, priority) were set
  unsigned long long other_dims = 0, other_args = 0, over_bound = 0, attributes = 0;
  std::string load_error;  // why the tuned code did not load ("" when it did or was not tried)
  // event times (ms) of each launch in launch order, and whether it had the recorded config
  std::vector<std::pair<double, bool>> event_times;
};

// Durations (ms) of one kernel's launches in order: the first apart, the median of the rest.
struct Durations {
  std::vector<double> all, same_config;  // same_config: launches with the recorded configuration

  static double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
  }
  // The median of the launches after the first; the first alone when it is the only one.
  static double steady(const std::vector<double>& v) {
    return v.size() > 1 ? median(std::vector<double>(v.begin() + 1, v.end())) : median(v);
  }
  static double total(const std::vector<double>& v) {
    double t = 0;
    for (double x : v) t += x;
    return t;
  }
};

// The plan file's kernels by mangled name; a file that is not a plan ends the process
// with one line.
std::map<std::string, Plan> read_plan(const std::string& path);

enum class Fit { kApplies, kOtherDims, kOtherArgs, kOverBound };

// Whether the tuned code is valid for this launch (why not), and the launch it then gets.
Fit applies(const Plan& p, Dims grid, Dims block, size_t shared, void** args, Dims& new_grid, Dims& new_block,
            size_t& new_shared);

}  // namespace mneme::apply
