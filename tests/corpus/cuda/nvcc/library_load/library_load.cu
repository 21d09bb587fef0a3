// Modules loaded every way an application can load them, each with device globals:
//   A  NVRTC PTX, cuModuleLoadData, table set through cuModuleGetGlobal + cuMemcpyHtoD,
//      launched twice with cuLaunchKernel
//   B  the same PTX, the runtime's cudaLibraryLoadData / cudaLibraryGetGlobal /
//      cudaLibraryGetKernel, launched with cudaLaunchKernel((void*)kernel)
//   C  a cubin of another variant (SCALE 3) written to a file, cuModuleLoad
//   D  the same file, cuLibraryLoadFromFile / cuLibraryGetGlobal / cuLibraryGetKernel,
//      the CUkernel launched with cuLaunchKernel
//   E  the same file, cudaLibraryLoadFromFile, launched with cudaLaunchKernelExC
// so one kernel name has two codes. Every module has its own __constant__ table and a
// __device__ counter that only its kernels touch (the host reads it once, at the end).
// Build: needs nvrtc.h and libnvrtc; links -lnvrtc -lcuda.
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../driver_check.h"
#include "corpus_check.h"

static const char *kSource = R"(
#ifndef SCALE
#define SCALE 1
#endif
__constant__ int table[16];
__device__ unsigned int launches;
extern "C" __global__ void lookup(int *v, int n, int bias) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = table[v[i] & 15] * SCALE + bias;
  if (i == 0) atomicAdd(&launches, 1u);
}
)";

__global__ void seed_values(int *v, int n, int salt) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = (i * 7 + salt) % 16;
}

static const int kN = 256, kThreads = 128, kBlocks = kN / kThreads;

// PTX (arch "compute_90") or a cubin ("sm_90") of kSource with SCALE defined.
static std::string compile(const char *arch, int scale) {
  nvrtcProgram program;
  NVRTC_CHECK(nvrtcCreateProgram(&program, kSource, "lookup.cu", 0, nullptr, nullptr));
  std::string arch_option = std::string("--gpu-architecture=") + arch;
  std::string scale_option = "-DSCALE=" + std::to_string(scale);
  const char *options[] = {arch_option.c_str(), scale_option.c_str()};
  if (nvrtcCompileProgram(program, 2, options) != NVRTC_SUCCESS) {
    size_t size = 0;
    nvrtcGetProgramLogSize(program, &size);
    std::string log(size, '\0');
    nvrtcGetProgramLog(program, &log[0]);
    std::fprintf(stderr, "corpus: NVRTC: %s\n", log.c_str());
    std::exit(1);
  }
  size_t size = 0;
  std::string code;
  if (arch[0] == 's') {
    NVRTC_CHECK(nvrtcGetCUBINSize(program, &size));
    code.resize(size);
    NVRTC_CHECK(nvrtcGetCUBIN(program, &code[0]));
  } else {
    NVRTC_CHECK(nvrtcGetPTXSize(program, &size));
    code.resize(size);
    NVRTC_CHECK(nvrtcGetPTX(program, &code[0]));
  }
  NVRTC_CHECK(nvrtcDestroyProgram(&program));
  return code;
}

static std::vector<int> table_of(int module) {
  std::vector<int> t(16);
  for (int k = 0; k < 16; ++k) t[k] = (k * (module + 3)) % 23 - 11;
  return t;
}

struct Buffer {
  int *d = nullptr;
  std::vector<int> want;  // what the host expects after the launches
};

static Buffer seeded(int salt) {
  Buffer b;
  CORPUS_CHECK(cudaMalloc(&b.d, kN * sizeof(int)));
  corpus::Launch l("seed_values(int*, int, int)", {corpus::buffer("v", b.d, kN * sizeof(int))});
  l.before();
  seed_values<<<kBlocks, kThreads>>>(b.d, kN, salt);
  l.after();
  b.want.resize(kN);
  for (int i = 0; i < kN; ++i) b.want[i] = (i * 7 + salt) % 16;
  return b;
}

