// Error checks of the nvcc programs that use the driver API and NVRTC: a failing call ends
// the program with exit status 1 and one line on stderr, like CORPUS_CHECK.
#pragma once

#include <cuda.h>
#include <nvrtc.h>

#include <cstdio>
#include <cstdlib>

#define NVRTC_CHECK(call)                                                                  \
  do {                                                                                     \
    nvrtcResult r_ = (call);                                                               \
    if (r_ != NVRTC_SUCCESS) {                                                             \
      std::fprintf(stderr, "corpus: %s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,     \
                   nvrtcGetErrorString(r_));                                               \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

#define CU_CHECK(call)                                                                     \
  do {                                                                                     \
    CUresult r_ = (call);                                                                  \
    if (r_ != CUDA_SUCCESS) {                                                              \
      const char *name_ = "?", *text_ = "?";                                               \
      cuGetErrorName(r_, &name_);                                                          \
      cuGetErrorString(r_, &text_);                                                        \
      std::fprintf(stderr, "corpus: %s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                   name_, text_);                                                          \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
