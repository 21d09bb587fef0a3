// Cooperative launches in `mneme run --apply` (libmneme_apply.so): what the swapper's
// launch paths (launch_swap.cpp) and its cooperative entry points (cooperative_swap.cpp)
// share. A cooperative launch of a planned kernel runs the tuned code cooperatively, so
// the kernel's grid-wide synchronisation holds.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <functional>

namespace mneme::apply {

// Whether a launch's attributes are ones the tuned launch carries: COOPERATIVE alone (any
// number of times; the last value counts, as the driver reads them). `cooperative` is then
// its value. False when any other attribute is set (clusters, priorities, ...): that
// launch runs the original code, counted under "attributes".
bool swappable_attributes(const cudaLaunchAttribute* attributes, unsigned count, bool& cooperative);
bool swappable_attributes(const CUlaunchAttribute* attributes, unsigned count, bool& cooperative);

// A runtime-API launch of `func` (a host stub or a cudaKernel_t) through the swapper: the
// tuned code (cooperatively when `cooperative`) where the plan applies, else `original`.
int swap_runtime_launch(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream,
                        bool per_thread, bool cooperative, const std::function<int()>& original);
// A driver-API launch of `f` with its parameters in `params`, likewise.
int swap_driver_launch(CUfunction f, dim3 grid, dim3 block, unsigned shared, CUstream stream, void** params,
                       bool cooperative, const std::function<int()>& original);

}  // namespace mneme::apply
