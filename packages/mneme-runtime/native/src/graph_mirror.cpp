#include "graph_mirror.hpp"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "interpose.hpp"

namespace mneme::recorder {

namespace {

const char* node_type_name(cudaGraphNodeType type) {
  switch (type) {
    case cudaGraphNodeTypeExtSemaphoreSignal: return "external semaphore signal";
    case cudaGraphNodeTypeExtSemaphoreWait: return "external semaphore wait";
    case cudaGraphNodeTypeMemAlloc: return "memory allocation";
    case cudaGraphNodeTypeMemFree: return "memory free";
    case cudaGraphNodeTypeConditional: return "conditional";
    default: return "batch memory operation";
  }
}

// Nodes the recorder runs as the equivalent stream operation (kernels and child graphs
// are handled on their own).
bool runs_alone(cudaGraphNodeType type) {
  switch (type) {
    case cudaGraphNodeTypeKernel:
    case cudaGraphNodeTypeMemcpy:
    case cudaGraphNodeTypeMemset:
    case cudaGraphNodeTypeHost:
    case cudaGraphNodeTypeEmpty:
    case cudaGraphNodeTypeWaitEvent:
    case cudaGraphNodeTypeEventRecord:
      return true;
    default:
      return false;
  }
}

std::vector<cudaGraphNode_t> nodes_of(cudaGraph_t graph) {
  REAL(cudaGraphGetNodes);
  size_t count = 0;
  if (real_cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) return {};
  std::vector<cudaGraphNode_t> nodes(count);
  if (count && real_cudaGraphGetNodes(graph, nodes.data(), &count) != cudaSuccess) return {};
  nodes.resize(count);
  return nodes;
}

// Kahn's algorithm over the graph's edges; ties keep the driver's node order.
bool dependency_order(cudaGraph_t graph, std::vector<cudaGraphNode_t>& out) {
  REAL(cudaGraphGetEdges);
  auto nodes = nodes_of(graph);
  size_t edges = 0;
  if (real_cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges) != cudaSuccess) return false;
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  if (edges && real_cudaGraphGetEdges(graph, from.data(), to.data(), nullptr, &edges) != cudaSuccess) return false;
  std::unordered_map<cudaGraphNode_t, size_t> waiting;
  std::unordered_map<cudaGraphNode_t, std::vector<cudaGraphNode_t>> next;
  for (auto n : nodes) waiting[n] = 0;
  for (size_t i = 0; i < edges; ++i) {
    ++waiting[to[i]];
    next[from[i]].push_back(to[i]);
  }
  std::deque<cudaGraphNode_t> ready;
  for (auto n : nodes)
    if (!waiting[n]) ready.push_back(n);
  out.clear();
  while (!ready.empty()) {
    auto n = ready.front();
    ready.pop_front();
    out.push_back(n);
    for (auto m : next[n])
      if (--waiting[m] == 0) ready.push_back(m);
  }
  return out.size() == nodes.size();
}

// The first node (in child graphs too) the recorder cannot run on its own, as a reason;
// empty when there is none. Checked before cloning: some of them cannot be cloned.
std::string unsupported_node(cudaGraph_t graph) {
  REAL(cudaGraphNodeGetType);
  REAL(cudaGraphChildGraphNodeGetGraph);
  for (auto node : nodes_of(graph)) {
    cudaGraphNodeType type;
    if (real_cudaGraphNodeGetType(node, &type) != cudaSuccess) return "a node's type could not be read";
    if (type == cudaGraphNodeTypeGraph) {
      cudaGraph_t child = nullptr;
      if (real_cudaGraphChildGraphNodeGetGraph(node, &child) != cudaSuccess) return "a child graph could not be read";
      if (auto why = unsupported_node(child); !why.empty()) return why;
    } else if (!runs_alone(type)) {
      return std::string("it holds a ") + node_type_name(type) + " node";
    }
  }
  return "";
}

}  // namespace

