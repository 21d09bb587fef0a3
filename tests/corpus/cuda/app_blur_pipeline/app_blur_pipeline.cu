// An image-processing application as real codes write one: each frame is blurred with a
// 7x7 Gaussian (the dominant kernel, its block of 8 x 4 threads hard-coded badly), then
// its gradient magnitude (Sobel) and a 64-bin histogram of it are computed. Prints its
// own frame time (events) and checksums of the last frame.
//   app_blur_pipeline [frames]   (default 30)
#include <cstdlib>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

constexpr int kRadius = 3;
__constant__ float gauss[2 * kRadius + 1];

__global__ void blur(const float *in, float *out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float sum = 0.0f;
  for (int dy = -kRadius; dy <= kRadius; ++dy) {
    int yy = min(max(y + dy, 0), h - 1);
    float row = 0.0f;
    for (int dx = -kRadius; dx <= kRadius; ++dx) {
      int xx = min(max(x + dx, 0), w - 1);
      row += gauss[dx + kRadius] * in[size_t(yy) * w + xx];
    }
    sum += gauss[dy + kRadius] * row;
  }
  out[size_t(y) * w + x] = sum;
}

__global__ void sobel(const float *in, float *mag, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x <= 0 || y <= 0 || x >= w - 1 || y >= h - 1) return;
  auto at = [&](int dx, int dy) { return in[size_t(y + dy) * w + x + dx]; };
  float gx = at(1, -1) + 2 * at(1, 0) + at(1, 1) - at(-1, -1) - 2 * at(-1, 0) - at(-1, 1);
  float gy = at(-1, 1) + 2 * at(0, 1) + at(1, 1) - at(-1, -1) - 2 * at(0, -1) - at(1, -1);
  mag[size_t(y) * w + x] = sqrtf(gx * gx + gy * gy);
}

__global__ void histogram(const float *mag, unsigned *bins, int n, float scale) {
  __shared__ unsigned local[64];
  for (int i = threadIdx.x; i < 64; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&local[min(int(mag[i] * scale), 63)], 1u);
  __syncthreads();
  for (int i = threadIdx.x; i < 64; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

int main(int argc, char **argv) {
  const int w = 4096, h = 2048, frames = argc > 1 ? std::atoi(argv[1]) : 30;
  if (frames < 1) {
    std::fprintf(stderr, "app_blur_pipeline: frames must be at least 1\n");
    return 64;
  }
  const size_t n = size_t(w) * h, bytes = n * sizeof(float);
  std::vector<float> image(n);
  unsigned seed = 12345;
  for (auto &v : image) v = float((seed = seed * 1664525u + 1013904223u) >> 8) / float(1 << 24);
  float weights[2 * kRadius + 1], total = 0;
  for (int i = -kRadius; i <= kRadius; ++i) total += weights[i + kRadius] = std::exp(-0.5f * i * i / 2.0f);
  for (auto &v : weights) v /= total;
  CORPUS_CHECK(cudaMemcpyToSymbol(gauss, weights, sizeof weights));
  float *src, *blurred, *mag;
  unsigned *bins;
  CORPUS_CHECK(cudaMalloc(&src, bytes));
  CORPUS_CHECK(cudaMalloc(&blurred, bytes));
  CORPUS_CHECK(cudaMalloc(&mag, bytes));
  CORPUS_CHECK(cudaMalloc(&bins, 64 * sizeof(unsigned)));
  CORPUS_CHECK(cudaMemcpy(src, image.data(), bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(mag, 0, bytes));
  const dim3 block(8, 4);  // (chosen long ago, for another GPU)
  const dim3 grid((w + block.x - 1) / block.x, (h + block.y - 1) / block.y);
  const dim3 block2(32, 8), grid2((w + 31) / 32, (h + 7) / 8);
  {  // the first frame under the corpus protocol (each kernel's regions before and after)
    CORPUS_CHECK(cudaMemset(bins, 0, 64 * sizeof(unsigned)));
    corpus::Launch b("blur(float const*, float*, int, int)",
                     {corpus::buffer("in", src, bytes), corpus::buffer("out", blurred, bytes), CORPUS_SYMBOL(gauss)});
    b.before();
    blur<<<grid, block>>>(src, blurred, w, h);
    b.after();
    corpus::Launch s("sobel(float const*, float*, int, int)",
                     {corpus::buffer("in", blurred, bytes), corpus::buffer("mag", mag, bytes)});
    s.before();
    sobel<<<grid2, block2>>>(blurred, mag, w, h);
    s.after();
    corpus::Launch hl("histogram(float const*, unsigned int*, int, float)",
                      {corpus::buffer("mag", mag, bytes), corpus::buffer("bins", bins, 64 * sizeof(unsigned))});
    hl.before();
    histogram<<<264, 256>>>(mag, bins, int(n), 16.0f);
    hl.after();
  }
  fidelity::EventTimer timer;
  double host_start = fidelity::host_ms();
  timer.start();
  for (int f = 1; f < frames; ++f) {
    CORPUS_CHECK(cudaMemsetAsync(bins, 0, 64 * sizeof(unsigned)));
    blur<<<grid, block>>>(src, blurred, w, h);
    sobel<<<grid2, block2>>>(blurred, mag, w, h);
    histogram<<<264, 256>>>(mag, bins, int(n), 16.0f);
  }
  CORPUS_CHECK(cudaGetLastError());
  float ms = timer.stop_ms();
  std::printf("blur pipeline: %d frames of %dx%d in %.3f ms (%.3f ms per frame, host %.1f ms)\n", frames, w, h,
              ms, ms / frames, fidelity::host_ms() - host_start);
  std::vector<float> out(n);
  std::vector<unsigned> hist(64);
  CORPUS_CHECK(cudaMemcpy(out.data(), mag, bytes, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hist.data(), bins, 64 * sizeof(unsigned), cudaMemcpyDeviceToHost));
  unsigned long long counted = 0;
  for (unsigned c : hist) counted += c;
  CORPUS_REQUIRE(counted == n, "the histogram counts every pixel");
  corpus::output("blur_gradient_sum", fidelity::sum(out.data(), n), 5);
  corpus::output("blur_bin0", double(hist[0]), 6);
  corpus::result_ok();
  return 0;
}
