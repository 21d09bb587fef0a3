// Timings the fidelity programs print about themselves, the way real applications do: a
// host clock around a phase and CUDA events around its kernels. The values differ every
// run; `mneme run --apply` must not mistake them for results.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>

#include "corpus_check.h"

namespace fidelity {

inline double host_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}

// cudaEvent pair around a stream's work.
class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream = 0) : stream_(stream) {
    CORPUS_CHECK(cudaEventCreate(&start_));
    CORPUS_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() { CORPUS_CHECK(cudaEventRecord(start_, stream_)); }
  float stop_ms() {
    CORPUS_CHECK(cudaEventRecord(stop_, stream_));
    CORPUS_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CORPUS_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
};

// Summed in host order, so the value depends only on the kernels' results; printed with
// corpus::output rounded to a few digits.
inline double sum(const float *values, size_t n) {
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += values[i];
  return sum;
}

}  // namespace fidelity
