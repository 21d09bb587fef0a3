// A weighted histogram and a total with float atomicAdd, as in Monte Carlo tallies and
// scatter-add assembly: the additions happen in a different order on every run, so the
// float sums differ in their last bits between runs (values, not bytes, are reproducible).
#include <cmath>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__global__ void tally(const float *x, const float *w, int n, int bins, float *hist, float *total) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int b = min(bins - 1, max(0, (int)(x[i] * bins)));
    atomicAdd(&hist[b], w[i]);
    atomicAdd(total, w[i] * x[i]);
  }
}

int main() {
  const int n = 1 << 20, bins = 64;
  std::vector<float> x(n), w(n);
  for (int i = 0; i < n; ++i) {
    unsigned h = (unsigned)i * 2654435761u;
    x[i] = (float)(h >> 8) / (float)(1u << 24);
    w[i] = 0.1f + (float)((h >> 3) % 997) * 1.37e-3f;
  }
  float *dx, *dw, *hist, *total;
  CORPUS_CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&dw, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&hist, bins * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&total, sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(dw, w.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(hist, 0, bins * sizeof(float)));
  CORPUS_CHECK(cudaMemset(total, 0, sizeof(float)));
  { corpus::Launch l("tally(float const*, float const*, int, int, float*, float*)",
                     {corpus::buffer("x", dx, n * sizeof(float)), corpus::buffer("w", dw, n * sizeof(float)),
                      corpus::buffer("hist", hist, bins * sizeof(float)), corpus::buffer("total", total, sizeof(float))});
    l.before(); tally<<<264, 256>>>(dx, dw, n, bins, hist, total); l.after(); }
  std::vector<float> h(bins);
  float t = 0;
  CORPUS_CHECK(cudaMemcpy(h.data(), hist, bins * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(&t, total, sizeof t, cudaMemcpyDeviceToHost));
  std::vector<double> want(bins, 0.0);
  double want_total = 0.0;
  for (int i = 0; i < n; ++i) {
    want[std::min(bins - 1, std::max(0, (int)(x[i] * bins)))] += w[i];
    want_total += (double)w[i] * x[i];
  }
  for (int b = 0; b < bins; ++b) CORPUS_REQUIRE(std::fabs(h[b] - want[b]) <= 1e-3 * want[b], "bin within float accuracy");
  CORPUS_REQUIRE(std::fabs(t - want_total) <= 1e-3 * want_total, "total within float accuracy");
  // Four significant digits: identical on every run although the bits are not.
  corpus::output("total", (double)t, 4);
  corpus::output("bin0", (double)h[0], 4);
  corpus::result_ok();
  return 0;
}
