// Driver API memory next to the runtime API: a buffer from cuMemAlloc (in the primary
// context the runtime made current) used by a <<<>>> kernel, and a kernel launched with
// cuLaunchKernel on the CUfunction that cudaGetFuncBySymbol returns. Links -lcuda.
#include <cuda.h>

#include "corpus_check.h"

#define DRIVER_CHECK(call)                                                              \
  do {                                                                                  \
    CUresult res_ = (call);                                                             \
    if (res_ != CUDA_SUCCESS) {                                                         \
      const char *name_ = "?";                                                          \
      cuGetErrorName(res_, &name_);                                                     \
      std::fprintf(stderr, "corpus: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, name_); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

__global__ void square_plus_index(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * x[i] + (float)i;
}

__global__ void halve(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 0.5f;
}

int main() {
  const int n = 2048;
  const size_t bytes = n * sizeof(float);
  CORPUS_CHECK(cudaFree(nullptr));  // creates and makes current the primary context
  DRIVER_CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  DRIVER_CHECK(cuCtxGetCurrent(&ctx));
  CORPUS_REQUIRE(ctx != nullptr, "the runtime made a context current");

  CUdeviceptr dptr = 0;
  DRIVER_CHECK(cuMemAlloc(&dptr, bytes));
  DRIVER_CHECK(cuMemsetD32(dptr, 0x40000000u, n));  // 2.0f
  float *x = reinterpret_cast<float *>(dptr);

  { corpus::Launch l("square_plus_index(float*, int)", {corpus::buffer("x", x, bytes)});
    l.before(); square_plus_index<<<n / 128, 128>>>(x, n); l.after(); }

  cudaFunction_t fn;
  CORPUS_CHECK(cudaGetFuncBySymbol(&fn, (const void *)halve));
  {
    int count = n;
    void *args[] = {&x, &count};
    corpus::Launch l("halve(float*, int)", {corpus::buffer("x", x, bytes)});
    l.before();
    DRIVER_CHECK(cuLaunchKernel(reinterpret_cast<CUfunction>(fn), n / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
    l.after();
  }

  std::vector<float> hx(n);
  DRIVER_CHECK(cuMemcpyDtoH(hx.data(), dptr, bytes));
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(hx[i] == 0.5f * (4.0f + (float)i), "square, add index, halve");
  DRIVER_CHECK(cuMemFree(dptr));
  corpus::result_ok();
  return 0;
}
