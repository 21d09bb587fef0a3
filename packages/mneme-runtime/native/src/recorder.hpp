// The recorder's state, shared by the files that make up libmneme_recorder.so.
//
// One Recorder per process (Recorder::get()) owns what the recorder knows: the kernels
// (manifest, registered fatbinaries, modules the application loads), the allocations it
// serves from the fixed address range, executable graphs and stream captures, and the
// writer and snapshot pipeline. The interposed entry points (runtime_api.cpp,
// driver_api.cpp, graph_api.cpp) lock Recorder::mutex and call into it:
//   recorder.cpp        launch recording and snapshot orchestration
//   recorder_settings.cpp  the settings, read once; which MPI ranks record
//   launch_regions.cpp  what a launch's snapshot copies (allocations, globals, peers)
//   device_slots.cpp    the GPUs the process works on, each with its own range
//   snapshot_source.cpp device-to-host copies for the snapshot pipeline
//   kernel_registry.cpp kernels and the code they came from (fatbinaries, modules)
//   allocations.cpp     the allocation service (the fixed range, managed memory)
//   graph_api.cpp       stream capture and graph launches
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/cuda_device.hpp"
#include "mneme/runtime/name_pattern.hpp"
#include "mneme/runtime/recording_writer.hpp"
#include "mneme/runtime/snapshot_pipeline.hpp"
#include "app_timing.hpp"
#include "stream_predecessors.hpp"
#include "graph_mirror.hpp"
#include "interpose.hpp"
#include "managed_arena.hpp"
#include "recorder_settings.hpp"
#include "snapshot_source.hpp"

namespace mneme::recorder {

namespace rt = mneme::runtime;

// cuCtxSynchronize of the current context: false when a kernel failed.
bool synchronize_device();

// One line on stderr, then exit with `code` (instances captured so far are committed first).
[[noreturn]] void fatal(const std::string& message, int code = 70);
std::vector<std::string> split(const std::string& s, char sep);

using Clock = std::chrono::steady_clock;
inline double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct KernelEntry {
  rt::KernelInfo info;
  std::string ir_path;
  uint64_t args_size = 0;
  int recorded = 0;
  bool stored = false;
  // Discovered from a registered fatbinary: its handle. Its launches snapshot only that
  // fatbinary's globals (replay binds globals in the module it loads; a framework
  // registers thousands in other modules).
  void** fatbin = nullptr;
};

struct GlobalEntry {
  std::string name;
  const void* host_var;
  uint64_t size;
  void** fatbin;  // the registration handle of the fatbinary that declares it
};

void at_exit();

// Set on a thread while a runtime-API wrapper of the recorder runs. The real runtime
// reaches the driver through the wrappers too (it takes its entry points from
// cuGetProcAddress, entry_points.cpp): those calls pass straight through, so a launch is
// recorded once, by the runtime wrapper, and Recorder::mutex is never taken twice.
class Forwarding {
 public:
  Forwarding() { ++depth_; }
  ~Forwarding() { --depth_; }
  Forwarding(const Forwarding&) = delete;
  Forwarding& operator=(const Forwarding&) = delete;
  static bool active() { return depth_ > 0; }

 private:
  static inline thread_local int depth_ = 0;
};

// The thread-block cluster shape of the launch this thread is making, set around it by
// the entry points that take launch attributes (cuLaunchKernelEx, cudaLaunchKernelExC,
// clustered graph kernel nodes); 1,1,1 for every other launch. The recorded instance
// keeps it, and replay launches with it.
class ClusterScope {
 public:
  explicit ClusterScope(dim3 cluster) : saved_(current_) { current_ = cluster; }
  ~ClusterScope() { current_ = saved_; }
  ClusterScope(const ClusterScope&) = delete;
  ClusterScope& operator=(const ClusterScope&) = delete;
  static dim3 current() { return current_; }

 private:
  dim3 saved_;
  static inline thread_local dim3 current_{1, 1, 1};
};

// Whether the launch this thread is making is cooperative, set around it by the entry
// points that launch cooperatively (cudaLaunchCooperativeKernel, cuLaunchCooperativeKernel,
// the COOPERATIVE launch attribute, a cooperative graph kernel node). The recorded instance
// keeps it, and replay launches cooperatively, so grid-wide synchronisation holds.
class CooperativeScope {
 public:
  explicit CooperativeScope(bool cooperative) : saved_(current_) { current_ = cooperative; }
  ~CooperativeScope() { current_ = saved_; }
  CooperativeScope(const CooperativeScope&) = delete;
  CooperativeScope& operator=(const CooperativeScope&) = delete;
  static bool current() { return current_; }

