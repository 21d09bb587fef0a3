// Crashes on purpose (abort(), SIGABRT) right after its second kernel launch completes:
// a recording of the first two launches must still be complete on disk.
#include <cstdlib>

#include "corpus_check.h"

__global__ void fill_pattern(unsigned *x, int n, unsigned seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (unsigned)i * 2654435761u ^ seed;
}

__global__ void rotate_bits(unsigned *x, int n, int r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (x[i] << r) | (x[i] >> (32 - r));
}

int main() {
  const int n = 1500;
  const size_t bytes = n * sizeof(unsigned);
  unsigned *x;
  CORPUS_CHECK(cudaMalloc(&x, bytes));
  CORPUS_CHECK(cudaMemset(x, 0, bytes));
  { corpus::Launch l("fill_pattern(unsigned int*, int, unsigned int)", {corpus::buffer("x", x, bytes)});
    l.before(); fill_pattern<<<(n + 255) / 256, 256>>>(x, n, 0x5eedu); l.after(); }
  { corpus::Launch l("rotate_bits(unsigned int*, int, int)", {corpus::buffer("x", x, bytes)});
    l.before(); rotate_bits<<<(n + 127) / 128, 128>>>(x, n, 7); l.after(); }
  std::fprintf(stderr, "crash_after_launch: aborting on purpose after launch 1\n");
  std::abort();  // no cudaFree, no MNEME-RESULT: the process dies here
}
