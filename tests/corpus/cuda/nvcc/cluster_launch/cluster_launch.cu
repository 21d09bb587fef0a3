// nvcc-only: kernels launched in thread-block clusters chosen at launch time, the way
// cuBLASLt's Hopper GEMMs and PyTorch launch them. The kernels exchange data through
// distributed shared memory, so a launch without its cluster shape computes something
// else: a replay must launch in the recorded clusters to verify.
//   - cluster_block_sums: cudaLaunchKernelEx with clusters of 2, then 16 blocks (16 is
//     "non-portable": the function opts in with cudaFuncAttributeNonPortableClusterSizeAllowed)
//   - cluster_neighbors: cuLaunchKernelEx (driver API, taken with cudaGetDriverEntryPoint as
//     libraries take it) on the runtime kernel's CUfunction with clusters of 4, then
//     captured into a CUDA graph with clusters of 2 and run 3 times
#include <cooperative_groups.h>
#include <cuda.h>

#include <cstdio>
#include <vector>

#include "corpus_check.h"

namespace cg = cooperative_groups;

#define CU_CHECK(call)                                                                       \
  do {                                                                                       \
    CUresult r_ = (call);                                                                    \
    if (r_ != CUDA_SUCCESS) {                                                                \
      std::fprintf(stderr, "corpus: %s:%d: %s failed: CUresult %d\n", __FILE__, __LINE__, \
                   #call, int(r_));                                                          \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

using LaunchKernelEx = CUresult (*)(const CUlaunchConfig *, CUfunction, void **, void **);

constexpr int kThreads = 128;

// Each block sums its slice in shared memory; the cluster's first block adds up the
// partial sums of every block of its cluster through distributed shared memory.
__global__ void cluster_block_sums(const float *x, int n, float *out) {
  __shared__ float partial[kThreads];
  cg::cluster_group cluster = cg::this_cluster();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    float total = 0.0f;
    for (unsigned r = 0; r < cluster.num_blocks(); ++r) total += *cluster.map_shared_rank(&partial[0], r);
    out[blockIdx.x / cluster.num_blocks()] = total;
  }
  cluster.sync();  // keeps every block's shared memory alive until rank 0 has read it
}

// Every block publishes a value in shared memory and adds its neighbour's (the next
// rank of its cluster) to its slice of y.
__global__ void cluster_neighbors(float *y, int n) {
  __shared__ float mine;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) mine = float(blockIdx.x + 1);
  cluster.sync();
  unsigned next = (cluster.block_rank() + 1) % cluster.num_blocks();
  float theirs = *cluster.map_shared_rank(&mine, next);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += theirs * float(cluster.num_blocks());
  cluster.sync();
}

static void launch_sums(const float *x, int n, float *out, int blocks, unsigned cluster_size) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeClusterDimension;
  attribute.val.clusterDim.x = cluster_size;
  attribute.val.clusterDim.y = 1;
  attribute.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  config.attrs = &attribute;
  config.numAttrs = 1;
  CORPUS_CHECK(cudaLaunchKernelEx(&config, cluster_block_sums, x, n, out));
}

static void launch_neighbors_driver(LaunchKernelEx launch, CUfunction f, float *y, int n, int blocks, unsigned cluster_size,
                                    cudaStream_t stream) {
  CUlaunchAttribute attribute{};
  attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attribute.value.clusterDim.x = cluster_size;
  attribute.value.clusterDim.y = 1;
  attribute.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = blocks;
  config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = kThreads;
  config.blockDimY = config.blockDimZ = 1;
  config.hStream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  void *params[] = {&y, &n};
  CU_CHECK(launch(&config, f, params, nullptr));
}

int main() {
  const int blocks = 64, n = blocks * kThreads;
  std::vector<float> hx(n);
  for (int i = 0; i < n; ++i) hx[i] = float((i * 37) % 101) * 0.25f;
  float *x, *out, *y;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&out, blocks * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&y, n * sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(y, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaFuncSetAttribute(cluster_block_sums, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));

  std::vector<float> want_out(blocks, 0.0f);
  for (unsigned cluster_size : {2u, 16u}) {
    CORPUS_CHECK(cudaMemset(out, 0, blocks * sizeof(float)));
    corpus::Launch l("cluster_block_sums(float const*, int, float*)",
                     {corpus::buffer("x", x, n * sizeof(float)),
                      corpus::buffer("out", out, blocks * sizeof(float))});
    l.before();
    launch_sums(x, n, out, blocks, cluster_size);
    l.after();
    std::vector<float> got(blocks);
    CORPUS_CHECK(cudaMemcpy(got.data(), out, blocks * sizeof(float), cudaMemcpyDeviceToHost));
    int clusters = blocks / int(cluster_size);
    for (int c = 0; c < clusters; ++c) {
      float total = 0.0f;
      for (int b = 0; b < int(cluster_size); ++b) {
        float block_sum = 0.0f;
        for (int t = 0; t < kThreads; ++t) block_sum += hx[(c * cluster_size + b) * kThreads + t];
        total += block_sum;
      }
      CORPUS_REQUIRE(std::abs(got[c] - total) <= 1e-3f * std::abs(total) + 1e-3f, "cluster sums");
    }
  }

  // The driver API on the runtime kernel's function, as libraries launch.
  cudaFunction_t runtime_function;
  CORPUS_CHECK(cudaGetFuncBySymbol(&runtime_function, reinterpret_cast<const void *>(cluster_neighbors)));
  CUfunction f = reinterpret_cast<CUfunction>(runtime_function);
  void *entry = nullptr;
  cudaDriverEntryPointQueryResult found;
  CORPUS_CHECK(cudaGetDriverEntryPoint("cuLaunchKernelEx", &entry, cudaEnableDefault, &found));
  CORPUS_REQUIRE(found == cudaDriverEntryPointSuccess && entry, "cuLaunchKernelEx entry point");
  auto launch = reinterpret_cast<LaunchKernelEx>(entry);
  {
    corpus::Launch l("cluster_neighbors(float*, int)", {corpus::buffer("y", y, n * sizeof(float))});
    l.before();
    launch_neighbors_driver(launch, f, y, n, blocks, 4, 0);
    l.after();
  }

  // Captured into a graph: the kernel node carries its cluster shape as an attribute.
  cudaStream_t stream;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CORPUS_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  launch_neighbors_driver(launch, f, y, n, blocks, 2, stream);
  CORPUS_CHECK(cudaStreamEndCapture(stream, &graph));
  CORPUS_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int run = 0; run < 3; ++run) {
    corpus::Launch l("cluster_neighbors(float*, int)", {corpus::buffer("y", y, n * sizeof(float))});
    l.before();
    CORPUS_CHECK(cudaGraphLaunch(exec, stream));
    CORPUS_CHECK(cudaStreamSynchronize(stream));
    l.after();
  }

  std::vector<float> hy(n);
  CORPUS_CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    int b = i / kThreads;
    float want = float((b / 4 * 4 + (b % 4 + 1) % 4) + 1) * 4.0f +
                 3.0f * float((b / 2 * 2 + (b % 2 + 1) % 2) + 1) * 2.0f;
    CORPUS_REQUIRE(hy[i] == want, "cluster neighbours");
  }
  double checksum = 0;
  for (float v : hy) checksum += v;
  std::printf("corpus-output cluster_launch checksum %.1f\n", checksum);
  CORPUS_CHECK(cudaGraphExecDestroy(exec));
  CORPUS_CHECK(cudaGraphDestroy(graph));
  CORPUS_CHECK(cudaStreamDestroy(stream));
  corpus::result_ok();
  return 0;
}