 private:
  bool saved_;
  static inline thread_local bool current_ = false;
};

class Recorder {
 public:
  static Recorder& get() {
    static Recorder* instance = new Recorder();  // never destroyed: atexit order is unknowable
    return *instance;
  }

  bool active() const { return active_; }
  std::mutex mutex;

  void register_function(void** handle, const void* host, const char* device_name) {
    functions_[host] = device_name;
    auto it = fatbins_.find(handle);
    if (it != fatbins_.end()) fatbin_of_.emplace(device_name, RegisteredCode{handle, it->second.bytes});
  }
  // The fatbinary an nvcc-built module registers: kernels missing from the manifest are
  // recorded with it as their code (PTX and/or cubin inside; docs/record.md). `origin`:
  // the object holding its bytes (code_origin).
  void register_fatbin(void** handle, std::string_view bytes, std::string origin) {
    fatbins_[handle] = {bytes, std::move(origin)};
  }
  // Code images the application loads itself (cuModuleLoad*, cuLibraryLoad*,
  // cudaLibraryLoad*; NVRTC output): copied, since the caller may free its buffer once
  // the module is loaded. Handles are the driver's CUmodule / CUlibrary or the runtime's
  // cudaLibrary_t; `api` says which functions find their globals; `origin` is where the
  // code came from (load_origin, file_origin).
  enum class ModuleApi { module, library, runtime_library };
  void module_loaded(void* module, const void* image, ModuleApi api, std::string origin) {
    module_image(module, image_of(image), api, std::move(origin));
  }
  void module_file_loaded(void* module, const char* path, ModuleApi api, std::string origin) {
    module_image(module, image_of_file(path), api, std::move(origin));
  }
  // A kernel handle taken from such a module (CUfunction, CUkernel, cudaKernel_t): launches
  // of it are recorded with the module's code. `is_kernel`: a CUkernel / cudaKernel_t,
  // whose CUfunction in the current context cuKernelGetFunction gives.
  void kernel_of_module(const void* handle, void* module, const char* name, bool is_kernel) {
    if (modules_.count(module) && name) handles_[handle] = {module, name, is_kernel};
  }
  void function_of_kernel(const void* function, const void* kernel) {
    auto it = handles_.find(kernel);
    if (it != handles_.end()) handles_[function] = {it->second.module, it->second.name, false};
  }
  // Unloaded: the driver may hand out its handles again, for other code.
  void module_unloaded(void* module) {
    modules_.erase(module);
    std::erase_if(handles_, [module](const auto& h) { return h.second.module == module; });
  }
  // A global the application looked up in such a module: snapshotted with its kernels.
  void global_of_module(void* module, const char* name) {
    auto it = modules_.find(module);
    if (it != modules_.end() && name) it->second.globals.insert(name);
  }
  void register_var(void** handle, const void* host, const char* name, uint64_t size) {
    globals_.push_back({name, host, size, handle});
  }

