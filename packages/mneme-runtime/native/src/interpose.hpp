// The real CUDA entry points behind the recorder's interposed ones.
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

namespace mneme::recorder {

// The next definition of `name` after the preloaded recorder: the application's
// libcudart (or libcuda) function.
template <typename F>
F real(const char* name) {
  void* p = dlsym(RTLD_NEXT, name);
  if (!p) {
    std::fprintf(stderr, "mneme record: %s not found: is the application linked to libcudart.so "
                         "(not the static cudart)? Build it with mneme-clang++.\n", name);
    _exit(70);
  }
  return reinterpret_cast<F>(p);
}

// A driver function by its exact versioned name (cuda.h maps e.g. cuGraphKernelNodeGetParams
// to _v2 by macro), from the libcuda the runtime loaded; nullptr when this driver lacks it.
template <typename F>
F driver_function(const char* name) {
  static void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!libcuda) libcuda = dlopen("libcuda.so.1", RTLD_NOW);
  return libcuda ? reinterpret_cast<F>(dlsym(libcuda, name)) : nullptr;
}

}  // namespace mneme::recorder

#define REAL(name) static auto real_##name = ::mneme::recorder::real<decltype(&name)>(#name)
