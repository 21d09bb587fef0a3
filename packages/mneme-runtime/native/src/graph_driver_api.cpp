// The driver API of CUDA graphs (docs/record.md, "CUDA Graphs and stream capture"): every
// driver function that instantiates, changes, destroys or launches an executable graph, or
// begins or ends a stream capture, in every version libcuda exports.
//
// These wrappers are reached by linking against libcuda and, through entry_points.cpp
// (kWrappedDriverFunctions), by dlsym on libcuda (JAX/XLA's command buffers) and by
// cuGetProcAddress (a static CUDA runtime takes every driver function that way). A lookup
// is matched by the address of the real function it returns, so each version is its own
// wrapper: an exec-changing version left unwrapped would change the graph behind its
// mirror, and the mirror would record what the graph no longer runs. A change the mirror
// cannot make loses track of the graph (its launches then run unrecorded, said once).
//
// Each wrapper calls the real function by its exact versioned name (driver_function, not
// RTLD_NEXT, whose answer for an unversioned name could be another version). Calls made
// while a runtime wrapper forwards (Forwarding) are followed by that wrapper: they pass
// straight through, so one change is never followed twice.
#include "recorder.hpp"

using namespace mneme::recorder;

namespace {

cudaError_t as_status(CUresult r) { return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown; }
cudaGraphExec_t as_exec(CUgraphExec exec) { return reinterpret_cast<cudaGraphExec_t>(exec); }
cudaGraphNode_t as_node(CUgraphNode node) { return reinterpret_cast<cudaGraphNode_t>(node); }
cudaGraph_t as_graph(CUgraph graph) { return reinterpret_cast<cudaGraph_t>(graph); }
cudaStream_t as_stream(CUstream stream) { return reinterpret_cast<cudaStream_t>(stream); }

// A change to `exec` the real call made (when `status` is success), made on its mirror too.
CUresult followed(CUgraphExec exec, CUresult status, const std::function<void(GraphMirror&)>& change) {
  if (!Forwarding::active()) follow(as_exec(exec), as_status(status), change);
  return status;
}

CUresult made(CUgraphExec* exec, CUgraph graph, unsigned long long flags, CUresult status) {
  if (!Forwarding::active())
    instantiated(reinterpret_cast<cudaGraphExec_t*>(exec), as_graph(graph), flags, as_status(status));
  return status;
}

CUresult began(CUstream stream, CUresult status) {
  if (!Forwarding::active()) capture_begin(as_stream(stream), as_status(status));
  return status;
}

CUresult ended(CUstream stream, CUresult status) {
  if (!Forwarding::active()) capture_end(as_stream(stream), cudaSuccess);  // ended whatever the status
  return status;
}

using LaunchFn = CUresult (*)(CUgraphExec, CUstream);

CUresult launched(LaunchFn real, CUgraphExec exec, CUstream stream, const void* caller) {
  if (Forwarding::active()) return real(exec, stream);
  CUresult status = CUDA_SUCCESS;
  cudaError_t e = graph_launch(as_exec(exec), as_stream(stream), caller, [&] {
    status = real(exec, stream);
    return status == CUDA_SUCCESS ? 0 : int(cudaErrorLaunchFailure);
  });
  return e == cudaSuccess ? CUDA_SUCCESS : (status != CUDA_SUCCESS ? status : CUDA_ERROR_LAUNCH_FAILED);
}

}  // namespace

// The real driver function `name` of type `Fn` as `real`; the wrapper answers
// CUDA_ERROR_NOT_FOUND where this driver lacks that version.
#define DRIVER(Fn, name)                                            \
  static auto real = ::mneme::recorder::driver_function<Fn>(name); \
  if (!real) return CUDA_ERROR_NOT_FOUND

