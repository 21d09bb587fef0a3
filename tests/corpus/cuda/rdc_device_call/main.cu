// Relocatable device code: kernels here call transfer() defined in lib.cu and count into
// lib.cu's __device__ global. Built with -fgpu-rdc --offload-new-driver (device link by nvlink).
#include "corpus_check.h"
#include "transfer.h"

__global__ void apply_transfer(float *x, int n, int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = transfer(x[i], k);
}

__global__ void ramp(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.25f * (float)(i % 16);
}

int main() {
  const int n = 1024;
  float *x;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(x, 0, n * sizeof(float)));
  reset_lib(2.0f);
  {
    corpus::Launch l("ramp(float*, int)", {corpus::buffer("x", x, n * sizeof(float))});
    l.before();
    ramp<<<n / 256, 256>>>(x, n);
    l.after();
  }
  for (int k = 0; k < 2; ++k) {
    corpus::Launch l("apply_transfer(float*, int, int)",
                     {corpus::buffer("x", x, n * sizeof(float)), CORPUS_SYMBOL(g_lib_calls),
                      CORPUS_SYMBOL(c_lib_gain)});
    l.before();
    apply_transfer<<<n / 128, 128>>>(x, n, k);
    l.after();
  }
  std::vector<float> hx(n);
  int calls = 0;
  CORPUS_CHECK(cudaMemcpy(hx.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpyFromSymbol(&calls, g_lib_calls, sizeof(calls)));
  CORPUS_REQUIRE(calls == 2 * n, "every thread called transfer() once per launch");
  for (int i = 0; i < n; ++i) {
    float v = 0.25f * (float)(i % 16);
    for (int k = 0; k < 2; ++k) v = 2.0f * (v > 1.0f ? 1.0f + 0.5f * (v - 1.0f) : v) + (float)k;
    CORPUS_REQUIRE(hx[i] == v, "transfer applied twice");
  }
  CORPUS_CHECK(cudaFree(x));
  corpus::result_ok();
  return 0;
}
