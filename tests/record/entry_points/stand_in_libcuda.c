/* A stand-in libcuda.so.1 for the CPU tests of the recorder's entry-point resolution
 * (machines without a GPU have no driver at all). It answers only what those tests ask:
 * cuGetProcAddress_v2 by name and version, as the real driver does, and launch/copy
 * functions that return a marker, so a test sees which function a call reached. */
#include <stddef.h>
#include <string.h>

#define MARK_LAUNCH 701
#define MARK_LAUNCH_EX 702
#define MARK_ALLOC_V1 703
#define MARK_ALLOC_V2 704
#define MARK_COPY 705
#define MARK_COOPERATIVE 706
#define MARK_COOPERATIVE_PTSZ 707

int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shmem, void* stream, void** params, void** extra) { return MARK_LAUNCH; }
int cuLaunchKernelEx(const void* config, void* f, void** params, void** extra) { return MARK_LAUNCH_EX; }
int cuMemAlloc(unsigned* ptr, unsigned size) { return MARK_ALLOC_V1; }
int cuMemAlloc_v2(unsigned long long* ptr, unsigned long size) { return MARK_ALLOC_V2; }
int cuMemcpy(unsigned long long dst, unsigned long long src, unsigned long n) { return MARK_COPY; }
int cuLaunchCooperativeKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                              unsigned shmem, void* stream, void** params) { return MARK_COOPERATIVE; }
int cuLaunchCooperativeKernel_ptsz(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                   unsigned bz, unsigned shmem, void* stream, void** params) {
  return MARK_COOPERATIVE_PTSZ;
}

/* Every exported version of the graph functions the recorder must follow (instantiate,
 * change, destroy or launch an executable graph; begin or end a capture). Each returns its
 * own marker, 800 + its place here: stand_in_mark names the marker of a version. */
#define GRAPH_FUNCTIONS(X)                                                                             \
  X(cuGraphInstantiate) X(cuGraphInstantiate_v2) X(cuGraphInstantiateWithFlags)                       \
  X(cuGraphInstantiateWithParams) X(cuGraphInstantiateWithParams_ptsz)                                 \
  X(cuGraphExecKernelNodeSetParams) X(cuGraphExecKernelNodeSetParams_v2)                               \
  X(cuGraphExecMemcpyNodeSetParams) X(cuGraphExecMemsetNodeSetParams) X(cuGraphExecHostNodeSetParams) \
  X(cuGraphExecChildGraphNodeSetParams) X(cuGraphExecEventRecordNodeSetEvent)                          \
  X(cuGraphExecEventWaitNodeSetEvent) X(cuGraphExecNodeSetParams) X(cuGraphNodeSetEnabled)             \
  X(cuGraphExecExternalSemaphoresSignalNodeSetParams) X(cuGraphExecExternalSemaphoresWaitNodeSetParams) \
  X(cuGraphExecBatchMemOpNodeSetParams) X(cuGraphExecUpdate) X(cuGraphExecUpdate_v2)                   \
  X(cuGraphExecDestroy) X(cuGraphLaunch) X(cuGraphLaunch_ptsz)                                         \
  X(cuStreamBeginCapture) X(cuStreamBeginCapture_ptsz) X(cuStreamBeginCapture_v2)                      \
  X(cuStreamBeginCapture_v2_ptsz) X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz)   \
  X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)

