// Device functions and globals defined in lib.cu, used from main.cu (needs -fgpu-rdc).
#pragma once

__device__ float transfer(float x, int k);
extern __device__ int g_lib_calls;
extern __constant__ float c_lib_gain;

// Sets the gain and zeroes the call counter (with a kernel of lib.cu).
void reset_lib(float gain);
