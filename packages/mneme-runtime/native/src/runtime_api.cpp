// The CUDA runtime API entry points the recorder interposes (LD_PRELOAD): registration
// of nvcc/clang-built code, launches, the runtime's libraries, allocations. Each passes
// through to the real runtime (dlsym(RTLD_NEXT)) and tells the Recorder what happened.
#include <cstring>

#include "recorder.hpp"

using namespace mneme::recorder;

extern "C" {

void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int threadLimit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize) {
  Forwarding forwarding;
  using Fn = void (*)(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*);
  static auto next = real<Fn>("__cudaRegisterFunction");
  Recorder::get().register_function(handle, hostFun, deviceName);
  next(handle, hostFun, deviceFun, deviceName, threadLimit, tid, bid, bDim, gDim, wSize);
}

// The wrapper nvcc and clang emit per translation unit, and the fatbinary header it points to.
struct FatbinWrapper {
  int magic;  // 0x466243b1
  int version;
  const unsigned char* data;
  void* filename_or_fatbins;
};

void** __cudaRegisterFatBinary(void* wrapper) {
  Forwarding forwarding;
  using Fn = void** (*)(void*);
  static auto next = real<Fn>("__cudaRegisterFatBinary");
  void** handle = next(wrapper);
  auto* w = static_cast<const FatbinWrapper*>(wrapper);
  if (w && w->magic == 0x466243b1 && w->data) {
    uint32_t magic = 0;
    uint16_t header_size = 0;
    uint64_t fat_size = 0;
    std::memcpy(&magic, w->data, 4);
    std::memcpy(&header_size, w->data + 6, 2);
    std::memcpy(&fat_size, w->data + 8, 8);
    if (magic == 0xBA55ED50u && header_size >= 16 && fat_size < (1ull << 34))
      Recorder::get().register_fatbin(handle,
                                      std::string_view(reinterpret_cast<const char*>(w->data), header_size + fat_size),
                                      code_origin(w->data));
  }
  return handle;
}

void __cudaRegisterVar(void** handle, char* hostVar, char* deviceAddress, const char* deviceName, int ext,
                       size_t size, int constant, int global) {
  Forwarding forwarding;
  using Fn = void (*)(void**, char*, char*, const char*, int, size_t, int, int);
  static auto next = real<Fn>("__cudaRegisterVar");
  Recorder::get().register_var(handle, hostVar, deviceName, size);
  next(handle, hostVar, deviceAddress, deviceName, ext, size, constant, global);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaLaunchKernel);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernel(func, grid, block, args, shmem, stream);
  RecorderLock lock(r);
  return cudaError_t(r.launch_runtime(func, grid, block, args, shmem, reinterpret_cast<uint64_t>(stream),
                                      [&] { return int(real_cudaLaunchKernel(func, grid, block, args, shmem, stream)); }));
}

// Built with --default-stream per-thread, <<<>>> lands here.
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                  cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaLaunchKernel_ptsz);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernel_ptsz(func, grid, block, args, shmem, stream);
  RecorderLock lock(r);
  return cudaError_t(r.launch_runtime(func, grid, block, args, shmem, reinterpret_cast<uint64_t>(stream), [&] {
    return int(real_cudaLaunchKernel_ptsz(func, grid, block, args, shmem, stream));
  }));
}

// What nvcc 13's launch stubs call (crt/host_runtime.h): the kernel handle once per stub,
// then __cudaLaunchKernel with it.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_function) {
  Forwarding forwarding;
  using Fn = cudaError_t (*)(cudaKernel_t*, const void*);
  static auto next = real<Fn>("__cudaGetKernel");
  cudaError_t status = next(kernel, host_function);
  auto& r = Recorder::get();
  if (status == cudaSuccess && kernel && r.active()) {
    RecorderLock lock(r);
    r.register_kernel_handle(*kernel, host_function);
  }
  return status;
}

// The public form: a cudaKernel_t for a registered kernel, launched as (void*)kernel.
cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* host_function) {
  Forwarding forwarding;
  REAL(cudaGetKernel);
  cudaError_t status = real_cudaGetKernel(kernel, host_function);
  auto& r = Recorder::get();
  if (status == cudaSuccess && kernel && r.active()) {
    RecorderLock lock(r);
    r.register_kernel_handle(*kernel, host_function);
  }
  return status;
}

