// The classic block reduction whose dynamic shared memory is one element per thread
// (blockDim.x * sizeof(double) bytes at launch), as in the CUDA samples and most codes
// derived from them: launched with another block size, the shared memory must scale too.
// A second pass reduces the per-block partials with the same kernel. The values are
// halves, so every block size sums them exactly (a tuned launch must give the same bits).
#include <cmath>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__global__ void block_sum(const double *in, double *out, int n) {
  extern __shared__ double scratch[];
  int tid = threadIdx.x;
  double s = 0.0;
  for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) s += in[i];
  scratch[tid] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (tid < stride) scratch[tid] += scratch[tid + stride];
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = scratch[0];
}

int main() {
  const int n = 1 << 20, block = 256, grid = 120;
  std::vector<double> x(n);
  double want = 0.0;
  for (int i = 0; i < n; ++i) {
    x[i] = 0.5 * (double)(i % 2001 - 1000);  // halves: every summation order is exact
    want += x[i];
  }
  double *in, *partial, *total;
  CORPUS_CHECK(cudaMalloc(&in, n * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&partial, grid * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&total, sizeof(double)));
  CORPUS_CHECK(cudaMemcpy(in, x.data(), n * sizeof(double), cudaMemcpyHostToDevice));
  { corpus::Launch l("block_sum(double const*, double*, int)",
                     {corpus::buffer("in", in, n * sizeof(double)), corpus::buffer("partial", partial, grid * sizeof(double))});
    l.before(); block_sum<<<grid, block, block * sizeof(double)>>>(in, partial, n); l.after(); }
  { corpus::Launch l("block_sum(double const*, double*, int)",
                     {corpus::buffer("partial", partial, grid * sizeof(double)), corpus::buffer("total", total, sizeof(double))});
    l.before(); block_sum<<<1, 128, 128 * sizeof(double)>>>(partial, total, grid); l.after(); }
  double got = 0;
  CORPUS_CHECK(cudaMemcpy(&got, total, sizeof got, cudaMemcpyDeviceToHost));
  CORPUS_REQUIRE(got == want, "the exact sum of the halves");
  corpus::output("total", got, 15);
  corpus::result_ok();
  return 0;
}
