// Library TU: the callee side of the cross-TU device call.
#include "corpus_check.h"
#include "transfer.h"

__device__ int g_lib_calls;
__constant__ float c_lib_gain;

// Piecewise-linear transfer function; exact for the inputs main.cu uses.
__device__ float transfer(float x, int k) {
  atomicAdd(&g_lib_calls, 1);
  float y = x > 1.0f ? 1.0f + 0.5f * (x - 1.0f) : x;
  return c_lib_gain * y + (float)k;
}

__global__ void reset_lib_calls() { g_lib_calls = 0; }

void reset_lib(float gain) {
  CORPUS_CHECK(cudaMemcpyToSymbol(c_lib_gain, &gain, sizeof(gain)));
  corpus::Launch l("reset_lib_calls()", {CORPUS_SYMBOL(g_lib_calls)});
  l.before();
  reset_lib_calls<<<1, 1>>>();
  l.after();
}
