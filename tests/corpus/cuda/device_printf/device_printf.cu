// Device printf with several argument types. Only one thread per launch prints, so the
// program's stdout is deterministic too.
#include <cstdio>

#include "corpus_check.h"

__global__ void summarize(const int *data, int n, int *out) {
  __shared__ int block_sum;
  if (threadIdx.x == 0) block_sum = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) atomicAdd(&block_sum, data[i]);
  __syncthreads();
  if (threadIdx.x == 0) {
    *out = block_sum;
    printf("device: n=%d sum=%d first=%d last=%d\n", n, block_sum, data[0], data[n - 1]);
  }
}

__global__ void describe(float f, double d, unsigned long long u, char c, const char *label_unused) {
  if (threadIdx.x == 0 && blockIdx.x == 0)
    printf("device: f=%.3f d=%.6e u=%llx c=%c s=%s pct=100%%\n", f, d, u, c, "corpus");
}

int main() {
  const int n = 300;
  int *data, *out;
  CORPUS_CHECK(cudaMalloc(&data, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&out, sizeof(int)));
  std::vector<int> h(n);
  int expect = 0;
  for (int i = 0; i < n; ++i) {
    h[i] = (i * 7) % 23 - 11;
    expect += h[i];
  }
  CORPUS_CHECK(cudaMemcpy(data, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(out, 0, sizeof(int)));

  { corpus::Launch l("summarize(int const*, int, int*)",
                     {corpus::buffer("data", data, n * sizeof(int)), corpus::buffer("out", out, sizeof(int))});
    l.before(); summarize<<<1, 128>>>(data, n, out); l.after(); }
  { corpus::Launch l("describe(float, double, unsigned long long, char, char const*)", {});
    l.before(); describe<<<2, 32>>>(1.25f, -3.5e-3, 0xfeedfacecafebeefull, 'Z', nullptr); l.after(); }

  int got = 0;
  CORPUS_CHECK(cudaMemcpy(&got, out, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("host: sum=%d\n", got);
  CORPUS_REQUIRE(got == expect, "summarize");
  CORPUS_CHECK(cudaFree(data));
  CORPUS_CHECK(cudaFree(out));
  corpus::result_ok();
  return 0;
}
