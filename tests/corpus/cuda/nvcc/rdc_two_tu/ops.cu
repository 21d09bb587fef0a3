// The device functions and globals main.cu's kernels use across translation units.
#include "corpus_check.h"
#include "ops.h"

__device__ unsigned g_ops_calls = 0;
__constant__ float c_ops_scale = 1.0f;

__device__ float ops_transform(float x) { return x * c_ops_scale + 0.25f; }

__device__ void ops_count(unsigned n) { atomicAdd(&g_ops_calls, n); }

// A kernel of this translation unit, launched from main.cu through a host function.
__global__ void ops_reset(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)(i % 16);
  if (i == 0) g_ops_calls = 0;
}

void ops_set_scale(float scale) {
  CORPUS_CHECK(cudaMemcpyToSymbol(c_ops_scale, &scale, sizeof(scale)));
}

void ops_launch_reset(float *x, int n) {
  corpus::Launch l("ops_reset(float*, int)",
                   {corpus::buffer("x", x, n * sizeof(float)), CORPUS_SYMBOL(g_ops_calls)});
  l.before();
  ops_reset<<<(n + 127) / 128, 128>>>(x, n);
  l.after();
}
