// __device__ and __constant__ globals (scalars, arrays, structs): set from the host with
// cudaMemcpyToSymbol, read and written by kernels, read back with cudaMemcpyFromSymbol.
#include <cstring>

#include "corpus_check.h"

struct Params {  // 24 bytes with padding after `tag` and `offset`
  short tag;
  float gain;
  int offset;
  double bias;
};

__constant__ float c_coeffs[8];
__constant__ Params c_params;
__constant__ int c_scale;
__device__ int g_counter;
__device__ int g_hist[16];
__device__ Params g_last;
__device__ float g_table[4] = {1.0f, 2.0f, 4.0f, 8.0f};  // statically initialised

__global__ void apply_coeffs(const int *in, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = (float)(in[i] * c_scale + c_params.offset);
  out[i] = v * c_coeffs[i % 8] * c_params.gain + g_table[i % 4];
}

__global__ void count_and_bin(const int *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (in[i] % 3 == 0) atomicAdd(&g_counter, 1);
  atomicAdd(&g_hist[in[i] % 16], 1);
}

__global__ void snapshot_params() {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  // Field by field, so the padding bytes of g_last keep their (zero) initial value.
  g_last.tag = c_params.tag + 1;
  g_last.gain = c_params.gain;
  g_last.offset = c_params.offset;
  g_last.bias = c_params.bias * 2.0 + (double)g_counter;
  g_table[0] = (float)g_hist[0];
}

int main() {
  const int n = 4096;
  int *din;
  float *dout;
  CORPUS_CHECK(cudaMalloc(&din, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&dout, n * sizeof(float)));
  std::vector<int> hin(n);
  for (int i = 0; i < n; ++i) hin[i] = (i * 37 + 11) % 101;
  CORPUS_CHECK(cudaMemcpy(din, hin.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(dout, 0, n * sizeof(float)));

  float coeffs[8] = {0.5f, 1.0f, 1.5f, 2.0f, -0.5f, -1.0f, 0.25f, 0.125f};
  Params params;
  std::memset(&params, 0, sizeof(params));  // padding bytes are part of the checksums
  params.tag = 7;
  params.gain = 2.0f;
  params.offset = -3;
  params.bias = 0.75;
  int scale = 3, zero = 0, zeros[16] = {};
  CORPUS_CHECK(cudaMemcpyToSymbol(c_coeffs, coeffs, sizeof(coeffs)));
  CORPUS_CHECK(cudaMemcpyToSymbol(c_params, &params, sizeof(params)));
  CORPUS_CHECK(cudaMemcpyToSymbol(c_scale, &scale, sizeof(scale)));
  CORPUS_CHECK(cudaMemcpyToSymbol(g_counter, &zero, sizeof(zero)));
  CORPUS_CHECK(cudaMemcpyToSymbol(g_hist, zeros, sizeof(zeros)));

  {
    corpus::Launch l("apply_coeffs(int const*, float*, int)",
                     {corpus::buffer("in", din, n * sizeof(int)), corpus::buffer("out", dout, n * sizeof(float)),
                      CORPUS_SYMBOL(c_coeffs), CORPUS_SYMBOL(c_params), CORPUS_SYMBOL(c_scale),
                      CORPUS_SYMBOL(g_table)});
    l.before();
    apply_coeffs<<<n / 256, 256>>>(din, dout, n);
    l.after();
  }
  {
    corpus::Launch l("count_and_bin(int const*, int)",
                     {corpus::buffer("in", din, n * sizeof(int)), CORPUS_SYMBOL(g_counter), CORPUS_SYMBOL(g_hist)});
    l.before();
    count_and_bin<<<n / 128, 128>>>(din, n);
    l.after();
  }
  {
    corpus::Launch l("snapshot_params()", {CORPUS_SYMBOL(c_params), CORPUS_SYMBOL(g_counter), CORPUS_SYMBOL(g_hist),
                                           CORPUS_SYMBOL(g_last), CORPUS_SYMBOL(g_table)});
    l.before();
    snapshot_params<<<1, 32>>>();
    l.after();
  }

  std::vector<float> hout(n);
  int counter = 0, hist[16];
  Params last;
  float table[4];
  CORPUS_CHECK(cudaMemcpy(hout.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpyFromSymbol(&counter, g_counter, sizeof(counter)));
  CORPUS_CHECK(cudaMemcpyFromSymbol(hist, g_hist, sizeof(hist)));
  CORPUS_CHECK(cudaMemcpyFromSymbol(&last, g_last, sizeof(last)));
  CORPUS_CHECK(cudaMemcpyFromSymbol(table, g_table, sizeof(table)));
  int expect_counter = 0, expect_hist[16] = {};
  const float init_table[4] = {1.0f, 2.0f, 4.0f, 8.0f};
  for (int i = 0; i < n; ++i) {
    float v = (float)(hin[i] * scale + params.offset);
    CORPUS_REQUIRE(hout[i] == v * coeffs[i % 8] * params.gain + init_table[i % 4], "apply_coeffs");
    expect_counter += hin[i] % 3 == 0;
    expect_hist[hin[i] % 16] += 1;
  }
  CORPUS_REQUIRE(counter == expect_counter, "g_counter");
  CORPUS_REQUIRE(std::memcmp(hist, expect_hist, sizeof(hist)) == 0, "g_hist");
  CORPUS_REQUIRE(last.tag == 8 && last.bias == 1.5 + expect_counter && last.offset == -3, "g_last");
  CORPUS_REQUIRE(table[0] == (float)expect_hist[0] && table[3] == 8.0f, "g_table");
  CORPUS_CHECK(cudaFree(din));
  CORPUS_CHECK(cudaFree(dout));
  corpus::result_ok();
  return 0;
}