  // One per GPU the application works on, in the order of first use (docs/record.md,
  // "Several GPUs"): the device and its own fixed range. The first range starts at the
  // base; the k-th k strides above it (a stride: the range and the managed arena's room).
  struct DeviceSlot {
    std::shared_ptr<rt::cuda::CudaDevice> device;
    std::unique_ptr<rt::AddressSpace> space;
    int ordinal() const { return device->properties().ordinal; }
    bool holds(uint64_t address, uint64_t size = 1) const {
      return address >= space->base() && address - space->base() < space->size() &&
             size <= space->size() - (address - space->base());
    }
  };
  // The current GPU's slot (the current context's device), opened on first use.
  DeviceSlot& slot();
  // The slot whose range holds `address`; nullptr when none does.
  DeviceSlot* slot_of(uint64_t address) {
    for (auto& s : slots_)
      if (s->holds(address)) return s.get();
    return nullptr;
  }
  rt::AddressSpace& space() { return *slot().space; }
  void track(uint64_t address, uint64_t size) {
    live_[address] = size;
    live_bytes_ += size;
    prestage();
  }
  bool owns(uint64_t address) const { return live_.count(address) != 0; }
  void untrack(uint64_t address) {
    auto it = live_.find(address);
    if (it == live_.end()) return;
    live_bytes_ -= it->second;
    live_.erase(it);
  }
  // A snapshot of everything live stages twice the live bytes (prologue and epilogue),
  // and the next instance's arrives while the last one is still being compressed (the
  // H100 benchmark peaks at 4x): the staging memory grows toward that, within the cap, in
  // the background as the application allocates, so the first snapshots do not wait for
  // page-locking (docs/record.md).
  void prestage() {
    if (!prestage_ || capture_reachable_ || capturing(0)) return;
    writer();
    pipeline_->reserve(4 * live_bytes_);
  }
  // Managed allocations stay the driver's (the host reaches them through page faults);
  // they are snapshotted like heap regions, at their own addresses.
  void track_managed(uint64_t address, uint64_t size) { managed_[address] = size; }
  bool untrack_managed(uint64_t address) { return managed_.erase(address) != 0; }
  // Address space reserved for the application inside the recorded range (cuMemAddressReserve).
  void track_reservation(uint64_t address) { reservations_.insert(address); }
  bool release_reservation(uint64_t address) {
    if (!reservations_.erase(address)) return false;
    std::erase_if(mapped_, [&](const auto& m) { return !slot_of(m.first); });
    DeviceSlot* owner = slot_of(address);
    return owner && owner->space->release_unmapped(address);
  }
  // Device memory the application maps itself into a range it reserved (cuMemMap:
  // PyTorch's expandable segments): snapshotted at its own address, kind "mapped".
  void track_mapped(uint64_t address, uint64_t size) { mapped_[address] = size; }
  void untrack_mapped(uint64_t address, uint64_t size) {
    std::erase_if(mapped_, [&](const auto& m) { return m.first >= address && m.first < address + size; });
  }
  // The fixed range after the first GPU's range that managed memory is placed in
  // (managed_arena.hpp); nullptr when there is none (MNEME_RECORD_MANAGED=driver).
  ManagedArena* managed_arena() {
    if (slots_.empty()) slot();
    return arena_.get();
  }
  // How managed allocations are served (MNEME_RECORD_MANAGED): placed / host / driver.
  const std::string& managed_mode() const { return managed_mode_; }
  bool free_managed(uint64_t address) { return arena_ && arena_->free_host(address); }
  bool in_arena(uint64_t address, uint64_t size) const { return arena_ && arena_->hosts(address, size); }

  // Stream capture: while any stream captures, launches only add graph nodes (nothing
  // runs), and a device-wide synchronisation would invalidate the capture.
  void capture_began(uint64_t stream) { capturing_.insert(stream); }
  void capture_ended(uint64_t stream) { capturing_.erase(stream); }
  bool capturing(uint64_t stream) const;

  // Executable graphs and the mirrors that say what they run (graph_mirror.hpp).
  void graph_instantiated(cudaGraphExec_t exec, cudaGraph_t graph, unsigned long long flags) {
    mirrors_[exec] = std::make_unique<mneme::recorder::GraphMirror>(graph, flags);
  }
  GraphMirror* mirror(cudaGraphExec_t exec) {
    auto it = mirrors_.find(exec);
    return it == mirrors_.end() ? nullptr : it->second.get();
  }
  void graph_destroyed(cudaGraphExec_t exec) { mirrors_.erase(exec); }
  // Runs a graph launch: as one launch when no kernel node needs recording, else node by
  // node in dependency order with each kernel recorded like a plain launch.
  int launch_graph(cudaGraphExec_t exec, uint64_t stream, const void* caller, const std::function<int()>& do_launch);
  // One kernel node of a graph launched on its own (with its cluster shape, if any).
  static CUresult launch_step(const KernelStep& step, uint64_t stream);

  // nvcc 13 stubs launch through a cudaKernel_t they get once from the host function
  // (__cudaGetKernel); applications may do the same with cudaGetKernel.
  void register_kernel_handle(cudaKernel_t kernel, const void* host_function) { kernel_hosts_[kernel] = host_function; }
  const void* host_of(cudaKernel_t kernel) const {
    auto it = kernel_hosts_.find(kernel);
    return it == kernel_hosts_.end() ? nullptr : it->second;
  }

