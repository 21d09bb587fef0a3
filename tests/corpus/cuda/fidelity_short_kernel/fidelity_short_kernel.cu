// A short kernel (a few microseconds) launched back to back: 100 relaxation steps on a
// 64 Ki-element vector, queued with no synchronisation between them, as a time-stepping
// loop does. Prints its own timing (events around the loop, per launch) and a checksum.
//   fidelity_short_kernel [launches]   (default 100)
#include <cstdlib>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

__global__ void relax_step(float *u, const float *f, float omega, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) u[i] = (1.0f - omega) * u[i] + omega * f[i];
}

int main(int argc, char **argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 100, n = 1 << 16;
  if (launches < 2) {
    std::fprintf(stderr, "fidelity_short_kernel: launches must be at least 2\n");
    return 64;
  }
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = float(i % 17) * 0.25f;
  float *u, *f;
  CORPUS_CHECK(cudaMalloc(&u, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&f, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(u, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(f, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreate(&stream));
  {
    corpus::Launch l("relax_step(float*, float const*, float, int)",
                     {corpus::buffer("u", u, n * sizeof(float)), corpus::buffer("f", f, n * sizeof(float))});
    l.before();
    relax_step<<<n / 256, 256, 0, stream>>>(u, f, 0.1f, n);
    l.after();
  }
  fidelity::EventTimer timer(stream);
  double started = fidelity::host_ms();
  timer.start();
  for (int k = 1; k < launches; ++k) relax_step<<<n / 256, 256, 0, stream>>>(u, f, 0.1f, n);
  CORPUS_CHECK(cudaGetLastError());
  float ms = timer.stop_ms();
  std::printf("%d launches in %.3f ms: %.2f us per launch (host %.3f ms)\n", launches - 1, ms,
              1e3 * ms / (launches - 1), fidelity::host_ms() - started);
  CORPUS_CHECK(cudaMemcpy(host.data(), u, n * sizeof(float), cudaMemcpyDeviceToHost));
  corpus::output("relaxed_sum", fidelity::sum(host.data(), n), 6);
  corpus::result_ok();
  return 0;
}
