// Device code of ops.cu that main.cu's kernels call (-rdc=true: resolved by nvcc's device link).
#pragma once

extern __device__ unsigned g_ops_calls;  // defined in ops.cu
extern __constant__ float c_ops_scale;   // defined in ops.cu

__device__ float ops_transform(float x);
__device__ void ops_count(unsigned n);

// A host function of ops.cu that sets c_ops_scale (symbols are per translation unit).
void ops_set_scale(float scale);
