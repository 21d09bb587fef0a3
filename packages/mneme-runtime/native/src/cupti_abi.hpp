// The few CUPTI declarations KernelTimer uses, declared here rather than taken from
// <cupti_activity.h>: libcupti is dlopen-ed at run time, and CUPTI's headers are not on
// every build machine (the CI toolkit lacks extras/CUPTI). Values and layouts are those
// of CUPTI 13 (cupti_activity.h, cupti_result.h); tests/runtime/test_cupti_abi.py checks
// them against the toolkit's header wherever one is installed.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mneme::runtime::cupti {

using Result = int;  // CUptiResult
constexpr Result kSuccess = 0;
constexpr Result kErrorMaxLimitReached = 12;
constexpr Result kErrorInsufficientPrivileges = 35;
constexpr Result kErrorMultipleSubscribers = 39;

using ActivityKind = int;  // CUpti_ActivityKind
// GPU start/end of every kernel without serialising them (KIND_KERNEL, 3, serialises).
constexpr ActivityKind kConcurrentKernel = 10;
// API records of the driver and runtime: enabled for the launch functions alone, since an
// external-correlation record is written only beside an API record (measured on an H200).
constexpr ActivityKind kDriverApi = 4;
constexpr ActivityKind kRuntimeApi = 5;
constexpr ActivityKind kExternalCorrelation = 39;
using ExternalCorrelationKind = int;  // CUpti_ExternalCorrelationKind
constexpr ExternalCorrelationKind kCustom0 = 3;
using CallbackId = uint32_t;  // CUpti_CallbackId
// cupti_driver_cbid.h / cupti_runtime_cbid.h: every function that launches one kernel.
constexpr CallbackId kDriverLaunches[] = {307, 442, 477, 478, 652, 653};  // cuLaunchKernel{,_ptsz,Ex,...}
constexpr CallbackId kRuntimeLaunches[] = {211, 214, 269, 270, 430, 431, 505, 506};  // cudaLaunchKernel...
constexpr CallbackId kLastCallbackId = 1024;  // above every driver and runtime callback id of CUPTI 13
constexpr uint32_t kFlushForced = 1;  // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED

struct Activity {  // CUpti_Activity: every record starts with its kind
  ActivityKind kind;
};

// The leading fields of CUpti_ActivityKernel4..10 (unchanged since CUDA 9: newer
// versions only append fields), packed and 8-byte aligned as CUPTI declares them.
struct __attribute__((packed, aligned(8))) KernelActivity {
  ActivityKind kind;
  uint8_t cache_config;
  uint8_t shared_memory_config;
  uint16_t registers_per_thread;
  int32_t partitioned_cache_requested;
  int32_t partitioned_cache_executed;
  uint64_t start;
  uint64_t end;
  uint64_t completed;
  uint32_t device_id;
  uint32_t context_id;
  uint32_t stream_id;
  int32_t grid_x, grid_y, grid_z;
  int32_t block_x, block_y, block_z;
  int32_t static_shared_memory;
  int32_t dynamic_shared_memory;
  uint32_t local_memory_per_thread;
  uint32_t local_memory_total;
  uint32_t correlation_id;
  int64_t grid_id;
  const char* name;
};
static_assert(offsetof(KernelActivity, start) == 16);
static_assert(offsetof(KernelActivity, device_id) == 40);
static_assert(offsetof(KernelActivity, grid_x) == 52);
static_assert(offsetof(KernelActivity, dynamic_shared_memory) == 80);
static_assert(offsetof(KernelActivity, correlation_id) == 92);
static_assert(offsetof(KernelActivity, name) == 104);

// CUpti_ActivityExternalCorrelation: a CUDA API call (its correlation id, shared with the
// kernel it launched) made while an external id was pushed on the calling thread.
struct __attribute__((packed, aligned(8))) ExternalCorrelationActivity {
  ActivityKind kind;
  ExternalCorrelationKind external_kind;
  uint64_t external_id;
  uint32_t correlation_id;
  uint32_t reserved;
};
static_assert(offsetof(ExternalCorrelationActivity, external_id) == 8);
static_assert(offsetof(ExternalCorrelationActivity, correlation_id) == 16);

using BufferRequested = void (*)(uint8_t** buffer, size_t* size, size_t* max_records);
using BufferCompleted = void (*)(void* context, uint32_t stream_id, uint8_t* buffer, size_t size,
                                 size_t valid_size);

// The entry points, as dlsym finds them in libcupti.
struct Api {
  Result (*cuptiActivityRegisterCallbacks)(BufferRequested, BufferCompleted);
  Result (*cuptiActivityEnable)(ActivityKind);
  Result (*cuptiActivityDisable)(ActivityKind);
  Result (*cuptiActivityFlushAll)(uint32_t flag);
  Result (*cuptiActivityGetNextRecord)(uint8_t* buffer, size_t valid_size, Activity** record);
  Result (*cuptiActivityGetNumDroppedRecords)(void* context, uint32_t stream_id, size_t* dropped);
  Result (*cuptiGetTimestamp)(uint64_t* timestamp);
  Result (*cuptiGetResultString)(Result result, const char** text);
  // Optional (tagging launches): absent, launches are attributed by their key alone.
  Result (*cuptiActivityPushExternalCorrelationId)(ExternalCorrelationKind kind, uint64_t id);
  Result (*cuptiActivityPopExternalCorrelationId)(ExternalCorrelationKind kind, uint64_t* last);
  Result (*cuptiActivityEnableDriverApi)(CallbackId cbid, uint8_t enable);
  Result (*cuptiActivityEnableRuntimeApi)(CallbackId cbid, uint8_t enable);
};

}  // namespace mneme::runtime::cupti
