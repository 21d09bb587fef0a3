// Specialization target: n, a and the pointers are known at replay time.
__global__ void saxpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// A loop whose trip count is an argument: specializing it lets LLVM unroll.
__global__ void row_sum(const float *m, float *out, int cols) {
  int row = blockIdx.x * blockDim.x + threadIdx.x;
  float sum = 0.0f;
  for (int c = 0; c < cols; ++c) sum += m[row * cols + c];
  out[row] = sum;
}