GraphMirror::GraphMirror(cudaGraph_t graph, unsigned long long flags) {
  REAL(cudaGraphClone);
  if (flags & cudaGraphInstantiateFlagDeviceLaunch) {
    why_not_ = "it was instantiated for device-side launch";
    return;
  }
  why_not_ = unsupported_node(graph);
  if (!why_not_.empty()) return;
  if (real_cudaGraphClone(&clone_, graph) != cudaSuccess) {
    clone_ = nullptr;
    why_not_ = "the recorder could not copy it (cudaGraphClone failed)";
    return;
  }
  adopt(graph);
}

GraphMirror::~GraphMirror() {
  REAL(cudaGraphDestroy);
  if (clone_) real_cudaGraphDestroy(clone_);
}

void GraphMirror::adopt(cudaGraph_t graph) {
  REAL(cudaGraphNodeFindInClone);
  for (auto node : nodes_of(graph)) {
    cudaGraphNode_t mirror = nullptr;
    if (real_cudaGraphNodeFindInClone(&mirror, node, clone_) == cudaSuccess && mirror) nodes_[node] = mirror;
  }
}

cudaGraphNode_t GraphMirror::mirror_of(cudaGraphNode_t node) {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : it->second;
}

void GraphMirror::lose_track(const std::string& why) {
  if (why_not_.empty()) why_not_ = why;
}

bool GraphMirror::collect(cudaGraph_t graph, std::vector<Step>& out, std::string& why) {
  REAL(cudaGraphNodeGetType);
  REAL(cudaGraphChildGraphNodeGetGraph);
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using KernelFunction = CUresult (*)(CUfunction*, CUkernel);
  using FunctionName = CUresult (*)(const char**, CUfunction);
  static auto get_params = driver_function<GetParams>("cuGraphKernelNodeGetParams_v2");
  static auto kernel_function = driver_function<KernelFunction>("cuKernelGetFunction");
  static auto function_name = driver_function<FunctionName>("cuFuncGetName");
  std::vector<cudaGraphNode_t> order;
  if (!dependency_order(graph, order)) {
    why = "its nodes could not be ordered";
    return false;
  }
  for (auto node : order) {
    if (disabled_.count(node)) continue;
    Step step;
    step.node = node;
    if (real_cudaGraphNodeGetType(node, &step.type) != cudaSuccess) {
      why = "a node's type could not be read";
      return false;
    }
    switch (step.type) {
      case cudaGraphNodeTypeKernel: {
        CUDA_KERNEL_NODE_PARAMS p{};
        if (!get_params || !function_name || get_params(reinterpret_cast<CUgraphNode>(node), &p) != CUDA_SUCCESS) {
          why = "a kernel node's parameters could not be read";
          return false;
        }
        CUfunction f = p.func;
        if (!f && p.kern && (!kernel_function || kernel_function(&f, p.kern) != CUDA_SUCCESS)) f = nullptr;
        const char* name = nullptr;
        if (!f || function_name(&name, f) != CUDA_SUCCESS || !name) {
          why = "a kernel node's function could not be identified";
          return false;
        }
        if (!p.kernelParams && p.extra) {
          why = std::string("kernel node ") + name + " passes its arguments as a packed buffer (extra)";
          return false;
        }
        // A plain launch cannot reproduce a cooperative or clustered kernel node.
        using GetAttribute = CUresult (*)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*);
        static auto get_attribute = driver_function<GetAttribute>("cuGraphKernelNodeGetAttribute");
        CUkernelNodeAttrValue value{};
        auto as_node = reinterpret_cast<CUgraphNode>(node);
        if (get_attribute && get_attribute(as_node, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &value) == CUDA_SUCCESS &&
            value.cooperative) {
          why = std::string("kernel node ") + name + " is a cooperative launch";
          return false;
        }
        value = CUkernelNodeAttrValue{};
        if (get_attribute && get_attribute(as_node, CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION, &value) == CUDA_SUCCESS &&
            value.clusterDim.x * value.clusterDim.y * value.clusterDim.z > 1) {
          why = std::string("kernel node ") + name + " launches thread-block clusters";
          return false;
        }
        step.kernel = {f, name, dim3(p.gridDimX, p.gridDimY, p.gridDimZ), dim3(p.blockDimX, p.blockDimY, p.blockDimZ),
                       p.sharedMemBytes, p.kernelParams};
        out.push_back(step);
        break;
      }
      case cudaGraphNodeTypeGraph: {
        cudaGraph_t child = nullptr;
        if (real_cudaGraphChildGraphNodeGetGraph(node, &child) != cudaSuccess || !collect(child, out, why)) {
          if (why.empty()) why = "a child graph could not be read";
          return false;
        }
        break;
      }
      default:
        if (!runs_alone(step.type)) {
          why = std::string("it holds a ") + node_type_name(step.type) + " node";
          return false;
        }
        out.push_back(step);
        break;
    }
  }
  return true;
}

