// What an executable CUDA graph runs, kept beside it so the recorder can run it node by node.
//
// The driver offers no way to read a node's parameters back from a cudaGraphExec_t, so at
// instantiation the recorder clones the source graph (the mirror) and replays every later
// change to the executable graph onto the mirror: kernel/memcpy/memset/host/event node
// updates, node enabling, cudaGraphExecUpdate. A graph launch that must be recorded then
// runs the mirror's nodes one at a time in dependency order on the launch stream (a valid
// schedule of the graph), kernels through the recorder like any other launch.
//
// The mirror reads, copies and runs graphs with the driver API only: graphs instantiated
// by a static CUDA runtime (no libcudart.so to ask) or through the driver are mirrored too.
// Only the setters for the runtime's own parameter types call the runtime (they are
// reached from its wrappers, so it is there).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace mneme::recorder {

// One kernel node of a graph, as the recorder sees a launch.
struct KernelStep {
  CUfunction function = nullptr;
  std::string device_name;  // mangled, from cuFuncGetName
  dim3 grid, block;
  unsigned shared_mem = 0;
  void** params = nullptr;  // the driver's copies of the argument values
  // For a node that keeps its arguments packed (`extra`, as XLA's cuBLASLt nodes do):
  // the pointers into the driver's buffer that `params` points at, shared by copies.
  std::shared_ptr<std::vector<void*>> unpacked;
  const void* handle = nullptr;  // the node's CUkernel, else its CUfunction (as the recorder may know it)
  dim3 cluster{1, 1, 1};  // the node's thread-block cluster shape (its attribute)
  bool cooperative = false;  // the node launches cooperatively (its attribute)
};

// One node, in an order that respects every edge.
struct Step {
  cudaGraphNode_t node = nullptr;
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  KernelStep kernel;  // type == kernel
};

class GraphMirror {
 public:
  // Clones `graph`; `flags` are the instantiation flags. The mirror is unusable (reason in
  // why_not()) for device-launchable graphs and graphs with nodes the recorder cannot run
  // separately; the graph itself still runs unchanged.
  GraphMirror(cudaGraph_t graph, unsigned long long flags);
  ~GraphMirror();
  GraphMirror(const GraphMirror&) = delete;
  GraphMirror& operator=(const GraphMirror&) = delete;

  // Empty when the graph can be run node by node.
  const std::string& why_not() const { return why_not_; }

  // The nodes in dependency order with kernel parameters read now (after all updates).
  // Empty with why_not() set when a node cannot be run on its own.
  std::vector<Step> steps();

  // Runs one non-kernel node on `stream` in stream order; returns the first error.
  cudaError_t run(const Step& step, cudaStream_t stream);

  // Mirrors of the cudaGraphExec*SetParams and cuGraphExec*SetParams families, one
  // overload per parameter type of the runtime and driver (each version of the driver's
  // kernel parameters): `node` is a node of a graph this executable graph was
  // instantiated or updated from. A change that cannot be made on the mirror loses track.
  void set_kernel_params(cudaGraphNode_t node, const cudaKernelNodeParams* params);
  void set_kernel_params(cudaGraphNode_t node, const CUDA_KERNEL_NODE_PARAMS* params);
  void set_kernel_params(cudaGraphNode_t node, const CUDA_KERNEL_NODE_PARAMS_v1* params);
  void set_memcpy_params(cudaGraphNode_t node, const cudaMemcpy3DParms* params);
  void set_memcpy_params(cudaGraphNode_t node, const CUDA_MEMCPY3D* params);
  void set_memset_params(cudaGraphNode_t node, const cudaMemsetParams* params);
  void set_memset_params(cudaGraphNode_t node, const CUDA_MEMSET_NODE_PARAMS* params);
  void set_host_params(cudaGraphNode_t node, const cudaHostNodeParams* params);
  void set_host_params(cudaGraphNode_t node, const CUDA_HOST_NODE_PARAMS* params);
  void set_event(cudaGraphNode_t node, cudaEvent_t event, bool record);
  void set_node_params(cudaGraphNode_t node, cudaGraphNodeParams* params);
  void set_node_params(cudaGraphNode_t node, CUgraphNodeParams* params);
  void set_enabled(cudaGraphNode_t node, bool enabled);
  // cudaGraphExecChildGraphNodeSetParams: the child's nodes take `child`'s parameters,
  // node by node (the driver requires the same topology).
  void set_child_graph(cudaGraphNode_t node, cudaGraph_t child);
  // An update the mirror cannot follow: launches of this graph run unrecorded from now on.
  void lose_track(const std::string& why);
  // cudaGraphExecUpdate succeeded with `graph`: it becomes the mirror; nodes of the graphs
  // known before keep their meaning by position (the update requires identical topology).
  void update_from(cudaGraph_t graph);

 private:
  cudaGraphNode_t mirror_of(cudaGraphNode_t node);
  // `set` applied to the mirror's copy of `node` (true on success); loses track, naming
  // `what` changed, when the node has no copy or `set` fails.
  void change(cudaGraphNode_t node, const char* what, const std::function<bool(cudaGraphNode_t)>& set);
  void adopt(cudaGraph_t graph);
  bool collect(cudaGraph_t graph, std::vector<Step>& out, std::string& why);

  cudaGraph_t clone_ = nullptr;
  std::map<cudaGraphNode_t, cudaGraphNode_t> nodes_;  // user's node -> mirror node
  std::set<cudaGraphNode_t> disabled_;                 // mirror nodes
  std::string why_not_;
};

}  // namespace mneme::recorder
