// Stream capture and CUDA graphs (docs/record.md, "CUDA Graphs and stream capture"):
// captures are followed so that nothing synchronises inside one, executable graphs get a
// mirror (graph_mirror.hpp), and a graph launch holding a kernel to record runs node by
// node, each kernel recorded like a plain launch. The runtime API's wrappers are here; the
// driver API's, in every exported version, are in graph_driver_api.cpp.
#include <elf.h>

#include <cstdio>

#include "recorder.hpp"

namespace mneme::recorder {

// "/path/app+0x1a2b": the file and the address addr2line takes for a return address
// (an offset in shared objects and position-independent executables, absolute otherwise).
// The caller's function name is not at hand: executables export few symbols.
std::string code_site(const void* return_address) {
  Dl_info where{};
  if (!dladdr(return_address, &where) || !where.dli_fname) return "an unknown caller";
  auto address = reinterpret_cast<uintptr_t>(return_address) - 1;  // inside the call instruction
  const auto* header = static_cast<const Elf64_Ehdr*>(where.dli_fbase);
  if (header && header->e_type != ET_EXEC) address -= reinterpret_cast<uintptr_t>(where.dli_fbase);
  std::string file = where.dli_fname[0] ? where.dli_fname : "the executable";
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(address));
  return file + "+" + hex + " (addr2line -f -C -e " + file + " " + hex + " names the caller)";
}

int Recorder::launch_graph(cudaGraphExec_t exec, uint64_t stream, const void* caller,
                           const std::function<int()>& do_launch) {
  // Launched into a capture, the graph becomes a child node of the graph being captured.
  if (capturing(stream)) return do_launch();
  auto* graph = mirror(exec);
  if (!graph) {  // instantiated before the recorder was active, or by a function it does not wrap
    unrecorded_call("cuGraphLaunch", "the recorder did not see the graph's instantiation (before recording began, or by a driver function it does not wrap)");
    return do_launch();
  }
  auto steps = graph->steps();
  if (!graph->why_not().empty()) {
    if (warned_graphs_.insert(exec).second)
      std::fprintf(stderr, "mneme record: a CUDA graph launched from %s runs unrecorded: %s\n", code_site(caller).c_str(),
                   graph->why_not().c_str());
    return do_launch();
  }
  // A kernel node by the handle the recorder knows it as (its module's code), else its name.
  auto name_of_step = [&](const KernelStep& k) -> const std::string* {
    const KernelHandle* h = handle_of(k);
    return h ? &h->name : &k.device_name;
  };
  auto module_of_step = [&](const KernelStep& k) -> void* {
    const KernelHandle* h = handle_of(k);
    return h ? h->module : nullptr;
  };
  bool record = false;
  for (const auto& step : steps) {
    const auto& k = step.kernel;
    if (step.type != cudaGraphNodeTypeKernel) continue;
    ClusterScope scope(k.cluster);
    CooperativeScope cooperative(k.cooperative);
    if (would_record(name_of_step(k), k.grid, k.block, k.params, k.shared_mem, k.function, module_of_step(k))) {
      record = true;
      break;
    }
  }
  if (!record) {
    // Every kernel node is a repeat (counted) or not selected: the graph runs as it is.
    for (const auto& step : steps)
      if (step.type == cudaGraphNodeTypeKernel) {
        ClusterScope scope(step.kernel.cluster);
        CooperativeScope cooperative(step.kernel.cooperative);
        launch(name_of_step(step.kernel), step.kernel.grid, step.kernel.block, step.kernel.params,
               step.kernel.shared_mem, stream, [] { return 0; }, step.kernel.function, nullptr,
               module_of_step(step.kernel));
      }
    return do_launch();
  }
  auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  for (const auto& step : steps) {
    if (step.type != cudaGraphNodeTypeKernel) {
      if (cudaError_t e = graph->run(step, cuda_stream); e != cudaSuccess) return e;
      continue;
    }
    const auto& k = step.kernel;
    ClusterScope scope(k.cluster);
    CooperativeScope cooperative(k.cooperative);
    int status = launch(name_of_step(k), k.grid, k.block, k.params, k.shared_mem, stream,
                        [&] { return launch_step(k, stream) == CUDA_SUCCESS ? 0 : int(cudaErrorLaunchFailure); },
                        k.function, nullptr, module_of_step(k));
    if (status != 0) return status;
  }
  return 0;
}

