// The swapper's cooperative entry points (`mneme run --apply`): cudaLaunchCooperativeKernel
// (and its per-thread-default-stream form) and cuLaunchCooperativeKernel run the tuned code
// of a planned kernel cooperatively, like the COOPERATIVE launch attribute of
// cudaLaunchKernelEx / cuLaunchKernelEx (launch_swap.cpp). A tuned launch the driver
// refuses (a grid the tuned code cannot keep co-resident: CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)
// runs the application's own launch instead, said once per kernel and counted as refused.
#include "cooperative_swap.hpp"

#include "interpose.hpp"

namespace mneme::apply {

bool swappable_attributes(const cudaLaunchAttribute* attributes, unsigned count, bool& cooperative) {
  cooperative = false;
  for (unsigned i = 0; attributes && i < count; ++i) {
    if (attributes[i].id != cudaLaunchAttributeCooperative) return false;
    cooperative = attributes[i].val.cooperative != 0;
  }
  return true;
}

bool swappable_attributes(const CUlaunchAttribute* attributes, unsigned count, bool& cooperative) {
  cooperative = false;
  for (unsigned i = 0; attributes && i < count; ++i) {
    if (attributes[i].id != CU_LAUNCH_ATTRIBUTE_COOPERATIVE) return false;
    cooperative = attributes[i].value.cooperative != 0;
  }
  return true;
}

}  // namespace mneme::apply

using mneme::apply::swap_driver_launch;
using mneme::apply::swap_runtime_launch;

extern "C" {

cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                        cudaStream_t stream) {
  REAL(cudaLaunchCooperativeKernel);
  return cudaError_t(swap_runtime_launch(func, grid, block, args, shmem, stream, false, true, [&] {
    return int(real_cudaLaunchCooperativeKernel(func, grid, block, args, shmem, stream));
  }));
}

// Built with --default-stream per-thread, cudaLaunchCooperativeKernel lands here.
cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                             cudaStream_t stream) {
  REAL(cudaLaunchCooperativeKernel_ptsz);
  return cudaError_t(swap_runtime_launch(func, grid, block, args, shmem, stream, true, true, [&] {
    return int(real_cudaLaunchCooperativeKernel_ptsz(func, grid, block, args, shmem, stream));
  }));
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shmem, CUstream stream, void** params) {
  REAL(cuLaunchCooperativeKernel);
  return CUresult(swap_driver_launch(f, dim3(gx, gy, gz), dim3(bx, by, bz), shmem, stream, params, true, [&] {
    return int(real_cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params));
  }));
}

}  // extern "C"
