// Entry-point resolution: the recorder's driver wrappers, whichever way the application
// found CUDA's functions.
//
// LD_PRELOAD only replaces the driver functions a program links against by name. The
// CUDA runtime (shared or linked statically into an executable or into cuBLAS/cuDNN),
// Triton's launchers, CuPy and JAX/XLA instead dlopen libcuda and take its functions with
// dlsym, or take every entry point from cuGetProcAddress (which cudaGetDriverEntryPoint
// also reaches). Both are interposed here: a lookup whose answer is one of the driver
// functions the recorder wraps (driver_api.cpp, graph_driver_api.cpp) returns the wrapper instead. Matching the
// answer, not the name, serves exactly the version the caller asked for: cuGetProcAddress
// ("cuMemAlloc", 3020) gives cuMemAlloc_v2, which is wrapped; an older version the
// recorder does not wrap passes through as it is. Lookups made by the recorder itself
// (its device layer takes the real functions) are never substituted.
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "recorder.hpp"

using namespace mneme::recorder;

// The wrappers (driver_api.cpp, graph_driver_api.cpp and here), by the exported name of the function they replace.
extern "C" {
CUresult mneme_cuGetProcAddress_v1(const char*, void**, int, cuuint64_t) __asm__("cuGetProcAddress");
CUresult cuGetProcAddress_v2(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
}

namespace mneme::recorder {

// Every driver function the recorder wraps (driver_api.cpp, graph_driver_api.cpp), by its
// exported (versioned) name.
const char* const kWrappedDriverFunctions[] = {
    "cuGetProcAddress", "cuGetProcAddress_v2",
    "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernel_ptsz", "cuLaunchCooperativeKernelMultiDevice",
    "cuModuleLoad", "cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuModuleUnload",
    "cuModuleGetFunction", "cuModuleGetGlobal_v2",
    "cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cuLibraryGetKernel", "cuLibraryGetGlobal",
    "cuKernelGetFunction",
    "cuMemAlloc_v2", "cuMemAllocPitch_v2", "cuMemFree_v2", "cuMemAllocAsync", "cuMemAllocAsync_ptsz",
    "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync_ptsz", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
    "cuMemAllocManaged", "cuMemPrefetchAsync_v2", "cuMemAdvise_v2", "cuMemMap", "cuMemUnmap",
    "cuMemAddressReserve", "cuMemAddressFree",
    // graph_driver_api.cpp: every version of every function that instantiates, changes,
    // destroys or launches an executable graph, or begins or ends a capture. Served one,
    // all must be: a change made behind the recorder's back leaves a graph's mirror stale
    // (tests/record/test_entry_points.py checks this list against cuda.h).
    "cuGraphInstantiate", "cuGraphInstantiate_v2", "cuGraphInstantiateWithFlags",
    "cuGraphInstantiateWithParams", "cuGraphInstantiateWithParams_ptsz",
    "cuGraphExecKernelNodeSetParams", "cuGraphExecKernelNodeSetParams_v2", "cuGraphExecMemcpyNodeSetParams",
    "cuGraphExecMemsetNodeSetParams", "cuGraphExecHostNodeSetParams", "cuGraphExecChildGraphNodeSetParams",
    "cuGraphExecEventRecordNodeSetEvent", "cuGraphExecEventWaitNodeSetEvent", "cuGraphExecNodeSetParams",
    "cuGraphNodeSetEnabled", "cuGraphExecExternalSemaphoresSignalNodeSetParams",
    "cuGraphExecExternalSemaphoresWaitNodeSetParams", "cuGraphExecBatchMemOpNodeSetParams",
    "cuGraphExecUpdate", "cuGraphExecUpdate_v2", "cuGraphExecDestroy", "cuGraphLaunch", "cuGraphLaunch_ptsz",
    "cuStreamBeginCapture", "cuStreamBeginCapture_ptsz", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz",
    "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph_ptsz", "cuStreamEndCapture",
    "cuStreamEndCapture_ptsz",
};

bool tracing_lookups() { return settings().trace_lookups; }

namespace {

bool wrapped_driver_function(const char* name) {
  for (const char* wrapped : kWrappedDriverFunctions)
    if (std::strcmp(wrapped, name) == 0) return true;
  return false;
}

// glibc's own dlsym: the one exported here replaces it for every caller in the process.
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() {
  static DlsymFn fn = [] {
    void* p = nullptr;
    for (const char* version : {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"})
      if ((p = dlvsym(RTLD_NEXT, "dlsym", version))) break;
    return reinterpret_cast<DlsymFn>(p);
  }();
  return fn;
}

const Dl_info& recorder_object() {
  static Dl_info self = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&recorder_object), &info);
    return info;
  }();
  return self;
}

// Whether `address` is code of the shared CUDA runtime (libcudart.so). It is followed at
// its own API (runtime_api.cpp, graph_api.cpp), so the driver functions it takes for
// itself stay the driver's: one launch is seen once, and the runtime's internal locks
// never wait on the recorder's.
bool in_shared_runtime(const void* address) {
  Dl_info where{};
  if (!dladdr(address, &where) || !where.dli_fname) return false;
  const char* slash = std::strrchr(where.dli_fname, '/');
  return std::strncmp(slash ? slash + 1 : where.dli_fname, "libcudart.so", 12) == 0;
}

// Whether `address` is code of this library (the recorder's own lookups).
bool in_recorder(const void* address) {
  Dl_info where{};
  return dladdr(address, &where) && where.dli_fbase == recorder_object().dli_fbase;
}

// The recorder's own definition of `name` (a wrapper), or nullptr.
void* own_function(const char* name) {
  static void* self = dlopen(recorder_object().dli_fname, RTLD_LAZY | RTLD_NOLOAD);
  void* p = self ? real_dlsym()(self, name) : nullptr;
  return p && in_recorder(p) ? p : nullptr;
}

// The real driver function's address -> the recorder's wrapper for it. Built once libcuda
// is loaded (every lookup that could return a driver function comes after that).
class WrapperTable {
 public:
  void* wrapper_for(void* real) {
    if (!real) return nullptr;
    if (!ready_.load(std::memory_order_acquire)) build();
    auto it = by_real_.find(real);
    return it == by_real_.end() ? nullptr : it->second;
  }

 private:
  void build() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ready_.load(std::memory_order_relaxed)) return;
    void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!libcuda) return;  // not loaded yet: nothing a lookup returns can be its function
    for (const char* name : kWrappedDriverFunctions) {
      void* real = real_dlsym()(libcuda, name);
      void* wrapper = own_function(name);
      if (real && wrapper && real != wrapper) by_real_[real] = wrapper;
    }
    ready_.store(true, std::memory_order_release);
  }

  std::mutex mutex_;
  std::atomic<bool> ready_{false};
  std::unordered_map<void*, void*> by_real_;
};