// The host's side of one launch of `lookup` with module `module`'s table.
static void expect(Buffer &b, int module, int scale, int bias) {
  std::vector<int> t = table_of(module);
  for (int &x : b.want) x = t[x & 15] * scale + bias;
}

int main() {
  CORPUS_CHECK(cudaFree(nullptr));  // the runtime's primary context, current from here on
  std::string ptx = compile("compute_90", 1);
  std::string cubin = compile("sm_90", 3);
  const char *tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/library_load-" + std::to_string(getpid()) + ".cubin";
  {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(cubin.data(), 1, cubin.size(), f) != cubin.size() || std::fclose(f) != 0) {
      std::fprintf(stderr, "corpus: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  int count = kN;
  size_t bytes = 0;

  // A: PTX through cuModuleLoadData, two launches
  Buffer a = seeded(1);
  CUmodule module_a;
  CUfunction lookup_a;
  CUdeviceptr table_a;
  CU_CHECK(cuModuleLoadData(&module_a, ptx.c_str()));
  CU_CHECK(cuModuleGetFunction(&lookup_a, module_a, "lookup"));
  CU_CHECK(cuModuleGetGlobal(&table_a, &bytes, module_a, "table"));
  CU_CHECK(cuMemcpyHtoD(table_a, table_of(0).data(), bytes));
  for (int bias : {0, 1000}) {
    corpus::Launch l("lookup", {corpus::buffer("v", a.d, kN * sizeof(int)),
                                corpus::buffer("table", (void *)table_a, bytes)});
    void *args[] = {&a.d, &count, &bias};
    l.before();
    CU_CHECK(cuLaunchKernel(lookup_a, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, args, nullptr));
    l.after();
    expect(a, 0, 1, bias);
  }

  // B: the same PTX through the runtime's library API
  Buffer b = seeded(2);
  cudaLibrary_t library_b;
  cudaKernel_t lookup_b;
  void *table_b = nullptr;
  CORPUS_CHECK(cudaLibraryLoadData(&library_b, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CORPUS_CHECK(cudaLibraryGetKernel(&lookup_b, library_b, "lookup"));
  CORPUS_CHECK(cudaLibraryGetGlobal(&table_b, &bytes, library_b, "table"));
  CORPUS_CHECK(cudaMemcpy(table_b, table_of(1).data(), bytes, cudaMemcpyHostToDevice));
  {
    corpus::Launch l("lookup", {corpus::buffer("v", b.d, kN * sizeof(int)),
                                corpus::buffer("table", table_b, bytes)});
    int bias = 5;
    void *args[] = {&b.d, &count, &bias};
    l.before();
    CORPUS_CHECK(cudaLaunchKernel((const void *)lookup_b, dim3(kBlocks), dim3(kThreads), args, 0, nullptr));
    l.after();
    expect(b, 1, 1, bias);
  }

  // C: the cubin from its file, cuModuleLoad
  Buffer c = seeded(3);
  CUmodule module_c;
  CUfunction lookup_c;
  CUdeviceptr table_c;
  CU_CHECK(cuModuleLoad(&module_c, path.c_str()));
  CU_CHECK(cuModuleGetFunction(&lookup_c, module_c, "lookup"));
  CU_CHECK(cuModuleGetGlobal(&table_c, &bytes, module_c, "table"));
  CU_CHECK(cuMemcpyHtoD(table_c, table_of(2).data(), bytes));
  {
    corpus::Launch l("lookup", {corpus::buffer("v", c.d, kN * sizeof(int)),
                                corpus::buffer("table", (void *)table_c, bytes)});
    int bias = -7;
    void *args[] = {&c.d, &count, &bias};
    l.before();
    CU_CHECK(cuLaunchKernel(lookup_c, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, args, nullptr));
    l.after();
    expect(c, 2, 3, bias);
  }

  // D: the same file through the driver's library API, the CUkernel launched as a function
  Buffer d = seeded(4);
  CUlibrary library_d;
  CUkernel lookup_d;
  CUdeviceptr table_d;
  CU_CHECK(cuLibraryLoadFromFile(&library_d, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CU_CHECK(cuLibraryGetKernel(&lookup_d, library_d, "lookup"));
  CU_CHECK(cuLibraryGetGlobal(&table_d, &bytes, library_d, "table"));
  CU_CHECK(cuMemcpyHtoD(table_d, table_of(3).data(), bytes));
  {
    corpus::Launch l("lookup", {corpus::buffer("v", d.d, kN * sizeof(int)),
                                corpus::buffer("table", (void *)table_d, bytes)});
    int bias = 11;
    void *args[] = {&d.d, &count, &bias};
    l.before();
    CU_CHECK(cuLaunchKernel((CUfunction)lookup_d, kBlocks, 1, 1, kThreads, 1, 1, 0, nullptr, args,
                            nullptr));
    l.after();
    expect(d, 3, 3, bias);
  }

  // E: the same file through the runtime's library API, cudaLaunchKernelExC
  Buffer e = seeded(5);
  cudaLibrary_t library_e;
  cudaKernel_t lookup_e;
  void *table_e = nullptr;
  CORPUS_CHECK(cudaLibraryLoadFromFile(&library_e, path.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CORPUS_CHECK(cudaLibraryGetKernel(&lookup_e, library_e, "lookup"));
  CORPUS_CHECK(cudaLibraryGetGlobal(&table_e, &bytes, library_e, "table"));
  CORPUS_CHECK(cudaMemcpy(table_e, table_of(4).data(), bytes, cudaMemcpyHostToDevice));
  {
    corpus::Launch l("lookup", {corpus::buffer("v", e.d, kN * sizeof(int)),
                                corpus::buffer("table", table_e, bytes)});
    int bias = 3;
    void *args[] = {&e.d, &count, &bias};
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(kBlocks);
    config.blockDim = dim3(kThreads);
    l.before();
    CORPUS_CHECK(cudaLaunchKernelExC(&config, (const void *)lookup_e, args));
    l.after();
    expect(e, 4, 3, bias);
  }
  std::remove(path.c_str());

  // every result, and each module's own launch counter
  for (Buffer *buffer : {&a, &b, &c, &d, &e}) {
    std::vector<int> got(kN);
    CORPUS_CHECK(cudaMemcpy(got.data(), buffer->d, kN * sizeof(int), cudaMemcpyDeviceToHost));
    CORPUS_REQUIRE(got == buffer->want, "lookup through the module's own table");
  }
  unsigned launches[5] = {};
  CUdeviceptr counter;
  void *runtime_counter = nullptr;
  CU_CHECK(cuModuleGetGlobal(&counter, &bytes, module_a, "launches"));
  CU_CHECK(cuMemcpyDtoH(&launches[0], counter, sizeof(unsigned)));
  CORPUS_CHECK(cudaLibraryGetGlobal(&runtime_counter, &bytes, library_b, "launches"));
  CORPUS_CHECK(cudaMemcpy(&launches[1], runtime_counter, sizeof(unsigned), cudaMemcpyDeviceToHost));
  CU_CHECK(cuModuleGetGlobal(&counter, &bytes, module_c, "launches"));
  CU_CHECK(cuMemcpyDtoH(&launches[2], counter, sizeof(unsigned)));
  CU_CHECK(cuLibraryGetGlobal(&counter, &bytes, library_d, "launches"));
  CU_CHECK(cuMemcpyDtoH(&launches[3], counter, sizeof(unsigned)));
  CORPUS_CHECK(cudaLibraryGetGlobal(&runtime_counter, &bytes, library_e, "launches"));
  CORPUS_CHECK(cudaMemcpy(&launches[4], runtime_counter, sizeof(unsigned), cudaMemcpyDeviceToHost));
  CORPUS_REQUIRE(launches[0] == 2 && launches[1] == 1 && launches[2] == 1 && launches[3] == 1 &&
                     launches[4] == 1,
                 "each module counts its own launches");

  CU_CHECK(cuModuleUnload(module_a));
  CORPUS_CHECK(cudaLibraryUnload(library_b));
  CU_CHECK(cuModuleUnload(module_c));
  CU_CHECK(cuLibraryUnload(library_d));
  CORPUS_CHECK(cudaLibraryUnload(library_e));
  corpus::result_ok();
  return 0;
}
