// In-kernel timing with clock64(), as instrumented kernels and load-balancing schedulers
// do: each block does real work (a polynomial evaluation) and writes how many cycles it
// took beside its result. The results repeat bit for bit; the cycle counts never do.
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__global__ void timed_horner(const float *coef, int degree, const float *x, float *y, long long *cycles, int n) {
  long long start = clock64();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float acc = coef[degree];
    for (int d = degree - 1; d >= 0; --d) acc = acc * x[i] + coef[d];
    y[i] = acc;
  }
  __syncthreads();
  if (threadIdx.x == 0) cycles[blockIdx.x] = clock64() - start;
}

int main() {
  const int n = 1 << 16, degree = 12, block = 256, grid = n / block;
  std::vector<float> coef(degree + 1), x(n);
  for (int d = 0; d <= degree; ++d) coef[d] = 1.0f / (float)(d + 1);
  for (int i = 0; i < n; ++i) x[i] = (float)(i % 1000) * 1e-3f;
  float *dc, *dx, *dy;
  long long *cycles;
  CORPUS_CHECK(cudaMalloc(&dc, coef.size() * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&dy, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&cycles, grid * sizeof(long long)));
  CORPUS_CHECK(cudaMemcpy(dc, coef.data(), coef.size() * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(cycles, 0, grid * sizeof(long long)));
  { corpus::Launch l("timed_horner(float const*, int, float const*, float*, long long*, int)",
                     {corpus::buffer("coef", dc, coef.size() * sizeof(float)), corpus::buffer("x", dx, n * sizeof(float)),
                      corpus::buffer("y", dy, n * sizeof(float)), corpus::buffer("cycles", cycles, grid * sizeof(long long))});
    l.before(); timed_horner<<<grid, block>>>(dc, degree, dx, dy, cycles, n); l.after(); }
  std::vector<float> y(n);
  std::vector<long long> c(grid);
  CORPUS_CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(c.data(), cycles, grid * sizeof(long long), cudaMemcpyDeviceToHost));
  for (long long v : c) CORPUS_REQUIRE(v > 0, "every block timed itself");
  corpus::output("y", corpus::fnv1a64(y.data(), n * sizeof(float)));
  corpus::result_ok();
  return 0;
}