WrapperTable& table() {
  static auto* t = new WrapperTable();  // never destroyed: lookups may come during exit
  return *t;
}

// dlsym(RTLD_NEXT, name) as glibc would answer it for `caller`: the objects loaded after
// the caller's, in order. (Passed on as it is, glibc would search after the recorder.)
void* next_after(const void* caller, const char* name) {
  Dl_info info{};
  link_map* map = nullptr;
  if (!dladdr1(caller, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) || !map)
    return real_dlsym()(RTLD_DEFAULT, name);
  for (link_map* l = map->l_next; l; l = l->l_next) {
    void* handle = dlopen(l->l_name && l->l_name[0] ? l->l_name : nullptr, RTLD_LAZY | RTLD_NOLOAD);
    if (!handle) continue;
    void* p = real_dlsym()(handle, name);
    dlclose(handle);
    if (p) return p;
  }
  return nullptr;
}

bool served_to(const void* caller) { return !in_recorder(caller) && !in_shared_runtime(caller); }

// What a driver lookup hands out for the real function `real`: its wrapper, if any.
// MNEME_RECORD_TRACE_LOOKUPS=1 prints each lookup and its answer (which library asks for
// what, in which version: the way to see why a call was not followed).
void trace_lookup(const char* how, const char* symbol, long version, bool served) {
  if (tracing_lookups())
    std::fprintf(stderr, "mneme record: %s %s (version %ld): %s\n", how, symbol, version,
                 served ? "the recorder's wrapper" : "the driver's function");
}

