// The CUDA driver API entry points the recorder interposes: launches, modules and
// libraries the application loads itself, allocations. They are reached by name
// (LD_PRELOAD) and, through entry_points.cpp, by dlsym on libcuda and cuGetProcAddress:
// that is how the CUDA runtime (shared or static), cuBLAS, Triton, CuPy and JAX call them.
// While a runtime-API wrapper of the recorder runs (Forwarding), the driver calls the real
// runtime makes for it pass straight through: that launch or allocation is the runtime
// wrapper's to record.
#include "packed_arguments.hpp"
#include "recorder.hpp"

using namespace mneme::recorder;

// The driver function `name` itself (by its exact, versioned name), for the wrapper of it.
#define DRIVER(name)                                                                             \
  static auto real_##name = ::mneme::recorder::driver_function<decltype(&name)>(#name);          \
  if (!real_##name) return CUDA_ERROR_NOT_FOUND

// Per-thread-default-stream variants (cuda.h declares them only under
// CUDA_API_PER_THREAD_DEFAULT_STREAM, which would rename the plain ones).
extern "C" {
CUresult cuLaunchKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig*, CUfunction, void**, void**);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                        unsigned, CUstream, void**);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, size_t, CUstream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
}

namespace {

// A launch with its arguments in `params` (the usual form) or packed in `extra` is
// recorded; one the recorder cannot read runs unrecorded, said once.
CUresult launch_through(CUfunction f, dim3 grid, dim3 block, unsigned shmem, CUstream stream, void** params,
                        void** extra, const char* call, const std::function<int()>& do_launch) {
  auto& r = Recorder::get();
  if (!r.active() || Forwarding::active()) return CUresult(do_launch());
  RecorderLock lock(r);
  std::vector<void*> unpacked;
  if (!params && extra) {
    if (!unpack_arguments(f, extra, unpacked) || unpacked.empty()) {
      r.unrecorded_call(call, "its packed argument buffer (extra) could not be read");
      return CUresult(do_launch());
    }
    params = unpacked.data();
  }
  // Neither form: nothing says how many arguments the caller meant (a parameterless
  // kernel, or a mistake the driver will report); it runs unrecorded.
  if (!params) return CUresult(do_launch());
  return CUresult(r.launch_driver(f, grid, block, params, shmem, reinterpret_cast<uint64_t>(stream), do_launch));
}

CUresult serve_driver(CUdeviceptr* ptr, size_t size) {
  void* p = nullptr;
  CUresult status = serve(&p, size) == cudaSuccess ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return status;
}

// What a launch's attributes set that the instance keeps: the cluster shape (cuBLASLt's
// Hopper GEMMs, PyTorch) and whether the launch is cooperative (replay launches it so).
void launch_attributes(const CUlaunchConfig* config, dim3& cluster, bool& cooperative) {
  cluster = dim3(1, 1, 1);
  cooperative = false;
  for (unsigned i = 0; config->attrs && i < config->numAttrs; ++i) {
    const auto& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
      cluster = dim3(a.value.clusterDim.x, a.value.clusterDim.y, a.value.clusterDim.z);
    if (a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) cooperative = a.value.cooperative != 0;
  }
}

bool served_by_driver_wrapper() { return !Forwarding::active() && served_here(); }

bool released(CUdeviceptr ptr) {
  if (Forwarding::active() || !Recorder::get().active()) return false;
  return release(reinterpret_cast<void*>(ptr)) || forget_managed(uint64_t(ptr));
}

}  // namespace

extern "C" {

// Driver-API launches of functions and of CUkernels cast to CUfunction.
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void** params, void** extra) {
  DRIVER(cuLaunchKernel);
  return launch_through(f, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, stream, params, extra, "cuLaunchKernel", [&] {
    return int(real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra));
  });
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shmem, CUstream stream, void** params, void** extra) {
  DRIVER(cuLaunchKernel_ptsz);
  return launch_through(f, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, stream, params, extra, "cuLaunchKernel_ptsz",
                        [&] { return int(real_cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)); });
}

