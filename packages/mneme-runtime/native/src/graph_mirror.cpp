#include "graph_mirror.hpp"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "interpose.hpp"
#include "packed_arguments.hpp"

namespace mneme::recorder {

namespace {

// A driver function by its exact versioned name (interpose.hpp), looked up once; a call
// through it returns CUDA_ERROR_NOT_FOUND when this driver lacks it.
template <typename... Args>
struct Driver {
  using Fn = CUresult (*)(Args...);
  explicit Driver(const char* name) : fn(driver_function<Fn>(name)) {}
  CUresult operator()(Args... args) const { return fn ? fn(args...) : CUDA_ERROR_NOT_FOUND; }
  Fn fn;
};

CUgraph as_cu(cudaGraph_t graph) { return reinterpret_cast<CUgraph>(graph); }
CUgraphNode as_cu(cudaGraphNode_t node) { return reinterpret_cast<CUgraphNode>(node); }

cudaGraphNodeType type_of(cudaGraphNode_t node, bool& ok) {
  static Driver<CUgraphNode, CUgraphNodeType*> get_type("cuGraphNodeGetType");
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ok = get_type(as_cu(node), &type) == CUDA_SUCCESS;
  return static_cast<cudaGraphNodeType>(type);  // the runtime's values are the driver's
}

cudaGraph_t child_of(cudaGraphNode_t node) {
  static Driver<CUgraphNode, CUgraph*> get_child("cuGraphChildGraphNodeGetGraph");
  CUgraph child = nullptr;
  return get_child(as_cu(node), &child) == CUDA_SUCCESS ? reinterpret_cast<cudaGraph_t>(child) : nullptr;
}

cudaGraph_t clone_of(cudaGraph_t graph) {
  static Driver<CUgraph*, CUgraph> clone("cuGraphClone");
  CUgraph copy = nullptr;
  return clone(&copy, as_cu(graph)) == CUDA_SUCCESS ? reinterpret_cast<cudaGraph_t>(copy) : nullptr;
}

void destroy(cudaGraph_t graph) {
  static Driver<CUgraph> destroy_graph("cuGraphDestroy");
  destroy_graph(as_cu(graph));
}

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
  static Driver<CUgraph, CUgraphNode*, size_t*> get_nodes("cuGraphGetNodes");
  size_t count = 0;
  if (get_nodes(as_cu(graph), nullptr, &count) != CUDA_SUCCESS) return {};
  std::vector<cudaGraphNode_t> nodes(count);
  if (count && get_nodes(as_cu(graph), reinterpret_cast<CUgraphNode*>(nodes.data()), &count) != CUDA_SUCCESS)
    return {};
  nodes.resize(count);
  return nodes;
}

// The graph's edges (from[i] -> to[i]): cuGraphGetEdges_v2 (CUDA 12.3+) or the first version.
// Every edge orders its nodes, whatever its data (a programmatic edge lets the second
// kernel start early; running them one after the other is still a valid schedule). The
// data is asked for all the same: without it the driver refuses graphs whose edges carry
// any (CUDA_ERROR_LOSSY_QUERY; XLA's command buffers).
CUresult edges_of(cudaGraph_t graph, std::vector<cudaGraphNode_t>& from, std::vector<cudaGraphNode_t>& to) {
  static Driver<CUgraph, CUgraphNode*, CUgraphNode*, CUgraphEdgeData*, size_t*> v2("cuGraphGetEdges_v2");
  static Driver<CUgraph, CUgraphNode*, CUgraphNode*, size_t*> v1("cuGraphGetEdges");
  std::vector<CUgraphEdgeData> data;
  auto get = [&](CUgraphNode* f, CUgraphNode* t, size_t* n) {
    return v2.fn ? v2(as_cu(graph), f, t, f ? data.data() : nullptr, n) : v1(as_cu(graph), f, t, n);
  };
  size_t edges = 0;
  if (CUresult r = get(nullptr, nullptr, &edges); r != CUDA_SUCCESS) return r;
  from.assign(edges, nullptr);
  to.assign(edges, nullptr);
  data.assign(edges, CUgraphEdgeData{});
  if (edges) {
    CUresult r = get(reinterpret_cast<CUgraphNode*>(from.data()), reinterpret_cast<CUgraphNode*>(to.data()), &edges);
    if (r != CUDA_SUCCESS) return r;
  }
  from.resize(edges);
  to.resize(edges);
  return CUDA_SUCCESS;
}

// Kahn's algorithm over the graph's edges; ties keep the driver's node order. Empty, or
// why the nodes have no order.
std::string dependency_order(cudaGraph_t graph, std::vector<cudaGraphNode_t>& out) {
  auto nodes = nodes_of(graph);
  std::vector<cudaGraphNode_t> from, to;
  if (CUresult r = edges_of(graph, from, to); r != CUDA_SUCCESS)
    return "its edges could not be read (cuGraphGetEdges: CUresult " + std::to_string(int(r)) + ")";
  const size_t edges = from.size();
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
  if (out.size() != nodes.size())
    return "its nodes could not be ordered (" + std::to_string(out.size()) + " of " + std::to_string(nodes.size()) +
           " reached through its edges)";
  return "";
}

// The first node (in child graphs too) the recorder cannot run on its own, as a reason;
// empty when there is none. Checked before cloning: some of them cannot be cloned.
std::string unsupported_node(cudaGraph_t graph) {
  for (auto node : nodes_of(graph)) {
    bool ok = false;
    cudaGraphNodeType type = type_of(node, ok);
    if (!ok) return "a node's type could not be read";
    if (type == cudaGraphNodeTypeGraph) {
      cudaGraph_t child = child_of(node);
      if (!child) return "a child graph could not be read";
      if (auto why = unsupported_node(child); !why.empty()) return why;
    } else if (!runs_alone(type)) {
      return std::string("it holds a ") + node_type_name(type) + " node";
    }
  }
  return "";
}

// One node's parameters of type P read from `a` and set on `b`.
template <typename P, typename Get, typename Set>
CUresult copy_node(const Get& get, const Set& set, CUgraphNode a, CUgraphNode b) {
  P p{};
  CUresult r = get(a, &p);
  return r == CUDA_SUCCESS ? set(b, &p) : r;
}

// The parameters of every node of `from` set on the node at the same position of `to`,
// a graph of the same topology and insertion order; false where a node cannot be copied.
bool copy_parameters(cudaGraph_t from, cudaGraph_t to) {
  static Driver<CUgraphNode, CUDA_KERNEL_NODE_PARAMS*> get_kernel("cuGraphKernelNodeGetParams_v2");
  static Driver<CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*> set_kernel("cuGraphKernelNodeSetParams_v2");
  static Driver<CUgraphNode, CUDA_MEMCPY3D*> get_memcpy("cuGraphMemcpyNodeGetParams");
  static Driver<CUgraphNode, const CUDA_MEMCPY3D*> set_memcpy("cuGraphMemcpyNodeSetParams");
  static Driver<CUgraphNode, CUDA_MEMSET_NODE_PARAMS*> get_memset("cuGraphMemsetNodeGetParams");
  static Driver<CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*> set_memset("cuGraphMemsetNodeSetParams");
  static Driver<CUgraphNode, CUDA_HOST_NODE_PARAMS*> get_host("cuGraphHostNodeGetParams");
  static Driver<CUgraphNode, const CUDA_HOST_NODE_PARAMS*> set_host("cuGraphHostNodeSetParams");
  static Driver<CUgraphNode, CUevent*> get_recorded("cuGraphEventRecordNodeGetEvent");
  static Driver<CUgraphNode, CUevent> set_recorded("cuGraphEventRecordNodeSetEvent");
  static Driver<CUgraphNode, CUevent*> get_awaited("cuGraphEventWaitNodeGetEvent");
  static Driver<CUgraphNode, CUevent> set_awaited("cuGraphEventWaitNodeSetEvent");
  auto src = nodes_of(from), dst = nodes_of(to);
  if (src.size() != dst.size()) return false;
  for (size_t i = 0; i < src.size(); ++i) {
    bool ok_src = false, ok_dst = false;
    cudaGraphNodeType type = type_of(src[i], ok_src);
    if (!ok_src || type != type_of(dst[i], ok_dst) || !ok_dst) return false;
    CUgraphNode a = as_cu(src[i]), b = as_cu(dst[i]);
    CUresult r = CUDA_SUCCESS;
    switch (type) {
      case cudaGraphNodeTypeKernel:
        r = copy_node<CUDA_KERNEL_NODE_PARAMS>(get_kernel, set_kernel, a, b);
        break;
      case cudaGraphNodeTypeMemcpy:
        r = copy_node<CUDA_MEMCPY3D>(get_memcpy, set_memcpy, a, b);
        break;
      case cudaGraphNodeTypeMemset:
        r = copy_node<CUDA_MEMSET_NODE_PARAMS>(get_memset, set_memset, a, b);
        break;
      case cudaGraphNodeTypeHost:
        r = copy_node<CUDA_HOST_NODE_PARAMS>(get_host, set_host, a, b);
        break;
      case cudaGraphNodeTypeEventRecord:
      case cudaGraphNodeTypeWaitEvent: {
        bool recorded = type == cudaGraphNodeTypeEventRecord;
        CUevent e = nullptr;
        if ((r = (recorded ? get_recorded : get_awaited)(a, &e)) == CUDA_SUCCESS)
          r = (recorded ? set_recorded : set_awaited)(b, e);
        break;
      }
      case cudaGraphNodeTypeGraph: {
        cudaGraph_t x = child_of(src[i]), y = child_of(dst[i]);
        if (!x || !y || !copy_parameters(x, y)) return false;
        break;
      }
      case cudaGraphNodeTypeEmpty:
        break;
      default:
        return false;
    }
    if (r != CUDA_SUCCESS) return false;
  }
  return true;
}

}  // namespace

