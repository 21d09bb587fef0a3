// Math library calls on the device (libdevice): expf, sqrt, __fdividef, sinf, powf, plus
// logf, cosf, sqrtf, fmaf and rsqrtf; checked against the host libm with tolerances.
#include <cmath>

#include "corpus_check.h"

enum Op { kExp, kSqrt, kFastDiv, kSin, kPow, kMixed, kNumOps };

__global__ void elementwise(const float *x, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = x[i];
  out[kExp * n + i] = expf(v);
  out[kSqrt * n + i] = (float)sqrt((double)v);
  out[kFastDiv * n + i] = __fdividef(v, 1.0f + v);
  out[kSin * n + i] = sinf(v);
  out[kPow * n + i] = powf(v, 1.5f);
  out[kMixed * n + i] = logf(1.0f + v) + cosf(v) * sqrtf(v) + fmaf(v, 0.5f, rsqrtf(1.0f + v));
}

// A double-precision kernel: a few terms of a series, with pow and exp.
__global__ void series(const double *x, double *out, int n, int terms) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double acc = 0.0;
  for (int k = 1; k <= terms; ++k) acc += pow(x[i], (double)k) / (double)(k * k);
  out[i] = acc * exp(-x[i]);
}

static bool within(double got, double expect, double rel) {
  return std::fabs(got - expect) <= rel * (std::fabs(expect) + 1e-6);
}

int main() {
  const int n = 777, terms = 6;
  float *x, *out;
  double *xd, *outd;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&out, kNumOps * n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&xd, n * sizeof(double)));
  CORPUS_CHECK(cudaMalloc(&outd, n * sizeof(double)));
  std::vector<float> hx(n);
  std::vector<double> hxd(n);
  for (int i = 0; i < n; ++i) {
    hx[i] = 0.05f + 0.01f * (float)i;  // (0, 8]
    hxd[i] = 0.001 * i;
  }
  CORPUS_CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(xd, hxd.data(), n * sizeof(double), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(out, 0, kNumOps * n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(outd, 0, n * sizeof(double)));

  { corpus::Launch l("elementwise(float const*, float*, int)",
                     {corpus::buffer("x", x, n * sizeof(float)), corpus::buffer("out", out, kNumOps * n * sizeof(float))});
    l.before(); elementwise<<<(n + 127) / 128, 128>>>(x, out, n); l.after(); }
  { corpus::Launch l("series(double const*, double*, int, int)",
                     {corpus::buffer("xd", xd, n * sizeof(double)), corpus::buffer("outd", outd, n * sizeof(double))});
    l.before(); series<<<(n + 63) / 64, 64>>>(xd, outd, n, terms); l.after(); }

  std::vector<float> ho(kNumOps * n);
  std::vector<double> hod(n);
  CORPUS_CHECK(cudaMemcpy(ho.data(), out, ho.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hod.data(), outd, n * sizeof(double), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    double v = hx[i];
    CORPUS_REQUIRE(within(ho[kExp * n + i], std::exp(v), 1e-5), "expf");
    CORPUS_REQUIRE(within(ho[kSqrt * n + i], std::sqrt(v), 1e-6), "sqrt");
    CORPUS_REQUIRE(within(ho[kFastDiv * n + i], v / (1.0 + v), 1e-5), "__fdividef");
    CORPUS_REQUIRE(std::fabs(ho[kSin * n + i] - std::sin(v)) < 1e-5, "sinf");
    CORPUS_REQUIRE(within(ho[kPow * n + i], std::pow(v, 1.5), 1e-5), "powf");
    double mixed = std::log(1.0 + v) + std::cos(v) * std::sqrt(v) + v * 0.5 + 1.0 / std::sqrt(1.0 + v);
    CORPUS_REQUIRE(std::fabs(ho[kMixed * n + i] - mixed) < 1e-4, "mixed float math");
    double acc = 0.0;
    for (int k = 1; k <= terms; ++k) acc += std::pow(hxd[i], (double)k) / (double)(k * k);
    CORPUS_REQUIRE(within(hod[i], acc * std::exp(-hxd[i]), 1e-12), "series");
  }
  CORPUS_CHECK(cudaFree(x));
  CORPUS_CHECK(cudaFree(out));
  CORPUS_CHECK(cudaFree(xd));
  CORPUS_CHECK(cudaFree(outd));
  corpus::result_ok();
  return 0;
}