// Triton's launchers, CUTLASS and the runtime's cudaLaunchKernelEx use this form.
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  DRIVER(cuLaunchKernelEx);
  auto launch = [&] { return int(real_cuLaunchKernelEx(config, f, params, extra)); };
  if (!config) return CUresult(launch());
  dim3 cluster;
  bool cooperative = false;
  launch_attributes(config, cluster, cooperative);
  ClusterScope scope(cluster);
  CooperativeScope cooperative_scope(cooperative);
  return launch_through(f, dim3(config->gridDimX, config->gridDimY, config->gridDimZ),
                        dim3(config->blockDimX, config->blockDimY, config->blockDimZ), config->sharedMemBytes,
                        config->hStream, params, extra, "cuLaunchKernelEx", launch);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  DRIVER(cuLaunchKernelEx_ptsz);
  auto launch = [&] { return int(real_cuLaunchKernelEx_ptsz(config, f, params, extra)); };
  if (!config) return CUresult(launch());
  dim3 cluster;
  bool cooperative = false;
  launch_attributes(config, cluster, cooperative);
  ClusterScope scope(cluster);
  CooperativeScope cooperative_scope(cooperative);
  return launch_through(f, dim3(config->gridDimX, config->gridDimY, config->gridDimZ),
                        dim3(config->blockDimX, config->blockDimY, config->blockDimZ), config->sharedMemBytes,
                        config->hStream, params, extra, "cuLaunchKernelEx_ptsz", launch);
}

// Cooperative launches (grid-wide synchronisation): recorded like any other, marked
// cooperative. The static CUDA runtime's cudaLaunchCooperativeKernel arrives here too.
CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shmem, CUstream stream, void** params) {
  DRIVER(cuLaunchCooperativeKernel);
  CooperativeScope scope(true);
  return launch_through(f, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, stream, params, nullptr,
                        "cuLaunchCooperativeKernel",
                        [&] { return int(real_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params)); });
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                        unsigned by, unsigned bz, unsigned shmem, CUstream stream, void** params) {
  DRIVER(cuLaunchCooperativeKernel_ptsz);
  CooperativeScope scope(true);
  return launch_through(f, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, stream, params, nullptr,
                        "cuLaunchCooperativeKernel_ptsz", [&] {
                          return int(real_cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shmem, stream, params));
                        });
}

// A launch on several GPUs at once (deprecated): runs unrecorded, said once.
CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launches, unsigned int count, unsigned int flags) {
  using Fn = CUresult (*)(CUDA_LAUNCH_PARAMS*, unsigned int, unsigned int);
  static auto real_launch = driver_function<Fn>("cuLaunchCooperativeKernelMultiDevice");
  if (!real_launch) return CUDA_ERROR_NOT_FOUND;
  auto& r = Recorder::get();
  if (r.active() && !Forwarding::active()) {
    RecorderLock lock(r);
    r.unrecorded_call("cuLaunchCooperativeKernelMultiDevice", "a cooperative launch on several GPUs is not recorded");
  }
  return real_launch(launches, count, flags);
}

