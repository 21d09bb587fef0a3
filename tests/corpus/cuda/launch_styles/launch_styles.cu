// Kernels launched in every host-side way: triple chevrons on a function pointer (chosen
// from a table at run time), cudaLaunchKernel with an argument array, and cudaLaunchKernelEx.
#include "corpus_check.h"

__global__ void add_const(int *x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += value;
}

__global__ void mul_const(int *x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= value;
}

__global__ void xor_index(int *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] ^= i;
}

using IntOp = void (*)(int *, int, int);

int main(int argc, char **argv) {
  const int n = 1000, block = 128, grid = (n + block - 1) / block;
  const size_t bytes = n * sizeof(int);
  int *x;
  CORPUS_CHECK(cudaMalloc(&x, bytes));
  CORPUS_CHECK(cudaMemset(x, 0, bytes));

  // Triple chevrons on a function pointer picked from a table (index fixed, but opaque to
  // the compiler because it flows through argc).
  const IntOp table[2] = {add_const, mul_const};
  const char *names[2] = {"add_const(int*, int, int)", "mul_const(int*, int, int)"};
  const int order[3] = {0, 1, 0};
  const int values[3] = {5, 3, -2};
  for (int k = 0; k < 3; ++k) {
    int which = (order[k] + argc - 1) % 2;
    IntOp op = table[which];
    corpus::Launch l(names[which], {corpus::buffer("x", x, bytes)});
    l.before();
    op<<<grid, block>>>(x, values[k], n);
    l.after();
  }

  // cudaLaunchKernel: the launch the runtime API itself performs for <<<>>>.
  {
    int value = 7, count = n;
    void *args[] = {&x, &value, &count};
    corpus::Launch l("add_const(int*, int, int)", {corpus::buffer("x", x, bytes)});
    l.before();
    CORPUS_CHECK(cudaLaunchKernel((const void *)add_const, dim3(grid), dim3(block), args, 0, nullptr));
    l.after();
  }

  // cudaLaunchKernelEx with a launch configuration struct, on a created stream.
  {
    cudaStream_t stream;
    CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid / 2 + 1);
    config.blockDim = dim3(block * 2);
    config.dynamicSmemBytes = 0;
    config.stream = stream;
    corpus::Launch l("xor_index(int*, int)", {corpus::buffer("x", x, bytes)});
    l.before();
    CORPUS_CHECK(cudaLaunchKernelEx(&config, xor_index, x, n));
    CORPUS_CHECK(cudaStreamSynchronize(stream));
    l.after();
    CORPUS_CHECK(cudaStreamDestroy(stream));
  }

  std::vector<int> hx(n);
  CORPUS_CHECK(cudaMemcpy(hx.data(), x, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(hx[i] == (((0 + 5) * 3 - 2 + 7) ^ i), "launch sequence");
  CORPUS_CHECK(cudaFree(x));
  corpus::result_ok();
  return 0;
}
