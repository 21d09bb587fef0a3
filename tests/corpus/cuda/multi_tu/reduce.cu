// Third translation unit: a two-stage deterministic sum.
#include "corpus_check.h"
#include "multi_tu.h"

__global__ void block_sums(const float *in, float *partial, int n) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void final_sum(const float *partial, float *total, int m) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  float acc = 0.0f;
  for (int j = 0; j < m; ++j) acc += partial[j];
  *total = acc;
}

static __global__ void local_scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 0.5f;
}

void run_block_sums(const float *in, float *partial, int n, int block) {
  int grid = (n + block - 1) / block;
  corpus::Launch l("block_sums(float const*, float*, int)",
                   {corpus::buffer("b", in, n * sizeof(float)), corpus::buffer("partial", partial, grid * sizeof(float))});
  l.before();
  block_sums<<<grid, block>>>(in, partial, n);
  l.after();
}

void run_final_sum(const float *partial, float *total, int m) {
  corpus::Launch l("final_sum(float const*, float*, int)",
                   {corpus::buffer("partial", partial, m * sizeof(float)), corpus::buffer("total", total, sizeof(float))});
  l.before();
  final_sum<<<1, 32>>>(partial, total, m);
  l.after();
}

void run_reduce_local_scale(float *x, int n) {
  corpus::Launch l("local_scale(float*, int)", {corpus::buffer("b", x, n * sizeof(float))});
  l.before();
  local_scale<<<(n + 127) / 128, 128>>>(x, n);
  l.after();
}