extern "C" {

// Versions cuda.h renames by macro (cuGraphInstantiate is cuGraphInstantiateWithFlags
// there, and so on) are defined under their exported names.
CUresult mneme_cuGraphInstantiate_v1(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t) __asm__("cuGraphInstantiate");
CUresult mneme_cuGraphExecKernelNodeSetParams_v1(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*)
    __asm__("cuGraphExecKernelNodeSetParams");
CUresult mneme_cuGraphExecUpdate_v1(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*)
    __asm__("cuGraphExecUpdate");
CUresult mneme_cuStreamBeginCapture_v1(CUstream) __asm__("cuStreamBeginCapture");

// ---- stream capture

CUresult mneme_cuStreamBeginCapture_v1(CUstream stream) {  // CUDA 10.0: no capture mode
  DRIVER(CUresult (*)(CUstream), "cuStreamBeginCapture");
  return began(stream, real(stream));
}

CUresult cuStreamBeginCapture_ptsz(CUstream stream) {
  DRIVER(CUresult (*)(CUstream), "cuStreamBeginCapture_ptsz");
  return began(stream, real(stream));
}

CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  DRIVER(CUresult (*)(CUstream, CUstreamCaptureMode), "cuStreamBeginCapture_v2");
  return began(stream, real(stream, mode));
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) {
  DRIVER(CUresult (*)(CUstream, CUstreamCaptureMode), "cuStreamBeginCapture_v2_ptsz");
  return began(stream, real(stream, mode));
}

using CaptureToGraphFn = CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*, size_t,
                                      CUstreamCaptureMode);

CUresult cuStreamBeginCaptureToGraph(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                                     const CUgraphEdgeData* data, size_t count, CUstreamCaptureMode mode) {
  DRIVER(CaptureToGraphFn, "cuStreamBeginCaptureToGraph");
  return began(stream, real(stream, graph, deps, data, count, mode));
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph, const CUgraphNode* deps,
                                          const CUgraphEdgeData* data, size_t count, CUstreamCaptureMode mode) {
  DRIVER(CaptureToGraphFn, "cuStreamBeginCaptureToGraph_ptsz");
  return began(stream, real(stream, graph, deps, data, count, mode));
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  DRIVER(CUresult (*)(CUstream, CUgraph*), "cuStreamEndCapture");
  return ended(stream, real(stream, graph));
}

CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph) {
  DRIVER(CUresult (*)(CUstream, CUgraph*), "cuStreamEndCapture_ptsz");
  return ended(stream, real(stream, graph));
}

// ---- instantiation

using InstantiateV1Fn = CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t);

CUresult mneme_cuGraphInstantiate_v1(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log,
                                     size_t size) {
  DRIVER(InstantiateV1Fn, "cuGraphInstantiate");
  return made(exec, graph, 0, real(exec, graph, error_node, log, size));
}

CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node, char* log, size_t size) {
  DRIVER(InstantiateV1Fn, "cuGraphInstantiate_v2");
  return made(exec, graph, 0, real(exec, graph, error_node, log, size));
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  DRIVER(CUresult (*)(CUgraphExec*, CUgraph, unsigned long long), "cuGraphInstantiateWithFlags");
  return made(exec, graph, flags, real(exec, graph, flags));
}

using InstantiateWithParamsFn = CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*);

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  DRIVER(InstantiateWithParamsFn, "cuGraphInstantiateWithParams");
  return made(exec, graph, params ? params->flags : 0, real(exec, graph, params));
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  DRIVER(InstantiateWithParamsFn, "cuGraphInstantiateWithParams_ptsz");
  return made(exec, graph, params ? params->flags : 0, real(exec, graph, params));
}

// ---- changes to an executable graph

CUresult mneme_cuGraphExecKernelNodeSetParams_v1(CUgraphExec exec, CUgraphNode node,
                                                 const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*), "cuGraphExecKernelNodeSetParams");
  return followed(exec, real(exec, node, p), [&](GraphMirror& m) { m.set_kernel_params(as_node(node), p); });
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*), "cuGraphExecKernelNodeSetParams_v2");
  return followed(exec, real(exec, node, p), [&](GraphMirror& m) { m.set_kernel_params(as_node(node), p); });
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p, CUcontext ctx) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_MEMCPY3D*, CUcontext), "cuGraphExecMemcpyNodeSetParams");
  return followed(exec, real(exec, node, p, ctx), [&](GraphMirror& m) { m.set_memcpy_params(as_node(node), p); });
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p,
                                        CUcontext ctx) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*, CUcontext),
         "cuGraphExecMemsetNodeSetParams");
  return followed(exec, real(exec, node, p, ctx), [&](GraphMirror& m) { m.set_memset_params(as_node(node), p); });
}

CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_HOST_NODE_PARAMS*), "cuGraphExecHostNodeSetParams");
  return followed(exec, real(exec, node, p), [&](GraphMirror& m) { m.set_host_params(as_node(node), p); });
}

CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraph child) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, CUgraph), "cuGraphExecChildGraphNodeSetParams");
  return followed(exec, real(exec, node, child), [&](GraphMirror& m) {
    m.set_child_graph(reinterpret_cast<cudaGraphNode_t>(node), reinterpret_cast<cudaGraph_t>(child));
  });
}

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, CUevent), "cuGraphExecEventRecordNodeSetEvent");
  return followed(exec, real(exec, node, event), [&](GraphMirror& m) {
    m.set_event(as_node(node), reinterpret_cast<cudaEvent_t>(event), true);
  });
}

CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, CUevent), "cuGraphExecEventWaitNodeSetEvent");
  return followed(exec, real(exec, node, event), [&](GraphMirror& m) {
    m.set_event(as_node(node), reinterpret_cast<cudaEvent_t>(event), false);
  });
}

CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, CUgraphNodeParams*), "cuGraphExecNodeSetParams");
  return followed(exec, real(exec, node, p), [&](GraphMirror& m) { m.set_node_params(as_node(node), p); });
}

CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, unsigned int), "cuGraphNodeSetEnabled");
  return followed(exec, real(exec, node, enabled), [&](GraphMirror& m) { m.set_enabled(as_node(node), enabled != 0); });
}

// Graphs with these nodes already have an unusable mirror; the change is noted all the same.
CUresult cuGraphExecExternalSemaphoresSignalNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                          const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_EXT_SEM_SIGNAL_NODE_PARAMS*),
         "cuGraphExecExternalSemaphoresSignalNodeSetParams");
  return followed(exec, real(exec, node, p),
                  [](GraphMirror& m) { m.lose_track("an external semaphore signal node was changed"); });
}

CUresult cuGraphExecExternalSemaphoresWaitNodeSetParams(CUgraphExec exec, CUgraphNode node,
                                                        const CUDA_EXT_SEM_WAIT_NODE_PARAMS* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_EXT_SEM_WAIT_NODE_PARAMS*),
         "cuGraphExecExternalSemaphoresWaitNodeSetParams");
  return followed(exec, real(exec, node, p),
                  [](GraphMirror& m) { m.lose_track("an external semaphore wait node was changed"); });
}

CUresult cuGraphExecBatchMemOpNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS*),
         "cuGraphExecBatchMemOpNodeSetParams");
  return followed(exec, real(exec, node, p),
                  [](GraphMirror& m) { m.lose_track("a batch memory operation node was changed"); });
}

CUresult mneme_cuGraphExecUpdate_v1(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node,
                                    CUgraphExecUpdateResult* result) {  // CUDA 10.2-11.x
  DRIVER(CUresult (*)(CUgraphExec, CUgraph, CUgraphNode*, CUgraphExecUpdateResult*), "cuGraphExecUpdate");
  return followed(exec, real(exec, graph, error_node, result), [&](GraphMirror& m) { m.update_from(as_graph(graph)); });
}

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  DRIVER(CUresult (*)(CUgraphExec, CUgraph, CUgraphExecUpdateResultInfo*), "cuGraphExecUpdate_v2");
  return followed(exec, real(exec, graph, info), [&](GraphMirror& m) { m.update_from(as_graph(graph)); });
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  DRIVER(CUresult (*)(CUgraphExec), "cuGraphExecDestroy");
  if (!Forwarding::active()) graph_gone(as_exec(exec));
  return real(exec);
}

// ---- launches

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  DRIVER(LaunchFn, "cuGraphLaunch");
  return launched(real, exec, stream, __builtin_return_address(0));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream stream) {
  DRIVER(LaunchFn, "cuGraphLaunch_ptsz");
  return launched(real, exec, stream, __builtin_return_address(0));
}

}  // extern "C"
