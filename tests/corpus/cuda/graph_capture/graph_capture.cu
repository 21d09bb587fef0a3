// A time-stepping code in the style of CUDA-Graph ports of real solvers: one explicit step
// (flux, update, per-block residual) plus a device-to-host copy of the residuals is
// captured from a stream into a graph once, instantiated, and launched many times. When the
// time step changes, the step is captured again and the executable graph is updated in
// place with cudaGraphExecUpdate (what codes do instead of re-instantiating). The first
// step runs eagerly with the checksum protocol, as codes validate before capturing.
#include <cmath>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

constexpr int kBlock = 128;

__global__ void flux(const float *u, float *f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float left = u[(i + n - 1) % n], right = u[(i + 1) % n];
    f[i] = 0.5f * (right - left) - 0.25f * (right - 2.0f * u[i] + left);
  }
}

__global__ void update(float *u, const float *f, float dt, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) u[i] -= dt * f[i];
}

// Per-block sum of |f| in a fixed tree order: deterministic.
__global__ void residual(const float *f, float *partial, int n) {
  __shared__ float tile[kBlock];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? fabsf(f[i]) : 0.0f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) tile[threadIdx.x] += tile[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = tile[0];
}

struct Step {
  float *u, *f, *partial, *host_partial;
  int n, blocks;
  void enqueue(cudaStream_t s, float dt) const {
    flux<<<blocks, kBlock, 0, s>>>(u, f, n);
    update<<<blocks, kBlock, 0, s>>>(u, f, dt, n);
    residual<<<blocks, kBlock, 0, s>>>(f, partial, n);
    CORPUS_CHECK(cudaMemcpyAsync(host_partial, partial, blocks * sizeof(float), cudaMemcpyDeviceToHost, s));
  }
};

cudaGraph_t capture(const Step &step, cudaStream_t s, float dt) {
  cudaGraph_t graph;
  CORPUS_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  step.enqueue(s, dt);
  CORPUS_CHECK(cudaStreamEndCapture(s, &graph));
  return graph;
}

int main() {
  const int n = 1 << 16, blocks = n / kBlock;
  Step step{nullptr, nullptr, nullptr, nullptr, n, blocks};
  CORPUS_CHECK(cudaMalloc(&step.u, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&step.f, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&step.partial, blocks * sizeof(float)));
  CORPUS_CHECK(cudaMallocHost(&step.host_partial, blocks * sizeof(float)));
  std::vector<float> u0(n);
  for (int i = 0; i < n; ++i) u0[i] = std::sin(6.283185307f * i / n) + 0.5f * std::sin(25.1327412f * i / n);
  CORPUS_CHECK(cudaMemcpy(step.u, u0.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t s;
  CORPUS_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Eager validation step.
  const size_t bytes = n * sizeof(float);
  { corpus::Launch l("flux(float const*, float*, int)", {corpus::buffer("u", step.u, bytes), corpus::buffer("f", step.f, bytes)});
    l.before(); flux<<<blocks, kBlock>>>(step.u, step.f, n); l.after(); }
  { corpus::Launch l("update(float*, float const*, float, int)", {corpus::buffer("u", step.u, bytes), corpus::buffer("f", step.f, bytes)});
    l.before(); update<<<blocks, kBlock>>>(step.u, step.f, 0.01f, n); l.after(); }
  { corpus::Launch l("residual(float const*, float*, int)",
                     {corpus::buffer("f", step.f, bytes), corpus::buffer("partial", step.partial, blocks * sizeof(float))});
    l.before(); residual<<<blocks, kBlock>>>(step.f, step.partial, n); l.after(); }

  float dt = 0.02f;
  cudaGraph_t graph = capture(step, s, dt);
  cudaGraphExec_t exec;
  CORPUS_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  double history = 0.0;
  for (int it = 0; it < 12; ++it) {
    if (it == 6) {  // adaptive time step: same topology, new parameters
      dt = 0.015f;
      cudaGraph_t fresh = capture(step, s, dt);
      cudaGraphExecUpdateResultInfo info;
      CORPUS_CHECK(cudaGraphExecUpdate(exec, fresh, &info));
      CORPUS_CHECK(cudaGraphDestroy(graph));
      graph = fresh;
    }
    CORPUS_CHECK(cudaGraphLaunch(exec, s));
    CORPUS_CHECK(cudaStreamSynchronize(s));
    double r = 0.0;
    for (int b = 0; b < blocks; ++b) r += step.host_partial[b];
    history += r;
  }
  std::vector<float> u(n);
  CORPUS_CHECK(cudaMemcpy(u.data(), step.u, bytes, cudaMemcpyDeviceToHost));
  corpus::output("u", corpus::fnv1a64(u.data(), bytes));
  corpus::output("residual-history", history, 9);
  CORPUS_REQUIRE(std::isfinite(history) && history > 0.0, "residuals are finite and positive");
  CORPUS_CHECK(cudaGraphExecDestroy(exec));
  CORPUS_CHECK(cudaGraphDestroy(graph));
  CORPUS_CHECK(cudaStreamDestroy(s));
  corpus::result_ok();
  return 0;
}
