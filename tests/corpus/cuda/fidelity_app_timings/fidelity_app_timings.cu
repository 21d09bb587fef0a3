// An application that prints its own timings and checksums, as real ones do: a start time,
// its process id and a host buffer's address, a progress bar rewritten with \r, a checksum
// every few steps, and at the end its host time, the kernels' cudaEvent total and a
// throughput. Two kernels, 20 steps each. The subject of `mneme run --apply` with no
// output filter: everything but the timings, dates, ids and addresses must stay the same.
//   fidelity_app_timings [steps]   (default 20)
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

__global__ void advect(const float *c, const float *velocity, float *next, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = velocity[i];
  int upwind = v > 0 ? (i > 0 ? i - 1 : n - 1) : (i < n - 1 ? i + 1 : 0);
  next[i] = c[i] - 0.4f * fabsf(v) * (c[i] - c[upwind]);
}

__global__ void damp(float *c, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = c[i] * factor + (1.0f - factor) * 0.5f;
}

int main(int argc, char **argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20, n = 4 << 20;
  if (steps < 2) {
    std::fprintf(stderr, "fidelity_app_timings: steps must be at least 2\n");
    return 64;
  }
  std::time_t now = std::time(nullptr);
  char started[32];
  std::strftime(started, sizeof started, "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  std::vector<float> host(n), velocity(n);
  for (int i = 0; i < n; ++i) {
    host[i] = (i / 4096) % 2 ? 1.0f : 0.0f;
    velocity[i] = (i % 7) < 4 ? 1.0f : -0.5f;
  }
  std::printf("[%s] advection solver, pid %d, %d cells, host buffer at %p\n", started, int(getpid()), n,
              (void *)host.data());
  float *c, *next, *v;
  CORPUS_CHECK(cudaMalloc(&c, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&next, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&v, n * sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(c, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(v, velocity.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  fidelity::EventTimer timer;
  float kernel_ms = 0;
  double host_start = fidelity::host_ms();
  for (int step = 0; step < steps; ++step) {
    if (step == 0) {  // the protocol's checksums on the first launch of each kernel
      corpus::Launch a("advect(float const*, float const*, float*, int)",
                       {corpus::buffer("c", c, n * sizeof(float)), corpus::buffer("velocity", v, n * sizeof(float)),
                        corpus::buffer("next", next, n * sizeof(float))});
      a.before();
      advect<<<n / 256, 256>>>(c, v, next, n);
      a.after();
      corpus::Launch d("damp(float*, float, int)", {corpus::buffer("c", next, n * sizeof(float))});
      d.before();
      damp<<<n / 512, 512>>>(next, 0.999f, n);
      d.after();
    } else {
      timer.start();
      advect<<<n / 256, 256>>>(c, v, next, n);
      damp<<<n / 512, 512>>>(next, 0.999f, n);
      kernel_ms += timer.stop_ms();
    }
    float *swap = c;
    c = next;
    next = swap;
    int done = 20 * (step + 1) / steps;
    std::printf("\rProgress: [%.*s%*s] %3d%% (%.1f ms)", done, "####################", 20 - done, "",
                100 * (step + 1) / steps, fidelity::host_ms() - host_start);
    if ((step + 1) % 5 == 0 || step + 1 == steps) {
      CORPUS_CHECK(cudaMemcpy(host.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost));
      std::printf("\nstep %d: mass %.6e\n", step + 1, fidelity::sum(host.data(), n));
    }
    std::fflush(stdout);
  }
  double host_ms = fidelity::host_ms() - host_start;
  std::printf("Total kernel execution time: %.4f s\n", kernel_ms * 1e-3);
  std::printf("Host time: %.0f ms\n", host_ms);
  std::printf("Throughput: %.2f GB/s\n", (steps - 1) * 6.0 * n * sizeof(float) / (kernel_ms * 1e6));
  corpus::output("final_mass", fidelity::sum(host.data(), n), 6);
  corpus::result_ok();
  return 0;
}
