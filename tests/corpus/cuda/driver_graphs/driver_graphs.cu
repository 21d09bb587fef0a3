// A CUDA graph the way XLA's command buffers make one: every driver function taken by
// lookup (dlopen + dlsym for cuGetProcAddress_v2, cuGetProcAddress for the rest), nothing
// linked against libcuda. The graph (a memset node, two kernels in a chain, a kernel that
// joins them with the memset's buffer, a device-to-device memcpy node) is built with
// cuGraphAdd*Node on kernels of the program's own module (cudaGetFuncBySymbol),
// instantiated with cuGraphInstantiateWithFlags and launched with cuGraphLaunch six
// times. The joining kernel's node passes its arguments packed in one buffer (`extra`), as
// XLA's nodes for cuBLASLt's kernels do. Between launches the executable graph changes: a
// kernel node's arguments (cuGraphExecKernelNodeSetParams), the memset value
// (cuGraphExecMemsetNodeSetParams), and a whole second graph of the same shape
// (cuGraphExecUpdate), after which a node changes again. The host checks every launch's
// result. Each kernel also runs once eagerly with the checksum protocol.
#include <cuda.h>
#include <dlfcn.h>

#include <cstddef>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

#define DRIVER_CHECK(call)                                                                      \
  do {                                                                                          \
    CUresult res_ = (call);                                                                     \
    if (res_ != CUDA_SUCCESS) {                                                                 \
      std::fprintf(stderr, "corpus: %s:%d: %s failed: CUresult %d\n", __FILE__, __LINE__, #call, \
                   (int)res_);                                                                  \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

__global__ void fill_index(unsigned *x, int n, unsigned seed) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (unsigned)i * 2654435761u ^ seed;
}

__global__ void scale_add(unsigned *x, int n, unsigned mul, unsigned add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * mul + add;
}

__global__ void combine(const unsigned *x, const unsigned *y, unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] ^ (y[i] >> 1);
}

