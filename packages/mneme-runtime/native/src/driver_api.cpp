// The CUDA driver API entry points the recorder interposes: launches, modules and
// libraries the application loads itself, allocations.
#include "recorder.hpp"

using namespace mneme::recorder;

extern "C" {

// Driver-API launches of functions and of CUkernels cast to CUfunction.
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void** params, void** extra) {
  REAL(cuLaunchKernel);
  auto& r = Recorder::get();
  auto launch = [&] { return int(real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)); };
  if (!r.active() || !params) return CUresult(launch());
  std::lock_guard<std::mutex> lock(r.mutex);
  return CUresult(r.launch_driver(f, dim3(gx, gy, gz), dim3(bx, by, bz), params, shmem,
                                  reinterpret_cast<uint64_t>(stream), launch));
}

CUresult cuModuleLoad(CUmodule* module, const char* path) {
  REAL(cuModuleLoad);
  CUresult status = real_cuModuleLoad(module, path);
  if (status == CUDA_SUCCESS) note_module_file(*module, path, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  REAL(cuModuleLoadData);
  CUresult status = real_cuModuleLoadData(module, image);
  if (status == CUDA_SUCCESS) note_module(*module, image, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count, CUjit_option* options,
                            void** values) {
  REAL(cuModuleLoadDataEx);
  CUresult status = real_cuModuleLoadDataEx(module, image, count, options, values);
  if (status == CUDA_SUCCESS) note_module(*module, image, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  REAL(cuModuleLoadFatBinary);
  CUresult status = real_cuModuleLoadFatBinary(module, image);
  if (status == CUDA_SUCCESS) note_module(*module, image, ModuleApi::module);
  return status;
}

CUresult cuModuleUnload(CUmodule module) {
  REAL(cuModuleUnload);
  note_unload(module);
  return real_cuModuleUnload(module);
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  REAL(cuModuleGetFunction);
  CUresult status = real_cuModuleGetFunction(function, module, name);
  if (status == CUDA_SUCCESS) note_kernel(*function, module, name, false);
  return status;
}

// cuModuleGetGlobal is a macro for the _v2 function (64-bit CUdeviceptr).
CUresult cuModuleGetGlobal_v2(CUdeviceptr* address, size_t* bytes, CUmodule module, const char* name) {
  REAL(cuModuleGetGlobal_v2);
  CUresult status = real_cuModuleGetGlobal_v2(address, bytes, module, name);
  if (status == CUDA_SUCCESS) note_global(module, name);
  return status;
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,
                           unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count) {
  REAL(cuLibraryLoadData);
  CUresult status = real_cuLibraryLoadData(library, code, jit_options, jit_values, jit_count, options, values, count);
  if (status == CUDA_SUCCESS) note_module(*library, code, ModuleApi::library);
  return status;
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option* jit_options, void** jit_values,
                               unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count) {
  REAL(cuLibraryLoadFromFile);
  CUresult status = real_cuLibraryLoadFromFile(library, path, jit_options, jit_values, jit_count, options, values, count);
  if (status == CUDA_SUCCESS) note_module_file(*library, path, ModuleApi::library);
  return status;
}

CUresult cuLibraryUnload(CUlibrary library) {
  REAL(cuLibraryUnload);
  note_unload(library);
  return real_cuLibraryUnload(library);
}

CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  REAL(cuLibraryGetKernel);
  CUresult status = real_cuLibraryGetKernel(kernel, library, name);
  if (status == CUDA_SUCCESS) note_kernel(*kernel, library, name, true);  // launched cast to a CUfunction
  return status;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* address, size_t* bytes, CUlibrary library, const char* name) {
  REAL(cuLibraryGetGlobal);
  CUresult status = real_cuLibraryGetGlobal(address, bytes, library, name);
  if (status == CUDA_SUCCESS) note_global(library, name);
  return status;
}

// The function of a library's kernel in the current context, launched like any other.
CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  REAL(cuKernelGetFunction);
  CUresult status = real_cuKernelGetFunction(function, kernel);
  auto& r = Recorder::get();
  if (status == CUDA_SUCCESS && r.active()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.function_of_kernel(*function, kernel);
  }
  return status;
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  REAL(cuMemAlloc_v2);
  if (!served_here()) return real_cuMemAlloc_v2(ptr, size);
  void* p = nullptr;
  serve(&p, size);
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  REAL(cuMemFree_v2);
  if (Recorder::get().active() && release(reinterpret_cast<void*>(ptr))) return CUDA_SUCCESS;
  if (forget_managed(uint64_t(ptr))) return CUDA_SUCCESS;
  return real_cuMemFree_v2(ptr);
}

CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned int flags) {
  REAL(cuMemAllocManaged);
  auto& r = Recorder::get();
  if (!r.active() || !size || !ptr) return real_cuMemAllocManaged(ptr, size, flags);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (uint64_t at = r.allocate_managed(size)) {
    r.track_managed(at, size);
    *ptr = at;
    return CUDA_SUCCESS;
  }
  CUresult status = real_cuMemAllocManaged(ptr, size, flags);
  if (status == CUDA_SUCCESS) r.track_managed(uint64_t(*ptr), size);
  return status;
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream stream) {
  REAL(cuMemPrefetchAsync_v2);
  if (arena_owned(reinterpret_cast<const void*>(ptr), count)) return CUDA_SUCCESS;
  return real_cuMemPrefetchAsync_v2(ptr, count, location, flags, stream);
}

CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location) {
  REAL(cuMemAdvise_v2);
  if (arena_owned(reinterpret_cast<const void*>(ptr), count)) return CUDA_SUCCESS;
  return real_cuMemAdvise_v2(ptr, count, advice, location);
}

}  // extern "C"
