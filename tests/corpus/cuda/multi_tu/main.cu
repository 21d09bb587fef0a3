// Several translation units, each with kernels (non-rdc: one device module per TU).
#include <cmath>

#include "corpus_check.h"
#include "multi_tu.h"

__global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

int main() {
  const int n = 2048, block = 256, m = n / block;
  float *a, *b, *partial, *total;
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&b, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&partial, m * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&total, sizeof(float)));
  CORPUS_CHECK(cudaMemset(b, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(partial, 0, m * sizeof(float)));
  CORPUS_CHECK(cudaMemset(total, 0, sizeof(float)));

  run_init_ramp(a, n);
  run_stencil3(a, b, n);
  run_stencil_local_scale(b, n);  // b *= 2
  run_reduce_local_scale(b, n);   // b *= 0.5: back to the stencil result
  {
    corpus::Launch l("axpy(float, float const*, float*, int)",
                     {corpus::buffer("a", a, n * sizeof(float)), corpus::buffer("b", b, n * sizeof(float))});
    l.before();
    axpy<<<n / 128, 128>>>(1.0f, a, b, n);
    l.after();
  }
  run_block_sums(b, partial, n, block);
  run_final_sum(partial, total, m);

  // Host model: every value is a multiple of 1/32 well inside float precision, so exact.
  std::vector<float> ha(n), hb(n, 0.0f);
  for (int i = 0; i < n; ++i) ha[i] = 0.125f * (float)(i % 64);
  for (int i = 1; i < n - 1; ++i) hb[i] = 0.25f * ha[i - 1] + 0.5f * ha[i] + 0.25f * ha[i + 1];
  double expect = 0.0;
  for (int i = 0; i < n; ++i) expect += ha[i] + hb[i];
  float got = 0.0f;
  CORPUS_CHECK(cudaMemcpy(&got, total, sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_REQUIRE(std::fabs(got - expect) < 1e-3, "total of the stencil plus ramp");

  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaFree(partial));
  CORPUS_CHECK(cudaFree(total));
  corpus::result_ok();
  return 0;
}