static cudaError_t launch_kernel_handle(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                                        cudaStream_t stream, const std::function<int()>& do_launch) {
  auto& r = Recorder::get();
  if (!r.active()) return cudaError_t(do_launch());
  RecorderLock lock(r);
  const void* host = r.host_of(kernel);
  return cudaError_t(r.launch(host ? r.name_of(host) : nullptr, grid, block, args, shmem,
                              reinterpret_cast<uint64_t>(stream), do_launch, nullptr, host));
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                               cudaStream_t stream) {
  Forwarding forwarding;
  using Fn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static auto next = real<Fn>("__cudaLaunchKernel");
  return launch_kernel_handle(kernel, grid, block, args, shmem, stream,
                              [&] { return int(next(kernel, grid, block, args, shmem, stream)); });
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                                    cudaStream_t stream) {
  Forwarding forwarding;
  using Fn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static auto next = real<Fn>("__cudaLaunchKernel_ptsz");
  return launch_kernel_handle(kernel, grid, block, args, shmem, stream,
                              [&] { return int(next(kernel, grid, block, args, shmem, stream)); });
}

// What a launch's attributes set that the instance keeps: the cluster shape and whether
// the launch is cooperative (as cuLaunchKernelEx's in driver_api.cpp).
static void launch_attributes(const cudaLaunchConfig_t* config, dim3& cluster, bool& cooperative) {
  cluster = dim3(1, 1, 1);
  cooperative = false;
  for (unsigned i = 0; config && config->attrs && i < config->numAttrs; ++i) {
    const auto& a = config->attrs[i];
    if (a.id == cudaLaunchAttributeClusterDimension)
      cluster = dim3(a.val.clusterDim.x, a.val.clusterDim.y, a.val.clusterDim.z);
    if (a.id == cudaLaunchAttributeCooperative) cooperative = a.val.cooperative != 0;
  }
}

// cudaLaunchKernelEx (a template in the headers) lands here.
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  Forwarding forwarding;
  REAL(cudaLaunchKernelExC);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernelExC(config, func, args);
  dim3 cluster;
  bool cooperative = false;
  launch_attributes(config, cluster, cooperative);
  ClusterScope scope(cluster);
  CooperativeScope cooperative_scope(cooperative);
  RecorderLock lock(r);
  return cudaError_t(r.launch_runtime(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                      reinterpret_cast<uint64_t>(config->stream),
                                      [&] { return int(real_cudaLaunchKernelExC(config, func, args)); }));
}

// Built with --default-stream per-thread, cudaLaunchKernelEx lands here.
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  Forwarding forwarding;
  REAL(cudaLaunchKernelExC_ptsz);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernelExC_ptsz(config, func, args);
  dim3 cluster;
  bool cooperative = false;
  launch_attributes(config, cluster, cooperative);
  ClusterScope scope(cluster);
  CooperativeScope cooperative_scope(cooperative);
  RecorderLock lock(r);
  return cudaError_t(r.launch_runtime(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                      reinterpret_cast<uint64_t>(config->stream),
                                      [&] { return int(real_cudaLaunchKernelExC_ptsz(config, func, args)); }));
}

// Cooperative launches (cooperative_groups::this_grid().sync()): recorded like any other,
// marked cooperative, so that replay launches them cooperatively.
cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                        cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaLaunchCooperativeKernel);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchCooperativeKernel(func, grid, block, args, shmem, stream);
  CooperativeScope scope(true);
  RecorderLock lock(r);
  return cudaError_t(r.launch_runtime(func, grid, block, args, shmem, reinterpret_cast<uint64_t>(stream), [&] {
    return int(real_cudaLaunchCooperativeKernel(func, grid, block, args, shmem, stream));
  }));
}

// Built with --default-stream per-thread, cudaLaunchCooperativeKernel lands here.
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                             cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaLaunchCooperativeKernel_ptsz);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchCooperativeKernel_ptsz(func, grid, block, args, shmem, stream);
  CooperativeScope scope(true);
  RecorderLock lock(r);
  return cudaError_t(r.launch_runtime(func, grid, block, args, shmem, reinterpret_cast<uint64_t>(stream), [&] {
    return int(real_cudaLaunchCooperativeKernel_ptsz(func, grid, block, args, shmem, stream));
  }));
}

// The runtime's libraries (CUDA 12+): libcudart reaches the driver through entry points
// it looks up itself, so the driver functions above never see these loads.
cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption* jit_options,
                                void** jit_values, unsigned int jit_count, cudaLibraryOption* options, void** values,
                                unsigned int count) {
  Forwarding forwarding;
  REAL(cudaLibraryLoadData);
  cudaError_t status = real_cudaLibraryLoadData(library, code, jit_options, jit_values, jit_count, options, values, count);
  if (status == cudaSuccess)
    note_module(*library, code, ModuleApi::runtime_library, __builtin_return_address(0));
  return status;
}

cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* path, cudaJitOption* jit_options,
                                    void** jit_values, unsigned int jit_count, cudaLibraryOption* options,
                                    void** values, unsigned int count) {
  Forwarding forwarding;
  REAL(cudaLibraryLoadFromFile);
  cudaError_t status =
      real_cudaLibraryLoadFromFile(library, path, jit_options, jit_values, jit_count, options, values, count);
  if (status == cudaSuccess) note_module_file(*library, path, ModuleApi::runtime_library);
  return status;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  Forwarding forwarding;
  REAL(cudaLibraryUnload);
  note_unload(library);
  return real_cudaLibraryUnload(library);
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t library, const char* name) {
  Forwarding forwarding;
  REAL(cudaLibraryGetKernel);
  cudaError_t status = real_cudaLibraryGetKernel(kernel, library, name);
  if (status == cudaSuccess) note_kernel(*kernel, library, name, true);  // launched as (void*)kernel
  return status;
}

cudaError_t cudaLibraryGetGlobal(void** address, size_t* bytes, cudaLibrary_t library, const char* name) {
  Forwarding forwarding;
  REAL(cudaLibraryGetGlobal);
  cudaError_t status = real_cudaLibraryGetGlobal(address, bytes, library, name);
  if (status == cudaSuccess) note_global(library, name);
  return status;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  Forwarding forwarding;
  REAL(cudaMalloc);
  return served_here() ? serve(ptr, size) : real_cudaMalloc(ptr, size);
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaMallocAsync);
  return served_here() ? serve(ptr, size) : real_cudaMallocAsync(ptr, size, stream);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaMallocFromPoolAsync);
  return served_here() ? serve(ptr, size) : real_cudaMallocFromPoolAsync(ptr, size, pool, stream);
}

cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  Forwarding forwarding;
  REAL(cudaMallocPitch);
  if (!served_here()) return real_cudaMallocPitch(ptr, pitch, width, height);
  *pitch = (width + 511) / 512 * 512;
  return serve(ptr, *pitch * height);
}

cudaError_t cudaMalloc3D(cudaPitchedPtr* pitched, cudaExtent extent) {
  Forwarding forwarding;
  REAL(cudaMalloc3D);
  if (!served_here()) return real_cudaMalloc3D(pitched, extent);
  size_t pitch = (extent.width + 511) / 512 * 512;
  void* ptr = nullptr;
  cudaError_t status = serve(&ptr, pitch * extent.height * extent.depth);
  pitched->ptr = ptr;
  pitched->pitch = pitch;
  pitched->xsize = extent.width;
  pitched->ysize = extent.height;
  return status;
}

cudaError_t cudaFree(void* ptr) {
  Forwarding forwarding;
  REAL(cudaFree);
  if (Recorder::get().active() && release(ptr)) return cudaSuccess;
  if (forget_managed(reinterpret_cast<uint64_t>(ptr))) return cudaSuccess;
  return real_cudaFree(ptr);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaFreeAsync);
  if (Recorder::get().active() && release(ptr)) return cudaSuccess;
  return real_cudaFreeAsync(ptr, stream);
}

// Managed memory: the driver's, placed in the recorder's range (allocations.cpp), so the
// application keeps real managed memory and replay finds it at the same addresses.
cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags) {
  Forwarding forwarding;
  REAL(cudaMallocManaged);
  REAL(cudaFree);
  if (!Recorder::get().active() || !size || !ptr) return real_cudaMallocManaged(ptr, size, flags);
  cudaError_t status = cudaSuccess;
  uint64_t address = 0;
  bool made = serve_managed(
      size, address,
      [&](uint64_t& at) {
        void* p = nullptr;
        status = real_cudaMallocManaged(&p, size, flags);
        at = reinterpret_cast<uint64_t>(p);
        return status == cudaSuccess;
      },
      [&](uint64_t at) { real_cudaFree(reinterpret_cast<void*>(at)); });
  if (made) *ptr = reinterpret_cast<void*>(address);
  return made ? cudaSuccess : status;
}

// Prefetching and advice have no meaning for host memory standing in for managed memory:
// accepted, ignored (the driver would refuse them); the driver's managed memory gets them.
cudaError_t cudaMemPrefetchAsync(const void* ptr, size_t count, cudaMemLocation location, unsigned int flags,
                                 cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaMemPrefetchAsync);
  if (arena_owned(ptr, count)) return cudaSuccess;
  return real_cudaMemPrefetchAsync(ptr, count, location, flags, stream);
}

cudaError_t cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise advice, cudaMemLocation location) {
  Forwarding forwarding;
  REAL(cudaMemAdvise);
  if (arena_owned(ptr, count)) return cudaSuccess;
  return real_cudaMemAdvise(ptr, count, advice, location);
}


}  // extern "C"