CUresult cuModuleLoad(CUmodule* module, const char* path) {
  DRIVER(cuModuleLoad);
  CUresult status = real_cuModuleLoad(module, path);
  if (status == CUDA_SUCCESS && !Forwarding::active()) note_module_file(*module, path, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  DRIVER(cuModuleLoadData);
  CUresult status = real_cuModuleLoadData(module, image);
  if (status == CUDA_SUCCESS && !Forwarding::active())
    note_module(*module, image, ModuleApi::module, __builtin_return_address(0));
  return status;
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count, CUjit_option* options,
                            void** values) {
  DRIVER(cuModuleLoadDataEx);
  CUresult status = real_cuModuleLoadDataEx(module, image, count, options, values);
  if (status == CUDA_SUCCESS && !Forwarding::active())
    note_module(*module, image, ModuleApi::module, __builtin_return_address(0));
  return status;
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  DRIVER(cuModuleLoadFatBinary);
  CUresult status = real_cuModuleLoadFatBinary(module, image);
  if (status == CUDA_SUCCESS && !Forwarding::active())
    note_module(*module, image, ModuleApi::module, __builtin_return_address(0));
  return status;
}

CUresult cuModuleUnload(CUmodule module) {
  DRIVER(cuModuleUnload);
  if (!Forwarding::active()) note_unload(module);
  return real_cuModuleUnload(module);
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  DRIVER(cuModuleGetFunction);
  CUresult status = real_cuModuleGetFunction(function, module, name);
  if (status == CUDA_SUCCESS && !Forwarding::active()) note_kernel(*function, module, name, false);
  return status;
}

// cuModuleGetGlobal is a macro for the _v2 function (64-bit CUdeviceptr).
CUresult cuModuleGetGlobal_v2(CUdeviceptr* address, size_t* bytes, CUmodule module, const char* name) {
  DRIVER(cuModuleGetGlobal_v2);
  CUresult status = real_cuModuleGetGlobal_v2(address, bytes, module, name);
  if (status == CUDA_SUCCESS && !Forwarding::active()) note_global(module, name);
  return status;
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,
                           unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count) {
  DRIVER(cuLibraryLoadData);
  CUresult status = real_cuLibraryLoadData(library, code, jit_options, jit_values, jit_count, options, values, count);
  if (status == CUDA_SUCCESS && !Forwarding::active())
    note_module(*library, code, ModuleApi::library, __builtin_return_address(0));
  return status;
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option* jit_options, void** jit_values,
                               unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count) {
  DRIVER(cuLibraryLoadFromFile);
  CUresult status = real_cuLibraryLoadFromFile(library, path, jit_options, jit_values, jit_count, options, values, count);
  if (status == CUDA_SUCCESS && !Forwarding::active()) note_module_file(*library, path, ModuleApi::library);
  return status;
}

CUresult cuLibraryUnload(CUlibrary library) {
  DRIVER(cuLibraryUnload);
  if (!Forwarding::active()) note_unload(library);
  return real_cuLibraryUnload(library);
}

CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  DRIVER(cuLibraryGetKernel);
  CUresult status = real_cuLibraryGetKernel(kernel, library, name);
  if (status == CUDA_SUCCESS && !Forwarding::active()) note_kernel(*kernel, library, name, true);
  return status;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* address, size_t* bytes, CUlibrary library, const char* name) {
  DRIVER(cuLibraryGetGlobal);
  CUresult status = real_cuLibraryGetGlobal(address, bytes, library, name);
  if (status == CUDA_SUCCESS && !Forwarding::active()) note_global(library, name);
  return status;
}

// The function of a library's kernel in the current context, launched like any other.
CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  DRIVER(cuKernelGetFunction);
  CUresult status = real_cuKernelGetFunction(function, kernel);
  auto& r = Recorder::get();
  if (status == CUDA_SUCCESS && r.active() && !Forwarding::active()) {
    RecorderLock lock(r);
    r.function_of_kernel(*function, kernel);
  }
  return status;
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  DRIVER(cuMemAlloc_v2);
  return served_by_driver_wrapper() ? serve_driver(ptr, size) : real_cuMemAlloc_v2(ptr, size);
}

CUresult cuMemAllocPitch_v2(CUdeviceptr* ptr, size_t* pitch, size_t width, size_t height, unsigned int element) {
  DRIVER(cuMemAllocPitch_v2);
  if (!served_by_driver_wrapper() || !pitch) return real_cuMemAllocPitch_v2(ptr, pitch, width, height, element);
  *pitch = (width + 511) / 512 * 512;
  return serve_driver(ptr, *pitch * height);
}

// Stream-ordered allocations (memory pools): served from the fixed range at once, so
// replay finds them where the kernels saw them.
CUresult cuMemAllocAsync(CUdeviceptr* ptr, size_t size, CUstream stream) {
  DRIVER(cuMemAllocAsync);
  return served_by_driver_wrapper() ? serve_driver(ptr, size) : real_cuMemAllocAsync(ptr, size, stream);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* ptr, size_t size, CUstream stream) {
  DRIVER(cuMemAllocAsync_ptsz);
  return served_by_driver_wrapper() ? serve_driver(ptr, size) : real_cuMemAllocAsync_ptsz(ptr, size, stream);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  DRIVER(cuMemAllocFromPoolAsync);
  return served_by_driver_wrapper() ? serve_driver(ptr, size) : real_cuMemAllocFromPoolAsync(ptr, size, pool, stream);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* ptr, size_t size, CUmemoryPool pool, CUstream stream) {
  DRIVER(cuMemAllocFromPoolAsync_ptsz);
  return served_by_driver_wrapper() ? serve_driver(ptr, size)
                                    : real_cuMemAllocFromPoolAsync_ptsz(ptr, size, pool, stream);
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  DRIVER(cuMemFree_v2);
  return released(ptr) ? CUDA_SUCCESS : real_cuMemFree_v2(ptr);
}

