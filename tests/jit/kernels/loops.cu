// Two nested loops and one separate loop: 3 natural loops, depth 2.
__global__ void loops(float *data, int rows, int cols, int passes) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) data[r * cols + c] *= 2.0f;
  for (int p = 0; p < passes; ++p) data[threadIdx.x] += 1.0f;
}
