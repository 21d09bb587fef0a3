// Kernels that assume their launch shape, for the guarded probe variant (llvm_guard.cpp):
// a shared array sized by a constant, an extern shared array sized at launch, atomics on
// global memory and a __device__ array indexed by the thread.
#define BLOCK 128

__device__ float table[BLOCK];

__global__ void shared_tile(const float *in, float *out) {
  __shared__ float tile[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  tile[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = tile[BLOCK - 1 - threadIdx.x] + table[threadIdx.x];
}

__global__ void dynamic_sum(const float *in, float *out, unsigned *count) {
  extern __shared__ float scratch[];
  scratch[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (unsigned t = 0; t < blockDim.x; ++t) s += scratch[t];
    out[blockIdx.x] = s;
    atomicAdd(count, 1u);
  }
}
