#include "packed_arguments.hpp"

#include "interpose.hpp"

namespace mneme::recorder {

bool unpack_arguments(CUfunction f, void** extra, std::vector<void*>& params) {
  char* buffer = nullptr;
  size_t size = 0;
  for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = static_cast<char*>(extra[i + 1]);
    else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) size = *static_cast<size_t*>(extra[i + 1]);
    else return false;  // an option this recorder does not know
  }
  // `f` may be a CUkernel cast to a CUfunction: its own query then.
  using FuncParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
  using KernelParamInfo = CUresult (*)(CUkernel, size_t, size_t*, size_t*);
  static auto func_info = driver_function<FuncParamInfo>("cuFuncGetParamInfo");
  static auto kernel_info = driver_function<KernelParamInfo>("cuKernelGetParamInfo");
  if (!buffer) return false;
  auto info = [&](size_t index, size_t* offset, size_t* bytes) {
    if (func_info && func_info(f, index, offset, bytes) == CUDA_SUCCESS) return true;
    return kernel_info && kernel_info(reinterpret_cast<CUkernel>(f), index, offset, bytes) == CUDA_SUCCESS;
  };
  params.clear();
  for (size_t index = 0;; ++index) {
    size_t offset = 0, bytes = 0;
    if (!info(index, &offset, &bytes)) break;
    if (offset + bytes > size) return false;
    params.push_back(buffer + offset);
  }
  // No layout from the driver for a launch that passes bytes: it cannot be read.
  return !params.empty() || size == 0;
}

}  // namespace mneme::recorder
