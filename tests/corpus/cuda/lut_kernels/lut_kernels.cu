// Six kernels of one translation unit sharing a tabulated function, as physics and image
// codes keep one: a __device__ lookup table that the first kernel fills and the other
// five read (interpolation, weights, binning, scaling, a reduction of the table itself),
// plus a __device__ counter two of them update. Every replay of one of these kernels
// needs the table restored, and a process replaying them all compiles six kernels of one
// module one after the other (issue 35).
#include <cmath>
#include <vector>

#include "corpus_check.h"

constexpr int kLutSize = 512;
constexpr float kLutMax = 8.0f;  // the table covers exp(-x) on [0, kLutMax]

__device__ float lut[kLutSize];
__device__ int lut_lookups;

// Linear interpolation in the table; x is clamped to its range.
__device__ float lut_at(float x) {
  float at = fminf(fmaxf(x, 0.0f), kLutMax) * ((kLutSize - 1) / kLutMax);
  int i = min((int)at, kLutSize - 2);
  float t = at - (float)i;
  return lut[i] + t * (lut[i + 1] - lut[i]);
}

__global__ void build_lut(float scale, float rate) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kLutSize) lut[i] = scale * expf(-rate * (float)i * (kLutMax / (kLutSize - 1)));
}

__global__ void tabulated_exp(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  y[i] = lut_at(x[i]);
  if (threadIdx.x == 0) atomicAdd(&lut_lookups, 1);
}

// Each output is a window of inputs weighted by the table: out[i] = sum_k x[i+k] lut[8k].
__global__ void weighted_sum(const float *x, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
  for (int k = 0; k < 16 && i + k < n; ++k) sum += x[i + k] * lut[8 * k];
  out[i] = sum;
}

// Bins of the tabulated values (integer counts: the result does not depend on order).
__global__ void lut_histogram(const float *x, int *bins, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int bin = min((int)(lut_at(x[i]) * 16.0f), 15);
  atomicAdd(&bins[bin], 1);
  if (threadIdx.x == 0) atomicAdd(&lut_lookups, 1);
}

__global__ void scale_by_lut(float *x, int n, float offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * lut[i % kLutSize] + offset;
}

// One block: the table's sum and the lookups counted so far.
__global__ void lut_checksum(float *out) {
  __shared__ float partial[256];
  float sum = 0.0f;
  for (int i = threadIdx.x; i < kLutSize; i += blockDim.x) sum += lut[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[0] = partial[0];
    out[1] = (float)lut_lookups;
  }
}

static float host_lut_at(const std::vector<float> &table, float x) {
  float at = std::fmin(std::fmax(x, 0.0f), kLutMax) * ((kLutSize - 1) / kLutMax);
  int i = std::min((int)at, kLutSize - 2);
  float t = at - (float)i;
  return table[i] + t * (table[i + 1] - table[i]);
}

