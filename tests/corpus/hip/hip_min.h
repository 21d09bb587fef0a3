// The smallest subset of the HIP runtime headers the corpus HIP ports need, so that they
// compile (to objects; they are never linked here) with
//   clang++-22 -x hip --offload-arch=gfx90a -nogpulib -nogpuinc -c
// on a machine without ROCm. Device builtins map onto clang's __builtin_amdgcn_* and
// __hip_atomic_* builtins; host functions are only declared (libamdhip64 would define them).
#pragma once

#include <cstddef>
#include <cstdint>

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
// Max threads per block only; the min-blocks hint has no direct amdgpu equivalent here.
#define __launch_bounds__(max_threads, ...) __attribute__((amdgpu_flat_work_group_size(1, max_threads)))

struct dim3 {
  unsigned x, y, z;
  constexpr __host__ __device__ dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// ---- Built-in index variables: properties read through amdgcn builtins --------------------
#define HIP_MIN_BUILTIN_VAR(type_name, fx, fy, fz)                                       \
  struct type_name {                                                                  \
    __declspec(property(get = get_x)) unsigned x;                                     \
    __declspec(property(get = get_y)) unsigned y;                                     \
    __declspec(property(get = get_z)) unsigned z;                                     \
    static inline __device__ unsigned get_x() { return fx; }                          \
    static inline __device__ unsigned get_y() { return fy; }                          \
    static inline __device__ unsigned get_z() { return fz; }                          \
  };                                                                                  \
  extern const __device__ __attribute__((weak)) type_name

HIP_MIN_BUILTIN_VAR(hip_min_thread_idx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
                    __builtin_amdgcn_workitem_id_z()) threadIdx;
HIP_MIN_BUILTIN_VAR(hip_min_block_idx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
                    __builtin_amdgcn_workgroup_id_z()) blockIdx;
HIP_MIN_BUILTIN_VAR(hip_min_block_dim, __builtin_amdgcn_workgroup_size_x(), __builtin_amdgcn_workgroup_size_y(),
                    __builtin_amdgcn_workgroup_size_z()) blockDim;
HIP_MIN_BUILTIN_VAR(hip_min_grid_dim, __builtin_amdgcn_grid_size_x() / __builtin_amdgcn_workgroup_size_x(),
                    __builtin_amdgcn_grid_size_y() / __builtin_amdgcn_workgroup_size_y(),
                    __builtin_amdgcn_grid_size_z() / __builtin_amdgcn_workgroup_size_z()) gridDim;
#undef HIP_MIN_BUILTIN_VAR

// ---- Device functions -------------------------------------------------------------------
__device__ inline void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

__device__ inline int min(int a, int b) { return a < b ? a : b; }
__device__ inline int max(int a, int b) { return a > b ? a : b; }

__device__ inline int __float_as_int(float f) { return __builtin_bit_cast(int, f); }
__device__ inline float __int_as_float(int i) { return __builtin_bit_cast(float, i); }
__device__ inline long long __double_as_longlong(double d) { return __builtin_bit_cast(long long, d); }
__device__ inline double __longlong_as_double(long long l) { return __builtin_bit_cast(double, l); }

#define HIP_MIN_ATOMIC(name, builtin, type)                                                 \
  __device__ inline type name(type *addr, type value) {                                  \
    return builtin(addr, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);             \
  }
HIP_MIN_ATOMIC(atomicAdd, __hip_atomic_fetch_add, int)
HIP_MIN_ATOMIC(atomicAdd, __hip_atomic_fetch_add, unsigned)
HIP_MIN_ATOMIC(atomicAdd, __hip_atomic_fetch_add, float)
HIP_MIN_ATOMIC(atomicAdd, __hip_atomic_fetch_add, unsigned long long)
HIP_MIN_ATOMIC(atomicSub, __hip_atomic_fetch_sub, int)
HIP_MIN_ATOMIC(atomicMax, __hip_atomic_fetch_max, int)
HIP_MIN_ATOMIC(atomicMin, __hip_atomic_fetch_min, int)
HIP_MIN_ATOMIC(atomicExch, __hip_atomic_exchange, int)
#undef HIP_MIN_ATOMIC

// Returns the old value whether or not the exchange happened.
#define HIP_MIN_ATOMIC_CAS(type)                                                           \
  __device__ inline type atomicCAS(type *addr, type compare, type value) {                \
    __hip_atomic_compare_exchange_strong(addr, &compare, value, __ATOMIC_RELAXED,         \
                                         __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);     \
    return compare;                                                                       \
  }
HIP_MIN_ATOMIC_CAS(int)
HIP_MIN_ATOMIC_CAS(unsigned)
HIP_MIN_ATOMIC_CAS(unsigned long long)
#undef HIP_MIN_ATOMIC_CAS

struct alignas(16) float4 {
  float x, y, z, w;
};
__host__ __device__ inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }

// ---- Host runtime API (declarations only) ----------------------------------------------
typedef enum hipError_t { hipSuccess = 0, hipErrorInvalidValue = 1 } hipError_t;
typedef enum hipMemcpyKind {
  hipMemcpyHostToHost = 0,
  hipMemcpyHostToDevice = 1,
  hipMemcpyDeviceToHost = 2,
  hipMemcpyDeviceToDevice = 3,
  hipMemcpyDefault = 4
} hipMemcpyKind;
typedef struct ihipStream_t *hipStream_t;

extern "C" {
hipError_t hipMalloc(void **ptr, size_t bytes);
hipError_t hipFree(void *ptr);
hipError_t hipMemcpy(void *dst, const void *src, size_t bytes, hipMemcpyKind kind);
hipError_t hipMemset(void *dst, int value, size_t bytes);
hipError_t hipMemcpyToSymbol(const void *symbol, const void *src, size_t bytes, size_t offset, hipMemcpyKind kind);
hipError_t hipMemcpyFromSymbol(void *dst, const void *symbol, size_t bytes, size_t offset, hipMemcpyKind kind);
hipError_t hipDeviceSynchronize(void);
hipError_t hipGetLastError(void);
const char *hipGetErrorName(hipError_t error);
const char *hipGetErrorString(hipError_t error);
hipError_t hipLaunchKernel(const void *function, dim3 grid, dim3 block, void **args, size_t shared_bytes,
                           hipStream_t stream);
// What clang's <<<>>> lowering calls.
hipError_t __hipPushCallConfiguration(dim3 grid, dim3 block, size_t shared_bytes = 0, hipStream_t stream = nullptr);
hipError_t __hipPopCallConfiguration(dim3 *grid, dim3 *block, size_t *shared_bytes, hipStream_t *stream);
}

template <typename T>
inline hipError_t hipMalloc(T **ptr, size_t bytes) {
  return hipMalloc(reinterpret_cast<void **>(ptr), bytes);
}

#define HIP_SYMBOL(sym) (&(sym))

#define hipLaunchKernelGGL(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<(grid), (block), (shared_bytes), (stream)>>>(__VA_ARGS__)

// Wraps a template kernel name whose arguments contain commas, as in HIP.
#define HIP_KERNEL_NAME(...) __VA_ARGS__
