// A module compiled at run time with NVRTC (PTX for compute_90), loaded with
// cuModuleLoadData and launched with cuLaunchKernel, next to an ordinary <<<>>> kernel.
// Build: needs nvrtc.h and libnvrtc (the toolkit, or the nvidia-cuda-nvrtc wheel via
// NVRTC_ROOT); links -lnvrtc -lcuda.
#include <string>

#include "../driver_check.h"
#include "corpus_check.h"

static const char *kSource = R"(
template <typename T>
__global__ void scale_add(T *y, const T *x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" __global__ void square_in_place(int *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = v[i] * v[i];
}
)";

__global__ void fill(float *x, int *v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    x[i] = (float)(i % 32);
    v[i] = i % 100 - 50;
  }
}

int main() {
  const int n = 1024, threads = 128;
  float *x, *y;
  int *v;
  CORPUS_CHECK(cudaMalloc(&x, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&y, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&v, n * sizeof(int)));
  CORPUS_CHECK(cudaMemset(y, 0, n * sizeof(float)));
  {
    corpus::Launch l("fill(float*, int*, int)", {corpus::buffer("x", x, n * sizeof(float)),
                                                 corpus::buffer("v", v, n * sizeof(int))});
    l.before();
    fill<<<n / threads, threads>>>(x, v, n);
    l.after();
  }

  // compile the module's source to PTX and load it into the runtime's primary context
  nvrtcProgram program;
  NVRTC_CHECK(nvrtcCreateProgram(&program, kSource, "runtime_module.cu", 0, nullptr, nullptr));
  NVRTC_CHECK(nvrtcAddNameExpression(program, "scale_add<float>"));
  const char *options[] = {"--gpu-architecture=compute_90", "-default-device"};
  nvrtcResult compiled = nvrtcCompileProgram(program, 2, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, &log[0]);
    std::fprintf(stderr, "corpus: NVRTC: %s\n", log.c_str());
    return 1;
  }
  const char *lowered = nullptr;
  NVRTC_CHECK(nvrtcGetLoweredName(program, "scale_add<float>", &lowered));
  std::string scale_add_name = lowered;  // owned by the program
  size_t ptx_size = 0;
  NVRTC_CHECK(nvrtcGetPTXSize(program, &ptx_size));
  std::string ptx(ptx_size, '\0');
  NVRTC_CHECK(nvrtcGetPTX(program, &ptx[0]));
  NVRTC_CHECK(nvrtcDestroyProgram(&program));

  CUmodule module;
  CUfunction scale_add, square;
  CU_CHECK(cuModuleLoadData(&module, ptx.c_str()));
  CU_CHECK(cuModuleGetFunction(&scale_add, module, scale_add_name.c_str()));
  CU_CHECK(cuModuleGetFunction(&square, module, "square_in_place"));

  {
    corpus::Launch l("void scale_add<float>(float*, float const*, float, int)",
                     {corpus::buffer("y", y, n * sizeof(float)),
                      corpus::buffer("x", x, n * sizeof(float))});
    float a = 3.0f;
    int count = n;
    void *args[] = {&y, &x, &a, &count};
    l.before();
    CU_CHECK(cuLaunchKernel(scale_add, n / threads, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr));
    l.after();
  }
  {
    corpus::Launch l("square_in_place", {corpus::buffer("v", v, n * sizeof(int))});
    int count = n;
    void *args[] = {&v, &count};
    l.before();
    CU_CHECK(cuLaunchKernel(square, n / threads, 1, 1, threads, 1, 1, 0, nullptr, args, nullptr));
    l.after();
  }

  std::vector<float> hy(n);
  std::vector<int> hv(n);
  CORPUS_CHECK(cudaMemcpy(hy.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hv.data(), v, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    CORPUS_REQUIRE(hy[i] == 3.0f * (float)(i % 32), "scale_add from the NVRTC module");
    int w = i % 100 - 50;
    CORPUS_REQUIRE(hv[i] == w * w, "square_in_place from the NVRTC module");
  }
  CU_CHECK(cuModuleUnload(module));
  corpus::result_ok();
  return 0;
}
