// cuBLAS and cuBLASLt called from a C++ program, the way applications call them: an SGEMM,
// a BF16 GEMM on tensor cores (cublasGemmEx), a dot product (cublasSdot, result to the host),
// and a cuBLASLt matmul with a bias + GELU epilogue chosen by cuBLASLt's heuristic. Two
// kernels of its own fill the inputs. The library kernels ship as SASS inside libcublas /
// libcublasLt: recording them is recording code the program never compiled.
//
// Each result is checked against a double-precision CPU reference (exit 2 and one stderr line
// when it is off) and printed as `CHECKSUM <name> <value>` lines; a failing CUDA or cuBLAS call
// ends the program with exit 1 and one stderr line. Last line: `RESULT ok`.
//
//   nvcc -arch=sm_90 -O2 cublas_gemm.cu -o cublas_gemm -lcublasLt -lcublas   (static cudart)
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CUDA_CHECK(call)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "cublas_gemm: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__,    \
                   #call, cudaGetErrorName(e_), cudaGetErrorString(e_));                      \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

#define CUBLAS_CHECK(call)                                                                    \
  do {                                                                                        \
    cublasStatus_t s_ = (call);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                        \
      std::fprintf(stderr, "cublas_gemm: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__,    \
                   #call, cublasGetStatusName(s_), cublasGetStatusString(s_));                \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int M = 256, N = 192, K = 128;  // column-major: A is MxK, B is KxN, C is MxN
constexpr size_t kWorkspaceBytes = 4u << 20;

// A value in [-1, 1) from an index and a seed: the same on the host and the device.
__host__ __device__ inline float pattern(unsigned i, unsigned seed) {
  unsigned x = i * 2654435761u ^ (seed * 0x9e3779b9u);
  x ^= x >> 15;
  x *= 0x2c1b3c6du;
  x ^= x >> 12;
  return static_cast<float>(x & 0xffffu) / 32768.0f - 1.0f;
}

__global__ void fill_pattern(float *out, int n, unsigned seed, float scale) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = scale * pattern(static_cast<unsigned>(i), seed);
}

__global__ void to_bf16(const float *in, __nv_bfloat16 *out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

std::vector<float> host_pattern(int n, unsigned seed, float scale) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = scale * pattern(static_cast<unsigned>(i), seed);
  return v;
}

float *device_pattern(int n, unsigned seed, float scale, cudaStream_t stream) {
  float *d = nullptr;
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
  fill_pattern<<<64, 256, 0, stream>>>(d, n, seed, scale);
  CUDA_CHECK(cudaGetLastError());
  return d;
}

std::vector<float> download(const float *d, int n, cudaStream_t stream) {
  std::vector<float> v(n);
  CUDA_CHECK(cudaMemcpyAsync(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

// alpha * A * B + beta * C in double, column-major.
std::vector<double> reference_gemm(const std::vector<float> &a, const std::vector<float> &b,
                                   const std::vector<float> &c, float alpha, float beta) {
  std::vector<double> out(static_cast<size_t>(M) * N);
  for (int j = 0; j < N; ++j)
    for (int i = 0; i < M; ++i) {
      double sum = 0;
      for (int k = 0; k < K; ++k) sum += static_cast<double>(a[i + k * M]) * b[k + j * K];
      out[i + j * M] = alpha * sum + (c.empty() ? 0.0 : beta * static_cast<double>(c[i + j * M]));
    }
  return out;
}

// The result check: every element within an absolute plus relative tolerance.
void require_close(const char *what, const std::vector<float> &got,
                   const std::vector<double> &want, double tolerance) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tolerance * (1.0 + std::fabs(want[i]))) {
      std::fprintf(stderr, "RESULT fail %s: element %zu is %.7g, expected %.7g\n", what, i,
                   got[i], want[i]);
      std::exit(2);
    }
  }
}

void print_checksums(const char *name, const std::vector<float> &v) {
  double sum = 0, abs_sum = 0;
  for (float x : v) {
    sum += x;
    abs_sum += std::fabs(x);
  }
  std::printf("CHECKSUM %s_sum %.6g\nCHECKSUM %s_abs_sum %.6g\n", name, sum, name, abs_sum);
  std::fflush(stdout);
}

double gelu_tanh(double x) {  // the approximation cuBLASLt's GELU epilogue computes
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

}  // namespace

int main() {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  float *a = device_pattern(M * K, 1, 1.0f, stream);
  float *b = device_pattern(K * N, 2, 1.0f, stream);
  float *c = device_pattern(M * N, 3, 1.0f, stream);
  float *bias = device_pattern(M, 4, 0.5f, stream);
  const auto ha = host_pattern(M * K, 1, 1.0f), hb = host_pattern(K * N, 2, 1.0f);
  const auto hc = host_pattern(M * N, 3, 1.0f), hbias = host_pattern(M, 4, 0.5f);

  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  CUBLAS_CHECK(cublasSetStream(handle, stream));

  // SGEMM: C = 0.5 A B + 0.25 C (C is read and written)
  const float alpha = 0.5f, beta = 0.25f;
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &alpha, a, M, b, K, &beta,
                           c, M));
  const auto sgemm = download(c, M * N, stream);
  require_close("sgemm", sgemm, reference_gemm(ha, hb, hc, alpha, beta), 1e-4);
  print_checksums("sgemm", sgemm);

  // BF16 GEMM on tensor cores with FP32 accumulation and output
  __nv_bfloat16 *a16 = nullptr, *b16 = nullptr;
  float *c16 = nullptr;
  CUDA_CHECK(cudaMalloc(&a16, M * K * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&b16, K * N * sizeof(__nv_bfloat16)));
  CUDA_CHECK(cudaMalloc(&c16, M * N * sizeof(float)));
  to_bf16<<<64, 256, 0, stream>>>(a, a16, M * K);
  to_bf16<<<64, 256, 0, stream>>>(b, b16, K * N);
  CUDA_CHECK(cudaGetLastError());
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, &one, a16, CUDA_R_16BF, M,
                            b16, CUDA_R_16BF, K, &zero, c16, CUDA_R_32F, M, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
  auto ha16 = ha, hb16 = hb;  // the inputs as the GEMM sees them
  for (auto &x : ha16) x = __bfloat162float(__float2bfloat16(x));
  for (auto &x : hb16) x = __bfloat162float(__float2bfloat16(x));
  const auto gemm_bf16 = download(c16, M * N, stream);
  require_close("gemm_bf16", gemm_bf16, reference_gemm(ha16, hb16, {}, 1.0f, 0.0f), 1e-4);
  print_checksums("gemm_bf16", gemm_bf16);

  // dot product of two columns of data, result to the host
  float dot = 0;
  // over the shorter of the two (b has K*N < M*K elements: a longer dot read past b's end
  // and summed whatever memory followed it)
  constexpr int kDot = K * N < M * K ? K * N : M * K;
  CUBLAS_CHECK(cublasSdot(handle, kDot, a, 1, b, 1, &dot));
  double dot_want = 0;
  for (int i = 0; i < kDot; ++i) dot_want += static_cast<double>(ha[i]) * hb[i];
  if (std::fabs(dot - dot_want) > 1e-3 * (1.0 + std::fabs(dot_want))) {
    std::fprintf(stderr, "RESULT fail sdot: %.7g, expected %.7g\n", dot, dot_want);
    return 2;
  }
  std::printf("CHECKSUM sdot %.6g\n", dot);

  // cuBLASLt: D = gelu(A B + bias), the epilogue fused into the GEMM
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t desc;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose,
                                              sizeof(no_transpose)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &no_transpose,
                                              sizeof(no_transpose)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                              sizeof(epilogue)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof(bias)));
  cublasLtMatrixLayout_t la, lb, ld;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, M, K, M));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, K, N, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, M, N, M));
  cublasLtMatmulPreference_t preference;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &kWorkspaceBytes,
      sizeof(kWorkspaceBytes)));
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, preference, 1, &heuristic,
                                              &found));
  if (found == 0) {
    std::fprintf(stderr, "cublas_gemm: cuBLASLt has no algorithm for the GELU_BIAS matmul\n");
    return 1;
  }
  void *workspace = nullptr;
  float *d = nullptr;
  CUDA_CHECK(cudaMalloc(&workspace, kWorkspaceBytes));
  CUDA_CHECK(cudaMalloc(&d, M * N * sizeof(float)));
  CUBLAS_CHECK(cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, d, ld, d, ld,
                              &heuristic.algo, workspace, kWorkspaceBytes, stream));
  const auto lt_gelu = download(d, M * N, stream);
  auto lt_want = reference_gemm(ha, hb, {}, 1.0f, 0.0f);
  for (int j = 0; j < N; ++j)
    for (int i = 0; i < M; ++i) lt_want[i + j * M] = gelu_tanh(lt_want[i + j * M] + hbias[i]);
  require_close("lt_gelu_bias", lt_gelu, lt_want, 1e-3);
  print_checksums("lt_gelu_bias", lt_gelu);

  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(la));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(lb));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(ld));
  CUBLAS_CHECK(cublasLtMatmulDescDestroy(desc));
  CUBLAS_CHECK(cublasLtDestroy(lt));
  CUBLAS_CHECK(cublasDestroy(handle));
  for (void *p : {static_cast<void *>(a), static_cast<void *>(b), static_cast<void *>(c),
                  static_cast<void *>(bias), static_cast<void *>(a16), static_cast<void *>(b16),
                  static_cast<void *>(c16), workspace, static_cast<void *>(d)})
    CUDA_CHECK(cudaFree(p));
  CUDA_CHECK(cudaStreamDestroy(stream));
  std::printf("RESULT ok\n");
  return 0;
}
