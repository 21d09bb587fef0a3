// HIP port of tests/corpus/cuda/atomics/atomics.cu (compile-only).
// Atomics: atomicAdd on int and float, atomicCAS (a float max and a 64-bit double add built
// on it), atomicMax/atomicMin/atomicExch/atomicSub. Final values do not depend on the order
// the threads run in: float and double addends are small multiples of 1/4, so sums are exact.
#include <cstring>

#include "corpus_check_hip.h"

struct Stats {
  int count;
  int max_key;
  int min_key;
  int exch_sink;  // atomicExch target: every thread writes the same value
  float sum;
  float max_value;  // maintained with atomicCAS
  double dsum;      // maintained with 64-bit atomicCAS
};

__device__ float cas_max(float *addr, float value) {
  int *bits = reinterpret_cast<int *>(addr);
  int old = *bits;
  while (__int_as_float(old) < value) {
    int assumed = old;
    old = atomicCAS(bits, assumed, __float_as_int(value));
    if (old == assumed) break;
  }
  return __int_as_float(old);
}

__device__ void cas_add(double *addr, double value) {
  unsigned long long *bits = reinterpret_cast<unsigned long long *>(addr);
  unsigned long long old = *bits, assumed;
  do {
    assumed = old;
    old = atomicCAS(bits, assumed, __double_as_longlong(__longlong_as_double(assumed) + value));
  } while (old != assumed);
}

__global__ void accumulate(const int *keys, int n, int *hist, int nbins, Stats *stats) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int k = keys[i];
    atomicAdd(&hist[k % nbins], 1);
    atomicAdd(&stats->count, 1);
    atomicMax(&stats->max_key, k);
    atomicMin(&stats->min_key, k);
    atomicExch(&stats->exch_sink, 42);
    atomicAdd(&stats->sum, 0.25f * (float)(k % 8));
    cas_max(&stats->max_value, 0.5f * (float)k);
    cas_add(&stats->dsum, 0.75 * (double)(k % 4));
  }
}

__global__ void drain(int *hist, int nbins, int amount) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < nbins) atomicSub(&hist[b], amount);
}

int main() {
  const int n = 20000, nbins = 64;
  int *keys, *hist;
  Stats *stats;
  CORPUS_CHECK(hipMalloc(&keys, n * sizeof(int)));
  CORPUS_CHECK(hipMalloc(&hist, nbins * sizeof(int)));
  CORPUS_CHECK(hipMalloc(&stats, sizeof(Stats)));
  std::vector<int> hk(n);
  for (int i = 0; i < n; ++i) hk[i] = (int)((i * 2654435761u) % 10007u);
  Stats init;
  std::memset(&init, 0, sizeof(init));
  init.max_key = -1;
  init.min_key = 1 << 30;
  init.max_value = -1.0f;
  CORPUS_CHECK(hipMemcpy(keys, hk.data(), n * sizeof(int), hipMemcpyHostToDevice));
  CORPUS_CHECK(hipMemcpy(stats, &init, sizeof(init), hipMemcpyHostToDevice));
  CORPUS_CHECK(hipMemset(hist, 0, nbins * sizeof(int)));

  { corpus::Launch l("accumulate(int const*, int, int*, int, Stats*)",
                     {corpus::buffer("keys", keys, n * sizeof(int)), corpus::buffer("hist", hist, nbins * sizeof(int)),
                      corpus::buffer("stats", stats, sizeof(Stats))});
    l.before(); accumulate<<<40, 256>>>(keys, n, hist, nbins, stats); l.after(); }
  { corpus::Launch l("drain(int*, int, int)", {corpus::buffer("hist", hist, nbins * sizeof(int))});
    l.before(); drain<<<1, nbins>>>(hist, nbins, 5); l.after(); }

  Stats got;
  std::vector<int> hh(nbins);
  CORPUS_CHECK(hipMemcpy(&got, stats, sizeof(got), hipMemcpyDeviceToHost));
  CORPUS_CHECK(hipMemcpy(hh.data(), hist, nbins * sizeof(int), hipMemcpyDeviceToHost));
  std::vector<int> expect(nbins, -5);
  int max_key = -1, min_key = 1 << 30;
  double sum = 0.0, dsum = 0.0;
  for (int k : hk) {
    expect[k % nbins] += 1;
    max_key = k > max_key ? k : max_key;
    min_key = k < min_key ? k : min_key;
    sum += 0.25 * (k % 8);
    dsum += 0.75 * (k % 4);
  }
  CORPUS_REQUIRE(hh == expect, "histogram minus drain");
  CORPUS_REQUIRE(got.count == n && got.exch_sink == 42, "count / exch");
  CORPUS_REQUIRE(got.max_key == max_key && got.min_key == min_key, "atomicMax / atomicMin");
  CORPUS_REQUIRE(got.sum == (float)sum && got.dsum == dsum, "float and double sums");
  CORPUS_REQUIRE(got.max_value == 0.5f * (float)max_key, "CAS max");
  CORPUS_CHECK(hipFree(keys));
  CORPUS_CHECK(hipFree(hist));
  CORPUS_CHECK(hipFree(stats));
  corpus::result_ok();
  return 0;
}
