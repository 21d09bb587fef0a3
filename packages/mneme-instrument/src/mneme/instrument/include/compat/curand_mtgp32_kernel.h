/* Empty on purpose. clang's __clang_cuda_runtime_wrapper.h includes this curand header
 * unconditionally; CUDA toolkits installed without curand lack it. mneme-clang++ adds this
 * folder to the include path (last) only when <CUDA root>/include has no such file. */
