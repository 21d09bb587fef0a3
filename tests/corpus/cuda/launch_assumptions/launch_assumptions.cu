// Kernels that assume their launch shape, as real codes do (issue 23): each is correct only
// for some block shapes, and the tuner must learn which. Launched several times each, as an
// application's time steps would; the results are checked on the host.
//
//   tile_stencil        a shared array sized by a #define'd block size (STENCIL_BLOCK):
//                       wider blocks write past it, narrower ones leave halo cells stale
//   warp_partials       __launch_bounds__ with a fixed warp count (PARTIAL_WARPS): more
//                       threads are refused by the driver, fewer leave partials unset
//   pow2_block_sum      a tree reduction over blockDim.x that assumes a power of two
//   tile_transpose      a TILE x TILE tile with TILE x TILE threads
#include <cmath>
#include <vector>

#include "corpus_check.h"

#define STENCIL_BLOCK 256
#define PARTIAL_WARPS 4
#define TILE 16

__global__ void tile_stencil(const float *in, float *out, int n) {
  __shared__ float tile[STENCIL_BLOCK + 2];
  int i = blockIdx.x * STENCIL_BLOCK + threadIdx.x;  // the block size, hard-coded
  int t = threadIdx.x + 1;
  tile[t] = i < n ? in[i] : 0.0f;
  if (threadIdx.x == 0) tile[0] = i > 0 && i - 1 < n ? in[i - 1] : 0.0f;
  if (threadIdx.x == STENCIL_BLOCK - 1) tile[STENCIL_BLOCK + 1] = i + 1 < n ? in[i + 1] : 0.0f;
  __syncthreads();
  if (i < n) out[i] = 0.25f * tile[t - 1] + 0.5f * tile[t] + 0.25f * tile[t + 1];
}

__global__ void __launch_bounds__(PARTIAL_WARPS * 32) warp_partials(const float *x, float *sums, int n) {
  __shared__ float partial[PARTIAL_WARPS];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float v = i < n ? x[i] : 0.0f;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < PARTIAL_WARPS; ++w) s += partial[w];  // every warp, as compiled
    sums[blockIdx.x] = s;
  }
}

__global__ void pow2_block_sum(const float *x, float *sums, int n) {
  extern __shared__ float scratch[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {  // halves: a power of two assumed
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) sums[blockIdx.x] = scratch[0];
}

__global__ void tile_transpose(const float *in, float *out, int rows, int cols) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x, y = blockIdx.y * TILE + threadIdx.y;
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}

static float value(int i) { return (float)((i * 37) % 101) * 0.125f - 4.0f; }

int main() {
  const int n = 1 << 16, rows = 256, cols = 192, steps = 4;
  const int threads = PARTIAL_WARPS * 32, reduce_block = 256;
  float *a, *b, *sums, *pow2, *m, *mt;
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&b, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&sums, n / threads * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&pow2, n / reduce_block * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&m, rows * cols * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&mt, rows * cols * sizeof(float)));
  std::vector<float> h(n), hm(rows * cols);
  for (int i = 0; i < n; ++i) h[i] = value(i);
  for (int i = 0; i < rows * cols; ++i) hm[i] = value(3 * i + 1);
  CORPUS_CHECK(cudaMemcpy(a, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(m, hm.data(), rows * cols * sizeof(float), cudaMemcpyHostToDevice));
  const size_t bytes = n * sizeof(float);

  for (int step = 0; step < steps; ++step) {  // smoothing steps, ping-pong
    float *src = step % 2 ? b : a, *dst = step % 2 ? a : b;
    corpus::Launch l("tile_stencil(float const*, float*, int)",
                     {corpus::buffer("src", src, bytes), corpus::buffer("dst", dst, bytes)});
    l.before(); tile_stencil<<<n / STENCIL_BLOCK, STENCIL_BLOCK>>>(src, dst, n); l.after();
  }
  for (int step = 0; step < steps; ++step) {
    corpus::Launch l("warp_partials(float const*, float*, int)",
                     {corpus::buffer("a", a, bytes), corpus::buffer("sums", sums, n / threads * sizeof(float))});
    l.before(); warp_partials<<<n / threads, threads>>>(a, sums, n); l.after();
  }
  for (int step = 0; step < steps; ++step) {
    corpus::Launch l("pow2_block_sum(float const*, float*, int)",
                     {corpus::buffer("a", a, bytes), corpus::buffer("pow2", pow2, n / reduce_block * sizeof(float))});
    l.before();
    pow2_block_sum<<<n / reduce_block, reduce_block, reduce_block * sizeof(float)>>>(a, pow2, n);
    l.after();
  }
  for (int step = 0; step < steps; ++step) {
    const float *src = step % 2 ? mt : m;
    float *dst = step % 2 ? m : mt;
    int r = step % 2 ? cols : rows, c = step % 2 ? rows : cols;
    corpus::Launch l("tile_transpose(float const*, float*, int, int)",
                     {corpus::buffer("src", src, rows * cols * sizeof(float)),
                      corpus::buffer("dst", dst, rows * cols * sizeof(float))});
    l.before();
    tile_transpose<<<dim3((c + TILE - 1) / TILE, (r + TILE - 1) / TILE), dim3(TILE, TILE)>>>(src, dst, r, c);
    l.after();
  }

  // The host's own check: four smoothing steps, the block sums of the result, the matrix
  // transposed back.
  std::vector<float> x = h, y(n);
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < n; ++i)
      y[i] = 0.25f * (i > 0 ? x[i - 1] : 0.0f) + 0.5f * x[i] + 0.25f * (i + 1 < n ? x[i + 1] : 0.0f);
    x.swap(y);
  }
  std::vector<float> got(n), hs(n / threads), hp(n / reduce_block), hback(rows * cols);
  CORPUS_CHECK(cudaMemcpy(got.data(), a, bytes, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hs.data(), sums, hs.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hp.data(), pow2, hp.size() * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hback.data(), m, hback.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i)
    CORPUS_REQUIRE(std::abs(got[i] - x[i]) <= 1e-4f * (std::abs(x[i]) + 1.0f), "tile_stencil steps");
  for (size_t blk = 0; blk < hs.size(); ++blk) {
    float s = 0.0f;
    for (int i = 0; i < threads; ++i) s += x[blk * threads + i];
    CORPUS_REQUIRE(std::abs(hs[blk] - s) <= 1e-3f * (std::abs(s) + 1.0f), "warp_partials sums");
  }
  for (size_t blk = 0; blk < hp.size(); ++blk) {
    float s = 0.0f;
    for (int i = 0; i < reduce_block; ++i) s += x[blk * reduce_block + i];
    CORPUS_REQUIRE(std::abs(hp[blk] - s) <= 1e-3f * (std::abs(s) + 1.0f), "pow2_block_sum sums");
  }
  for (int i = 0; i < rows * cols; ++i) CORPUS_REQUIRE(hback[i] == hm[i], "tile_transpose twice");
  std::printf("launch_assumptions: n=%d, %d steps, block sums %.3f %.3f\n", n, steps, hs[0], hp[0]);
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaFree(sums));
  CORPUS_CHECK(cudaFree(pow2));
  CORPUS_CHECK(cudaFree(m));
  CORPUS_CHECK(cudaFree(mt));
  corpus::result_ok();
  return 0;
}