  const std::string* name_of(const void* host_function) const {
    auto it = functions_.find(host_function);
    return it == functions_.end() ? nullptr : &it->second;
  }
  // Records around `launch` (which performs the real launch and returns 0 on success)
  // when the kernel is selected; otherwise just launches.
  int launch(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem,
             uint64_t stream, const std::function<int()>& do_launch, CUfunction function = nullptr,
             const void* host_function = nullptr, void* module = nullptr);
  // A runtime launch (cudaLaunchKernel, cudaLaunchKernelExC): `func` is a registered host
  // stub, or a cudaKernel_t cast to a pointer (cudaGetKernel's, cudaLibraryGetKernel's).
  int launch_runtime(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, uint64_t stream,
                     const std::function<int()>& do_launch);
  // A driver launch (cuLaunchKernel) of `f`: a CUfunction, or a CUkernel cast to one.
  int launch_driver(CUfunction f, dim3 grid, dim3 block, void** args, size_t shmem, uint64_t stream,
                    const std::function<int()>& do_launch);

 private:
  struct KernelHandle {
    void* module;
    std::string name;
    bool is_kernel;
  };
  // The CUfunction of a handle in the current context (a CUkernel's through cuKernelGetFunction).
  static CUfunction function_of(const void* handle, const KernelHandle& h);
  // The entry of a launched kernel: the manifest's, else one discovered from the code it
  // came from (a registered fatbinary, or a module the application loaded itself; then
  // `module` is set to it). nullptr when it cannot be recorded.
  KernelEntry* entry(const std::string& name, CUfunction function, const void* host_function, void*& module);
  // A kernel of a registered fatbinary that the manifest does not know (an nvcc-built
  // translation unit or library): its entry, with the fatbinary as code and the parameter
  // layout from cuFuncGetParamInfo; nullptr when it cannot be recorded.
  KernelEntry* discover(const std::string& device_name, CUfunction function, const void* host_function);
  // A kernel of a module the application loaded itself, keyed by its name and the image's
  // content: modules with different code may hold kernels of one name (NVRTC variants).
  struct LoadedModule;
  KernelEntry* loaded_kernel(const std::string& name, const LoadedModule& module, CUfunction function);
  // Fills in an entry from the kernel's code and cuFuncGetParamInfo; false (and no static
  // hash: never recorded) without a parameter layout.
  static bool describe(KernelEntry& k, const std::string& name, CUfunction function, const std::string& kind,
                       std::string_view code);
  // A launch of a recorded kernel: its entry, launch record and dynamic hash.
  struct Pending {
    KernelEntry* kernel = nullptr;
    rt::InstanceInfo inst;
    std::string dyn;
    void* module = nullptr;  // the application-loaded module the kernel came from
  };
  // False when the launch is not of a kernel selected for recording.
  bool pending(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem, uint64_t stream,
               Pending& out, CUfunction function = nullptr, const void* host_function = nullptr,
               void* module = nullptr);
  // Whether the launch would be captured as a new instance now (changes nothing).
  bool would_record(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem,
                    CUfunction function, void* module = nullptr);
  // How the recorder knows a graph's kernel node: the handle it was taken as (a library's
  // CUkernel, a module's CUfunction), else by name (nullptr).
  const KernelHandle* handle_of(const KernelStep& step) const;

 public:
  // At exit (return from main or exit()): every captured instance is committed first.
  void finish();
  // A launch through `call` that cannot be recorded: one line per call and reason.
  void unrecorded_call(const char* call, const char* why);
  // One line about how a call was served (nothing goes unrecorded), said once per text.
  void notice_once(const std::string& text);

 private:
  Recorder();
  void load_manifest(const std::string& path);
  // Opens the slot of GPU `ordinal` and lets the GPUs that have slots reach each other's
  // memory where they can (peer access; docs/record.md).
  DeviceSlot& open_slot(int ordinal);
  rt::RecordingWriter& writer();

  bool selected(KernelEntry& k) const {
    if (max_ > 0 && k.recorded >= max_) return false;
    if (filter_ && !filter_->found_in(k.info.demangled_name) && !filter_->found_in(k.info.name))
      return false;
    return true;
  }

