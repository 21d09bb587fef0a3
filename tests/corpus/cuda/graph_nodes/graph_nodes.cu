// A graph built node by node with the graph API, the way libraries assemble fixed
// pipelines: a memset node, a generator kernel, two independent transforms (a fork), a
// join kernel, a device-to-host memcpy and a host callback. Between launches the
// executable graph is changed in place: a kernel node gets new parameters
// (cudaGraphExecKernelNodeSetParams) and one branch is switched off and on again
// (cudaGraphNodeSetEnabled). Each kernel also runs once eagerly with the checksum protocol.
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__global__ void generate(unsigned *data, int n, unsigned seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned x = (unsigned)i * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    data[i] = x ^ (x >> 15);
  }
}

__global__ void scale_bits(const unsigned *in, unsigned *out, int n, unsigned mul, unsigned add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * mul + add;
}

__global__ void mix(const unsigned *a, const unsigned *b, unsigned *out, unsigned *count, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    out[i] = a[i] ^ (b[i] >> 3);
    if (out[i] & 1u) atomicAdd(count, 1u);  // integer count: order-independent
  }
}

struct Callback {
  int calls = 0;
};

void CUDART_CB on_done(void *user) { static_cast<Callback *>(user)->calls++; }

int main() {
  const int n = 1 << 15, block = 256, grid = n / block;
  const size_t bytes = n * sizeof(unsigned);
  unsigned *data, *a, *b, *out, *count;
  CORPUS_CHECK(cudaMalloc(&data, bytes));
  CORPUS_CHECK(cudaMalloc(&a, bytes));
  CORPUS_CHECK(cudaMalloc(&b, bytes));
  CORPUS_CHECK(cudaMalloc(&out, bytes));
  CORPUS_CHECK(cudaMalloc(&count, sizeof(unsigned)));
  CORPUS_CHECK(cudaMemset(count, 0, sizeof(unsigned)));
  std::vector<unsigned> host(n);

  { corpus::Launch l("generate(unsigned int*, int, unsigned int)", {corpus::buffer("data", data, bytes)});
    l.before(); generate<<<grid, block>>>(data, n, 7u); l.after(); }
  { corpus::Launch l("scale_bits(unsigned int const*, unsigned int*, int, unsigned int, unsigned int)",
                     {corpus::buffer("data", data, bytes), corpus::buffer("a", a, bytes)});
    l.before(); scale_bits<<<grid, block>>>(data, a, n, 3u, 1u); l.after(); }
  { corpus::Launch l("mix(unsigned int const*, unsigned int const*, unsigned int*, unsigned int*, int)",
                     {corpus::buffer("a", a, bytes), corpus::buffer("b", b, bytes), corpus::buffer("out", out, bytes),
                      corpus::buffer("count", count, sizeof(unsigned))});
    l.before(); mix<<<grid, block>>>(a, a, out, count, n); l.after(); }

  cudaGraph_t graph;
  CORPUS_CHECK(cudaGraphCreate(&graph, 0));
  cudaGraphNode_t zero, gen, left, right, join, copy, done;
  cudaMemsetParams ms{};
  ms.dst = count; ms.value = 0; ms.elementSize = 4; ms.width = 1; ms.height = 1;
  CORPUS_CHECK(cudaGraphAddMemsetNode(&zero, graph, nullptr, 0, &ms));

  int n_arg = n;
  unsigned seed = 11u, mul_a = 5u, add_a = 2u, mul_b = 9u, add_b = 4u;
  void *gen_args[] = {&data, &n_arg, &seed};
  cudaKernelNodeParams kp{};
  kp.func = (void *)generate; kp.gridDim = dim3(grid); kp.blockDim = dim3(block); kp.kernelParams = gen_args;
  CORPUS_CHECK(cudaGraphAddKernelNode(&gen, graph, nullptr, 0, &kp));

  void *left_args[] = {&data, &a, &n_arg, &mul_a, &add_a};
  cudaKernelNodeParams lp = kp;
  lp.func = (void *)scale_bits; lp.kernelParams = left_args;
  CORPUS_CHECK(cudaGraphAddKernelNode(&left, graph, &gen, 1, &lp));
  void *right_args[] = {&data, &b, &n_arg, &mul_b, &add_b};
  cudaKernelNodeParams rp = lp;
  rp.kernelParams = right_args;
  CORPUS_CHECK(cudaGraphAddKernelNode(&right, graph, &gen, 1, &rp));

  void *join_args[] = {&a, &b, &out, &count, &n_arg};
  cudaKernelNodeParams jp = kp;
  jp.func = (void *)mix; jp.kernelParams = join_args;
  cudaGraphNode_t join_deps[] = {left, right, zero};
  CORPUS_CHECK(cudaGraphAddKernelNode(&join, graph, join_deps, 3, &jp));

  CORPUS_CHECK(cudaGraphAddMemcpyNode1D(&copy, graph, &join, 1, host.data(), out, bytes, cudaMemcpyDeviceToHost));
  Callback cb;
  cudaHostNodeParams hp{on_done, &cb};
  CORPUS_CHECK(cudaGraphAddHostNode(&done, graph, &copy, 1, &hp));

  cudaGraphExec_t exec;
  CORPUS_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaStream_t s;
  CORPUS_CHECK(cudaStreamCreate(&s));
  unsigned long long digest = 0;
  for (int it = 0; it < 8; ++it) {
    if (it == 3) {  // new coefficients for the left branch
      mul_a = 17u; add_a = 6u;
      CORPUS_CHECK(cudaGraphExecKernelNodeSetParams(exec, left, &lp));
    }
    if (it == 5) CORPUS_CHECK(cudaGraphNodeSetEnabled(exec, right, 0));  // right branch off: b stays
    if (it == 6) CORPUS_CHECK(cudaGraphNodeSetEnabled(exec, right, 1));
    CORPUS_CHECK(cudaGraphLaunch(exec, s));
    CORPUS_CHECK(cudaStreamSynchronize(s));
    unsigned c = 0;
    CORPUS_CHECK(cudaMemcpy(&c, count, sizeof c, cudaMemcpyDeviceToHost));
    digest = digest * 1099511628211ull ^ corpus::fnv1a64(host.data(), bytes) ^ c;
  }
  corpus::output("digest", digest);
  corpus::output("callbacks", (unsigned long long)cb.calls);
  CORPUS_REQUIRE(cb.calls == 8, "the host node ran once per launch");
  CORPUS_CHECK(cudaGraphExecDestroy(exec));
  CORPUS_CHECK(cudaGraphDestroy(graph));
  corpus::result_ok();
  return 0;
}