CUresult cuMemFreeAsync(CUdeviceptr ptr, CUstream stream) {
  DRIVER(cuMemFreeAsync);
  return released(ptr) ? CUDA_SUCCESS : real_cuMemFreeAsync(ptr, stream);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr ptr, CUstream stream) {
  DRIVER(cuMemFreeAsync_ptsz);
  return released(ptr) ? CUDA_SUCCESS : real_cuMemFreeAsync_ptsz(ptr, stream);
}

// Address space an application reserves to map memory into itself (PyTorch's expandable
// segments, XLA's allocator): served from the recorded range when it fits, so what is
// mapped there is snapshotted as heap memory that replay restores like any other. A
// reservation at an address of the caller's choosing, or one the range cannot hold, is
// the driver's (said once); memory mapped there is kept at its own address (kind "mapped").
CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  DRIVER(cuMemAddressReserve);
  if (!ptr || addr != 0 || !served_by_driver_wrapper()) return real_cuMemAddressReserve(ptr, size, alignment, addr, flags);
  auto& r = Recorder::get();
  RecorderLock lock(r);
  try {
    *ptr = r.space().reserve_unmapped(size, alignment);
    r.track_reservation(*ptr);
    return CUDA_SUCCESS;
  } catch (const rt::OutOfSpaceError&) {
    r.notice_once("cuMemAddressReserve: a reservation larger than the free recorded range is left to the driver; "
                  "memory mapped there is recorded at its own address (a larger -vass keeps it in the range)");
    return real_cuMemAddressReserve(ptr, size, alignment, addr, flags);
  }
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  DRIVER(cuMemAddressFree);
  auto& r = Recorder::get();
  if (r.active() && !Forwarding::active()) {
    RecorderLock lock(r);
    if (r.release_reservation(ptr)) return CUDA_SUCCESS;
  }
  return real_cuMemAddressFree(ptr, size);
}

// Physical memory the application maps into address space it reserved itself (PyTorch's
// expandable segments, JAX's and other allocators over the VMM API): snapshotted where it
// is mapped, as heap memory inside the recorded range, else at its own address ("mapped").
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  DRIVER(cuMemMap);
  CUresult status = real_cuMemMap(ptr, size, offset, handle, flags);
  auto& r = Recorder::get();
  if (status == CUDA_SUCCESS && r.active() && !Forwarding::active()) {
    RecorderLock lock(r);
    r.track_mapped(uint64_t(ptr), size);
  }
  return status;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  DRIVER(cuMemUnmap);
  auto& r = Recorder::get();
  if (r.active() && !Forwarding::active()) {
    RecorderLock lock(r);
    r.untrack_mapped(uint64_t(ptr), size);
  }
  return real_cuMemUnmap(ptr, size);
}

CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned int flags) {
  DRIVER(cuMemAllocManaged);
  DRIVER(cuMemFree_v2);
  if (!Recorder::get().active() || Forwarding::active() || !size || !ptr) return real_cuMemAllocManaged(ptr, size, flags);
  CUresult status = CUDA_SUCCESS;
  uint64_t address = 0;
  bool made = serve_managed(
      size, address,
      [&](uint64_t& at) {
        CUdeviceptr p = 0;
        status = real_cuMemAllocManaged(&p, size, flags);
        at = p;
        return status == CUDA_SUCCESS;
      },
      [&](uint64_t at) { real_cuMemFree_v2(at); });
  if (made) *ptr = address;
  return made ? CUDA_SUCCESS : status;
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream stream) {
  DRIVER(cuMemPrefetchAsync_v2);
  if (arena_owned(reinterpret_cast<const void*>(ptr), count)) return CUDA_SUCCESS;
  return real_cuMemPrefetchAsync_v2(ptr, count, location, flags, stream);
}

CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location) {
  DRIVER(cuMemAdvise_v2);
  if (arena_owned(reinterpret_cast<const void*>(ptr), count)) return CUDA_SUCCESS;
  return real_cuMemAdvise_v2(ptr, count, advice, location);
}

}  // extern "C"