#define GRAPH_INDEX(name) INDEX_##name,
enum { GRAPH_FUNCTIONS(GRAPH_INDEX) GRAPH_COUNT };
#define GRAPH_DEFINE(name) \
  int name() { return 800 + INDEX_##name; }
GRAPH_FUNCTIONS(GRAPH_DEFINE)
#define GRAPH_NAME(name) #name,
static const char* const kGraphNames[] = {GRAPH_FUNCTIONS(GRAPH_NAME)};

int stand_in_mark(const char* exported) {
  for (int i = 0; i < GRAPH_COUNT; ++i)
    if (!strcmp(kGraphNames[i], exported)) return 800 + i;
  return -1;
}

/* What cuGetProcAddress answers for a graph function: by name, the newest version at or
 * below the caller's CUDA version, the _ptsz one for per-thread default streams (flag 2),
 * as cudaTypedefs.h lists them (PFN_<name>_v<version>[_ptsz]). */
struct GraphLookup {
  const char* symbol;
  int version;
  int per_thread;
  int (*function)();
};
const struct GraphLookup stand_in_graph_lookups[] = {
    {"cuGraphInstantiate", 10000, 0, cuGraphInstantiate},
    {"cuGraphInstantiate", 11000, 0, cuGraphInstantiate_v2},
    {"cuGraphInstantiate", 12000, 0, cuGraphInstantiateWithFlags},
    {"cuGraphInstantiateWithFlags", 11040, 0, cuGraphInstantiateWithFlags},
    {"cuGraphInstantiateWithParams", 12000, 0, cuGraphInstantiateWithParams},
    {"cuGraphInstantiateWithParams", 12000, 1, cuGraphInstantiateWithParams_ptsz},
    {"cuGraphExecKernelNodeSetParams", 10010, 0, cuGraphExecKernelNodeSetParams},
    {"cuGraphExecKernelNodeSetParams", 12000, 0, cuGraphExecKernelNodeSetParams_v2},
    {"cuGraphExecMemcpyNodeSetParams", 10020, 0, cuGraphExecMemcpyNodeSetParams},
    {"cuGraphExecMemsetNodeSetParams", 10020, 0, cuGraphExecMemsetNodeSetParams},
    {"cuGraphExecHostNodeSetParams", 10020, 0, cuGraphExecHostNodeSetParams},
    {"cuGraphExecChildGraphNodeSetParams", 11010, 0, cuGraphExecChildGraphNodeSetParams},
    {"cuGraphExecEventRecordNodeSetEvent", 11010, 0, cuGraphExecEventRecordNodeSetEvent},
    {"cuGraphExecEventWaitNodeSetEvent", 11010, 0, cuGraphExecEventWaitNodeSetEvent},
    {"cuGraphExecNodeSetParams", 12020, 0, cuGraphExecNodeSetParams},
    {"cuGraphNodeSetEnabled", 11060, 0, cuGraphNodeSetEnabled},
    {"cuGraphExecExternalSemaphoresSignalNodeSetParams", 11020, 0, cuGraphExecExternalSemaphoresSignalNodeSetParams},
    {"cuGraphExecExternalSemaphoresWaitNodeSetParams", 11020, 0, cuGraphExecExternalSemaphoresWaitNodeSetParams},
    {"cuGraphExecBatchMemOpNodeSetParams", 11070, 0, cuGraphExecBatchMemOpNodeSetParams},
    {"cuGraphExecUpdate", 10020, 0, cuGraphExecUpdate},
    {"cuGraphExecUpdate", 12000, 0, cuGraphExecUpdate_v2},
    {"cuGraphExecDestroy", 10000, 0, cuGraphExecDestroy},
    {"cuGraphLaunch", 10000, 0, cuGraphLaunch},
    {"cuGraphLaunch", 10000, 1, cuGraphLaunch_ptsz},
    {"cuStreamBeginCapture", 10000, 0, cuStreamBeginCapture},
    {"cuStreamBeginCapture", 10000, 1, cuStreamBeginCapture_ptsz},
    {"cuStreamBeginCapture", 10010, 0, cuStreamBeginCapture_v2},
    {"cuStreamBeginCapture", 10010, 1, cuStreamBeginCapture_v2_ptsz},
    {"cuStreamBeginCaptureToGraph", 12030, 0, cuStreamBeginCaptureToGraph},
    {"cuStreamBeginCaptureToGraph", 12030, 1, cuStreamBeginCaptureToGraph_ptsz},
    {"cuStreamEndCapture", 10000, 0, cuStreamEndCapture},
    {"cuStreamEndCapture", 10000, 1, cuStreamEndCapture_ptsz},
    {NULL, 0, 0, NULL},
};

static void* graph_lookup(const char* symbol, int version, unsigned long long flags) {
  const struct GraphLookup* best = NULL;
  for (const struct GraphLookup* l = stand_in_graph_lookups; l->symbol; ++l)
    if (!strcmp(l->symbol, symbol) && l->version <= version && l->per_thread == ((flags & 2) != 0) &&
        (!best || l->version > best->version))
      best = l;
  return best ? (void*)best->function : NULL;
}

/* cuMemAlloc became cuMemAlloc_v2 (64-bit pointers) in CUDA 3.2: the version picks. */
int cuGetProcAddress_v2(const char* symbol, void** pfn, int version, unsigned long long flags, int* status) {
  void* found = 0;
  if (!strcmp(symbol, "cuLaunchKernel")) found = (void*)cuLaunchKernel;
  else if (!strcmp(symbol, "cuLaunchKernelEx")) found = (void*)cuLaunchKernelEx;
  else if (!strcmp(symbol, "cuLaunchCooperativeKernel"))
    found = (flags & 2) ? (void*)cuLaunchCooperativeKernel_ptsz : (void*)cuLaunchCooperativeKernel;
  else if (!strcmp(symbol, "cuMemAlloc")) found = version >= 3020 ? (void*)cuMemAlloc_v2 : (void*)cuMemAlloc;
  else if (!strcmp(symbol, "cuMemcpy")) found = (void*)cuMemcpy;
  else if (!strcmp(symbol, "cuGetProcAddress")) found = (void*)cuGetProcAddress_v2;
  else found = graph_lookup(symbol, version, flags);
  if (status) *status = found ? 0 : 1;
  *pfn = found;
  return found ? 0 : 500; /* CUDA_ERROR_NOT_FOUND */
}
