// -rdc=true across two translation units: main.cu's kernel calls ops.cu's __device__
// functions, which read ops.cu's __constant__ and update its __device__ counter.
#include "corpus_check.h"
#include "ops.h"

void ops_launch_reset(float *x, int n);

__global__ void apply_ops(float *x, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  for (int r = 0; r < rounds; ++r) v = ops_transform(v);
  x[i] = v;
  ops_count(1);
}

int main() {
  const int n = 2048, rounds = 3;
  float *x;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  ops_launch_reset(x, n);
  ops_set_scale(2.0f);
  {
    corpus::Launch l("apply_ops(float*, int, int)",
                     {corpus::buffer("x", x, n * sizeof(float)), CORPUS_SYMBOL(g_ops_calls),
                      CORPUS_SYMBOL(c_ops_scale)});
    l.before();
    apply_ops<<<n / 256, 256>>>(x, n, rounds);
    l.after();
  }
  std::vector<float> hx(n);
  unsigned calls = 0;
  CORPUS_CHECK(cudaMemcpy(hx.data(), x, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpyFromSymbol(&calls, g_ops_calls, sizeof(calls)));
  for (int i = 0; i < n; ++i) {
    float v = (float)(i % 16);
    for (int r = 0; r < rounds; ++r) v = v * 2.0f + 0.25f;  // exact in float
    CORPUS_REQUIRE(hx[i] == v, "cross-TU device calls");
  }
  CORPUS_REQUIRE(calls == (unsigned)n, "cross-TU device counter");
  corpus::result_ok();
  return 0;
}
