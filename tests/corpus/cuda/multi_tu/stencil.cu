// Second translation unit: initialisation and a 3-point stencil.
#include "corpus_check.h"
#include "multi_tu.h"

__global__ void init_ramp(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.125f * (float)(i % 64);
}

__global__ void stencil3(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= 0 || i >= n - 1) return;
  out[i] = 0.25f * in[i - 1] + 0.5f * in[i] + 0.25f * in[i + 1];
}

// A file-local kernel; reduce.cu has one of the same name (internal linkage in both).
static __global__ void local_scale(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

void run_init_ramp(float *x, int n) {
  corpus::Launch l("init_ramp(float*, int)", {corpus::buffer("a", x, n * sizeof(float))});
  l.before();
  init_ramp<<<(n + 255) / 256, 256>>>(x, n);
  l.after();
}

void run_stencil3(const float *in, float *out, int n) {
  corpus::Launch l("stencil3(float const*, float*, int)",
                   {corpus::buffer("a", in, n * sizeof(float)), corpus::buffer("b", out, n * sizeof(float))});
  l.before();
  stencil3<<<(n + 127) / 128, 128>>>(in, out, n);
  l.after();
}

void run_stencil_local_scale(float *x, int n) {
  corpus::Launch l("local_scale(float*, int)", {corpus::buffer("b", x, n * sizeof(float))});
  l.before();
  local_scale<<<(n + 63) / 64, 64>>>(x, n);
  l.after();
}
