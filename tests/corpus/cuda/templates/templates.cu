// Template kernels (type and non-type parameters) and overloaded kernels.
#include <algorithm>
#include <cmath>

#include "corpus_check.h"

template <typename T>
__global__ void scale(T *x, T factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * factor;
}

// Sum of the 2*kRadius+1 neighbours, clamped at the edges.
template <typename T, int kRadius>
__global__ void box_sum(const T *in, T *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T acc = 0;
#pragma unroll
  for (int d = -kRadius; d <= kRadius; ++d) {
    int j = min(max(i + d, 0), n - 1);
    acc += in[j];
  }
  out[i] = acc;
}

// Three overloads of one kernel name.
__global__ void fill(int *x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value + i;
}
__global__ void fill(float *x, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value * (float)(i % 17);
}
__global__ void fill(double *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.5 * i;
}

int main() {
  const int n = 1000, block = 128, grid = (n + block - 1) / block;
  int *di, *di2;
  float *df, *df2;
  double *dd;
  CORPUS_CHECK(cudaMalloc(&di, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&di2, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&df, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&df2, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&dd, n * sizeof(double)));
  CORPUS_CHECK(cudaMemset(di, 0, n * sizeof(int)));
  CORPUS_CHECK(cudaMemset(di2, 0, n * sizeof(int)));
  CORPUS_CHECK(cudaMemset(df, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(df2, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(dd, 0, n * sizeof(double)));
  const size_t ib = n * sizeof(int), fb = n * sizeof(float), db = n * sizeof(double);

  { corpus::Launch l("fill(int*, int, int)", {corpus::buffer("ints", di, ib)});
    l.before(); fill<<<grid, block>>>(di, 7, n); l.after(); }
  { corpus::Launch l("fill(float*, float, int)", {corpus::buffer("floats", df, fb)});
    l.before(); fill<<<grid, block>>>(df, 0.25f, n); l.after(); }
  { corpus::Launch l("fill(double*, int)", {corpus::buffer("doubles", dd, db)});
    l.before(); fill<<<grid, block>>>(dd, n); l.after(); }
  { corpus::Launch l("void scale<int>(int*, int, int)", {corpus::buffer("ints", di, ib)});
    l.before(); scale<int><<<grid, block>>>(di, 3, n); l.after(); }
  { corpus::Launch l("void scale<float>(float*, float, int)", {corpus::buffer("floats", df, fb)});
    l.before(); scale<float><<<grid, block>>>(df, 2.0f, n); l.after(); }
  { corpus::Launch l("void scale<double>(double*, double, int)", {corpus::buffer("doubles", dd, db)});
    l.before(); scale<double><<<grid, block>>>(dd, -4.0, n); l.after(); }
  { corpus::Launch l("void box_sum<float, 1>(float const*, float*, int)",
                     {corpus::buffer("floats", df, fb), corpus::buffer("floats_out", df2, fb)});
    l.before(); box_sum<float, 1><<<grid, block>>>(df, df2, n); l.after(); }
  { corpus::Launch l("void box_sum<float, 3>(float const*, float*, int)",
                     {corpus::buffer("floats", df, fb), corpus::buffer("floats_out", df2, fb)});
    l.before(); box_sum<float, 3><<<grid, block>>>(df, df2, n); l.after(); }
  { corpus::Launch l("void box_sum<int, 2>(int const*, int*, int)",
                     {corpus::buffer("ints", di, ib), corpus::buffer("ints_out", di2, ib)});
    l.before(); box_sum<int, 2><<<grid, block>>>(di, di2, n); l.after(); }

  std::vector<int> hi(n), hi2(n);
  std::vector<float> hf2(n);
  std::vector<double> hd(n);
  CORPUS_CHECK(cudaMemcpy(hi.data(), di, ib, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hi2.data(), di2, ib, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hf2.data(), df2, fb, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hd.data(), dd, db, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    CORPUS_REQUIRE(hi[i] == 3 * (7 + i), "scale<int> after fill");
    CORPUS_REQUIRE(hd[i] == -2.0 * i, "scale<double> after fill");
    long long s = 0;
    float f = 0.f;
    for (int d = -2; d <= 2; ++d) s += 3 * (7 + std::min(std::max(i + d, 0), n - 1));
    for (int d = -3; d <= 3; ++d) f += 0.5f * (float)(std::min(std::max(i + d, 0), n - 1) % 17);
    CORPUS_REQUIRE(hi2[i] == s, "box_sum<int, 2>");
    CORPUS_REQUIRE(std::fabs(hf2[i] - f) < 1e-4f, "box_sum<float, 3>");
  }
  CORPUS_CHECK(cudaFree(di));
  CORPUS_CHECK(cudaFree(di2));
  CORPUS_CHECK(cudaFree(df));
  CORPUS_CHECK(cudaFree(df2));
  CORPUS_CHECK(cudaFree(dd));
  corpus::result_ok();
  return 0;
}