  // What a snapshot copies: every live allocation and device global (with the globals of
  // `module`, the application-loaded module the kernel came from), or (`args` given:
  // --capture reachable) the globals and the allocations reachable from them and `args`.
  // Another GPU's allocations are "peer" regions, and only those the launch reaches.
  // `here`: the slot of the GPU the launch runs on.
  void regions_now(std::vector<rt::RegionSpec>& regions, std::vector<uint64_t>& sources, const DeviceSlot& here,
                   const std::string& args, bool reachable_only, void* module = nullptr, void** fatbin = nullptr);
  static void drop_repeated_regions(std::vector<rt::RegionSpec>& regions, std::vector<uint64_t>& sources);
  std::set<uint64_t> reachable(const DeviceSlot& here, const std::string& args,
                               const std::vector<std::pair<uint64_t, uint64_t>>& globals);
  bool capture_reachable_ = false;

  // Why nothing was recorded, said at exit when nothing was (docs/record.md).
  struct Seen {
    uint64_t launches = 0;        // kernel launches the recorder saw
    uint64_t unknown = 0;         // ... of kernels whose code or parameters it could not find
    uint64_t not_selected = 0;    // ... not selected by --kernel / -mr
    uint64_t recorded = 0;        // instances captured
  } seen_;
  std::set<std::string> unrecorded_calls_;
  void explain_nothing_recorded() const;
  void write_report() const;

  bool active_ = false;
  bool stats_ = false;
  double crash_wait_ = 60;
  pid_t owner_ = 0;
  bool finished_ = false;
  rt::PipelineOptions options_;
  std::string db_, epilogue_;
  uint64_t vass_ = 0, base_ = 0;
  int max_ = 0;
  std::unique_ptr<rt::NamePattern> filter_;
  std::unordered_map<const void*, std::string> functions_;
  struct RegisteredFatbin {
    std::string_view bytes;
    std::string origin;
  };
  std::unordered_map<void**, RegisteredFatbin> fatbins_;
  std::unordered_map<cudaKernel_t, const void*> kernel_hosts_;
  struct CodeImage {
    CodeImage(std::string k, std::string b);
    std::string kind;  // "cuda-fatbin", "cubin" or "ptx" (docs/format.md, kernel "code")
    std::string bytes;
    uint64_t digest;   // FNV-1a 64 of kind and bytes
  };
  struct LoadedModule {
    std::shared_ptr<const CodeImage> code;
    ModuleApi api;
    // declared in the image (PTX, cubin) or looked up by the application
    std::set<std::string> globals;
    std::string origin;  // the loader (or the file loaded): its kernels' origin
  };
  std::unordered_map<void*, LoadedModule> modules_;               // CUmodule/CUlibrary/cudaLibrary_t
  std::unordered_map<const void*, KernelHandle> handles_;         // CUfunction/CUkernel/cudaKernel_t
  std::map<std::pair<uint64_t, std::string>, KernelEntry> loaded_kernels_;  // (image digest, name)
  void module_image(void* module, std::shared_ptr<const CodeImage> code, ModuleApi api, std::string origin);
  static std::shared_ptr<const CodeImage> image_of(const void* image);
  static std::shared_ptr<const CodeImage> image_of_file(const char* path);
  static std::shared_ptr<const CodeImage> image_of_bytes(std::string bytes);
  static std::set<std::string> declared_globals(const CodeImage& image);
  static bool global_address(void* module, ModuleApi api, const std::string& name, uint64_t& address, uint64_t& size);
  struct RegisteredCode {
    void** handle;
    std::string_view bytes;
  };
  std::unordered_map<std::string, RegisteredCode> fatbin_of_;
  bool discover_ = true;
  std::vector<GlobalEntry> globals_;
  std::map<std::string, KernelEntry> kernels_;
  std::map<uint64_t, uint64_t> live_;
  uint64_t live_bytes_ = 0;
  bool prestage_ = true;
  int zstd_level_ = MNEME_RECORDING_DEFAULT_ZSTD_LEVEL;
  std::map<uint64_t, uint64_t> managed_;
  std::map<uint64_t, uint64_t> mapped_;
  std::set<uint64_t> reservations_;
  std::set<uint64_t> capturing_;
  std::set<std::string> traced_;  // kernels said unrecorded under MNEME_RECORD_TRACE_LOOKUPS
  std::unordered_map<cudaGraphExec_t, std::unique_ptr<GraphMirror>> mirrors_;
  std::set<cudaGraphExec_t> warned_graphs_;
  std::vector<std::unique_ptr<DeviceSlot>> slots_;
  std::unique_ptr<ManagedArena> arena_;
  uint64_t managed_size_ = 0;
  std::string managed_mode_ = "placed";
  std::unique_ptr<rt::RecordingWriter> writer_;
  std::unique_ptr<CudaSource> source_;
  std::unique_ptr<rt::SnapshotPipeline> pipeline_;
  AppTiming timing_;  // in-app kernel times (app_timing.hpp)
  StreamPredecessors predecessors_;  // the launch before each instance (stream_predecessors.hpp)
  void note_predecessor(uint64_t stream, const std::string* device_name, const KernelEntry* kernel, void** args);
};

// Recorder::mutex held, with the thread marked Forwarding: the CUDA runtime calls the
// recorder makes while holding it (symbol addresses, lazy module loading) may come back
// through the wrappers, which then pass straight through instead of locking again.
class RecorderLock {
 public:
  explicit RecorderLock(Recorder& r) : lock_(r.mutex) {}