std::vector<Step> GraphMirror::steps() {
  std::vector<Step> out;
  if (!why_not_.empty()) return out;
  std::string why;
  if (!collect(clone_, out, why)) {
    why_not_ = why;
    out.clear();
  }
  return out;
}

cudaError_t GraphMirror::run(const Step& step, cudaStream_t stream) {
  REAL(cudaGraphMemcpyNodeGetParams);
  REAL(cudaMemcpy3DAsync);
  REAL(cudaGraphMemsetNodeGetParams);
  REAL(cudaGraphHostNodeGetParams);
  REAL(cudaLaunchHostFunc);
  REAL(cudaGraphEventRecordNodeGetEvent);
  REAL(cudaGraphEventWaitNodeGetEvent);
  REAL(cudaEventRecord);
  REAL(cudaStreamWaitEvent);
  switch (step.type) {
    case cudaGraphNodeTypeMemcpy: {
      cudaMemcpy3DParms p{};
      cudaError_t e = real_cudaGraphMemcpyNodeGetParams(step.node, &p);
      return e != cudaSuccess ? e : real_cudaMemcpy3DAsync(&p, stream);
    }
    case cudaGraphNodeTypeMemset: {
      cudaMemsetParams p{};
      cudaError_t e = real_cudaGraphMemsetNodeGetParams(step.node, &p);
      if (e != cudaSuccess) return e;
      // Elements of 1, 2 or 4 bytes: the driver's 2-D memsets of that width.
      using Memset8 = CUresult (*)(CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream);
      using Memset16 = CUresult (*)(CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream);
      using Memset32 = CUresult (*)(CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream);
      static auto d8 = driver_function<Memset8>("cuMemsetD2D8Async");
      static auto d16 = driver_function<Memset16>("cuMemsetD2D16Async");
      static auto d32 = driver_function<Memset32>("cuMemsetD2D32Async");
      auto dst = reinterpret_cast<CUdeviceptr>(p.dst);
      size_t pitch = p.height > 1 ? p.pitch : p.width * p.elementSize;
      auto s = reinterpret_cast<CUstream>(stream);
      CUresult r = CUDA_ERROR_INVALID_VALUE;
      if (p.elementSize == 1 && d8) r = d8(dst, pitch, (unsigned char)p.value, p.width, p.height, s);
      if (p.elementSize == 2 && d16) r = d16(dst, pitch, (unsigned short)p.value, p.width, p.height, s);
      if (p.elementSize == 4 && d32) r = d32(dst, pitch, p.value, p.width, p.height, s);
      return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
    }
    case cudaGraphNodeTypeHost: {
      cudaHostNodeParams p{};
      cudaError_t e = real_cudaGraphHostNodeGetParams(step.node, &p);
      return e != cudaSuccess ? e : real_cudaLaunchHostFunc(stream, p.fn, p.userData);
    }
    case cudaGraphNodeTypeEventRecord: {
      cudaEvent_t event = nullptr;
      cudaError_t e = real_cudaGraphEventRecordNodeGetEvent(step.node, &event);
      return e != cudaSuccess ? e : real_cudaEventRecord(event, stream);
    }
    case cudaGraphNodeTypeWaitEvent: {
      cudaEvent_t event = nullptr;
      cudaError_t e = real_cudaGraphEventWaitNodeGetEvent(step.node, &event);
      return e != cudaSuccess ? e : real_cudaStreamWaitEvent(stream, event, 0);
    }
    default:
      return cudaSuccess;  // empty nodes; kernels run through the recorder
  }
}