GraphMirror::GraphMirror(cudaGraph_t graph, unsigned long long flags) {
  if (flags & cudaGraphInstantiateFlagDeviceLaunch) {
    why_not_ = "it was instantiated for device-side launch";
    return;
  }
  why_not_ = unsupported_node(graph);
  if (!why_not_.empty()) return;
  if (!(clone_ = clone_of(graph))) {
    why_not_ = "the recorder could not copy it (cuGraphClone failed)";
    return;
  }
  adopt(graph);
}

GraphMirror::~GraphMirror() {
  if (clone_) destroy(clone_);
}

void GraphMirror::adopt(cudaGraph_t graph) {
  static Driver<CUgraphNode*, CUgraphNode, CUgraph> find_in_clone("cuGraphNodeFindInClone");
  for (auto node : nodes_of(graph)) {
    CUgraphNode mirror = nullptr;
    if (find_in_clone(&mirror, as_cu(node), as_cu(clone_)) == CUDA_SUCCESS && mirror)
      nodes_[node] = reinterpret_cast<cudaGraphNode_t>(mirror);
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
  using GetParams = CUresult (*)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS*);
  using KernelFunction = CUresult (*)(CUfunction*, CUkernel);
  using FunctionName = CUresult (*)(const char**, CUfunction);
  static auto get_params = driver_function<GetParams>("cuGraphKernelNodeGetParams_v2");
  static auto kernel_function = driver_function<KernelFunction>("cuKernelGetFunction");
  static auto function_name = driver_function<FunctionName>("cuFuncGetName");
  std::vector<cudaGraphNode_t> order;
  if (auto no_order = dependency_order(graph, order); !no_order.empty()) {
    why = no_order;
    return false;
  }
  for (auto node : order) {
    if (disabled_.count(node)) continue;
    Step step;
    step.node = node;
    bool ok = false;
    step.type = type_of(node, ok);
    if (!ok) {
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
        std::shared_ptr<std::vector<void*>> unpacked;
        if (!p.kernelParams && p.extra) {
          unpacked = std::make_shared<std::vector<void*>>();
          if (!unpack_arguments(f, p.extra, *unpacked)) {
            why = std::string("kernel node ") + name + "'s packed argument buffer (extra) could not be read";
            return false;
          }
          p.kernelParams = unpacked->data();
        }
        // A cooperative kernel node is launched cooperatively, a clustered one with its
        // cluster shape.
        using GetAttribute = CUresult (*)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*);
        static auto get_attribute = driver_function<GetAttribute>("cuGraphKernelNodeGetAttribute");
        CUkernelNodeAttrValue value{};
        auto as_node = reinterpret_cast<CUgraphNode>(node);
        step.kernel = {f, name, dim3(p.gridDimX, p.gridDimY, p.gridDimZ), dim3(p.blockDimX, p.blockDimY, p.blockDimZ),
                       p.sharedMemBytes, p.kernelParams,
                       unpacked, p.kern ? static_cast<const void*>(p.kern) : static_cast<const void*>(p.func)};
        if (get_attribute && get_attribute(as_node, CU_KERNEL_NODE_ATTRIBUTE_COOPERATIVE, &value) == CUDA_SUCCESS)
          step.kernel.cooperative = value.cooperative != 0;
        value = CUkernelNodeAttrValue{};
        if (get_attribute && get_attribute(as_node, CU_KERNEL_NODE_ATTRIBUTE_CLUSTER_DIMENSION, &value) == CUDA_SUCCESS &&
            value.clusterDim.x * value.clusterDim.y * value.clusterDim.z > 1)
          step.kernel.cluster = dim3(value.clusterDim.x, value.clusterDim.y, value.clusterDim.z);
        out.push_back(step);
        break;
      }
      case cudaGraphNodeTypeGraph: {
        cudaGraph_t child = child_of(node);
        if (!child || !collect(child, out, why)) {
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
  static Driver<CUgraphNode, CUDA_MEMCPY3D*> memcpy_params("cuGraphMemcpyNodeGetParams");
  static Driver<const CUDA_MEMCPY3D*, CUstream> memcpy_3d("cuMemcpy3DAsync_v2");
  static Driver<CUgraphNode, CUDA_MEMSET_NODE_PARAMS*> memset_params("cuGraphMemsetNodeGetParams");
  static Driver<CUgraphNode, CUDA_HOST_NODE_PARAMS*> host_params("cuGraphHostNodeGetParams");
  static Driver<CUstream, CUhostFn, void*> launch_host("cuLaunchHostFunc");
  static Driver<CUgraphNode, CUevent*> recorded_event("cuGraphEventRecordNodeGetEvent");
  static Driver<CUgraphNode, CUevent*> awaited_event("cuGraphEventWaitNodeGetEvent");
  static Driver<CUevent, CUstream> event_record("cuEventRecord");
  static Driver<CUstream, CUevent, unsigned> wait_event("cuStreamWaitEvent");
  // Elements of 1, 2 or 4 bytes: the driver's 2-D memsets of that width.
  static Driver<CUdeviceptr, size_t, unsigned char, size_t, size_t, CUstream> d8("cuMemsetD2D8Async");
  static Driver<CUdeviceptr, size_t, unsigned short, size_t, size_t, CUstream> d16("cuMemsetD2D16Async");
  static Driver<CUdeviceptr, size_t, unsigned int, size_t, size_t, CUstream> d32("cuMemsetD2D32Async");
  auto node = as_cu(step.node);
  auto s = reinterpret_cast<CUstream>(stream);
  CUresult r = CUDA_SUCCESS;  // empty nodes; kernels run through the recorder
  switch (step.type) {
    case cudaGraphNodeTypeMemcpy: {
      CUDA_MEMCPY3D p{};
      if ((r = memcpy_params(node, &p)) == CUDA_SUCCESS) r = memcpy_3d(&p, s);
      break;
    }
    case cudaGraphNodeTypeMemset: {
      CUDA_MEMSET_NODE_PARAMS p{};
      if ((r = memset_params(node, &p)) != CUDA_SUCCESS) break;
      size_t pitch = p.height > 1 ? p.pitch : p.width * p.elementSize;
      r = CUDA_ERROR_INVALID_VALUE;
      if (p.elementSize == 1) r = d8(p.dst, pitch, (unsigned char)p.value, p.width, p.height, s);
      if (p.elementSize == 2) r = d16(p.dst, pitch, (unsigned short)p.value, p.width, p.height, s);
      if (p.elementSize == 4) r = d32(p.dst, pitch, p.value, p.width, p.height, s);
      break;
    }
    case cudaGraphNodeTypeHost: {
      CUDA_HOST_NODE_PARAMS p{};
      if ((r = host_params(node, &p)) == CUDA_SUCCESS) r = launch_host(s, p.fn, p.userData);
      break;
    }
    case cudaGraphNodeTypeEventRecord: {
      CUevent event = nullptr;
      if ((r = recorded_event(node, &event)) == CUDA_SUCCESS) r = event_record(event, s);
      break;
    }
    case cudaGraphNodeTypeWaitEvent: {
      CUevent event = nullptr;
      if ((r = awaited_event(node, &event)) == CUDA_SUCCESS) r = wait_event(s, event, 0);
      break;
    }
    default:
      break;
  }
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

void GraphMirror::change(cudaGraphNode_t node, const char* what, const std::function<bool(cudaGraphNode_t)>& set) {
  auto m = mirror_of(node);
  if (!m || !set(m)) lose_track(std::string("a ") + what + " update could not be followed");
}

// The runtime's parameter types: reached from its wrappers, so the runtime is there.
void GraphMirror::set_kernel_params(cudaGraphNode_t node, const cudaKernelNodeParams* params) {
  REAL(cudaGraphKernelNodeSetParams);
  change(node, "kernel node", [&](cudaGraphNode_t m) { return real_cudaGraphKernelNodeSetParams(m, params) == cudaSuccess; });
}

void GraphMirror::set_memcpy_params(cudaGraphNode_t node, const cudaMemcpy3DParms* params) {
  REAL(cudaGraphMemcpyNodeSetParams);
  change(node, "memcpy node", [&](cudaGraphNode_t m) { return real_cudaGraphMemcpyNodeSetParams(m, params) == cudaSuccess; });
}

void GraphMirror::set_memset_params(cudaGraphNode_t node, const cudaMemsetParams* params) {
  REAL(cudaGraphMemsetNodeSetParams);
  change(node, "memset node", [&](cudaGraphNode_t m) { return real_cudaGraphMemsetNodeSetParams(m, params) == cudaSuccess; });
}

void GraphMirror::set_host_params(cudaGraphNode_t node, const cudaHostNodeParams* params) {
  REAL(cudaGraphHostNodeSetParams);
  change(node, "host node", [&](cudaGraphNode_t m) { return real_cudaGraphHostNodeSetParams(m, params) == cudaSuccess; });
}

void GraphMirror::set_node_params(cudaGraphNode_t node, cudaGraphNodeParams* params) {
  REAL(cudaGraphNodeSetParams);
  change(node, "node", [&](cudaGraphNode_t m) { return real_cudaGraphNodeSetParams(m, params) == cudaSuccess; });
}

// The driver's parameter types (graph_driver_api.cpp), each by its exact versioned setter.
void GraphMirror::set_kernel_params(cudaGraphNode_t node, const CUDA_KERNEL_NODE_PARAMS* params) {
  static Driver<CUgraphNode, const CUDA_KERNEL_NODE_PARAMS*> set("cuGraphKernelNodeSetParams_v2");
  change(node, "kernel node", [&](cudaGraphNode_t m) { return set(as_cu(m), params) == CUDA_SUCCESS; });
}

void GraphMirror::set_kernel_params(cudaGraphNode_t node, const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  static Driver<CUgraphNode, const CUDA_KERNEL_NODE_PARAMS_v1*> set("cuGraphKernelNodeSetParams");
  change(node, "kernel node", [&](cudaGraphNode_t m) { return set(as_cu(m), params) == CUDA_SUCCESS; });
}

void GraphMirror::set_memcpy_params(cudaGraphNode_t node, const CUDA_MEMCPY3D* params) {
  static Driver<CUgraphNode, const CUDA_MEMCPY3D*> set("cuGraphMemcpyNodeSetParams");
  change(node, "memcpy node", [&](cudaGraphNode_t m) { return set(as_cu(m), params) == CUDA_SUCCESS; });
}

void GraphMirror::set_memset_params(cudaGraphNode_t node, const CUDA_MEMSET_NODE_PARAMS* params) {
  static Driver<CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*> set("cuGraphMemsetNodeSetParams");
  change(node, "memset node", [&](cudaGraphNode_t m) { return set(as_cu(m), params) == CUDA_SUCCESS; });
}

void GraphMirror::set_host_params(cudaGraphNode_t node, const CUDA_HOST_NODE_PARAMS* params) {
  static Driver<CUgraphNode, const CUDA_HOST_NODE_PARAMS*> set("cuGraphHostNodeSetParams");
  change(node, "host node", [&](cudaGraphNode_t m) { return set(as_cu(m), params) == CUDA_SUCCESS; });
}

void GraphMirror::set_node_params(cudaGraphNode_t node, CUgraphNodeParams* params) {
  static Driver<CUgraphNode, CUgraphNodeParams*> set("cuGraphNodeSetParams");
  change(node, "node", [&](cudaGraphNode_t m) { return set(as_cu(m), params) == CUDA_SUCCESS; });
}

// Events are the same handles in the runtime and the driver.
void GraphMirror::set_event(cudaGraphNode_t node, cudaEvent_t event, bool record) {
  static Driver<CUgraphNode, CUevent> set_recorded("cuGraphEventRecordNodeSetEvent");
  static Driver<CUgraphNode, CUevent> set_awaited("cuGraphEventWaitNodeSetEvent");
  auto e = reinterpret_cast<CUevent>(event);
  change(node, "event node", [&](cudaGraphNode_t m) {
    return (record ? set_recorded(as_cu(m), e) : set_awaited(as_cu(m), e)) == CUDA_SUCCESS;
  });
}

void GraphMirror::set_child_graph(cudaGraphNode_t node, cudaGraph_t child) {
  if (auto why = unsupported_node(child); !why.empty()) return lose_track(why);
  // The child node of the mirror holds its own graph (not a copy): its nodes change in place.
  change(node, "child graph node", [&](cudaGraphNode_t m) {
    cudaGraph_t mine = child_of(m);
    return mine && copy_parameters(child, mine);
  });
}

void GraphMirror::set_enabled(cudaGraphNode_t node, bool enabled) {
  auto m = mirror_of(node);
  if (!m) return lose_track("a node's enabling could not be followed");
  if (enabled) disabled_.erase(m);
  else disabled_.insert(m);
}

void GraphMirror::update_from(cudaGraph_t graph) {
  if (!clone_) return;
  if (auto why = unsupported_node(graph); !why.empty()) return lose_track(why);
  cudaGraph_t fresh = clone_of(graph);
  if (!fresh) return lose_track("an updated graph could not be copied");
  auto before = nodes_of(clone_), after = nodes_of(fresh);
  if (before.size() != after.size()) {
    destroy(fresh);
    return lose_track("an update changed the number of nodes");
  }
  std::unordered_map<cudaGraphNode_t, size_t> position;
  for (size_t i = 0; i < before.size(); ++i) position[before[i]] = i;
  for (auto& [user, mirror] : nodes_) mirror = after[position[mirror]];
  std::set<cudaGraphNode_t> disabled;
  for (auto m : disabled_) disabled.insert(after[position[m]]);
  disabled_ = std::move(disabled);
  destroy(clone_);
  clone_ = fresh;
  adopt(graph);
}

}  // namespace mneme::recorder
