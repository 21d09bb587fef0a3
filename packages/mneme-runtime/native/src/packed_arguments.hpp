// Arguments a launch passes packed in one buffer (`extra`: CU_LAUNCH_PARAM_BUFFER_POINTER
// and _SIZE), as cuBLASLt and CUTLASS launch and as XLA's command buffers keep cuBLASLt's
// kernels in graph nodes: the recorder reads them as kernelParams, one pointer per parameter.
#pragma once

#include <cuda.h>

#include <vector>

namespace mneme::recorder {

// One pointer per parameter of `f` into the packed buffer, at the offsets the driver
// gives. False when it cannot tell (an option it does not know, no layout).
bool unpack_arguments(CUfunction f, void** extra, std::vector<void*>& params);

}  // namespace mneme::recorder
