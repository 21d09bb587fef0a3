// A working set sized from the command line: `large_working_set [MiB] [--quiet]` (default
// 4 MiB per buffer, two buffers). Kernels: initialise from a hash, several Jacobi-style
// smoothing sweeps (ping-pong) and a per-block checksum reduction. --quiet skips the
// per-launch checksums (benchmarks/record_overhead.py: time the kernels and the
// recording, not the host-side FNV of gigabytes); the final spot-check still runs.
#include <cstdlib>
#include <cstring>

#include "corpus_check.h"

__device__ unsigned mix(unsigned v) {
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  return v;
}

__global__ void init_hash(float *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    x[i] = (float)(mix((unsigned)i) % 1024u) * 0.125f;
}

__global__ void smooth(const float *in, float *out, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    float l = in[i > 0 ? i - 1 : i], r = in[i + 1 < n ? i + 1 : i];
    out[i] = 0.25f * l + 0.5f * in[i] + 0.25f * r;
  }
}

// Per-block sum of the float bit patterns (integer, so order-independent).
__global__ void bit_sums(const float *x, size_t n, unsigned long long *sums) {
  __shared__ unsigned long long acc;
  if (threadIdx.x == 0) acc = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    mine += (unsigned)__float_as_int(x[i]);
  atomicAdd(&acc, mine);
  __syncthreads();
  if (threadIdx.x == 0) sums[blockIdx.x] = acc;
}

int main(int argc, char **argv) {
  long mib = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 4;
  if (mib < 1 || mib > 65536) {
    std::fprintf(stderr, "usage: %s [MiB per buffer, 1..65536] [--quiet]\n", argv[0]);
    return 64;
  }
  const bool quiet = argc > 2 && std::strcmp(argv[2], "--quiet") == 0;
  auto before = [&](corpus::Launch &l) { if (!quiet) l.before(); };
  auto after = [&](corpus::Launch &l) {
    if (quiet) CORPUS_CHECK(cudaGetLastError());
    else l.after();
  };
  const size_t n = (size_t)mib * (1 << 20) / sizeof(float), bytes = n * sizeof(float);
  const int grid = 264, block = 256, sweeps = 3;  // 2 waves of 132 SMs; grid-stride loops cover n
  float *a, *b;
  unsigned long long *sums;
  CORPUS_CHECK(cudaMalloc(&a, bytes));
  CORPUS_CHECK(cudaMalloc(&b, bytes));
  CORPUS_CHECK(cudaMalloc(&sums, grid * sizeof(unsigned long long)));
  CORPUS_CHECK(cudaMemset(a, 0, bytes));
  CORPUS_CHECK(cudaMemset(b, 0, bytes));
  CORPUS_CHECK(cudaMemset(sums, 0, grid * sizeof(unsigned long long)));
  std::printf("large_working_set: %ld MiB per buffer, %zu floats\n", mib, n);

  { corpus::Launch l("init_hash(float*, unsigned long)", {corpus::buffer("a", a, bytes)});
    before(l); init_hash<<<grid, block>>>(a, n); after(l); }
  for (int s = 0; s < sweeps; ++s) {
    float *in = s % 2 ? b : a, *out = s % 2 ? a : b;
    corpus::Launch l("smooth(float const*, float*, unsigned long)",
                     {corpus::buffer("a", a, bytes), corpus::buffer("b", b, bytes)});
    before(l); smooth<<<grid, block>>>(in, out, n); after(l);
  }
  { corpus::Launch l("bit_sums(float const*, unsigned long, unsigned long long*)",
                     {corpus::buffer("b", b, bytes), corpus::buffer("sums", sums, grid * sizeof(unsigned long long))});
    before(l); bit_sums<<<grid, block>>>(b, n, sums); after(l); }

  // Spot-check the final sweep on the host at a few indices, recomputing from the hash.
  std::vector<float> hb(n);
  CORPUS_CHECK(cudaMemcpy(hb.data(), b, bytes, cudaMemcpyDeviceToHost));
  auto hash = [](size_t i) {
    unsigned v = (unsigned)i;
    v ^= v >> 16; v *= 0x7feb352du; v ^= v >> 15;
    return (float)(v % 1024u) * 0.125f;
  };
  auto at = [&](auto &&self, int sweep, long i) -> float {  // value after `sweep` sweeps
    long c = i < 0 ? 0 : (i >= (long)n ? (long)n - 1 : i);
    if (sweep == 0) return hash(c);
    long l = c > 0 ? c - 1 : c, r = c + 1 < (long)n ? c + 1 : c;
    return 0.25f * self(self, sweep - 1, l) + 0.5f * self(self, sweep - 1, c) + 0.25f * self(self, sweep - 1, r);
  };
  const long probes[] = {0, 1, 2, 12345 % (long)n, (long)n / 2, (long)n - 2, (long)n - 1};
  for (long i : probes) CORPUS_REQUIRE(hb[i] == at(at, sweeps, i), "smoothed value");
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaFree(sums));
  corpus::result_ok();
  return 0;
}
