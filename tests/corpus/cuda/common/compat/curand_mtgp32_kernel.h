/* Intentionally empty. clang's __clang_cuda_runtime_wrapper.h includes this curand header
 * unconditionally; minimal CUDA toolkits ship no curand. build.py puts this folder on the
 * include path only when <CUDA root>/include/curand_mtgp32_kernel.h is missing. */
