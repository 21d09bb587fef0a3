// nvcc-only: the __nv_atomic_* builtins with __NV_ATOMIC_RELAXED (CUDA >= 12.8; clang-22
// knows none of them). Relaxed fetch-add/add/max/min/or at device and block scope, a
// relaxed load/store pair and exchange. Every result is independent of thread order.
#include <cstring>

#include "corpus_check.h"

struct Totals {
  unsigned long long sum;  // __nv_atomic_add, device scope
  unsigned max_key;        // __nv_atomic_fetch_max
  unsigned min_key;        // __nv_atomic_fetch_min
  unsigned bits;           // __nv_atomic_fetch_or
  unsigned sink;           // __nv_atomic_exchange: every thread stores the same value
};

__global__ void histogram_relaxed(const unsigned *keys, int n, unsigned *hist, int nbins,
                                  Totals *totals) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    unsigned k = keys[i];
    __nv_atomic_fetch_add(&hist[k % nbins], 1u, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
    __nv_atomic_add(&totals->sum, (unsigned long long)k, __NV_ATOMIC_RELAXED,
                    __NV_THREAD_SCOPE_DEVICE);
    __nv_atomic_fetch_max(&totals->max_key, k, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
    __nv_atomic_fetch_min(&totals->min_key, k, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
    __nv_atomic_fetch_or(&totals->bits, 1u << (k % 32), __NV_ATOMIC_RELAXED,
                         __NV_THREAD_SCOPE_DEVICE);
    __nv_atomic_exchange_n(&totals->sink, 7u, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_DEVICE);
  }
}

// Per-block counts in shared memory with block-scope relaxed atomics, then one relaxed
// load per block and a relaxed store of the block's result.
__global__ void block_counts(const unsigned *keys, int n, unsigned *per_block) {
  __shared__ unsigned count;
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && keys[i] % 3 == 0)
    __nv_atomic_fetch_add(&count, 1u, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_BLOCK);
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned seen = __nv_atomic_load_n(&count, __NV_ATOMIC_RELAXED, __NV_THREAD_SCOPE_BLOCK);
    __nv_atomic_store_n(&per_block[blockIdx.x], seen, __NV_ATOMIC_RELAXED,
                        __NV_THREAD_SCOPE_DEVICE);
  }
}

int main() {
  const int n = 30000, nbins = 48, threads = 256, blocks = (n + threads - 1) / threads;
  std::vector<unsigned> hk(n);
  for (int i = 0; i < n; ++i) hk[i] = (unsigned)((i * 2654435761u) % 100003u);
  unsigned *keys, *hist, *per_block;
  Totals *totals;
  CORPUS_CHECK(cudaMalloc(&keys, n * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&hist, nbins * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&per_block, blocks * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&totals, sizeof(Totals)));
  Totals init;
  std::memset(&init, 0, sizeof(init));
  init.min_key = ~0u;
  CORPUS_CHECK(cudaMemcpy(keys, hk.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(totals, &init, sizeof(init), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(hist, 0, nbins * sizeof(unsigned)));
  CORPUS_CHECK(cudaMemset(per_block, 0xff, blocks * sizeof(unsigned)));

  {
    corpus::Launch l(
        "histogram_relaxed(unsigned int const*, int, unsigned int*, int, Totals*)",
        {corpus::buffer("keys", keys, n * sizeof(unsigned)),
         corpus::buffer("hist", hist, nbins * sizeof(unsigned)),
         corpus::buffer("totals", totals, sizeof(Totals))});
    l.before();
    histogram_relaxed<<<40, threads>>>(keys, n, hist, nbins, totals);
    l.after();
  }
  {
    corpus::Launch l("block_counts(unsigned int const*, int, unsigned int*)",
                     {corpus::buffer("keys", keys, n * sizeof(unsigned)),
                      corpus::buffer("per_block", per_block, blocks * sizeof(unsigned))});
    l.before();
    block_counts<<<blocks, threads>>>(keys, n, per_block);
    l.after();
  }

  std::vector<unsigned> h(nbins), pb(blocks);
  Totals t;
  CORPUS_CHECK(cudaMemcpy(h.data(), hist, nbins * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(pb.data(), per_block, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(&t, totals, sizeof(t), cudaMemcpyDeviceToHost));
  std::vector<unsigned> want(nbins, 0), want_pb(blocks, 0);
  unsigned long long sum = 0;
  unsigned mx = 0, mn = ~0u, bits = 0;
  for (int i = 0; i < n; ++i) {
    unsigned k = hk[i];
    want[k % nbins]++;
    sum += k;
    mx = k > mx ? k : mx;
    mn = k < mn ? k : mn;
    bits |= 1u << (k % 32);
    if (k % 3 == 0) want_pb[i / threads]++;
  }
  CORPUS_REQUIRE(h == want, "relaxed histogram");
  CORPUS_REQUIRE(pb == want_pb, "block-scope relaxed counts");
  CORPUS_REQUIRE(t.sum == sum && t.max_key == mx && t.min_key == mn && t.bits == bits &&
                     t.sink == 7u,
                 "relaxed totals");
  corpus::result_ok();
  return 0;
}