namespace {

using GetProcAddress = CUresult (*)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
GetProcAddress get_proc_address = nullptr;

// The driver's function `name` for this CUDA version, as cuGetProcAddress answers it.
template <typename F>
F driver(const char *name) {
  void *p = nullptr;
  CUdriverProcAddressQueryResult found{};
  DRIVER_CHECK(get_proc_address(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  CORPUS_REQUIRE(p && found == CU_GET_PROC_ADDRESS_SUCCESS, "cuGetProcAddress found the function");
  return reinterpret_cast<F>(p);
}

// `p_<name>`: cuda.h's type for `name` (the version it maps the name to), by lookup.
#define DRIVER_FUNCTION(name) const auto p_##name = driver<decltype(&name)>(#name)

struct Host {  // what one launch computes, on the host
  unsigned seed, mul, add, fill;
};

std::vector<unsigned> expected(const Host &h, int n) {
  std::vector<unsigned> out(n);
  for (int i = 0; i < n; ++i) out[i] = (((unsigned)i * 2654435761u ^ h.seed) * h.mul + h.add) ^ (h.fill >> 1);
  return out;
}

}  // namespace

int main() {
  const int n = 1 << 14, block = 128, grid = n / block;
  const size_t bytes = n * sizeof(unsigned);
  CORPUS_CHECK(cudaFree(nullptr));  // the runtime makes the primary context current

  void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  CORPUS_REQUIRE(libcuda != nullptr, "libcuda.so.1 opens");
  get_proc_address = reinterpret_cast<GetProcAddress>(dlsym(libcuda, "cuGetProcAddress_v2"));
  CORPUS_REQUIRE(get_proc_address != nullptr, "libcuda exports cuGetProcAddress_v2");
  DRIVER_FUNCTION(cuCtxGetCurrent);
  DRIVER_FUNCTION(cuGraphCreate);
  DRIVER_FUNCTION(cuGraphAddKernelNode);
  DRIVER_FUNCTION(cuGraphAddMemsetNode);
  DRIVER_FUNCTION(cuGraphAddMemcpyNode);
  DRIVER_FUNCTION(cuGraphInstantiateWithFlags);
  DRIVER_FUNCTION(cuGraphExecKernelNodeSetParams);
  DRIVER_FUNCTION(cuGraphExecMemsetNodeSetParams);
  DRIVER_FUNCTION(cuGraphExecUpdate);
  DRIVER_FUNCTION(cuGraphLaunch);
  DRIVER_FUNCTION(cuGraphExecDestroy);
  DRIVER_FUNCTION(cuGraphDestroy);
  CUcontext ctx = nullptr;
  DRIVER_CHECK(p_cuCtxGetCurrent(&ctx));

  unsigned *x, *y, *out, *result;
  CORPUS_CHECK(cudaMalloc(&x, bytes));
  CORPUS_CHECK(cudaMalloc(&y, bytes));
  CORPUS_CHECK(cudaMalloc(&out, bytes));
  CORPUS_CHECK(cudaMalloc(&result, bytes));
  CORPUS_CHECK(cudaMemset(y, 0, bytes));

  { corpus::Launch l("fill_index(unsigned int*, int, unsigned int)", {corpus::buffer("x", x, bytes)});
    l.before(); fill_index<<<grid, block>>>(x, n, 3u); l.after(); }
  { corpus::Launch l("scale_add(unsigned int*, int, unsigned int, unsigned int)", {corpus::buffer("x", x, bytes)});
    l.before(); scale_add<<<grid, block>>>(x, n, 5u, 1u); l.after(); }
  { corpus::Launch l("combine(unsigned int const*, unsigned int const*, unsigned int*, int)",
                     {corpus::buffer("x", x, bytes), corpus::buffer("y", y, bytes), corpus::buffer("out", out, bytes)});
    l.before(); combine<<<grid, block>>>(x, y, out, n); l.after(); }

  cudaFunction_t fill_fn, scale_fn, combine_fn;
  CORPUS_CHECK(cudaGetFuncBySymbol(&fill_fn, (const void *)fill_index));
  CORPUS_CHECK(cudaGetFuncBySymbol(&scale_fn, (const void *)scale_add));
  CORPUS_CHECK(cudaGetFuncBySymbol(&combine_fn, (const void *)combine));

  // The graph's nodes, built again for the update with other values (same shape).
  struct Nodes {
    CUgraph graph;
    CUgraphNode fill, scale, zero, join, copy;
  };
  int n_arg = n;
  auto kernel_params = [&](cudaFunction_t f, void **args) {
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = reinterpret_cast<CUfunction>(f);
    p.gridDimX = grid; p.gridDimY = 1; p.gridDimZ = 1;
    p.blockDimX = block; p.blockDimY = 1; p.blockDimZ = 1;
    p.kernelParams = args;
    return p;
  };
  auto memset_params = [&](unsigned value) {
    CUDA_MEMSET_NODE_PARAMS p{};
    p.dst = reinterpret_cast<CUdeviceptr>(y);
    p.value = value; p.elementSize = 4; p.width = n; p.height = 1; p.pitch = 0;
    return p;
  };
  // combine's arguments packed as the driver lays them out (what cuBLASLt passes in `extra`)
  struct CombineArgs {
    const unsigned *x, *y;
    unsigned *out;
    int n;
  } combine_args{x, y, out, n};
  // the parameters' bytes exactly, without the struct's tail padding: the driver checks the size
  size_t combine_args_size = offsetof(CombineArgs, n) + sizeof(int);
  void *join_extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &combine_args, CU_LAUNCH_PARAM_BUFFER_SIZE,
                        &combine_args_size, CU_LAUNCH_PARAM_END};
  auto build = [&](Host h, void **fill_args, void **scale_args) {
    Nodes g{};
    DRIVER_CHECK(p_cuGraphCreate(&g.graph, 0));
    CUDA_MEMSET_NODE_PARAMS ms = memset_params(h.fill);
    DRIVER_CHECK(p_cuGraphAddMemsetNode(&g.zero, g.graph, nullptr, 0, &ms, ctx));
    CUDA_KERNEL_NODE_PARAMS fp = kernel_params(fill_fn, fill_args);
    DRIVER_CHECK(p_cuGraphAddKernelNode(&g.fill, g.graph, nullptr, 0, &fp));
    CUDA_KERNEL_NODE_PARAMS sp = kernel_params(scale_fn, scale_args);
    DRIVER_CHECK(p_cuGraphAddKernelNode(&g.scale, g.graph, &g.fill, 1, &sp));
    CUDA_KERNEL_NODE_PARAMS jp = kernel_params(combine_fn, nullptr);
    jp.extra = join_extra;
    CUgraphNode join_deps[] = {g.scale, g.zero};
    DRIVER_CHECK(p_cuGraphAddKernelNode(&g.join, g.graph, join_deps, 2, &jp));
    CUDA_MEMCPY3D cp{};
    cp.srcMemoryType = CU_MEMORYTYPE_DEVICE; cp.srcDevice = reinterpret_cast<CUdeviceptr>(out);
    cp.dstMemoryType = CU_MEMORYTYPE_DEVICE; cp.dstDevice = reinterpret_cast<CUdeviceptr>(result);
    cp.WidthInBytes = bytes; cp.Height = 1; cp.Depth = 1;
    DRIVER_CHECK(p_cuGraphAddMemcpyNode(&g.copy, g.graph, &g.join, 1, &cp, ctx));
    return g;
  };

  Host h{3u, 5u, 1u, 0x11111111u};
  unsigned seed = h.seed, mul = h.mul, add = h.add;
  void *fill_args[] = {&x, &n_arg, &seed};
  void *scale_args[] = {&x, &n_arg, &mul, &add};
  Nodes first = build(h, fill_args, scale_args);
  CUgraphExec exec = nullptr;
  DRIVER_CHECK(p_cuGraphInstantiateWithFlags(&exec, first.graph, 0));

  Host h2{13u, 11u, 4u, 0x33333333u};
  unsigned seed2 = h2.seed, mul2 = h2.mul, add2 = h2.add;
  void *fill_args2[] = {&x, &n_arg, &seed2};
  void *scale_args2[] = {&x, &n_arg, &mul2, &add2};
  Nodes second{};
  cudaStream_t s;
  CORPUS_CHECK(cudaStreamCreate(&s));
  std::vector<unsigned> host(n);
  unsigned long long digest = 0;
  for (int it = 0; it < 6; ++it) {
    if (it == 2) {  // new arguments for the scale kernel node
      h.mul = mul = 7u; h.add = add = 9u;
      CUDA_KERNEL_NODE_PARAMS sp = kernel_params(scale_fn, scale_args);
      DRIVER_CHECK(p_cuGraphExecKernelNodeSetParams(exec, first.scale, &sp));
    }
    if (it == 3) {  // a new memset value
      h.fill = 0x2222u;
      CUDA_MEMSET_NODE_PARAMS ms = memset_params(h.fill);
      DRIVER_CHECK(p_cuGraphExecMemsetNodeSetParams(exec, first.zero, &ms, ctx));
    }
    if (it == 4) {  // the whole graph replaced by one of the same shape, as XLA updates
      second = build(h2, fill_args2, scale_args2);
      CUgraphExecUpdateResultInfo info{};
      DRIVER_CHECK(p_cuGraphExecUpdate(exec, second.graph, &info));
      CORPUS_REQUIRE(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "the update applied");
      h = h2;
    }
    if (it == 5) {  // after the update, a node changes again: named by the graph it was
      // instantiated from (the driver refuses the update source's nodes: CUDA_ERROR_INVALID_VALUE)
      h.mul = mul2 = 2u; h.add = add2 = 3u;
      CUDA_KERNEL_NODE_PARAMS sp = kernel_params(scale_fn, scale_args2);
      DRIVER_CHECK(p_cuGraphExecKernelNodeSetParams(exec, first.scale, &sp));
    }
    DRIVER_CHECK(p_cuGraphLaunch(exec, reinterpret_cast<CUstream>(s)));
    CORPUS_CHECK(cudaStreamSynchronize(s));
    CORPUS_CHECK(cudaMemcpy(host.data(), result, bytes, cudaMemcpyDeviceToHost));
    CORPUS_REQUIRE(host == expected(h, n), "the graph computed what its current parameters say");
    digest = digest * 1099511628211ull ^ corpus::fnv1a64(host.data(), bytes);
  }
  corpus::output("digest", digest);

  DRIVER_CHECK(p_cuGraphExecDestroy(exec));
  DRIVER_CHECK(p_cuGraphDestroy(first.graph));
  DRIVER_CHECK(p_cuGraphDestroy(second.graph));
  CORPUS_CHECK(cudaStreamDestroy(s));
  CORPUS_CHECK(cudaFree(x));
  CORPUS_CHECK(cudaFree(y));
  CORPUS_CHECK(cudaFree(out));
  CORPUS_CHECK(cudaFree(result));
  corpus::result_ok();
  return 0;
}
