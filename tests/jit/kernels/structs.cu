// By-value struct argument and a 3-D launch.
struct Params {
  int count;
  float scale;
  double *out;
};

__global__ void use_params(Params p, const float *in) {
  int i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (i < p.count) p.out[i] = in[i] * p.scale;
}

__global__ void __launch_bounds__(128, 4) bounded(float *x) { x[threadIdx.x] += 1.0f; }

// 1 KiB of static shared memory and a barrier.
__global__ void reverse_tile(float *x) {
  __shared__ float tile[256];
  tile[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  x[threadIdx.x] = tile[255 - threadIdx.x];
}
