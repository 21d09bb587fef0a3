// A kernel beside asynchronous copies on another stream: a 1-D stencil runs 20 times on a
// 32 MiB array while a second stream moves 64 MiB between pinned host memory and the
// device, both ways, the whole time (an input pipeline overlapping compute). Prints its
// own timings (events per stream) and checksums of both.
//   fidelity_copy_overlap [launches]   (default 20)
#include <cstdlib>
#include <cstring>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

__global__ void stencil_1d(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float left = i > 0 ? in[i - 1] : 0.0f, right = i < n - 1 ? in[i + 1] : 0.0f;
  out[i] = 0.5f * in[i] + 0.25f * (left + right);
}

int main(int argc, char **argv) {
  const int launches = argc > 1 ? std::atoi(argv[1]) : 20;
  if (launches < 2) {
    std::fprintf(stderr, "fidelity_copy_overlap: launches must be at least 2\n");
    return 64;
  }
  const int n = 8 << 20;                              // 32 MiB per stencil buffer
  const size_t copy_bytes = size_t(64) << 20;         // 64 MiB each way per round
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = float(i % 101);
  float *a, *b;
  unsigned char *staging, *pinned_in, *pinned_out;
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&b, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&staging, copy_bytes));
  CORPUS_CHECK(cudaMallocHost(&pinned_in, copy_bytes));
  CORPUS_CHECK(cudaMallocHost(&pinned_out, copy_bytes));
  for (size_t i = 0; i < copy_bytes; ++i) pinned_in[i] = (unsigned char)(i * 31 + 7);
  CORPUS_CHECK(cudaMemcpy(a, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t compute, copies;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  CORPUS_CHECK(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking));
  {
    corpus::Launch l("stencil_1d(float const*, float*, int)",
                     {corpus::buffer("in", a, n * sizeof(float)), corpus::buffer("out", b, n * sizeof(float))});
    l.before();
    stencil_1d<<<n / 256, 256, 0, compute>>>(a, b, n);
    l.after();
  }
  fidelity::EventTimer compute_timer(compute), copy_timer(copies);
  copy_timer.start();
  int rounds = 0;
  // Enough copy rounds to outlast the kernels: the copies start first and keep going.
  for (; rounds < 4; ++rounds) {
    CORPUS_CHECK(cudaMemcpyAsync(staging, pinned_in, copy_bytes, cudaMemcpyHostToDevice, copies));
    CORPUS_CHECK(cudaMemcpyAsync(pinned_out, staging, copy_bytes, cudaMemcpyDeviceToHost, copies));
  }
  compute_timer.start();
  for (int k = 1; k < launches; ++k) {
    const float *in = k % 2 ? b : a;
    float *out = k % 2 ? a : b;
    stencil_1d<<<n / 256, 256, 0, compute>>>(in, out, n);
  }
  CORPUS_CHECK(cudaGetLastError());
  float compute_ms = compute_timer.stop_ms(), copy_ms = copy_timer.stop_ms();
  std::printf("stencil: %d launches in %.3f ms; copies: %d rounds of %zu MiB each way in %.3f ms (%.1f GB/s)\n",
              launches - 1, compute_ms, rounds, copy_bytes >> 20, copy_ms,
              2.0 * rounds * copy_bytes / (copy_ms * 1e6));
  CORPUS_REQUIRE(std::memcmp(pinned_in, pinned_out, copy_bytes) == 0, "the copies round-tripped");
  CORPUS_CHECK(cudaMemcpy(host.data(), launches % 2 ? b : a, n * sizeof(float), cudaMemcpyDeviceToHost));
  corpus::output("stencil_sum", fidelity::sum(host.data(), n), 6);
  corpus::output("copied_bytes", (unsigned long long)(2 * rounds * copy_bytes));
  corpus::result_ok();
  return 0;
}
