// Work split across two GPUs of one process, as multi-GPU codes do it by hand: each GPU
// fills its half, the halves meet through a peer copy (cudaMemcpyPeer) and through a
// kernel on GPU 0 that reads GPU 1's memory directly (peer access; 21 launches, the last 20
// timed together), GPU 1 scales its half
// in place, and GPU 0 combines. The host checks every value, prints each phase's time and
// a checksum. With one GPU both halves live on it (the same code, one device).
#include <chrono>
#include <cmath>

#include "corpus_check.h"

__global__ void fill_ramp(float *x, int n, float offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = offset + (float)i;
}

__global__ void scale_half(float *x, int n, float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

// `remote` is the other GPU's memory, read through a peer pointer.
__global__ void add_remote(float *out, const float *local, const float *remote, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = local[i] + remote[i];
}

__global__ void add_copied(float *out, const float *local, const float *copied, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = out[i] + local[i] * copied[i];
}

static double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int main() {
  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  const int grid = (n + 255) / 256;
  int count = 0;
  CORPUS_CHECK(cudaGetDeviceCount(&count));
  const int gpu0 = 0, gpu1 = count > 1 ? 1 : 0;
  if (gpu1 != gpu0) {
    int reach01 = 0, reach10 = 0;
    CORPUS_CHECK(cudaDeviceCanAccessPeer(&reach01, gpu0, gpu1));
    CORPUS_CHECK(cudaDeviceCanAccessPeer(&reach10, gpu1, gpu0));
    CORPUS_REQUIRE(reach01 && reach10, "the two GPUs reach each other (peer access)");
    CORPUS_CHECK(cudaSetDevice(gpu0));
    CORPUS_CHECK(cudaDeviceEnablePeerAccess(gpu1, 0));
    CORPUS_CHECK(cudaSetDevice(gpu1));
    CORPUS_CHECK(cudaDeviceEnablePeerAccess(gpu0, 0));
  }
  std::printf("two_gpus: %d GPU(s) visible, working on GPUs %d and %d\n", count, gpu0, gpu1);
  auto start = std::chrono::steady_clock::now();

  float *a, *out, *copied, *b;
  CORPUS_CHECK(cudaSetDevice(gpu0));
  CORPUS_CHECK(cudaMalloc(&a, bytes));
  CORPUS_CHECK(cudaMalloc(&out, bytes));
  CORPUS_CHECK(cudaMalloc(&copied, bytes));
  CORPUS_CHECK(cudaSetDevice(gpu1));
  CORPUS_CHECK(cudaMalloc(&b, bytes));

  CORPUS_CHECK(cudaSetDevice(gpu0));
  { corpus::Launch l("fill_ramp(float*, int, float)", {corpus::buffer("a", a, bytes)});
    l.before(); fill_ramp<<<grid, 256>>>(a, n, 0.0f); l.after(); }
  CORPUS_CHECK(cudaSetDevice(gpu1));
  { corpus::Launch l("fill_ramp(float*, int, float)", {corpus::buffer("b", b, bytes)});
    l.before(); fill_ramp<<<grid, 256>>>(b, n, 1000.0f); l.after(); }
  CORPUS_CHECK(cudaDeviceSynchronize());
  double fill_ms = ms_since(start);

  // GPU 0 reads GPU 1's half where it lies.
  auto t = std::chrono::steady_clock::now();
  CORPUS_CHECK(cudaSetDevice(gpu0));
  { corpus::Launch l("add_remote(float*, float const*, float const*, int)",
                     {corpus::buffer("out", out, bytes), corpus::buffer("a", a, bytes), corpus::buffer("b", b, bytes)});
    l.before(); add_remote<<<grid, 256>>>(out, a, b, n); l.after(); }
  double remote_ms = ms_since(t);
  // ... and again, as a loop would (same result every time; no checks around these)
  const int repeats = 20;
  cudaEvent_t begin, end;
  CORPUS_CHECK(cudaEventCreate(&begin));
  CORPUS_CHECK(cudaEventCreate(&end));
  CORPUS_CHECK(cudaEventRecord(begin));
  for (int r = 0; r < repeats; ++r) add_remote<<<grid, 256>>>(out, a, b, n);
  CORPUS_CHECK(cudaEventRecord(end));
  CORPUS_CHECK(cudaEventSynchronize(end));
  float repeat_ms = 0;
  CORPUS_CHECK(cudaEventElapsedTime(&repeat_ms, begin, end));
  CORPUS_CHECK(cudaEventDestroy(begin));
  CORPUS_CHECK(cudaEventDestroy(end));

  // GPU 1 scales its half; then the half travels to GPU 0 by a peer copy.
  t = std::chrono::steady_clock::now();
  CORPUS_CHECK(cudaSetDevice(gpu1));
  { corpus::Launch l("scale_half(float*, int, float)", {corpus::buffer("b", b, bytes)});
    l.before(); scale_half<<<grid, 256>>>(b, n, 2.0f); l.after(); }
  CORPUS_CHECK(cudaDeviceSynchronize());
  CORPUS_CHECK(cudaMemcpyPeer(copied, gpu0, b, gpu1, bytes));
  CORPUS_CHECK(cudaSetDevice(gpu0));
  { corpus::Launch l("add_copied(float*, float const*, float const*, int)",
                     {corpus::buffer("out", out, bytes), corpus::buffer("a", a, bytes),
                      corpus::buffer("copied", copied, bytes)});
    l.before(); add_copied<<<grid, 256>>>(out, a, copied, n); l.after(); }
  CORPUS_CHECK(cudaDeviceSynchronize());
  double copy_ms = ms_since(t);

  float *host = new float[n];
  CORPUS_CHECK(cudaMemcpy(host, out, bytes, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int i = 0; i < n; i += 4097) {
    // out = a + b, then + a * 2b (float rounding: within a relative 1e-6)
    double want = (double)i + (1000.0 + i) + (double)i * 2.0 * (1000.0 + i);
    CORPUS_REQUIRE(std::fabs((double)host[i] - want) <= 1e-6 * want, "out = a + b + a * 2b");
  }
  for (int i = 0; i < n; ++i) sum += host[i];
  std::printf("two_gpus: fill %.3f ms, remote add %.3f ms (then %.4f ms each over %d launches), "
              "scale + peer copy + add %.3f ms, checksum %.6e\n",
              fill_ms, remote_ms, repeat_ms / repeats, repeats, copy_ms, sum);
  delete[] host;
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaSetDevice(gpu0));
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(out));
  CORPUS_CHECK(cudaFree(copied));
  corpus::result_ok();
  return 0;
}
