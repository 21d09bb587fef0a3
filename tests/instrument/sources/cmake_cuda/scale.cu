#include <cstdio>

__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main() {
  const int n = 1024;
  float *x = nullptr;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) {
    std::printf("no GPU\n");
    return 0;
  }
  scale<<<(n + 255) / 256, 256>>>(x, 2.0f, n);
  cudaDeviceSynchronize();
  cudaFree(x);
  std::printf("done\n");
  return 0;
}