 private:
  Forwarding forwarding_;
  std::lock_guard<std::mutex> lock_;
};

// ---- the allocation service (allocations.cpp)

// MNEME_RECORD_TRACE_LOOKUPS=1 (entry_points.cpp): driver lookups, and kernels whose
// launches are not recorded, are said on stderr.
bool tracing_lookups();

// Whether the recorder serves an allocation now (recording).
bool served_here();
// An allocation from the fixed range.
cudaError_t serve(void** ptr, uint64_t size);
// False when `ptr` is not the recorder's (then the caller frees it with the driver).
bool release(void* ptr);
// A managed allocation for the application, in the arena (allocations.cpp): false when
// `allocate` (the driver's allocation) failed.
bool serve_managed(uint64_t size, uint64_t& address, const std::function<bool(uint64_t&)>& allocate,
                   const std::function<void(uint64_t)>& free);
// A managed allocation freed: true when it was the arena's host memory (then freed here).
bool forget_managed(uint64_t address);
// Whether [ptr, ptr + count) is host memory standing in for managed memory.
bool arena_owned(const void* ptr, size_t count);

// ---- where kernels' code came from (kernel_registry.cpp; docs/record.md, "Origins")

// The file of the object whose memory holds `address`: a shared object's path as the
// loader opened it, the executable's resolved path; empty when no object holds it (heap).
std::string code_origin(const void* address);
// The origin of an image loaded from memory by code at `caller`: the caller's object; when
// that is the shared CUDA runtime (loading its own registered fatbinaries), the object
// holding the image, if any.
std::string load_origin(const void* caller, const void* image);
// The origin of a file-based load: the file, as an absolute path.
std::string file_origin(const char* path);
// The executable's resolved path (/proc/self/exe): the origin of manifest kernels.
const std::string& executable_path();

// ---- modules and kernels the application loads itself (kernel_registry.cpp)

using ModuleApi = Recorder::ModuleApi;
// `caller`: the return address of the load wrapper (__builtin_return_address(0)).
void note_module(void* module, const void* image, ModuleApi api, const void* caller);
void note_module_file(void* module, const char* path, ModuleApi api);
void note_kernel(const void* handle, void* module, const char* name, bool is_kernel);
void note_unload(void* module);
void note_global(void* module, const char* name);

// ---- stream capture and graphs (graph_api.cpp)

// "/path/app+0x1a2b (addr2line ...)": where a call came from, for messages.
std::string code_site(const void* return_address);

// What the runtime's (graph_api.cpp) and the driver's (graph_driver_api.cpp) graph wrappers
// share. Each takes the status of the real call and returns it; a change is followed only
// when the call succeeded and the recorder is active.
cudaError_t capture_begin(cudaStream_t stream, cudaError_t status);
cudaError_t capture_end(cudaStream_t stream, cudaError_t status);  // followed whatever the status
cudaError_t instantiated(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags, cudaError_t status);
// After a successful change to an executable graph, the same change on its mirror.
cudaError_t follow(cudaGraphExec_t exec, cudaError_t status, const std::function<void(GraphMirror&)>& change);
void graph_gone(cudaGraphExec_t exec);
cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream, const void* caller,
                         const std::function<int()>& do_launch);

}  // namespace mneme::recorder
