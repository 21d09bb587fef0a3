// Host entry points of the three translation units of multi_tu.
#pragma once

// stencil.cu
void run_init_ramp(float *x, int n);
void run_stencil3(const float *in, float *out, int n);
void run_stencil_local_scale(float *x, int n);
// reduce.cu
void run_block_sums(const float *in, float *partial, int n, int block);
void run_final_sum(const float *partial, float *total, int m);
void run_reduce_local_scale(float *x, int n);
