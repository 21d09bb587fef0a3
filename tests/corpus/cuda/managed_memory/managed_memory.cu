// Unified (managed) memory from cudaMallocManaged: the host writes it, a kernel scales it,
// the host reads the result without a copy. mneme record refuses managed memory (the
// host can change it behind a snapshot's back) and must name this allocation site.
#include "corpus_check.h"

__global__ void scale_in_place(float *x, int n, float factor) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

int main() {
  const int n = 4096;
  const size_t bytes = n * sizeof(float);
  float *x;
  CORPUS_CHECK(cudaMallocManaged(&x, bytes));
  for (int i = 0; i < n; ++i) x[i] = (float)i;
  { corpus::Launch l("scale_in_place(float*, int, float)", {corpus::buffer("x", x, bytes)});
    l.before(); scale_in_place<<<(n + 255) / 256, 256>>>(x, n, 3.0f); l.after(); }
  CORPUS_CHECK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(x[i] == 3.0f * i, "3i, read on the host");
  CORPUS_CHECK(cudaFree(x));
  corpus::result_ok();
  return 0;
}
