// Stream-ordered allocation: cudaMallocAsync/cudaFreeAsync on the default pool and on a
// created pool, with a buffer freed and a new one allocated between launches (the pool may
// hand back the same addresses).
#include "corpus_check.h"

__global__ void iota_scaled(int *x, int n, int scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = i * scale;
}

__global__ void add_arrays(const int *a, const int *b, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

int main() {
  const int n = 3000, block = 256, grid = (n + block - 1) / block;
  const size_t bytes = n * sizeof(int);
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int device = 0;
  CORPUS_CHECK(cudaGetDevice(&device));
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool;
  CORPUS_CHECK(cudaMemPoolCreate(&pool, &props));

  int *a, *b, *sum;
  CORPUS_CHECK(cudaMallocAsync(&a, bytes, stream));
  CORPUS_CHECK(cudaMallocFromPoolAsync(&b, bytes, pool, stream));
  CORPUS_CHECK(cudaMemsetAsync(a, 0, bytes, stream));
  CORPUS_CHECK(cudaMemsetAsync(b, 0, bytes, stream));
  { corpus::Launch l("iota_scaled(int*, int, int)", {corpus::buffer("a", a, bytes)});
    l.before(); iota_scaled<<<grid, block, 0, stream>>>(a, n, 2); l.after(); }
  { corpus::Launch l("iota_scaled(int*, int, int)", {corpus::buffer("b", b, bytes)});
    l.before(); iota_scaled<<<grid, block, 0, stream>>>(b, n, 5); l.after(); }
  CORPUS_CHECK(cudaMallocAsync(&sum, bytes, stream));
  CORPUS_CHECK(cudaMemsetAsync(sum, 0, bytes, stream));
  { corpus::Launch l("add_arrays(int const*, int const*, int*, int)",
                     {corpus::buffer("a", a, bytes), corpus::buffer("b", b, bytes), corpus::buffer("sum", sum, bytes)});
    l.before(); add_arrays<<<grid, block, 0, stream>>>(a, b, sum, n); l.after(); }

  // Free `a` and allocate `c` in stream order: c may reuse a's memory.
  int *c;
  CORPUS_CHECK(cudaFreeAsync(a, stream));
  CORPUS_CHECK(cudaMallocAsync(&c, bytes, stream));
  CORPUS_CHECK(cudaMemsetAsync(c, 0, bytes, stream));
  { corpus::Launch l("add_arrays(int const*, int const*, int*, int)",
                     {corpus::buffer("sum", sum, bytes), corpus::buffer("b", b, bytes), corpus::buffer("c", c, bytes)});
    l.before(); add_arrays<<<grid, block, 0, stream>>>(sum, b, c, n); l.after(); }

  std::vector<int> hc(n);
  CORPUS_CHECK(cudaMemcpyAsync(hc.data(), c, bytes, cudaMemcpyDeviceToHost, stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(hc[i] == 12 * i, "2i + 5i + 5i");
  CORPUS_CHECK(cudaFreeAsync(b, stream));
  CORPUS_CHECK(cudaFreeAsync(c, stream));
  CORPUS_CHECK(cudaFreeAsync(sum, stream));
  CORPUS_CHECK(cudaStreamSynchronize(stream));
  CORPUS_CHECK(cudaMemPoolDestroy(pool));
  CORPUS_CHECK(cudaStreamDestroy(stream));
  corpus::result_ok();
  return 0;
}
