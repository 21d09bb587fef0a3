// Kernels for the fatbinary reader tests (tests/instrument/test_fatbin.py), built with nvcc.
#include <cstdio>

namespace ns {
template <typename T>
__global__ void scale(T *x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
}  // namespace ns

extern "C" __global__ void __launch_bounds__(128, 2) plain_c(int *out) {
  __shared__ int tile[128];
  tile[threadIdx.x] = threadIdx.x * 3;
  __syncthreads();
  out[threadIdx.x] = tile[127 - threadIdx.x];
}

__device__ float helper(float v) { return v * v + 1.0f; }

__global__ void uses_helper(float *x) { x[threadIdx.x] = helper(x[threadIdx.x]); }

int main() {
  float *d = nullptr;
  if (cudaMalloc(&d, 4096) != cudaSuccess) return 1;
  ns::scale<float><<<1, 32>>>(d, 2.0f, 32);
  ns::scale<double><<<1, 32>>>(reinterpret_cast<double *>(d), 2.0, 32);
  plain_c<<<1, 128>>>(reinterpret_cast<int *>(d));
  uses_helper<<<1, 32>>>(d);
  std::printf("%d\n", static_cast<int>(cudaDeviceSynchronize()));
  return 0;
}
