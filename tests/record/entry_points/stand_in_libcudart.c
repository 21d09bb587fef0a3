/* A stand-in shared CUDA runtime (libcudart.so.13) for the CPU tests of entry-point
 * resolution: it takes driver functions as the real one does, with dlsym on libcuda and
 * cuGetProcAddress. The recorder follows the runtime at its own API, so these lookups must
 * get the driver's functions, never the wrappers (a graph change would be followed twice). */
#define _GNU_SOURCE
#include <dlfcn.h>

typedef int (*GetProc)(const char*, void**, int, unsigned long long, int*);

/* volatile: no tail call, so the lookups' return address is in this library. */
void* cudart_dlsym(const char* name) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* volatile found = cuda ? dlsym(cuda, name) : 0;
  return found;
}

void* cudart_proc(const char* name, int version) {
  GetProc get = (GetProc)cudart_dlsym("cuGetProcAddress_v2");
  void* pfn = 0;
  int status = 0;
  volatile int result = get ? get(name, &pfn, version, 0, &status) : -1;
  (void)result;
  return pfn;
}