void GraphMirror::set_kernel_params(cudaGraphNode_t node, const cudaKernelNodeParams* params) {
  REAL(cudaGraphKernelNodeSetParams);
  auto m = mirror_of(node);
  if (!m || real_cudaGraphKernelNodeSetParams(m, params) != cudaSuccess) lose_track("a kernel node update could not be followed");
}

void GraphMirror::set_kernel_params_driver(cudaGraphNode_t node, const CUDA_KERNEL_NODE_PARAMS* params) {
  using SetParams = CUresult (*)(CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*);
  static auto set = driver_function<SetParams>("cuGraphKernelNodeSetParams_v2");
  auto m = mirror_of(node);
  if (!m || !set || set(reinterpret_cast<CUgraphNode>(m), params) != CUDA_SUCCESS)
    lose_track("a kernel node update could not be followed");
}

void GraphMirror::set_memcpy_params(cudaGraphNode_t node, const cudaMemcpy3DParms* params) {
  REAL(cudaGraphMemcpyNodeSetParams);
  auto m = mirror_of(node);
  if (!m || real_cudaGraphMemcpyNodeSetParams(m, params) != cudaSuccess) lose_track("a memcpy node update could not be followed");
}

void GraphMirror::set_memset_params(cudaGraphNode_t node, const cudaMemsetParams* params) {
  REAL(cudaGraphMemsetNodeSetParams);
  auto m = mirror_of(node);
  if (!m || real_cudaGraphMemsetNodeSetParams(m, params) != cudaSuccess) lose_track("a memset node update could not be followed");
}

void GraphMirror::set_host_params(cudaGraphNode_t node, const cudaHostNodeParams* params) {
  REAL(cudaGraphHostNodeSetParams);
  auto m = mirror_of(node);
  if (!m || real_cudaGraphHostNodeSetParams(m, params) != cudaSuccess) lose_track("a host node update could not be followed");
}

void GraphMirror::set_event(cudaGraphNode_t node, cudaEvent_t event, bool record) {
  REAL(cudaGraphEventRecordNodeSetEvent);
  REAL(cudaGraphEventWaitNodeSetEvent);
  auto m = mirror_of(node);
  cudaError_t e = !m ? cudaErrorInvalidValue
                : record ? real_cudaGraphEventRecordNodeSetEvent(m, event)
                         : real_cudaGraphEventWaitNodeSetEvent(m, event);
  if (e != cudaSuccess) lose_track("an event node update could not be followed");
}

void GraphMirror::set_node_params(cudaGraphNode_t node, cudaGraphNodeParams* params) {
  REAL(cudaGraphNodeSetParams);
  auto m = mirror_of(node);
  if (!m || real_cudaGraphNodeSetParams(m, params) != cudaSuccess) lose_track("a node update could not be followed");
}

void GraphMirror::set_enabled(cudaGraphNode_t node, bool enabled) {
  auto m = mirror_of(node);
  if (!m) return lose_track("a node's enabling could not be followed");
  if (enabled) disabled_.erase(m);
  else disabled_.insert(m);
}

void GraphMirror::update_from(cudaGraph_t graph) {
  REAL(cudaGraphClone);
  REAL(cudaGraphDestroy);
  if (!clone_) return;
  if (auto why = unsupported_node(graph); !why.empty()) return lose_track(why);
  cudaGraph_t fresh = nullptr;
  if (real_cudaGraphClone(&fresh, graph) != cudaSuccess) return lose_track("an updated graph could not be copied");
  auto before = nodes_of(clone_), after = nodes_of(fresh);
  if (before.size() != after.size()) {
    real_cudaGraphDestroy(fresh);
    return lose_track("an update changed the number of nodes");
  }
  std::unordered_map<cudaGraphNode_t, size_t> position;
  for (size_t i = 0; i < before.size(); ++i) position[before[i]] = i;
  for (auto& [user, mirror] : nodes_) mirror = after[position[mirror]];
  std::set<cudaGraphNode_t> disabled;
  for (auto m : disabled_) disabled.insert(after[position[m]]);
  disabled_ = std::move(disabled);
  real_cudaGraphDestroy(clone_);
  clone_ = fresh;
  adopt(graph);
}

}  // namespace mneme::recorder
