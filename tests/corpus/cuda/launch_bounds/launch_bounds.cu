// __launch_bounds__ in its forms: max threads only, with min blocks per SM, and with the
// sm_90 max-blocks-per-cluster third argument. Each kernel is launched within its bound.
#include <cmath>

#include "corpus_check.h"

__global__ void __launch_bounds__(256) smooth(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float l = in[i > 0 ? i - 1 : i], r = in[i < n - 1 ? i + 1 : i];
  out[i] = 0.25f * l + 0.5f * in[i] + 0.25f * r;
}

__global__ void __launch_bounds__(128, 4) polynomial(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  x[i] = ((0.5f * v + 1.0f) * v - 2.0f) * v + 0.25f;
}

__global__ void __launch_bounds__(64, 2, 1) count_bits(const float *x, int *bits, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) bits[i] = __popc(__float_as_int(x[i]));
}

int main() {
  const int n = 1024;
  float *a, *b;
  int *bits;
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&b, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&bits, n * sizeof(int)));
  std::vector<float> ha(n);
  for (int i = 0; i < n; ++i) ha[i] = (float)((i * 5) % 16) * 0.5f;
  CORPUS_CHECK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(b, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(bits, 0, n * sizeof(int)));

  { corpus::Launch l("smooth(float const*, float*, int)",
                     {corpus::buffer("a", a, n * sizeof(float)), corpus::buffer("b", b, n * sizeof(float))});
    l.before(); smooth<<<n / 256, 256>>>(a, b, n); l.after(); }
  { corpus::Launch l("polynomial(float*, int)", {corpus::buffer("b", b, n * sizeof(float))});
    l.before(); polynomial<<<n / 128, 128>>>(b, n); l.after(); }
  { corpus::Launch l("count_bits(float const*, int*, int)",
                     {corpus::buffer("b", b, n * sizeof(float)), corpus::buffer("bits", bits, n * sizeof(int))});
    l.before(); count_bits<<<n / 64, 64>>>(b, bits, n); l.after(); }

  std::vector<float> hb(n);
  CORPUS_CHECK(cudaMemcpy(hb.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float l = ha[i > 0 ? i - 1 : i], r = ha[i < n - 1 ? i + 1 : i];
    float v = 0.25f * l + 0.5f * ha[i] + 0.25f * r;
    float p = ((0.5f * v + 1.0f) * v - 2.0f) * v + 0.25f;
    CORPUS_REQUIRE(std::abs(hb[i] - p) <= 1e-3f * (std::abs(p) + 1.0f), "smooth then polynomial");
  }
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaFree(bits));
  corpus::result_ok();
  return 0;
}
