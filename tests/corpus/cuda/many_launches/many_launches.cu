// Many launches of a few kernels under different configurations: 1-D and 2-D grids and
// blocks, different dynamic shared sizes, the legacy default stream and a created stream.
// Grid-stride loops make every configuration compute the same function.
#include "corpus_check.h"

__global__ void saxpy(float a, const float *x, float *y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] = a * x[i] + y[i];
}

// Rows are spread over the y and z dimensions, columns over x: any 1/2/3-D configuration
// visits each element exactly once.
__global__ void add_coords(int *m, int rows, int cols) {
  int nz = gridDim.z * blockDim.z, z = blockIdx.z * blockDim.z + threadIdx.z;
  int first_row = (blockIdx.y * blockDim.y + threadIdx.y) * nz + z;
  for (int r = first_row; r < rows; r += gridDim.y * blockDim.y * nz)
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x)
      m[r * cols + c] += r * 1000 + c;
}

// Stages `chunk` elements per block iteration in dynamic shared memory, then reverses them.
__global__ void reverse_chunks(const int *in, int *out, int n, int chunk) {
  extern __shared__ int stage[];
  for (int base = blockIdx.x * chunk; base < n; base += gridDim.x * chunk) {
    for (int j = threadIdx.x; j < chunk; j += blockDim.x) stage[j] = base + j < n ? in[base + j] : 0;
    __syncthreads();
    for (int j = threadIdx.x; j < chunk; j += blockDim.x)
      if (base + j < n) out[base + j] = stage[chunk - 1 - j];
    __syncthreads();
  }
}

int main() {
  const int n = 4096, rows = 48, cols = 80;
  float *x, *y;
  int *m, *rin, *rout;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&y, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&m, rows * cols * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&rin, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&rout, n * sizeof(int)));
  std::vector<float> hx(n);
  std::vector<int> hr(n);
  for (int i = 0; i < n; ++i) {
    hx[i] = 0.5f * (float)(i % 10);
    hr[i] = i * 3;
  }
  CORPUS_CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(rin, hr.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(y, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(m, 0, rows * cols * sizeof(int)));
  CORPUS_CHECK(cudaMemset(rout, 0, n * sizeof(int)));
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreate(&stream));

  const int saxpy_configs[][2] = {{1, 32}, {2, 64}, {16, 256}, {7, 96}, {n / 128, 128}, {1, 1024}};
  int k = 0;
  for (const auto &cfg : saxpy_configs) {
    corpus::Launch l("saxpy(float, float const*, float*, int)",
                     {corpus::buffer("x", x, n * sizeof(float)), corpus::buffer("y", y, n * sizeof(float))});
    l.before();
    saxpy<<<cfg[0], cfg[1], 0, k % 2 ? stream : 0>>>(1.0f + (float)k, x, y, n);
    l.after();
    ++k;
  }
  const dim3 grids[] = {dim3(1, 1), dim3(3, 2), dim3(5, 6, 1)}, blocks[] = {dim3(32, 8), dim3(16, 16), dim3(8, 4, 2)};
  for (int c = 0; c < 3; ++c) {
    corpus::Launch l("add_coords(int*, int, int)", {corpus::buffer("m", m, rows * cols * sizeof(int))});
    l.before();
    add_coords<<<grids[c], blocks[c], 0, stream>>>(m, rows, cols);
    l.after();
  }
  const int chunks[][3] = {{64, 32, 4}, {128, 128, 8}, {256, 64, 16}, {4096, 512, 1}};  // chunk, block, grid
  for (const auto &cfg : chunks) {
    corpus::Launch l("reverse_chunks(int const*, int*, int, int)",
                     {corpus::buffer("rin", rin, n * sizeof(int)), corpus::buffer("rout", rout, n * sizeof(int))});
    l.before();
    reverse_chunks<<<cfg[2], cfg[1], cfg[0] * sizeof(int)>>>(rin, rout, n, cfg[0]);
    l.after();
  }

  std::vector<float> hy(n);
  std::vector<int> hm(rows * cols), ho(n);
  CORPUS_CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hm.data(), m, rows * cols * sizeof(int), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(ho.data(), rout, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    CORPUS_REQUIRE(hy[i] == (1 + 2 + 3 + 4 + 5 + 6) * hx[i], "saxpy sequence");
    CORPUS_REQUIRE(ho[i] == hr[n - 1 - i], "reverse_chunks (last launch reverses the whole array)");
  }
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) CORPUS_REQUIRE(hm[r * cols + c] == 3 * (r * 1000 + c), "add_coords");
  CORPUS_CHECK(cudaStreamDestroy(stream));
  CORPUS_CHECK(cudaFree(x));
  CORPUS_CHECK(cudaFree(y));
  CORPUS_CHECK(cudaFree(m));
  CORPUS_CHECK(cudaFree(rin));
  CORPUS_CHECK(cudaFree(rout));
  corpus::result_ok();
  return 0;
}
