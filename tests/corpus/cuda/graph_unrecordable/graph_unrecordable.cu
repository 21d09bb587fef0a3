// Graphs the recorder cannot run node by node, as real codes build them: a graph that
// allocates its own scratch memory (memory allocation and free nodes, the graph-owned
// form of cudaMallocAsync) and a graph instantiated for device-side launch. Under
// `mneme record` each must run unrecorded as it is, with one line naming it, and the
// program must compute what it computes without mneme. One eager launch is recorded.
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__global__ void fill_square(int *out, int n, int offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = (i + offset) * (i + offset);
}

__global__ void fold(const int *in, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += in[i] % 97;
}

int main() {
  const int n = 4096, block = 256, grid = n / block;
  int *result;
  CORPUS_CHECK(cudaMalloc(&result, n * sizeof(int)));
  CORPUS_CHECK(cudaMemset(result, 0, n * sizeof(int)));
  { corpus::Launch l("fill_square(int*, int, int)", {corpus::buffer("result", result, n * sizeof(int))});
    l.before(); fill_square<<<grid, block>>>(result, n, 1); l.after(); }
  { corpus::Launch l("fold(int const*, int*, int)", {corpus::buffer("result", result, n * sizeof(int))});
    l.before(); fold<<<grid, block>>>(result, result, n); l.after(); }

  // 1. scratch allocated by the graph: alloc -> fill -> fold into result -> free
  cudaGraph_t graph;
  CORPUS_CHECK(cudaGraphCreate(&graph, 0));
  cudaMemAllocNodeParams alloc{};
  alloc.poolProps.allocType = cudaMemAllocationTypePinned;
  alloc.poolProps.location.type = cudaMemLocationTypeDevice;
  alloc.poolProps.location.id = 0;
  alloc.bytesize = n * sizeof(int);
  cudaGraphNode_t a, f, g, fr;
  CORPUS_CHECK(cudaGraphAddMemAllocNode(&a, graph, nullptr, 0, &alloc));
  int *scratch = static_cast<int *>(alloc.dptr);
  int n_arg = n, offset = 3;
  void *fill_args[] = {&scratch, &n_arg, &offset};
  cudaKernelNodeParams kp{};
  kp.func = (void *)fill_square; kp.gridDim = dim3(grid); kp.blockDim = dim3(block); kp.kernelParams = fill_args;
  CORPUS_CHECK(cudaGraphAddKernelNode(&f, graph, &a, 1, &kp));
  void *fold_args[] = {&scratch, &result, &n_arg};
  cudaKernelNodeParams fp = kp;
  fp.func = (void *)fold; fp.kernelParams = fold_args;
  CORPUS_CHECK(cudaGraphAddKernelNode(&g, graph, &f, 1, &fp));
  CORPUS_CHECK(cudaGraphAddMemFreeNode(&fr, graph, &g, 1, scratch));
  cudaGraphExec_t exec;
  CORPUS_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaStream_t s;
  CORPUS_CHECK(cudaStreamCreate(&s));
  for (int it = 0; it < 3; ++it) CORPUS_CHECK(cudaGraphLaunch(exec, s));
  CORPUS_CHECK(cudaStreamSynchronize(s));

  // 2. a kernel-only graph instantiated for device-side launch (launched from the host here)
  cudaGraph_t device_graph;
  CORPUS_CHECK(cudaGraphCreate(&device_graph, 0));
  int offset2 = 5;
  void *fill2[] = {&result, &n_arg, &offset2};
  cudaKernelNodeParams dp = kp;
  dp.kernelParams = fill2;
  cudaGraphNode_t d;
  CORPUS_CHECK(cudaGraphAddKernelNode(&d, device_graph, nullptr, 0, &dp));
  cudaGraphExec_t device_exec;
  CORPUS_CHECK(cudaGraphInstantiate(&device_exec, device_graph, cudaGraphInstantiateFlagDeviceLaunch));
  CORPUS_CHECK(cudaGraphUpload(device_exec, s));
  CORPUS_CHECK(cudaGraphLaunch(device_exec, s));
  CORPUS_CHECK(cudaStreamSynchronize(s));

  std::vector<int> host(n);
  CORPUS_CHECK(cudaMemcpy(host.data(), result, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(host[i] == (i + 5) * (i + 5), "the device-launch graph ran last");
  corpus::output("result", corpus::fnv1a64(host.data(), n * sizeof(int)));
  CORPUS_CHECK(cudaGraphExecDestroy(exec));
  CORPUS_CHECK(cudaGraphExecDestroy(device_exec));
  CORPUS_CHECK(cudaGraphDestroy(graph));
  CORPUS_CHECK(cudaGraphDestroy(device_graph));
  corpus::result_ok();
  return 0;
}
