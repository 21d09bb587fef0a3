// Kernels the replay-engine tests record by hand (tests/replay/replay_support.py).

// Heap regions and scalar arguments.
__global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Device globals: one read, one written (restored per iteration, verified).
__device__ int g_bias;
__device__ unsigned int g_count;

__global__ void add_bias(int *data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    data[i] += g_bias;
    atomicAdd(&g_count, 1u);
  }
}

// Dynamic shared memory: each block reverses its chunk of blockDim.x elements.
__global__ void reverse_chunks(float *data) {
  extern __shared__ float tile[];
  int t = threadIdx.x;
  int base = blockIdx.x * blockDim.x;
  tile[t] = data[base + t];
  __syncthreads();
  data[base + t] = tile[blockDim.x - 1 - t];
}

// Floating-point math whose last bits depend on the compiler (tolerance checks).
__global__ void smooth(const float *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = sinf(in[i]) * 0.5f + expf(-in[i] * in[i]);
}

// No bound check, as some real kernels have none: a grid larger than the recorded one
// writes past the data (a sparse region's zero range, in test_sparse_replay_gpu.py).
__global__ void add_unchecked(float *data, float value) {
  data[blockIdx.x * blockDim.x + threadIdx.x] += value;
}
