// Extended lambdas: __device__ and __host__ __device__ lambdas (capturing scalars, a struct
// and a device pointer) passed by value to template kernels.
#include "corpus_check.h"

template <typename F>
__global__ void transform(float *x, int n, F f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = f(x[i]);
}

template <typename F>
__global__ void generate(float *x, int n, F f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = f(i);
}

struct Affine {
  float a, b;
};

int main() {
  const int n = 1000, block = 128, grid = (n + block - 1) / block;
  float *x, *y;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&y, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(x, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(y, 0, n * sizeof(float)));
  const size_t bytes = n * sizeof(float);

  const float step = 0.5f;
  auto ramp = [=] __device__(int i) { return step * (float)(i % 32); };
  { corpus::Launch l("void generate<main::'lambda'(int)>(float*, int, main::'lambda'(int))",
                     {corpus::buffer("x", x, bytes)});
    l.before(); generate<<<grid, block>>>(x, n, ramp); l.after(); }

  Affine affine{2.0f, -1.0f};
  auto apply_affine = [=] __device__(float v) { return affine.a * v + affine.b; };
  { corpus::Launch l("void transform<main::'lambda'(float)>(float*, int, main::'lambda'(float))",
                     {corpus::buffer("x", x, bytes)});
    l.before(); transform<<<grid, block>>>(x, n, apply_affine); l.after(); }

  // Captures a device pointer: the lambda reads another buffer.
  const float *other = x;
  auto copy_twice = [=] __device__(int i) { return other[i] + other[i]; };
  { corpus::Launch l("void generate<main::'lambda0'(int)>(float*, int, main::'lambda0'(int))",
                     {corpus::buffer("x", x, bytes), corpus::buffer("y", y, bytes)});
    l.before(); generate<<<grid, block>>>(y, n, copy_twice); l.after(); }

  // A __host__ __device__ lambda, also called on the host for the expected values.
  auto square_plus = [] __host__ __device__(float v) { return v * v + 1.0f; };
  { corpus::Launch l("void transform<main::'lambda0'(float)>(float*, int, main::'lambda0'(float))",
                     {corpus::buffer("y", y, bytes)});
    l.before(); transform<<<grid, block>>>(y, n, square_plus); l.after(); }

  std::vector<float> hy(n);
  CORPUS_CHECK(cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float v = 2.0f * (0.5f * (float)(i % 32)) - 1.0f;
    CORPUS_REQUIRE(hy[i] == square_plus(v + v), "lambda pipeline");
  }
  CORPUS_CHECK(cudaFree(x));
  CORPUS_CHECK(cudaFree(y));
  corpus::result_ok();
  return 0;
}