void* served_entry_point(void* real, const char* symbol = nullptr, long version = 0) {
  void* wrapper = table().wrapper_for(real);
  if (symbol) trace_lookup("cuGetProcAddress", symbol, version, wrapper != nullptr);
  return wrapper ? wrapper : real;
}

}  // namespace

}  // namespace mneme::recorder

extern "C" {

void* dlsym(void* handle, const char* name) {
  const void* caller = __builtin_return_address(0);
  const bool cuda_name = name && std::strncmp(name, "cu", 2) == 0;
  // Most lookups (Python's PyInit_*, every library's own) need no caller: answered at once.
  if (handle != RTLD_NEXT && !cuda_name) return real_dlsym()(handle, name);
  if (in_recorder(caller)) return real_dlsym()(handle, name);
  void* found = handle == RTLD_NEXT ? next_after(caller, name) : real_dlsym()(handle, name);
  if (in_shared_runtime(caller)) return found;  // followed at its own API
  // Runtime functions (cuda*) and the driver functions of the table are substituted by
  // exact name, as LD_PRELOAD would: a library that dlopens libcudart or libcuda gets the
  // wrappers too. (Other driver wrappers keep needing the shared runtime, so they are
  // only reached by linking, as before.)
  if (!found || !cuda_name) return found;
  if (std::strncmp(name, "cuda", 4) != 0 && !wrapped_driver_function(name)) {
    trace_lookup("dlsym", name, 0, false);
    return found;
  }
  void* ours = own_function(name);
  trace_lookup("dlsym", name, 0, ours != nullptr);
  return ours ? ours : found;
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  static auto next = driver_function<Fn>("cuGetProcAddress_v2");
  if (!next) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult result = next(symbol, pfn, version, flags, status);
  if (result == CUDA_SUCCESS && pfn && served_to(__builtin_return_address(0)))
    *pfn = served_entry_point(*pfn, symbol, version);
  return result;
}

// The CUDA 11.3-12.x signature, still exported for binaries built against it.
CUresult mneme_cuGetProcAddress_v1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
  static auto next = driver_function<Fn>("cuGetProcAddress");
  if (!next) return CUDA_ERROR_NOT_SUPPORTED;
  CUresult result = next(symbol, pfn, version, flags);
  if (result == CUDA_SUCCESS && pfn && served_to(__builtin_return_address(0)))
    *pfn = served_entry_point(*pfn, symbol, version);
  return result;
}

// The shared runtime's own lookup of driver entry points (PyTorch takes cuMemCreate & co.
// this way): the runtime asks the real driver, the caller gets the wrapper.
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** pfn, unsigned int version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  using Fn = cudaError_t (*)(const char*, void**, unsigned int, unsigned long long, cudaDriverEntryPointQueryResult*);
  static auto next = real<Fn>("cudaGetDriverEntryPointByVersion");
  cudaError_t result = next(symbol, pfn, version, flags, status);
  if (result == cudaSuccess && pfn && served_to(__builtin_return_address(0))) *pfn = served_entry_point(*pfn);
  return result;
}

cudaError_t mneme_cudaGetDriverEntryPoint(const char* symbol, void** pfn, unsigned long long flags,
                                          cudaDriverEntryPointQueryResult* status) __asm__("cudaGetDriverEntryPoint");
cudaError_t mneme_cudaGetDriverEntryPoint(const char* symbol, void** pfn, unsigned long long flags,
                                          cudaDriverEntryPointQueryResult* status) {
  using Fn = cudaError_t (*)(const char*, void**, unsigned long long, cudaDriverEntryPointQueryResult*);
  static auto next = real<Fn>("cudaGetDriverEntryPoint");
  cudaError_t result = next(symbol, pfn, flags, status);
  if (result == cudaSuccess && pfn && served_to(__builtin_return_address(0))) *pfn = served_entry_point(*pfn);
  return result;
}

}  // extern "C"
