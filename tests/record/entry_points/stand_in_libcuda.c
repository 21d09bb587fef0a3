/* A stand-in libcuda.so.1 for the CPU tests of the recorder's entry-point resolution
 * (machines without a GPU have no driver at all). It answers only what those tests ask:
 * cuGetProcAddress_v2 by name and version, as the real driver does, and launch/copy
 * functions that return a marker, so a test sees which function a call reached. */
#include <string.h>

#define MARK_LAUNCH 701
#define MARK_LAUNCH_EX 702
#define MARK_ALLOC_V1 703
#define MARK_ALLOC_V2 704
#define MARK_COPY 705

int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, void* stream, void** params, void** extra) { return MARK_LAUNCH; }
int cuLaunchKernelEx(const void* config, void* f, void** params, void** extra) { return MARK_LAUNCH_EX; }
int cuMemAlloc(unsigned* ptr, unsigned size) { return MARK_ALLOC_V1; }
int cuMemAlloc_v2(unsigned long long* ptr, unsigned long size) { return MARK_ALLOC_V2; }
int cuMemcpy(unsigned long long dst, unsigned long long src, unsigned long n) { return MARK_COPY; }

/* cuMemAlloc became cuMemAlloc_v2 (64-bit pointers) in CUDA 3.2: the version picks. */
int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags, int* status) {
  void* found = 0;
  if (!strcmp(symbol, "cuLaunchKernel")) found = (void*)cuLaunchKernel;
  else if (!strcmp(symbol, "cuLaunchKernelEx")) found = (void*)cuLaunchKernelEx;
  else if (!strcmp(symbol, "cuMemAlloc")) found = version >= 3020 ? (void*)cuMemAlloc_v2 : (void*)cuMemAlloc;
  else if (!strcmp(symbol, "cuMemcpy")) found = (void*)cuMemcpy;
  else if (!strcmp(symbol, "cuGetProcAddress")) found = (void*)cuGetProcAddress_v2;
  if (status) *status = found ? 0 : 1;
  *pfn = found;
  return found ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}
