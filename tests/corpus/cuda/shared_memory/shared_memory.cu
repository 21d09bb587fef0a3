// Static shared memory (a padded transpose tile) and dynamic shared memory (extern
// __shared__, sized at launch), including a kernel that uses both.
#include "corpus_check.h"

constexpr int kTile = 32;

__global__ void transpose(const float *in, float *out, int rows, int cols) {
  __shared__ float tile[kTile][kTile + 1];  // +1 avoids bank conflicts
  int x = blockIdx.x * kTile + threadIdx.x, y = blockIdx.y * kTile + threadIdx.y;
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
  __syncthreads();
  x = blockIdx.y * kTile + threadIdx.x;
  y = blockIdx.x * kTile + threadIdx.y;
  if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}

// Per-block sums in dynamic shared memory; blockDim.x must be a power of two.
__global__ void block_reduce(const float *in, float *partial, int n) {
  extern __shared__ float scratch[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  scratch[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) scratch[threadIdx.x] += scratch[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = scratch[0];
}

// Dynamic shared memory holds an int histogram, static shared memory a block-wide flag.
__global__ void histogram(const int *in, int *bins, int n, int nbins) {
  extern __shared__ int local_bins[];
  __shared__ int any_negative;
  if (threadIdx.x == 0) any_negative = 0;
  for (int b = threadIdx.x; b < nbins; b += blockDim.x) local_bins[b] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (in[i] < 0) any_negative = 1;
    else atomicAdd(&local_bins[in[i] % nbins], 1);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < nbins; b += blockDim.x)
    atomicAdd(&bins[b], any_negative ? -1000000 : local_bins[b]);
}

int main() {
  const int rows = 96, cols = 64, n = rows * cols, nbins = 40;
  float *a, *t, *partial;
  int *values, *bins;
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&t, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&values, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&bins, nbins * sizeof(int)));
  std::vector<float> ha(n);
  std::vector<int> hv(n);
  for (int i = 0; i < n; ++i) {
    ha[i] = (float)(i % 97) * 0.25f;
    hv[i] = (i * 13) % 211;
  }
  CORPUS_CHECK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(values, hv.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(t, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(bins, 0, nbins * sizeof(int)));

  { corpus::Launch l("transpose(float const*, float*, int, int)",
                     {corpus::buffer("a", a, n * sizeof(float)), corpus::buffer("t", t, n * sizeof(float))});
    l.before();
    transpose<<<dim3(cols / kTile, rows / kTile), dim3(kTile, kTile)>>>(a, t, rows, cols);
    l.after(); }

  // Two block sizes: different dynamic shared sizes for the same kernel.
  const int blocks[2] = {128, 512};
  std::vector<float> sums;
  for (int block : blocks) {
    int grid = (n + block - 1) / block;
    CORPUS_CHECK(cudaMalloc(&partial, grid * sizeof(float)));
    CORPUS_CHECK(cudaMemset(partial, 0, grid * sizeof(float)));
    corpus::Launch l("block_reduce(float const*, float*, int)",
                     {corpus::buffer("t", t, n * sizeof(float)), corpus::buffer("partial", partial, grid * sizeof(float))});
    l.before();
    block_reduce<<<grid, block, block * sizeof(float)>>>(t, partial, n);
    l.after();
    std::vector<float> hp(grid);
    CORPUS_CHECK(cudaMemcpy(hp.data(), partial, grid * sizeof(float), cudaMemcpyDeviceToHost));
    float s = 0.0f;
    for (float p : hp) s += p;
    sums.push_back(s);
    CORPUS_CHECK(cudaFree(partial));
  }
  { corpus::Launch l("histogram(int const*, int*, int, int)",
                     {corpus::buffer("values", values, n * sizeof(int)), corpus::buffer("bins", bins, nbins * sizeof(int))});
    l.before();
    histogram<<<8, 256, nbins * sizeof(int)>>>(values, bins, n, nbins);
    l.after(); }

  std::vector<float> ht(n);
  std::vector<int> hb(nbins);
  CORPUS_CHECK(cudaMemcpy(ht.data(), t, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hb.data(), bins, nbins * sizeof(int), cudaMemcpyDeviceToHost));
  float total = 0.0f;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      CORPUS_REQUIRE(ht[c * rows + r] == ha[r * cols + c], "transpose");
      total += ha[r * cols + c];
    }
  CORPUS_REQUIRE(sums[0] == total && sums[1] == total, "block_reduce");  // all partial sums are exact
  std::vector<int> expect(nbins, 0);
  for (int v : hv) expect[v % nbins] += 1;
  CORPUS_REQUIRE(hb == expect, "histogram");
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(t));
  CORPUS_CHECK(cudaFree(values));
  CORPUS_CHECK(cudaFree(bins));
  corpus::result_ok();
  return 0;
}