// A graph's kernel node launched on its own: with its cluster shape and cooperatively
// when its attributes say so.
CUresult Recorder::launch_step(const KernelStep& k, uint64_t stream) {
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  using LaunchExFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  static auto driver_launch = mneme::recorder::driver_function<LaunchFn>("cuLaunchKernel");
  static auto driver_launch_ex = mneme::recorder::driver_function<LaunchExFn>("cuLaunchKernelEx");
  bool clustered = uint64_t(k.cluster.x) * k.cluster.y * k.cluster.z > 1;
  if (!clustered && !k.cooperative)
    return driver_launch(k.function, k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z, k.shared_mem,
                         reinterpret_cast<CUstream>(stream), k.params, nullptr);
  CUlaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (clustered) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = k.cluster.x;
    attributes[count].value.clusterDim.y = k.cluster.y;
    attributes[count].value.clusterDim.z = k.cluster.z;
    ++count;
  }
  if (k.cooperative) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[count].value.cooperative = 1;
    ++count;
  }
  CUlaunchConfig config{};
  config.gridDimX = k.grid.x; config.gridDimY = k.grid.y; config.gridDimZ = k.grid.z;
  config.blockDimX = k.block.x; config.blockDimY = k.block.y; config.blockDimZ = k.block.z;
  config.sharedMemBytes = k.shared_mem;
  config.hStream = reinterpret_cast<CUstream>(stream);
  config.attrs = attributes;
  config.numAttrs = count;
  return driver_launch_ex ? driver_launch_ex(&config, k.function, k.params, nullptr) : CUDA_ERROR_NOT_SUPPORTED;
}

const Recorder::KernelHandle* Recorder::handle_of(const KernelStep& step) const {
  for (const void* key : {step.handle, static_cast<const void*>(step.function)}) {
    auto h = key ? handles_.find(key) : handles_.end();
    if (h != handles_.end()) return &h->second;
  }
  return nullptr;
}

cudaError_t capture_begin(cudaStream_t stream, cudaError_t status) {
  auto& r = Recorder::get();
  if (status == cudaSuccess && r.active()) {
    RecorderLock lock(r);
    r.capture_began(reinterpret_cast<uint64_t>(stream));
  }
  return status;
}

cudaError_t capture_end(cudaStream_t stream, cudaError_t status) {
  auto& r = Recorder::get();
  if (r.active()) {  // the capture ends whether or not it produced a graph
    RecorderLock lock(r);
    r.capture_ended(reinterpret_cast<uint64_t>(stream));
  }
  return status;
}

cudaError_t instantiated(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags, cudaError_t status) {
  auto& r = Recorder::get();
  if (status == cudaSuccess && r.active() && exec && *exec) {
    RecorderLock lock(r);
    r.graph_instantiated(*exec, graph, flags);
  }
  return status;
}

cudaError_t follow(cudaGraphExec_t exec, cudaError_t status,
                   const std::function<void(mneme::recorder::GraphMirror&)>& change) {
  auto& r = Recorder::get();
  if (status == cudaSuccess && r.active()) {
    RecorderLock lock(r);
    if (auto* m = r.mirror(exec)) change(*m);
  }
  return status;
}

void graph_gone(cudaGraphExec_t exec) {
  auto& r = Recorder::get();
  if (!r.active()) return;
  RecorderLock lock(r);
  r.graph_destroyed(exec);
}

cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream, const void* caller,
                         const std::function<int()>& do_launch) {
  auto& r = Recorder::get();
  if (!r.active()) return cudaError_t(do_launch());
  RecorderLock lock(r);
  return cudaError_t(r.launch_graph(exec, reinterpret_cast<uint64_t>(stream), caller, do_launch));
}

}  // namespace mneme::recorder

using namespace mneme::recorder;

extern "C" {

// ---- stream capture and graphs (docs/record.md, "CUDA Graphs")

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  Forwarding forwarding;
  REAL(cudaStreamBeginCapture);
  return capture_begin(stream, real_cudaStreamBeginCapture(stream, mode));
}

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  Forwarding forwarding;
  REAL(cudaStreamBeginCapture_ptsz);
  return capture_begin(stream, real_cudaStreamBeginCapture_ptsz(stream, mode));
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                          const cudaGraphEdgeData* data, size_t count, cudaStreamCaptureMode mode) {
  Forwarding forwarding;
  REAL(cudaStreamBeginCaptureToGraph);
  return capture_begin(stream, real_cudaStreamBeginCaptureToGraph(stream, graph, deps, data, count, mode));
}

cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                               const cudaGraphEdgeData* data, size_t count, cudaStreamCaptureMode mode) {
  Forwarding forwarding;
  REAL(cudaStreamBeginCaptureToGraph_ptsz);
  return capture_begin(stream, real_cudaStreamBeginCaptureToGraph_ptsz(stream, graph, deps, data, count, mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  Forwarding forwarding;
  REAL(cudaStreamEndCapture);
  return capture_end(stream, real_cudaStreamEndCapture(stream, graph));
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  Forwarding forwarding;
  REAL(cudaStreamEndCapture_ptsz);
  return capture_end(stream, real_cudaStreamEndCapture_ptsz(stream, graph));
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  Forwarding forwarding;
  REAL(cudaGraphInstantiate);
  return instantiated(exec, graph, flags, real_cudaGraphInstantiate(exec, graph, flags));
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  Forwarding forwarding;
  REAL(cudaGraphInstantiateWithFlags);
  return instantiated(exec, graph, flags, real_cudaGraphInstantiateWithFlags(exec, graph, flags));
}

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph, cudaGraphInstantiateParams* params) {
  Forwarding forwarding;
  REAL(cudaGraphInstantiateWithParams);
  return instantiated(exec, graph, params ? params->flags : 0, real_cudaGraphInstantiateWithParams(exec, graph, params));
}

cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                cudaGraphInstantiateParams* params) {
  Forwarding forwarding;
  REAL(cudaGraphInstantiateWithParams_ptsz);
  return instantiated(exec, graph, params ? params->flags : 0,
                      real_cudaGraphInstantiateWithParams_ptsz(exec, graph, params));
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaKernelNodeParams* p) {
  Forwarding forwarding;
  REAL(cudaGraphExecKernelNodeSetParams);
  return follow(exec, real_cudaGraphExecKernelNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_kernel_params(node, p); });
}

cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaMemcpy3DParms* p) {
  Forwarding forwarding;
  REAL(cudaGraphExecMemcpyNodeSetParams);
  return follow(exec, real_cudaGraphExecMemcpyNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_memcpy_params(node, p); });
}

cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node, void* dst, const void* src,
                                               size_t count, cudaMemcpyKind kind) {
  Forwarding forwarding;
  REAL(cudaGraphExecMemcpyNodeSetParams1D);
  return follow(exec, real_cudaGraphExecMemcpyNodeSetParams1D(exec, node, dst, src, count, kind),
                [&](mneme::recorder::GraphMirror& m) {
                  cudaMemcpy3DParms p{};
                  p.srcPtr = {const_cast<void*>(src), count, count, 1};
                  p.dstPtr = {dst, count, count, 1};
                  p.extent = {count, 1, 1};
                  p.kind = kind;
                  m.set_memcpy_params(node, &p);
                });
}

cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaMemsetParams* p) {
  Forwarding forwarding;
  REAL(cudaGraphExecMemsetNodeSetParams);
  return follow(exec, real_cudaGraphExecMemsetNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_memset_params(node, p); });
}

cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaHostNodeParams* p) {
  Forwarding forwarding;
  REAL(cudaGraphExecHostNodeSetParams);
  return follow(exec, real_cudaGraphExecHostNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_host_params(node, p); });
}

cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t event) {
  Forwarding forwarding;
  REAL(cudaGraphExecEventRecordNodeSetEvent);
  return follow(exec, real_cudaGraphExecEventRecordNodeSetEvent(exec, node, event),
                [&](mneme::recorder::GraphMirror& m) { m.set_event(node, event, true); });
}

cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t event) {
  Forwarding forwarding;
  REAL(cudaGraphExecEventWaitNodeSetEvent);
  return follow(exec, real_cudaGraphExecEventWaitNodeSetEvent(exec, node, event),
                [&](mneme::recorder::GraphMirror& m) { m.set_event(node, event, false); });
}

cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child) {
  Forwarding forwarding;
  REAL(cudaGraphExecChildGraphNodeSetParams);
  return follow(exec, real_cudaGraphExecChildGraphNodeSetParams(exec, node, child),
                [&](mneme::recorder::GraphMirror& m) { m.set_child_graph(node, child); });
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeParams* p) {
  Forwarding forwarding;
  REAL(cudaGraphExecNodeSetParams);
  return follow(exec, real_cudaGraphExecNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_node_params(node, p); });
}

cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int enabled) {
  Forwarding forwarding;
  REAL(cudaGraphNodeSetEnabled);
  return follow(exec, real_cudaGraphNodeSetEnabled(exec, node, enabled),
                [&](mneme::recorder::GraphMirror& m) { m.set_enabled(node, enabled != 0); });
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  Forwarding forwarding;
  REAL(cudaGraphExecUpdate);
  return follow(exec, real_cudaGraphExecUpdate(exec, graph, info),
                [&](mneme::recorder::GraphMirror& m) { m.update_from(graph); });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  Forwarding forwarding;
  REAL(cudaGraphExecDestroy);
  graph_gone(exec);
  return real_cudaGraphExecDestroy(exec);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaGraphLaunch);
  return graph_launch(exec, stream, __builtin_return_address(0), [&] { return int(real_cudaGraphLaunch(exec, stream)); });
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  Forwarding forwarding;
  REAL(cudaGraphLaunch_ptsz);
  return graph_launch(exec, stream, __builtin_return_address(0),
                      [&] { return int(real_cudaGraphLaunch_ptsz(exec, stream)); });
}

}  // extern "C"
