// thrust and cub the way applications use them, next to hand-written kernels:
// device_vectors, thrust::sort_by_key / inclusive_scan / transform_reduce / copy_if,
// cub::DeviceRadixSort::SortPairs and cub::DeviceReduce::Sum with the temp-storage size
// query, cudaMalloc and second call. The library's kernels are templates with long mangled
// names, launched through triple-chevron stubs and cudaLaunchKernelEx (programmatic
// dependent launch), after CUB's dispatch queries (cudaFuncGetAttributes, occupancy).
// Integer data only: every result is independent of thread order, so the corpus-output
// lines are the same with and without `mneme record`. Only the hand-written kernels
// report checksums (the library's launches are not the program's to name).
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>

#include <algorithm>
#include <numeric>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__host__ __device__ inline unsigned mix(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

__global__ void make_keys(unsigned *keys, int *values, int n, unsigned seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    keys[i] = mix(unsigned(i) ^ seed) % 1000003u;
    values[i] = int(mix(unsigned(i) + seed) % 201u) - 100;
  }
}

// After the sorts: how many neighbours are out of order, and a position-weighted sum of
// the permuted values (which differs for any other permutation of equal keys' values).
__global__ void check_sorted(const unsigned *keys, const int *values, int n,
                             unsigned long long *out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    if (i > 0 && keys[i - 1] > keys[i]) atomicAdd(&out[0], 1ull);
    atomicAdd(&out[1], (unsigned long long)(long long)values[i] * (unsigned long long)(i + 1));
  }
}

struct Square {
  __host__ __device__ long long operator()(int v) const { return (long long)v * v; }
};

struct IsPositive {
  __host__ __device__ bool operator()(int v) const { return v > 0; }
};

template <typename T>
unsigned long long checksum(const thrust::device_vector<T> &v) {
  thrust::host_vector<T> h = v;
  return corpus::fnv1a64(h.data(), h.size() * sizeof(T));
}

