// A kernel iterating on its own output (warm): Jacobi sweeps of a 1024 x 1024 grid, two
// 4 MiB buffers that stay in L2 between sweeps, swapped every launch. Prints its own
// timing (events around the sweeps) and a checksum of the result.
//   fidelity_jacobi [sweeps]   (default 200)
#include <cstdlib>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

__global__ void jacobi_sweep(const float *in, float *out, int n) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= n || y >= n) return;
  if (x == 0 || y == 0 || x == n - 1 || y == n - 1) {
    out[y * n + x] = in[y * n + x];  // fixed boundary
    return;
  }
  out[y * n + x] = 0.25f * (in[y * n + x - 1] + in[y * n + x + 1] + in[(y - 1) * n + x] + in[(y + 1) * n + x]);
}

int main(int argc, char **argv) {
  const int n = 1024, sweeps = argc > 1 ? std::atoi(argv[1]) : 200;
  if (sweeps < 2) {
    std::fprintf(stderr, "fidelity_jacobi: sweeps must be at least 2\n");
    return 64;
  }
  const size_t bytes = size_t(n) * n * sizeof(float);
  std::vector<float> host(size_t(n) * n, 0.0f);
  for (int x = 0; x < n; ++x) host[x] = 100.0f;  // a hot top edge
  float *a, *b;
  CORPUS_CHECK(cudaMalloc(&a, bytes));
  CORPUS_CHECK(cudaMalloc(&b, bytes));
  CORPUS_CHECK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
  const dim3 block(32, 8), grid((n + 31) / 32, (n + 7) / 8);
  {
    corpus::Launch l("jacobi_sweep(float const*, float*, int)",
                     {corpus::buffer("in", a, bytes), corpus::buffer("out", b, bytes)});
    l.before();
    jacobi_sweep<<<grid, block>>>(a, b, n);
    l.after();
  }
  fidelity::EventTimer timer;
  timer.start();
  for (int s = 1; s < sweeps; ++s) {
    const float *in = s % 2 ? b : a;
    float *out = s % 2 ? a : b;
    jacobi_sweep<<<grid, block>>>(in, out, n);
  }
  CORPUS_CHECK(cudaGetLastError());
  float ms = timer.stop_ms();
  std::printf("jacobi: %d sweeps in %.3f ms (%.2f us per sweep)\n", sweeps - 1, ms, 1e3 * ms / (sweeps - 1));
  CORPUS_CHECK(cudaMemcpy(host.data(), sweeps % 2 ? b : a, bytes, cudaMemcpyDeviceToHost));
  double total = fidelity::sum(host.data(), host.size());
  CORPUS_REQUIRE(total > 100.0 * n && total < 100.0 * n * n, "heat stays between the edges");
  corpus::output("jacobi_heat", total, 6);
  corpus::output("jacobi_center", double(host[size_t(n / 2) * n + n / 2]), 6);
  corpus::result_ok();
  return 0;
}
