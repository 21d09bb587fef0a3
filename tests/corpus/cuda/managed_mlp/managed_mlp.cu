// A small MLP kept entirely in unified memory, as tutorials and many research codes do:
// weights and activations come from cudaMallocManaged, the host writes each step's input
// and reads each step's output directly (no copies), and the program times its own GEMM
// kernels with CUDA events and prints them. Under a recorder that serves managed memory
// from host memory, these GEMMs read across the host link: the printed times show it.
//   managed_mlp [steps]   (default 12)
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"
#include "fidelity_timing.h"

constexpr int kTile = 16;

// out[b, o] = act(sum_i in[b, i] * w[i, o] + bias[o]); a shared-memory tiled GEMM.
__global__ void dense(const float *in, const float *w, const float *bias, float *out, int batch, int inputs,
                      int outputs, int relu) {
  __shared__ float a[kTile][kTile], b[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int k = 0; k < inputs; k += kTile) {
    a[threadIdx.y][threadIdx.x] = row < batch && k + threadIdx.x < inputs ? in[row * inputs + k + threadIdx.x] : 0.0f;
    b[threadIdx.y][threadIdx.x] = col < outputs && k + threadIdx.y < inputs ? w[(k + threadIdx.y) * outputs + col] : 0.0f;
    __syncthreads();
    for (int j = 0; j < kTile; ++j) acc += a[threadIdx.y][j] * b[j][threadIdx.x];
    __syncthreads();
  }
  if (row < batch && col < outputs) {
    float v = acc + bias[col];
    out[row * outputs + col] = relu && v < 0.0f ? 0.0f : v;
  }
}

int main(int argc, char **argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 12;
  const int batch = 256, width = 1024, layers = 3;
  if (steps < 3) {
    std::fprintf(stderr, "managed_mlp: steps must be at least 3\n");
    return 64;
  }
  std::vector<float *> weights(layers), biases(layers), acts(layers + 1);
  for (int l = 0; l < layers; ++l) {
    CORPUS_CHECK(cudaMallocManaged(&weights[l], size_t(width) * width * sizeof(float)));
    CORPUS_CHECK(cudaMallocManaged(&biases[l], width * sizeof(float)));
    for (int i = 0; i < width * width; ++i) weights[l][i] = ((i * 7 + l * 13) % 31 - 15) / (16.0f * width);
    for (int i = 0; i < width; ++i) biases[l][i] = ((i + l) % 5) * 0.01f;
  }
  for (int l = 0; l <= layers; ++l) CORPUS_CHECK(cudaMallocManaged(&acts[l], size_t(batch) * width * sizeof(float)));
  fidelity::EventTimer timer;
  std::vector<float> gemm_ms;
  double checksum = 0.0;
  dim3 block(kTile, kTile), grid(width / kTile, batch / kTile);
  const size_t act_bytes = size_t(batch) * width * sizeof(float), w_bytes = size_t(width) * width * sizeof(float);
  for (int step = 0; step < steps; ++step) {
    for (int i = 0; i < batch * width; ++i) acts[0][i] = ((i + step * 3) % 17) * 0.0625f;  // the host writes the input
    for (int l = 0; l < layers; ++l) {
      if (step == 0) {  // the protocol's checksums on each layer's first launch
        corpus::Launch launch("dense(float const*, float const*, float const*, float*, int, int, int, int)",
                              {corpus::buffer("in", acts[l], act_bytes), corpus::buffer("w", weights[l], w_bytes),
                               corpus::buffer("bias", biases[l], width * sizeof(float)),
                               corpus::buffer("out", acts[l + 1], act_bytes)});
        launch.before();
        dense<<<grid, block>>>(acts[l], weights[l], biases[l], acts[l + 1], batch, width, width, l + 1 < layers);
        launch.after();
      } else {
        timer.start();
        dense<<<grid, block>>>(acts[l], weights[l], biases[l], acts[l + 1], batch, width, width, l + 1 < layers);
        gemm_ms.push_back(timer.stop_ms());
      }
    }
    CORPUS_CHECK(cudaDeviceSynchronize());
    double s = fidelity::sum(acts[layers], size_t(batch) * width);  // the host reads the output
    if (step == 0) checksum = s;
    std::printf("step %d: output sum %.6e\n", step, s);
  }
  std::vector<float> sorted(gemm_ms);
  std::sort(sorted.begin(), sorted.end());
  std::printf("GEMM time: median %.4f ms, min %.4f ms over %zu launches\n", sorted[sorted.size() / 2], sorted[0],
              sorted.size());
  corpus::output("first_output_sum", checksum, 6);
  // What the application holds is managed memory (under a recorder too): 3 is cudaMemoryTypeManaged.
  cudaPointerAttributes attributes{};
  CORPUS_CHECK(cudaPointerGetAttributes(&attributes, weights[0]));
  corpus::output("weights_memory_type", (unsigned long long)attributes.type);
  for (int l = 0; l < layers; ++l) {
    cudaFree(weights[l]);
    cudaFree(biases[l]);
  }
  for (auto *a : acts) cudaFree(a);
  corpus::result_ok();
  return 0;
}