int run() {
  const int n = 1 << 16, threads = 256, blocks = n / threads;
  thrust::device_vector<unsigned> keys(n);
  thrust::device_vector<int> values(n);
  unsigned *d_keys = thrust::raw_pointer_cast(keys.data());
  int *d_values = thrust::raw_pointer_cast(values.data());
  {
    corpus::Launch l("make_keys(unsigned int*, int*, int, unsigned int)",
                     {corpus::buffer("keys", d_keys, n * sizeof(unsigned)),
                      corpus::buffer("values", d_values, n * sizeof(int))});
    l.before();
    make_keys<<<blocks, threads>>>(d_keys, d_values, n, 12345u);
    l.after();
  }
  std::vector<unsigned> hk(n);
  std::vector<int> hv(n);
  CORPUS_CHECK(cudaMemcpy(hk.data(), d_keys, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hv.data(), d_values, n * sizeof(int), cudaMemcpyDeviceToHost));

  // cub: radix-sort a copy of the pairs, with the two-call temp-storage protocol
  thrust::device_vector<unsigned> cub_keys(n);
  thrust::device_vector<int> cub_values(n);
  size_t temp_bytes = 0;
  CORPUS_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, d_keys,
                                               thrust::raw_pointer_cast(cub_keys.data()), d_values,
                                               thrust::raw_pointer_cast(cub_values.data()), n));
  void *temp = nullptr;
  CORPUS_CHECK(cudaMalloc(&temp, temp_bytes));
  CORPUS_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, d_keys,
                                               thrust::raw_pointer_cast(cub_keys.data()), d_values,
                                               thrust::raw_pointer_cast(cub_values.data()), n));
  CORPUS_CHECK(cudaFree(temp));

  // cub: the sum of the keys
  thrust::device_vector<unsigned long long> wide(keys.begin(), keys.end());
  thrust::device_vector<unsigned long long> key_sum(1);
  temp_bytes = 0;
  CORPUS_CHECK(cub::DeviceReduce::Sum(nullptr, temp_bytes, thrust::raw_pointer_cast(wide.data()),
                                      thrust::raw_pointer_cast(key_sum.data()), n));
  CORPUS_CHECK(cudaMalloc(&temp, temp_bytes));
  CORPUS_CHECK(cub::DeviceReduce::Sum(temp, temp_bytes, thrust::raw_pointer_cast(wide.data()),
                                      thrust::raw_pointer_cast(key_sum.data()), n));
  CORPUS_CHECK(cudaFree(temp));

  // thrust: sort the pairs in place (stable), scan and reduce the values, keep the positives
  thrust::sort_by_key(keys.begin(), keys.end(), values.begin());
  thrust::device_vector<int> prefix(n);
  thrust::inclusive_scan(values.begin(), values.end(), prefix.begin());
  long long squares = thrust::transform_reduce(values.begin(), values.end(), Square(), 0ll,
                                               thrust::plus<long long>());
  thrust::device_vector<int> positive(n);
  int kept = int(thrust::copy_if(values.begin(), values.end(), positive.begin(), IsPositive()) -
                 positive.begin());
  CORPUS_CHECK(cudaDeviceSynchronize());

  thrust::device_vector<unsigned long long> verdict(2, 0ull);
  {
    unsigned long long *d_verdict = thrust::raw_pointer_cast(verdict.data());
    corpus::Launch l("check_sorted(unsigned int const*, int const*, int, unsigned long long*)",
                     {corpus::buffer("keys", d_keys, n * sizeof(unsigned)),
                      corpus::buffer("values", d_values, n * sizeof(int)),
                      corpus::buffer("verdict", d_verdict, 2 * sizeof(unsigned long long))});
    l.before();
    check_sorted<<<blocks, threads>>>(d_keys, d_values, n, d_verdict);
    l.after();
  }

  // the host's answers: a stable sort of the pairs by key
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return hk[a] < hk[b]; });
  std::vector<unsigned> sk(n);
  std::vector<int> sv(n), sp(n), pos;
  long long want_squares = 0, running = 0;
  unsigned long long want_sum = 0, want_weighted = 0;
  for (int i = 0; i < n; ++i) {
    sk[i] = hk[order[i]];
    sv[i] = hv[order[i]];
    running += sv[i];
    sp[i] = int(running);
    want_squares += (long long)sv[i] * sv[i];
    want_sum += hk[i];
    want_weighted += (unsigned long long)(long long)sv[i] * (unsigned long long)(i + 1);
    if (sv[i] > 0) pos.push_back(sv[i]);
  }
  thrust::host_vector<unsigned> got_keys = keys, got_cub_keys = cub_keys;
  thrust::host_vector<int> got_values = values, got_cub_values = cub_values, got_prefix = prefix;
  thrust::host_vector<unsigned long long> got_sum = key_sum, got_verdict = verdict;
  for (int i = 0; i < n; ++i) {
    CORPUS_REQUIRE(got_keys[i] == sk[i] && got_values[i] == sv[i], "thrust::sort_by_key");
    CORPUS_REQUIRE(got_cub_keys[i] == sk[i] && got_cub_values[i] == sv[i],
                   "cub::DeviceRadixSort::SortPairs");
    CORPUS_REQUIRE(got_prefix[i] == sp[i], "thrust::inclusive_scan");
  }
  CORPUS_REQUIRE(got_sum[0] == want_sum, "cub::DeviceReduce::Sum");
  CORPUS_REQUIRE(squares == want_squares, "thrust::transform_reduce");
  CORPUS_REQUIRE(kept == int(pos.size()), "thrust::copy_if count");
  positive.resize(kept);
  thrust::host_vector<int> got_positive = positive;
  CORPUS_REQUIRE(std::equal(pos.begin(), pos.end(), got_positive.begin()), "thrust::copy_if");
  CORPUS_REQUIRE(got_verdict[0] == 0 && got_verdict[1] == want_weighted, "check_sorted");

  corpus::output("sorted_keys", checksum(keys));
  corpus::output("sorted_values", checksum(values));
  corpus::output("cub_sorted_values", checksum(cub_values));
  corpus::output("prefix", checksum(prefix));
  corpus::output("key_sum", (unsigned long long)got_sum[0]);
  corpus::output("squares", (unsigned long long)squares);
  corpus::output("positive", checksum(positive));
  corpus::output("weighted", (unsigned long long)got_verdict[1]);
  corpus::result_ok();
  return 0;
}

int main() {
  // the first CUDA call checked here: thrust reports a failing one by throwing
  CORPUS_CHECK(cudaSetDevice(0));
  CORPUS_CHECK(cudaFree(nullptr));
  try {
    return run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "corpus: thrust/cub call failed: %s\n", e.what());
    return 1;
  }
}