int main() {
  const int n = 8192, threads = 256, blocks = n / threads;
  const size_t bytes = n * sizeof(float);
  float *x, *y, *w, *sums;
  int *bins;
  CORPUS_CHECK(cudaMalloc(&x, bytes));
  CORPUS_CHECK(cudaMalloc(&y, bytes));
  CORPUS_CHECK(cudaMalloc(&w, bytes));
  CORPUS_CHECK(cudaMalloc(&sums, 2 * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&bins, 16 * sizeof(int)));
  std::vector<float> hx(n);
  for (int i = 0; i < n; ++i) hx[i] = (float)((i * 37) % 1000) * 0.009f;  // in [0, 9): some clamp
  CORPUS_CHECK(cudaMemcpy(x, hx.data(), bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(y, 0, bytes));
  CORPUS_CHECK(cudaMemset(w, 0, bytes));
  CORPUS_CHECK(cudaMemset(sums, 0, 2 * sizeof(float)));
  CORPUS_CHECK(cudaMemset(bins, 0, 16 * sizeof(int)));
  int zero = 0;
  CORPUS_CHECK(cudaMemcpyToSymbol(lut_lookups, &zero, sizeof(zero)));

  {
    corpus::Launch l("build_lut(float, float)", {CORPUS_SYMBOL(lut)});
    l.before();
    build_lut<<<(kLutSize + threads - 1) / threads, threads>>>(1.0f, 0.5f);
    l.after();
  }
  {
    corpus::Launch l("tabulated_exp(float const*, float*, int)",
                     {corpus::buffer("x", x, bytes), corpus::buffer("y", y, bytes), CORPUS_SYMBOL(lut),
                      CORPUS_SYMBOL(lut_lookups)});
    l.before();
    tabulated_exp<<<blocks, threads>>>(x, y, n);
    l.after();
  }
  {
    corpus::Launch l("weighted_sum(float const*, float*, int)",
                     {corpus::buffer("y", y, bytes), corpus::buffer("w", w, bytes), CORPUS_SYMBOL(lut)});
    l.before();
    weighted_sum<<<blocks, threads>>>(y, w, n);
    l.after();
  }
  {
    corpus::Launch l("lut_histogram(float const*, int*, int)",
                     {corpus::buffer("x", x, bytes), corpus::buffer("bins", bins, 16 * sizeof(int)),
                      CORPUS_SYMBOL(lut), CORPUS_SYMBOL(lut_lookups)});
    l.before();
    lut_histogram<<<blocks, threads>>>(x, bins, n);
    l.after();
  }
  {
    corpus::Launch l("scale_by_lut(float*, int, float)", {corpus::buffer("w", w, bytes), CORPUS_SYMBOL(lut)});
    l.before();
    scale_by_lut<<<blocks, threads>>>(w, n, 0.25f);
    l.after();
  }
  {
    corpus::Launch l("lut_checksum(float*)",
                     {corpus::buffer("sums", sums, 2 * sizeof(float)), CORPUS_SYMBOL(lut),
                      CORPUS_SYMBOL(lut_lookups)});
    l.before();
    lut_checksum<<<1, 256>>>(sums);
    l.after();
  }

  // The host checks what it can exactly (counts) and the rest to float rounding.
  std::vector<float> table(kLutSize), hy(n), hw(n);
  float hsums[2];
  int hbins[16], lookups = 0;
  CORPUS_CHECK(cudaMemcpyFromSymbol(table.data(), lut, sizeof(lut)));
  CORPUS_CHECK(cudaMemcpyFromSymbol(&lookups, lut_lookups, sizeof(lookups)));
  CORPUS_CHECK(cudaMemcpy(hy.data(), y, bytes, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hw.data(), w, bytes, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hsums, sums, sizeof(hsums), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hbins, bins, sizeof(hbins), cudaMemcpyDeviceToHost));
  double table_sum = 0.0;
  for (int i = 0; i < kLutSize; ++i) {
    float want = std::exp(-0.5f * (float)i * (kLutMax / (kLutSize - 1)));
    CORPUS_REQUIRE(std::fabs(table[i] - want) <= 1e-5f, "build_lut");
    table_sum += table[i];
  }
  for (int i = 0; i < n; ++i)
    CORPUS_REQUIRE(std::fabs(hy[i] - host_lut_at(table, hx[i])) <= 1e-6f, "tabulated_exp");
  int counted = 0;
  for (int b = 0; b < 16; ++b) counted += hbins[b];
  CORPUS_REQUIRE(counted == n, "lut_histogram");
  CORPUS_REQUIRE(lookups == 2 * blocks, "lut_lookups");
  CORPUS_REQUIRE(std::fabs(hsums[0] - (float)table_sum) <= 1e-3f * (float)table_sum, "lut_checksum sum");
  CORPUS_REQUIRE(hsums[1] == (float)(2 * blocks), "lut_checksum lookups");
  CORPUS_CHECK(cudaFree(x));
  CORPUS_CHECK(cudaFree(y));
  CORPUS_CHECK(cudaFree(w));
  CORPUS_CHECK(cudaFree(sums));
  CORPUS_CHECK(cudaFree(bins));
  corpus::result_ok();
  return 0;
}
