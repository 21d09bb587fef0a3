// libmneme_recorder.so: preloaded into an instrumented application by `mneme record`.
//
// It serves the application's device allocations from a fixed-address virtual range
// (AddressSpace on the CUDA VMM API), learns kernel and global names from the CUDA
// runtime's registration calls, and around each selected kernel launch copies every
// live allocation and every device global to the host before and after the launch.
// The copies land in pinned staging blocks through a SnapshotPipeline (their own
// non-blocking stream, many chunks in flight); background threads diff, compress, write
// and commit the instance (RecordingWriter layout) while the application goes on.
// Everything else passes through to the real CUDA runtime, found with dlsym(RTLD_NEXT).
//
// Configuration comes from environment variables that `mneme record` sets (see
// docs/record.md); kernel metadata and IR come from a manifest file it extracts from
// the executable's .mneme.kernels section.
#include <cuda.h>
#include <cxxabi.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <elf.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/cuda_device.hpp"
#include "mneme/runtime/devices.hpp"
#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/recording_writer.hpp"
#include "mneme/runtime/snapshot_pipeline.hpp"
#include "graph_mirror.hpp"
#include "managed_arena.hpp"
#include "interpose.hpp"

namespace rt = mneme::runtime;

namespace {

using mneme::recorder::real;

// Set once the recorder writes: instances captured before a fatal error still commit.
rt::SnapshotPipeline* g_pipeline = nullptr;
double g_commit_wait = 60;
pid_t g_owner_pid = 0;

[[noreturn]] void fatal(const std::string& message, int code = 70) {
  std::fprintf(stderr, "mneme record: %s\n", message.c_str());
  std::fflush(stderr);
  if (g_pipeline && getpid() == g_owner_pid && g_pipeline->uncommitted() > 0 && !g_pipeline->drain_for(g_commit_wait))
    std::fprintf(stderr, "mneme record: gave up waiting for the captured instances to be written\n");
  _exit(code);
}

std::string env(const char* name, const char* fallback = "") {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

struct KernelEntry {
  rt::KernelInfo info;
  std::string ir_path;
  uint64_t args_size = 0;
  int recorded = 0;
  bool stored = false;
};

struct GlobalEntry {
  std::string name;
  const void* host_var;
  uint64_t size;
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

int this_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    if (const char* s = std::getenv(v)) return std::atoi(s);
  }
  return 0;
}

bool rank_selected(const std::string& ranks) {
  if (ranks == "all") return true;
  int rank = this_rank();
  for (const auto& r : split(ranks.empty() ? "0" : ranks, ','))
    if (!r.empty() && std::atoi(r.c_str()) == rank) return true;
  return false;
}

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Device-to-host copies for the snapshot pipeline: cuMemcpyDtoHAsync on a non-blocking
// stream of the runtime's primary context into pinned blocks; fences are events. The
// driver API keeps the application's cudaGetLastError state untouched.
class CudaSource : public rt::SnapshotSource {
 public:
  explicit CudaSource(std::shared_ptr<rt::cuda::CudaDevice> device) : device_(std::move(device)), d_(device_->driver()) {
    rt::cuda::CudaDevice::Scope scope(*device_);
    rt::cuda::check(d_, d_.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }

  void* allocate(size_t bytes) override {
    try {
      return device_->allocate_pinned(bytes);
    } catch (const std::exception&) {
      return nullptr;  // the pipeline falls back to pageable memory
    }
  }
  void deallocate(void* pointer, size_t) noexcept override { device_->free_pinned(pointer); }

  void copy(void* destination, uint64_t source, size_t bytes) override {
    rt::cuda::CudaDevice::Scope scope(*device_);
    rt::cuda::check(d_, d_.cuMemcpyDtoHAsync(destination, source, bytes, stream_), "cuMemcpyDtoHAsync");
  }

  std::shared_ptr<rt::Fence> fence() override {
    CUevent event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!events_.empty()) {
        event = events_.back();
        events_.pop_back();
      }
    }
    rt::cuda::CudaDevice::Scope scope(*device_);
    if (!event)
      rt::cuda::check(d_, d_.cuEventCreate(&event, CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC), "cuEventCreate");
    rt::cuda::check(d_, d_.cuEventRecord(event, stream_), "cuEventRecord");
    return std::make_shared<EventFence>(this, event);
  }

  void wait_all() override {
    rt::cuda::CudaDevice::Scope scope(*device_);
    rt::cuda::check(d_, d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }

  // Background threads keep the context current for their event waits.
  void thread_started() override { d_.cuCtxPushCurrent(device_->context()); }

  // The chunk-digest kernel (snapshot_digest.cu, as PTX the driver JIT-compiles), one
  // launch per range on the copy stream, its results in mapped host memory.
  bool digest(const std::vector<DigestRange>& ranges, uint64_t* out) override {
    if (digest_failed_) return false;
    rt::cuda::CudaDevice::Scope scope(*device_);
    try {
      if (!digest_kernel_) {
        static const char kPtx[] =
#include "snapshot_digest_ptx.inc"
            ;
        rt::cuda::check(d_, d_.cuModuleLoadDataEx(&digest_module_, kPtx, 0, nullptr, nullptr), "loading the digest kernel");
        rt::cuda::check(d_, d_.cuModuleGetFunction(&digest_kernel_, digest_module_, "mneme_chunk_digest"),
                        "cuModuleGetFunction");
      }
      uint64_t words = 0;
      for (const auto& r : ranges) words += 2 * ((r.size + r.chunk - 1) / r.chunk);
      if (words * 8 > digest_bytes_) {
        if (digest_words_) d_.cuMemFreeHost(digest_words_);
        digest_words_ = nullptr;
        digest_bytes_ = std::max<uint64_t>(words * 8, 1 << 16);
        rt::cuda::check(d_, d_.cuMemHostAlloc(reinterpret_cast<void**>(&digest_words_), digest_bytes_,
                                              CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
      }
      uint64_t at = 0;
      for (const auto& r : ranges) {
        if (!r.size) continue;
        uint64_t address = r.address, size = r.size, chunk = r.chunk;
        uint64_t* dst = digest_words_ + at;  // the host pointer is the device's (unified addressing)
        void* params[] = {&address, &size, &chunk, &dst};
        unsigned grid = unsigned((size + chunk - 1) / chunk);
        rt::cuda::check(d_, d_.cuLaunchKernel(digest_kernel_, grid, 1, 1, 256, 1, 1, 0, stream_, params, nullptr),
                        "launching the digest kernel");
        at += 2 * uint64_t(grid);
      }
      rt::cuda::check(d_, d_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      std::memcpy(out, digest_words_, words * 8);
      return true;
    } catch (const std::exception& e) {
      digest_failed_ = true;
      std::fprintf(stderr, "mneme record: chunk digests on the device are not available (%s); every epilogue "
                           "chunk is copied\n", e.what());
      return false;
    }
  }

 private:
  class EventFence : public rt::Fence {
   public:
    EventFence(CudaSource* source, CUevent event) : source_(source), event_(event) {}
    ~EventFence() override {
      std::lock_guard<std::mutex> lock(source_->mutex_);
      source_->events_.push_back(event_);
    }

   protected:
    void wait_impl() override {
      rt::cuda::check(source_->d_, source_->d_.cuEventSynchronize(event_), "cuEventSynchronize");
    }

   private:
    CudaSource* source_;
    CUevent event_;
  };

  std::shared_ptr<rt::cuda::CudaDevice> device_;
  const rt::cuda::Driver& d_;
  CUstream stream_ = nullptr;
  std::mutex mutex_;
  std::vector<CUevent> events_;
  CUmodule digest_module_ = nullptr;
  CUfunction digest_kernel_ = nullptr;
  uint64_t* digest_words_ = nullptr;
  uint64_t digest_bytes_ = 0;
  bool digest_failed_ = false;
};

void at_exit();

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
    if (it != fatbins_.end()) fatbin_of_.emplace(device_name, it->second);
  }
  // The fatbinary an nvcc-built module registers: kernels missing from the manifest are
  // recorded with it as their code (PTX and/or cubin inside; docs/record.md).
  void register_fatbin(void** handle, std::string_view bytes) { fatbins_[handle] = bytes; }
  // Code images the application loads itself (cuModuleLoad*, cuLibraryLoad*,
  // cudaLibraryLoad*; NVRTC output): copied, since the caller may free its buffer once
  // the module is loaded. Handles are the driver's CUmodule / CUlibrary or the runtime's
  // cudaLibrary_t; `api` says which functions find their globals.
  enum class ModuleApi { module, library, runtime_library };
  void module_loaded(void* module, const void* image, ModuleApi api) { module_image(module, image_of(image), api); }
  void module_file_loaded(void* module, const char* path, ModuleApi api) { module_image(module, image_of_file(path), api); }
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
  void register_var(const void* host, const char* name, uint64_t size) { globals_.push_back({name, host, size}); }

  rt::AddressSpace& space() {
    if (!space_) init_device();
    return *space_;
  }
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
  // Managed memory from the fixed range after the device range (managed_arena.hpp);
  // 0 when it cannot be placed there (then the driver's managed memory is used).
  uint64_t allocate_managed(uint64_t size) {
    if (!space_) init_device();
    return arena_ ? arena_->allocate(size) : 0;
  }
  bool free_managed(uint64_t address) { return arena_ && arena_->free(address); }
  bool in_arena(uint64_t address, uint64_t size) const { return arena_ && arena_->contains(address, size); }

  // Stream capture: while any stream captures, launches only add graph nodes (nothing
  // runs), and a device-wide synchronisation would invalidate the capture.
  void capture_began(uint64_t stream) { capturing_.insert(stream); }
  void capture_ended(uint64_t stream) { capturing_.erase(stream); }
  bool capturing(uint64_t stream) const;

  // Another GPU than the recorded one is current: its allocations and launches pass
  // through unrecorded (one recorded device per process; docs/record.md).
  bool foreign_device() {
    if (ordinal_ < 0) return false;
    REAL(cudaGetDevice);
    int current = ordinal_;
    real_cudaGetDevice(&current);
    if (current == ordinal_) return false;
    if (!warned_device_) {
      warned_device_ = true;
      std::fprintf(stderr, "mneme record: device %d is recorded; allocations and launches on device %d "
                           "run unrecorded (one device per process)\n", ordinal_, current);
    }
    return true;
  }

  // Executable graphs and the mirrors that say what they run (graph_mirror.hpp).
  void graph_instantiated(cudaGraphExec_t exec, cudaGraph_t graph, unsigned long long flags) {
    mirrors_[exec] = std::make_unique<mneme::recorder::GraphMirror>(graph, flags);
  }
  mneme::recorder::GraphMirror* mirror(cudaGraphExec_t exec) {
    auto it = mirrors_.find(exec);
    return it == mirrors_.end() ? nullptr : it->second.get();
  }
  void graph_destroyed(cudaGraphExec_t exec) { mirrors_.erase(exec); }
  // Runs a graph launch: as one launch when no kernel node needs recording, else node by
  // node in dependency order with each kernel recorded like a plain launch.
  int launch_graph(cudaGraphExec_t exec, uint64_t stream, const void* caller, const std::function<int()>& do_launch);

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
                    CUfunction function);

 public:

 private:
  Recorder() {
    active_ = !env("MNEME_RECORD_DB").empty() && rank_selected(env("MNEME_RECORD_RANKS", "0"));
    if (!active_) return;
    db_ = env("MNEME_RECORD_DB");
    vass_ = std::strtoull(env("MNEME_RECORD_VASS", "17179869184").c_str(), nullptr, 0);
    base_ = std::strtoull(env("MNEME_RECORD_BASE", "0").c_str(), nullptr, 0);
    if (!base_) base_ = rt::kDefaultBase;
    max_ = std::atoi(env("MNEME_RECORD_MAX", "0").c_str());
    std::string filter = env("MNEME_RECORD_FILTER");
    if (!filter.empty()) filter_ = std::make_unique<std::regex>(filter);
    epilogue_ = env("MNEME_RECORD_EPILOGUE", "diff");
    discover_ = env("MNEME_RECORD_FATBIN", "1") != "0";
    capture_reachable_ = env("MNEME_RECORD_CAPTURE", "all") == "reachable";
    prestage_ = env("MNEME_RECORD_PRESTAGE", "1") != "0";
    options_.digests = env("MNEME_RECORD_DIGESTS", "1") != "0";
    // Negative levels are zstd's fast modes: less compression, more throughput.
    zstd_level_ = std::atoi(env("MNEME_RECORD_ZSTD_LEVEL", std::to_string(MNEME_RECORDING_DEFAULT_ZSTD_LEVEL).c_str()).c_str());
    // Room for managed memory after the device range (0: the driver's managed memory).
    managed_size_ = std::strtoull(env("MNEME_RECORD_MANAGED_SIZE", "1099511627776").c_str(), nullptr, 0);
    std::string host_memory = env("MNEME_RECORD_HOST_MEMORY");
    if (!host_memory.empty() && !(options_.host_memory = rt::parse_size(host_memory)))
      fatal("MNEME_RECORD_HOST_MEMORY=" + host_memory + " is not a size (bytes, or e.g. 512M, 8G)", 2);
    options_.threads = unsigned(std::max(0, std::atoi(env("MNEME_RECORD_THREADS", "0").c_str())));
    stats_ = !env("MNEME_RECORD_STATS").empty() && env("MNEME_RECORD_STATS") != "0";
    crash_wait_ = std::strtod(env("MNEME_RECORD_CRASH_WAIT", "60").c_str(), nullptr);
    load_manifest(env("MNEME_RECORD_MANIFEST"));
    if (stats_) std::atexit(at_exit);  // the statistics line even when nothing is recorded
  }

 public:
  // At exit (return from main or exit()): every captured instance is committed first.
  void finish() {
    if (finished_) return;
    finished_ = true;
    if (pipeline_ && getpid() != owner_) return;  // a forked child: the threads stayed in the parent
    if (pipeline_) {
      auto start = Clock::now();
      pipeline_->flush();
      pipeline_->note_drain(seconds(start, Clock::now()));
      std::string error = pipeline_->error();
      if (!error.empty()) {
        std::fflush(nullptr);
        fatal("writing the recording failed: " + error, 2);
      }
    }
    if (stats_) {
      rt::PipelineStats none;  // nothing recorded: the same keys, zero
      none.host_memory_bytes = options_.host_memory ? options_.host_memory : rt::default_host_memory();
      std::string line = pipeline_ ? pipeline_->stats_line() : rt::format_stats(none);
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    }
  }

 private:

  void load_manifest(const std::string& path) {
    std::ifstream in(path);
    if (!in) fatal("cannot read the kernel manifest " + path + " (run through `mneme record`)");
    std::string line;
    while (std::getline(in, line)) {
      auto f = split(line, '\t');
      if (f.size() < 4) continue;
      KernelEntry k;
      k.info.name = f[0];
      k.info.static_hash = f[1];
      k.info.demangled_name = f[2];
      k.ir_path = f[3];
      if (f.size() > 4)
        for (const auto& p : split(f[4], ',')) {
          auto v = split(p, ':');
          if (v.size() != 5) continue;
          rt::KernelParam param{uint32_t(std::stoul(v[0])), uint32_t(std::stoul(v[1])), uint32_t(std::stoul(v[2])),
                                v[3] == "1", v[4] == "1"};
          k.args_size = std::max<uint64_t>(k.args_size, param.offset + param.size);
          k.info.params.push_back(param);
        }
      if (f.size() > 5)
        for (const auto& g : split(f[5], ',')) {
          auto v = split(g, ':');
          if (v.size() == 3) k.info.globals.push_back({v[0], std::stoull(v[1]), uint32_t(std::stoul(v[2]))});
        }
      auto existing = kernels_.find(k.info.name);
      if (existing != kernels_.end() && existing->second.info.static_hash != k.info.static_hash) {
        // File-static kernels of one name in several translation units: a launch cannot
        // be mapped to the right IR yet, so they run unrecorded rather than recorded wrong.
        std::fprintf(stderr, "mneme record: kernel %s is defined differently in several translation "
                             "units; its launches are not recorded\n", k.info.demangled_name.c_str());
        existing->second.info.static_hash.clear();
        continue;
      }
      kernels_[k.info.name] = std::move(k);
    }
  }

  void init_device() {
    REAL(cudaFree);
    REAL(cudaGetDevice);
    real_cudaFree(nullptr);  // the runtime's primary context, which the driver calls below share
    int ordinal = 0;
    real_cudaGetDevice(&ordinal);
    ordinal_ = ordinal;
    try {
      device_ = std::dynamic_pointer_cast<rt::cuda::CudaDevice>(rt::open_device("cuda", ordinal));
      space_ = std::make_unique<rt::AddressSpace>(std::make_unique<rt::cuda::CudaMappingBackend>(device_), base_, vass_);
      if (managed_size_)
        arena_ = std::make_unique<mneme::recorder::ManagedArena>(device_->driver(), base_ + vass_, managed_size_);
    } catch (const std::exception& e) {
      fatal(std::string(e.what()) + " (choose another base with --vass-base, or a smaller -vass)");
    }
  }

  rt::RecordingWriter& writer() {
    if (!writer_) {
      rt::RecordingInfo info;
      info.vas_base = space().base();
      info.vas_size = space().size();
      const auto& p = device_->properties();
      info.gpu_name = p.name;
      info.compute_capability = std::to_string(p.compute_capability_major) + "." + std::to_string(p.compute_capability_minor);
      int driver = 0, runtime = 0;
      REAL(cudaDriverGetVersion);
      REAL(cudaRuntimeGetVersion);
      real_cudaDriverGetVersion(&driver);
      real_cudaRuntimeGetVersion(&runtime);
      info.driver_version = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
      info.runtime_version = std::to_string(runtime / 1000) + "." + std::to_string(runtime % 1000 / 10);
      char host[256] = {0};
      gethostname(host, sizeof host - 1);
      info.host = host;
      std::ifstream cmd("/proc/self/cmdline", std::ios::binary);
      std::string arg;
      while (std::getline(cmd, arg, '\0')) info.command_line.push_back(arg);
      try {
        writer_ = std::make_unique<rt::RecordingWriter>(db_, info, epilogue_, MNEME_RECORDING_DEFAULT_CHUNK_SIZE,
                                                        zstd_level_);
        source_ = std::make_unique<CudaSource>(device_);
        pipeline_ = std::make_unique<rt::SnapshotPipeline>(*writer_, *source_, options_);
      } catch (const std::exception& e) {
        fatal(e.what(), 2);
      }
      rt::SnapshotPipeline::install_crash_handler(pipeline_.get(), crash_wait_);
      g_commit_wait = crash_wait_;
      g_pipeline = pipeline_.get();
      owner_ = g_owner_pid = getpid();
      // Registered after the application's CUDA module destructors, so it runs before them.
      std::atexit(at_exit);
    }
    return *writer_;
  }

  bool selected(KernelEntry& k) const {
    if (max_ > 0 && k.recorded >= max_) return false;
    if (filter_ && !std::regex_search(k.info.demangled_name, *filter_) && !std::regex_search(k.info.name, *filter_))
      return false;
    return true;
  }

  // What a snapshot copies: every live allocation and device global (with the globals of
  // `module`, the application-loaded module the kernel came from), or (`args` given:
  // --capture reachable) the globals and the allocations reachable from them and `args`.
  void regions_now(std::vector<rt::RegionSpec>& regions, std::vector<uint64_t>& sources,
                   const std::string* args = nullptr, void* module = nullptr);
  std::set<uint64_t> reachable(const std::string& args, const std::vector<std::pair<uint64_t, uint64_t>>& globals);
  bool capture_reachable_ = false;

  bool active_ = false;
  bool stats_ = false;
  double crash_wait_ = 60;
  pid_t owner_ = 0;
  bool finished_ = false;
  rt::PipelineOptions options_;
  std::string db_, epilogue_;
  uint64_t vass_ = 0, base_ = 0;
  int max_ = 0;
  std::unique_ptr<std::regex> filter_;
  std::unordered_map<const void*, std::string> functions_;
  std::unordered_map<void**, std::string_view> fatbins_;
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
  };
  std::unordered_map<void*, LoadedModule> modules_;               // CUmodule/CUlibrary/cudaLibrary_t
  std::unordered_map<const void*, KernelHandle> handles_;         // CUfunction/CUkernel/cudaKernel_t
  std::map<std::pair<uint64_t, std::string>, KernelEntry> loaded_kernels_;  // (image digest, name)
  void module_image(void* module, std::shared_ptr<const CodeImage> code, ModuleApi api);
  static std::shared_ptr<const CodeImage> image_of(const void* image);
  static std::shared_ptr<const CodeImage> image_of_file(const char* path);
  static std::shared_ptr<const CodeImage> image_of_bytes(std::string bytes);
  static std::set<std::string> declared_globals(const CodeImage& image);
  static bool global_address(void* module, ModuleApi api, const std::string& name, uint64_t& address, uint64_t& size);
  std::unordered_map<std::string, std::string_view> fatbin_of_;
  bool discover_ = true;
  std::vector<GlobalEntry> globals_;
  std::map<std::string, KernelEntry> kernels_;
  std::map<uint64_t, uint64_t> live_;
  uint64_t live_bytes_ = 0;
  bool prestage_ = true;
  int zstd_level_ = MNEME_RECORDING_DEFAULT_ZSTD_LEVEL;
  std::map<uint64_t, uint64_t> managed_;
  std::set<uint64_t> capturing_;
  std::unordered_map<cudaGraphExec_t, std::unique_ptr<mneme::recorder::GraphMirror>> mirrors_;
  std::set<cudaGraphExec_t> warned_graphs_;
  std::shared_ptr<rt::cuda::CudaDevice> device_;
  std::unique_ptr<rt::AddressSpace> space_;
  std::unique_ptr<mneme::recorder::ManagedArena> arena_;
  int ordinal_ = -1;  // the device recorded: the one current at the first allocation
  bool warned_device_ = false;
  uint64_t managed_size_ = 0;
  std::unique_ptr<rt::RecordingWriter> writer_;
  std::unique_ptr<CudaSource> source_;
  std::unique_ptr<rt::SnapshotPipeline> pipeline_;
};

void at_exit() { Recorder::get().finish(); }

// Every live allocation and every registered device global: what a snapshot copies.
void Recorder::regions_now(std::vector<rt::RegionSpec>& regions, std::vector<uint64_t>& sources,
                           const std::string* args, void* module) {
  REAL(cudaGetSymbolAddress);
  regions.clear();
  sources.clear();
  std::vector<std::pair<uint64_t, uint64_t>> globals;
  for (const auto& g : globals_) {
    void* address = nullptr;
    if (real_cudaGetSymbolAddress(&address, g.host_var) != cudaSuccess || !address) continue;
    regions.push_back({"global", reinterpret_cast<uint64_t>(address), g.size, g.name});
    sources.push_back(reinterpret_cast<uint64_t>(address));
    globals.emplace_back(reinterpret_cast<uint64_t>(address), g.size);
  }
  // Only the kernel's own module: replay binds globals by name in the module it loads,
  // and other modules may hold globals of the same name.
  auto loaded = module ? modules_.find(module) : modules_.end();
  if (loaded != modules_.end()) {
    std::vector<std::string> absent;  // declared, but not in the loaded code: not asked again
    for (const auto& name : loaded->second.globals) {
      uint64_t address = 0, size = 0;
      if (!global_address(module, loaded->second.api, name, address, size) || !address) {
        absent.push_back(name);
        continue;
      }
      regions.push_back({"global", address, size, name});
      sources.push_back(address);
      globals.emplace_back(address, size);
    }
    for (const auto& name : absent) loaded->second.globals.erase(name);
  }
  std::set<uint64_t> wanted;  // allocation start addresses
  bool everything = !args;
  if (args) wanted = reachable(*args, globals);
  for (const auto* pool : {&live_, &managed_}) {
    for (const auto& [address, size] : *pool) {
      if (!everything && !wanted.count(address)) continue;
      regions.push_back({pool == &live_ ? "heap" : "managed", address, size, ""});
      sources.push_back(address);
    }
  }
}

// The allocations a launch can reach: those an 8-byte word of the argument buffer or of a
// device global points into, then, transitively, those that 8-byte words stored in reached
// allocations point into. Pointers the kernel computes from integers are not seen
// (docs/record.md, "--capture reachable").
std::set<uint64_t> Recorder::reachable(const std::string& args, const std::vector<std::pair<uint64_t, uint64_t>>& globals) {
  std::map<uint64_t, uint64_t> all(live_);
  all.insert(managed_.begin(), managed_.end());
  auto owner = [&all](uint64_t value) -> std::optional<uint64_t> {
    auto it = all.upper_bound(value);
    if (it == all.begin()) return std::nullopt;
    --it;
    if (value >= it->first && value < it->first + std::max<uint64_t>(it->second, 1)) return it->first;
    return std::nullopt;
  };
  std::set<uint64_t> found;
  std::vector<uint64_t> pending;
  auto scan = [&](const unsigned char* bytes, size_t n) {
    for (size_t at = 0; at + 8 <= n; at += 8) {
      uint64_t value;
      std::memcpy(&value, bytes + at, 8);
      if (auto start = owner(value); start && found.insert(*start).second) pending.push_back(*start);
    }
  };
  // Arguments are packed at their own offsets: look at every 4-byte step for 8-byte words.
  for (size_t at = 0; at + 8 <= args.size(); at += 4) {
    uint64_t value;
    std::memcpy(&value, args.data() + at, 8);
    if (auto start = owner(value); start && found.insert(*start).second) pending.push_back(*start);
  }
  const auto& d = device_->driver();
  std::vector<unsigned char> buffer;
  constexpr uint64_t kPiece = 64ull << 20;
  auto read_and_scan = [&](uint64_t address, uint64_t size) {
    for (uint64_t done = 0; done < size; done += kPiece) {
      uint64_t n = std::min(kPiece, size - done);
      buffer.resize(n);
      if (d.cuMemcpyDtoH(buffer.data(), address + done, n) != CUDA_SUCCESS) return;
      scan(buffer.data(), n);
    }
  };
  rt::cuda::CudaDevice::Scope scope(*device_);
  for (const auto& [address, size] : globals) read_and_scan(address, size);
  while (!pending.empty()) {
    uint64_t start = pending.back();
    pending.pop_back();
    read_and_scan(start, all[start]);
  }
  return found;
}

bool Recorder::capturing(uint64_t stream) const {
  if (!capturing_.empty()) return true;
  REAL(cudaStreamIsCapturing);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  // A capture begun where the recorder cannot see it (a handle from another library)
  return real_cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status) != cudaSuccess ||
         status != cudaStreamCaptureStatusNone;
}

Recorder::CodeImage::CodeImage(std::string k, std::string b) : kind(std::move(k)), bytes(std::move(b)) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (std::string_view part : {std::string_view(kind.c_str(), kind.size() + 1), std::string_view(bytes)})
    for (unsigned char c : part) { h ^= c; h *= 0x100000001b3ull; }
  digest = h;
}

void Recorder::module_image(void* module, std::shared_ptr<const CodeImage> code, ModuleApi api) {
  if (!code) {
    modules_.erase(module);  // a handle the driver reuses must not keep an earlier module's code
    return;
  }
  LoadedModule m{code, api, declared_globals(*code)};
  modules_[module] = std::move(m);
}

// What an image passed to cuModuleLoadData & co. is, and how long: fatbinary (or its
// wrapper), cubin (ELF: up to the end of its section headers) or NUL-terminated PTX.
std::shared_ptr<const Recorder::CodeImage> Recorder::image_of(const void* image) {
  if (!image) return nullptr;
  auto* p = static_cast<const unsigned char*>(image);
  uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  if (magic == 0x466243b1u) {  // the wrapper __cudaRegisterFatBinary takes
    const unsigned char* data = nullptr;
    std::memcpy(&data, p + 8, sizeof data);
    if (!data) return nullptr;
    p = data;
    std::memcpy(&magic, p, 4);
  }
  if (magic == 0xBA55ED50u) {
    uint16_t header = 0;
    uint64_t size = 0;
    std::memcpy(&header, p + 6, 2);
    std::memcpy(&size, p + 8, 8);
    if (header < 16 || size > (1ull << 34)) return nullptr;
    return std::make_shared<CodeImage>(CodeImage{"cuda-fatbin", std::string(reinterpret_cast<const char*>(p), header + size)});
  }
  if (std::memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2) {
    Elf64_Ehdr h;
    std::memcpy(&h, p, sizeof h);
    uint64_t end = std::max<uint64_t>(h.e_shoff + uint64_t(h.e_shnum) * h.e_shentsize,
                                      h.e_phoff + uint64_t(h.e_phnum) * h.e_phentsize);
    if (end > (1ull << 34)) return nullptr;
    return std::make_shared<CodeImage>(CodeImage{"cubin", std::string(reinterpret_cast<const char*>(p), end)});
  }
  size_t length = strnlen(reinterpret_cast<const char*>(p), 1ull << 30);
  return std::make_shared<CodeImage>(CodeImage{"ptx", std::string(reinterpret_cast<const char*>(p), length)});
}

// A file passed to cuModuleLoad, cuLibraryLoadFromFile or cudaLibraryLoadFromFile: the
// same kinds, read whole (a file holds no fatbinary wrapper, whose pointer would be
// meaningless here).
std::shared_ptr<const Recorder::CodeImage> Recorder::image_of_file(const char* path) {
  if (!path) return nullptr;
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream bytes;
  bytes << in.rdbuf();
  return image_of_bytes(bytes.str());
}

std::shared_ptr<const Recorder::CodeImage> Recorder::image_of_bytes(std::string bytes) {
  if (bytes.size() < 16) return nullptr;
  uint32_t magic = 0;
  std::memcpy(&magic, bytes.data(), 4);
  if (magic == 0xBA55ED50u) {
    uint16_t header = 0;
    uint64_t size = 0;
    std::memcpy(&header, bytes.data() + 6, 2);
    std::memcpy(&size, bytes.data() + 8, 8);
    if (header >= 16 && header + size <= bytes.size()) bytes.resize(header + size);
    return std::make_shared<CodeImage>(CodeImage{"cuda-fatbin", std::move(bytes)});
  }
  if (bytes.compare(0, 4, "\x7f" "ELF") == 0) return std::make_shared<CodeImage>(CodeImage{"cubin", std::move(bytes)});
  bytes.resize(strnlen(bytes.c_str(), bytes.size()));
  return std::make_shared<CodeImage>(CodeImage{"ptx", std::move(bytes)});
}

// The device globals an image declares, so that a kernel's globals are snapshotted even
// when the application never asks for them (a counter only kernels touch): PTX
// `.global`/`.const` variables at module scope, or a cubin's object symbols in its global
// and constant sections. Fatbinaries are not looked into: only the globals the
// application looks up count for them.
std::set<std::string> Recorder::declared_globals(const CodeImage& image) {
  std::set<std::string> names;
  const std::string& b = image.bytes;
  if (image.kind == "ptx") {
    std::istringstream in(b);
    std::string line;
    int depth = 0;  // inside a function body or a multi-line initializer
    while (std::getline(in, line)) {
      int at_start = depth;
      for (char c : line) depth += c == '{' ? 1 : c == '}' ? -1 : 0;
      if (at_start != 0) continue;
      std::string head = line.substr(0, line.find_first_of("=;"));
      std::istringstream words(head);
      std::vector<std::string> w;
      for (std::string word; words >> word;) w.push_back(word);
      size_t space = w.size() > 1 && (w[0] == ".visible" || w[0] == ".weak" || w[0] == ".common") ? 1 : 0;
      if (w.size() < space + 3 || (w[space] != ".global" && w[space] != ".const")) continue;
      std::string name = w.back().substr(0, w.back().find('['));
      if (name.empty() || name[0] == '.') continue;
      if (line.find(".texref") != std::string::npos || line.find(".samplerref") != std::string::npos ||
          line.find(".surfref") != std::string::npos)
        continue;
      names.insert(name);
    }
  } else if (image.kind == "cubin" && b.size() >= sizeof(Elf64_Ehdr)) {
    Elf64_Ehdr h;
    std::memcpy(&h, b.data(), sizeof h);
    auto section = [&](size_t i, Elf64_Shdr& out) {
      uint64_t at = h.e_shoff + i * uint64_t(h.e_shentsize);
      if (h.e_shentsize < sizeof(Elf64_Shdr) || i >= h.e_shnum || at + sizeof out > b.size()) return false;
      std::memcpy(&out, b.data() + at, sizeof out);
      return true;
    };
    auto string_at = [&](const Elf64_Shdr& table, uint64_t offset) -> std::string {
      if (table.sh_offset + offset >= b.size() || offset >= table.sh_size) return {};
      return std::string(b.c_str() + table.sh_offset + offset, strnlen(b.c_str() + table.sh_offset + offset,
                                                                        table.sh_size - offset));
    };
    Elf64_Shdr names_table{}, symtab{}, strtab{};
    if (!section(h.e_shstrndx, names_table)) return names;
    for (size_t i = 0; i < h.e_shnum; ++i)
      if (section(i, symtab) && symtab.sh_type == SHT_SYMTAB) break;
    if (symtab.sh_type != SHT_SYMTAB || !section(symtab.sh_link, strtab) || symtab.sh_offset + symtab.sh_size > b.size())
      return names;
    for (uint64_t at = symtab.sh_offset; at + sizeof(Elf64_Sym) <= symtab.sh_offset + symtab.sh_size;
         at += sizeof(Elf64_Sym)) {
      Elf64_Sym sym;
      std::memcpy(&sym, b.data() + at, sizeof sym);
      Elf64_Shdr where{};
      if (ELF64_ST_TYPE(sym.st_info) != STT_OBJECT || sym.st_size == 0 || !section(sym.st_shndx, where)) continue;
      std::string in_section = string_at(names_table, where.sh_name);
      if (in_section.rfind(".nv.global", 0) != 0 && in_section.rfind(".nv.constant", 0) != 0) continue;
      std::string name = string_at(strtab, sym.st_name);
      if (!name.empty()) names.insert(name);
    }
  }
  return names;
}

// Where a module's global is in the current context, through the driver (or runtime)
// functions of the API that loaded the module, called directly: not through the
// interposed ones, which would note the lookup.
bool Recorder::global_address(void* module, ModuleApi api, const std::string& name, uint64_t& address,
                              uint64_t& size) {
  using ModuleGlobal = CUresult (*)(CUdeviceptr*, size_t*, CUmodule, const char*);
  using LibraryGlobal = CUresult (*)(CUdeviceptr*, size_t*, CUlibrary, const char*);
  static auto module_global = mneme::recorder::driver_function<ModuleGlobal>("cuModuleGetGlobal_v2");
  static auto library_global = mneme::recorder::driver_function<LibraryGlobal>("cuLibraryGetGlobal");
  CUdeviceptr pointer = 0;
  size_t bytes = 0;
  bool found = false;
  if (api == ModuleApi::module && module_global)
    found = module_global(&pointer, &bytes, static_cast<CUmodule>(module), name.c_str()) == CUDA_SUCCESS;
  else if (api == ModuleApi::library && library_global)
    found = library_global(&pointer, &bytes, static_cast<CUlibrary>(module), name.c_str()) == CUDA_SUCCESS;
  else if (api == ModuleApi::runtime_library) {
    using RuntimeGlobal = cudaError_t (*)(void**, size_t*, cudaLibrary_t, const char*);
    static auto runtime_global = real<RuntimeGlobal>("cudaLibraryGetGlobal");
    REAL(cudaPeekAtLastError);
    REAL(cudaGetLastError);
    cudaError_t before = real_cudaPeekAtLastError();
    void* p = nullptr;
    found = runtime_global(&p, &bytes, static_cast<cudaLibrary_t>(module), name.c_str()) == cudaSuccess;
    pointer = reinterpret_cast<CUdeviceptr>(p);
    if (!found && before == cudaSuccess) real_cudaGetLastError();  // the application's error state as it was
  }
  address = pointer;
  size = bytes;
  return found && bytes > 0;
}

CUfunction Recorder::function_of(const void* handle, const KernelHandle& h) {
  if (!h.is_kernel) return reinterpret_cast<CUfunction>(const_cast<void*>(handle));
  using KernelFunction = CUresult (*)(CUfunction*, CUkernel);
  static auto kernel_function = mneme::recorder::driver_function<KernelFunction>("cuKernelGetFunction");
  CUfunction f = nullptr;
  if (!kernel_function ||
      kernel_function(&f, reinterpret_cast<CUkernel>(const_cast<void*>(handle))) != CUDA_SUCCESS)
    return nullptr;
  return f;
}

KernelEntry* Recorder::entry(const std::string& name, CUfunction function, const void* host_function,
                             void*& module) {
  if (!module && function) {
    auto h = handles_.find(function);
    if (h != handles_.end()) module = h->second.module;
  }
  if (!module && function && !host_function && !kernels_.count(name)) {
    // A function of an application-loaded module that was not taken from it through the
    // calls the recorder follows (cuModuleEnumerateFunctions, a handle from another library).
    using FuncModule = CUresult (*)(CUmodule*, CUfunction);
    static auto module_of = mneme::recorder::driver_function<FuncModule>("cuFuncGetModule");
    CUmodule m = nullptr;
    if (module_of && module_of(&m, function) == CUDA_SUCCESS && modules_.count(m)) {
      handles_[function] = {m, name, false};
      module = m;
    }
  }
  if (module) {
    auto loaded = modules_.find(module);
    if (loaded != modules_.end()) return loaded_kernel(name, loaded->second, function);
    module = nullptr;
  }
  auto it = kernels_.find(name);
  return it != kernels_.end() ? &it->second : discover(name, function, host_function);
}

KernelEntry* Recorder::discover(const std::string& name, CUfunction function, const void* host_function) {
  KernelEntry& k = kernels_[name];  // an entry without a static hash is never recorded
  if (!discover_) return nullptr;
  auto fatbin = fatbin_of_.find(name);
  if (fatbin == fatbin_of_.end()) return nullptr;
  if (!function && host_function) {
    REAL(cudaGetFuncBySymbol);
    cudaFunction_t f = nullptr;
    if (real_cudaGetFuncBySymbol(&f, host_function) == cudaSuccess) function = reinterpret_cast<CUfunction>(f);
  }
  return describe(k, name, function, "cuda-fatbin", fatbin->second) ? &k : nullptr;
}

KernelEntry* Recorder::loaded_kernel(const std::string& name, const LoadedModule& module, CUfunction function) {
  auto key = std::make_pair(module.code->digest, name);
  auto it = loaded_kernels_.find(key);
  if (it != loaded_kernels_.end()) return &it->second;
  KernelEntry& k = loaded_kernels_[key];  // an entry without a static hash is never recorded
  if (!discover_) return nullptr;
  return describe(k, name, function, module.code->kind, module.code->bytes) ? &k : nullptr;
}

bool Recorder::describe(KernelEntry& k, const std::string& name, CUfunction function, const std::string& kind,
                        std::string_view code) {
  using ParamInfo = CUresult (*)(CUfunction, size_t, size_t*, size_t*);
  static auto param_info = mneme::recorder::driver_function<ParamInfo>("cuFuncGetParamInfo");
  if (!function || !param_info) return false;
  for (size_t index = 0;; ++index) {
    size_t offset = 0, size = 0;
    if (param_info(function, index, &offset, &size) != CUDA_SUCCESS) break;
    // Whether a parameter is a pointer is not in the binary: specialisation needs IR anyway.
    rt::KernelParam p{uint32_t(size), uint32_t(size >= 8 ? 8 : size ? size : 1), uint32_t(offset), false, false};
    k.args_size = std::max<uint64_t>(k.args_size, offset + size);
    k.info.params.push_back(p);
  }
  k.info.name = name;
  int status = 0;
  char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  k.info.demangled_name = status == 0 && demangled ? demangled : name;
  std::free(demangled);
  k.info.code = kind;
  k.info.ir.assign(code.data(), code.size());
  // FNV-1a 64 of the code kind, the name and the code: one kernel of one binary.
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) { h ^= c; h *= 0x100000001b3ull; }
  };
  mix(kind);
  mix(std::string_view(name.c_str(), name.size() + 1));
  mix(code);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  k.info.static_hash = hex;
  return true;
}

bool Recorder::pending(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem,
                       uint64_t stream, Pending& out, CUfunction function, const void* host_function,
                       void* module) {
  if (!device_name) return false;
  KernelEntry* kernel = entry(*device_name, function, host_function, module);
  if (!kernel) return false;
  if (kernel->info.static_hash.empty() || !selected(*kernel)) return false;
  std::string buffer(kernel->args_size, '\0');
  for (size_t i = 0; i < kernel->info.params.size(); ++i) {
    const auto& p = kernel->info.params[i];
    std::memcpy(&buffer[p.offset], args[i], p.size);
  }
  rt::InstanceInfo& inst = out.inst;
  inst.grid[0] = grid.x; inst.grid[1] = grid.y; inst.grid[2] = grid.z;
  inst.block[0] = block.x; inst.block[1] = block.y; inst.block[2] = block.z;
  inst.shared_mem = uint32_t(shmem);
  inst.stream = stream;
  inst.args = buffer;
  out.kernel = kernel;
  out.module = module;
  out.dyn = rt::dynamic_hash(kernel->info.static_hash, inst.grid, inst.block, inst.shared_mem, inst.args);
  return true;
}

bool Recorder::would_record(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem,
                            CUfunction function) {
  Pending p;
  if (!pending(device_name, grid, block, args, shmem, 0, p, function)) return false;
  try {
    auto& w = writer();
    return !pipeline_->knows(p.kernel->info.static_hash, p.dyn) && !w.has_instance(p.kernel->info.static_hash, p.dyn);
  } catch (const std::exception& e) {
    fatal(std::string("reading the recording failed: ") + e.what(), 2);
  }
}

int Recorder::launch(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem,
                     uint64_t stream, const std::function<int()>& do_launch, CUfunction function,
                     const void* host_function, void* module) {
  REAL(cudaDeviceSynchronize);
  // A launch into a capturing stream only adds a graph node: it is recorded when the
  // graph runs. Any synchronisation now would invalidate the capture.
  if (capturing(stream) || foreign_device()) return do_launch();
  Pending launch;
  if (!pending(device_name, grid, block, args, shmem, stream, launch, function, host_function, module))
    return do_launch();
  KernelEntry* kernel = launch.kernel;
  rt::InstanceInfo& inst = launch.inst;
  auto& w = writer();
  auto& pipeline = *pipeline_;
  std::string failure = pipeline.error();
  if (!failure.empty()) fatal("writing the recording failed: " + failure, 2);
  const std::string& static_hash = kernel->info.static_hash;
  const std::string& dyn = launch.dyn;
  try {
    // A repeat only counts: of an instance of this run (possibly still being written)...
    if (pipeline.count_repeat(static_hash, dyn)) return do_launch();
    if (!kernel->stored) {
      if (!kernel->ir_path.empty()) {  // instrumented: the IR the manifest points to
        std::ifstream ir(kernel->ir_path, std::ios::binary);
        std::stringstream bytes;
        bytes << ir.rdbuf();
        kernel->info.ir = bytes.str();
      }
      w.add_kernel(kernel->info);
      kernel->stored = true;
    }
    // ...or of an earlier recording into the same database.
    if (w.has_instance(static_hash, dyn)) {
      w.count_occurrence(static_hash, dyn);
      return do_launch();
    }
  } catch (const std::exception& e) {
    fatal(std::string("writing the recording failed: ") + e.what(), 2);
  }
  // Complete outstanding work so the prologue is what the kernel will see.
  auto t0 = Clock::now();
  if (real_cudaDeviceSynchronize() != cudaSuccess) return do_launch();
  auto t1 = Clock::now();
  std::vector<rt::RegionSpec> regions;
  std::vector<uint64_t> sources;
  regions_now(regions, sources, capture_reachable_ ? &inst.args : nullptr, launch.module);
  inst.capture = capture_reachable_ ? "reachable" : "all";
  std::shared_ptr<rt::SnapshotPipeline::Instance> snap;
  try {
    snap = pipeline.begin(static_hash, inst, regions);
    pipeline.capture_prologue(*snap, sources);  // returns once the bytes are in host memory
  } catch (const std::exception& e) {
    fatal(std::string("copying the prologue to the host failed: ") + e.what());
  }
  auto t2 = Clock::now();
  int status = do_launch();
  if (status != 0) {
    pipeline.abandon(*snap);
    return status;
  }
  cudaError_t done = real_cudaDeviceSynchronize();
  auto t3 = Clock::now();
  if (done != cudaSuccess) {  // a failed launch is not recorded; the app sees the error
    pipeline.abandon(*snap);
    return status;
  }
  try {
    // The application continues as soon as the epilogue is in host memory: diffing,
    // compressing, writing and committing go on in the background.
    pipeline.capture_epilogue(*snap, sources);
  } catch (const std::exception& e) {
    fatal(std::string("copying the epilogue to the host failed: ") + e.what());
  }
  auto t4 = Clock::now();
  kernel->recorded++;
  pipeline.note_launch(seconds(t1, t2) + seconds(t3, t4), seconds(t2, t3), seconds(t0, t1));
  return status;
}

int Recorder::launch_runtime(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, uint64_t stream,
                             const std::function<int()>& do_launch) {
  if (const std::string* name = name_of(func)) return launch(name, grid, block, args, shmem, stream, do_launch, nullptr, func);
  if (const void* host = host_of(static_cast<cudaKernel_t>(const_cast<void*>(func))))
    return launch(name_of(host), grid, block, args, shmem, stream, do_launch, nullptr, host);
  auto h = handles_.find(func);
  if (h == handles_.end()) return launch(nullptr, grid, block, args, shmem, stream, do_launch);
  return launch(&h->second.name, grid, block, args, shmem, stream, do_launch, function_of(func, h->second), nullptr,
                h->second.module);
}

int Recorder::launch_driver(CUfunction f, dim3 grid, dim3 block, void** args, size_t shmem, uint64_t stream,
                            const std::function<int()>& do_launch) {
  auto h = handles_.find(f);
  if (h != handles_.end())
    return launch(&h->second.name, grid, block, args, shmem, stream, do_launch, function_of(f, h->second), nullptr,
                  h->second.module);
  // Any other function: its name from cuFuncGetName (CUDA 12.3+).
  using GetName = CUresult (*)(const char**, CUfunction);
  static auto get_name = mneme::recorder::driver_function<GetName>("cuFuncGetName");
  const char* name = nullptr;
  if (!get_name || get_name(&name, f) != CUDA_SUCCESS || !name) return do_launch();
  std::string device_name = name;
  return launch(&device_name, grid, block, args, shmem, stream, do_launch, f);
}

// Lets this thread map memory while a stream captures in global mode (where the driver
// would otherwise refuse the VMM calls and invalidate the application's capture).
class RelaxedCapture {
 public:
  RelaxedCapture() {
    REAL(cudaThreadExchangeStreamCaptureMode);
    mode_ = cudaStreamCaptureModeRelaxed;
    real_cudaThreadExchangeStreamCaptureMode(&mode_);
  }
  ~RelaxedCapture() {
    REAL(cudaThreadExchangeStreamCaptureMode);
    real_cudaThreadExchangeStreamCaptureMode(&mode_);
  }

 private:
  cudaStreamCaptureMode mode_;
};

// Whether the recorder serves an allocation now (recording, on the recorded device).
bool served_here() {
  auto& r = Recorder::get();
  if (!r.active()) return false;
  std::lock_guard<std::mutex> lock(r.mutex);
  return !r.foreign_device();
}

cudaError_t serve(void** ptr, uint64_t size) {
  auto& r = Recorder::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  RelaxedCapture relaxed;
  try {
    auto a = r.space().allocate(size ? size : 1);
    r.track(a.address, size);
    *ptr = reinterpret_cast<void*>(a.address);
    return cudaSuccess;
  } catch (const rt::OutOfSpaceError& e) {
    fatal("the recorded address space (-vass " + std::to_string(e.range_size >> 30) +
          " GiB) is too small: rerun with -vass " + std::to_string((e.needed_size + (1ull << 30) - 1) >> 30) + " or more", 75);
  } catch (const std::exception& e) {
    fatal(std::string("device allocation failed: ") + e.what());
  }
}

bool release(void* ptr) {
  auto& r = Recorder::get();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto address = reinterpret_cast<uint64_t>(ptr);
  if (!ptr || !r.owns(address)) return false;
  // Freed inside a stream capture (cudaFreeAsync into a graph): the graph's allocation
  // keeps its address for every launch of the graph, so the memory stays mapped.
  if (r.capturing(0)) return true;
  REAL(cudaDeviceSynchronize);
  real_cudaDeviceSynchronize();  // never unmap memory a kernel may still use
  r.space().free(address);
  r.untrack(address);
  return true;
}

// A managed allocation freed: true when it was the arena's (then freed here).
bool forget_managed(uint64_t address) {
  auto& r = Recorder::get();
  if (!r.active() || !address) return false;
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.untrack_managed(address)) return false;
  if (!r.in_arena(address, 1)) return false;
  REAL(cudaDeviceSynchronize);
  real_cudaDeviceSynchronize();  // no running kernel loses its memory
  return r.free_managed(address);
}

bool arena_owned(const void* ptr, size_t count) {
  auto& r = Recorder::get();
  if (!r.active() || !ptr) return false;
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.in_arena(reinterpret_cast<uint64_t>(ptr), count ? count : 1);
}

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
  if (capturing(stream) || foreign_device()) return do_launch();
  auto* graph = mirror(exec);
  if (!graph) return do_launch();
  auto steps = graph->steps();
  if (!graph->why_not().empty()) {
    if (warned_graphs_.insert(exec).second)
      std::fprintf(stderr, "mneme record: a CUDA graph launched from %s runs unrecorded: %s\n", code_site(caller).c_str(),
                   graph->why_not().c_str());
    return do_launch();
  }
  bool record = false;
  for (const auto& step : steps) {
    const auto& k = step.kernel;
    if (step.type == cudaGraphNodeTypeKernel &&
        would_record(&k.device_name, k.grid, k.block, k.params, k.shared_mem, k.function)) {
      record = true;
      break;
    }
  }
  if (!record) {
    // Every kernel node is a repeat (counted) or not selected: the graph runs as it is.
    for (const auto& step : steps)
      if (step.type == cudaGraphNodeTypeKernel)
        launch(&step.kernel.device_name, step.kernel.grid, step.kernel.block, step.kernel.params,
               step.kernel.shared_mem, stream, [] { return 0; }, step.kernel.function);
    return do_launch();
  }
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  static auto driver_launch = mneme::recorder::driver_function<LaunchFn>("cuLaunchKernel");
  auto cuda_stream = reinterpret_cast<cudaStream_t>(stream);
  for (const auto& step : steps) {
    if (step.type != cudaGraphNodeTypeKernel) {
      if (cudaError_t e = graph->run(step, cuda_stream); e != cudaSuccess) return e;
      continue;
    }
    const auto& k = step.kernel;
    int status = launch(&k.device_name, k.grid, k.block, k.params, k.shared_mem, stream, [&] {
      CUresult r = driver_launch(k.function, k.grid.x, k.grid.y, k.grid.z, k.block.x, k.block.y, k.block.z,
                                 k.shared_mem, reinterpret_cast<CUstream>(stream), k.params, nullptr);
      return r == CUDA_SUCCESS ? 0 : int(cudaErrorLaunchFailure);
    }, k.function);
    if (status != 0) return status;
  }
  return 0;
}

cudaError_t capture_begin(cudaStream_t stream, cudaError_t status) {
  auto& r = Recorder::get();
  if (status == cudaSuccess && r.active()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.capture_began(reinterpret_cast<uint64_t>(stream));
  }
  return status;
}

cudaError_t capture_end(cudaStream_t stream, cudaError_t status) {
  auto& r = Recorder::get();
  if (r.active()) {  // the capture ends whether or not it produced a graph
    std::lock_guard<std::mutex> lock(r.mutex);
    r.capture_ended(reinterpret_cast<uint64_t>(stream));
  }
  return status;
}

cudaError_t instantiated(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags, cudaError_t status) {
  auto& r = Recorder::get();
  if (status == cudaSuccess && r.active() && exec && *exec) {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.graph_instantiated(*exec, graph, flags);
  }
  return status;
}

// After a successful change to an executable graph, the same change on its mirror.
cudaError_t follow(cudaGraphExec_t exec, cudaError_t status,
                   const std::function<void(mneme::recorder::GraphMirror&)>& change) {
  auto& r = Recorder::get();
  if (status == cudaSuccess && r.active()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (auto* m = r.mirror(exec)) change(*m);
  }
  return status;
}

void graph_gone(cudaGraphExec_t exec) {
  auto& r = Recorder::get();
  if (!r.active()) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.graph_destroyed(exec);
}

cudaError_t graph_launch(cudaGraphExec_t exec, cudaStream_t stream, const void* caller,
                         const std::function<int()>& do_launch) {
  auto& r = Recorder::get();
  if (!r.active()) return cudaError_t(do_launch());
  std::lock_guard<std::mutex> lock(r.mutex);
  return cudaError_t(r.launch_graph(exec, reinterpret_cast<uint64_t>(stream), caller, do_launch));
}

}  // namespace

extern "C" {

void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int threadLimit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize) {
  using Fn = void (*)(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*);
  static auto next = real<Fn>("__cudaRegisterFunction");
  Recorder::get().register_function(handle, hostFun, deviceName);
  next(handle, hostFun, deviceFun, deviceName, threadLimit, tid, bid, bDim, gDim, wSize);
}

// The wrapper nvcc and clang emit per translation unit, and the fatbinary header it points to.
struct FatbinWrapper {
  int magic;  // 0x466243b1
  int version;
  const unsigned char* data;
  void* filename_or_fatbins;
};

void** __cudaRegisterFatBinary(void* wrapper) {
  using Fn = void** (*)(void*);
  static auto next = real<Fn>("__cudaRegisterFatBinary");
  void** handle = next(wrapper);
  auto* w = static_cast<const FatbinWrapper*>(wrapper);
  if (w && w->magic == 0x466243b1 && w->data) {
    uint32_t magic = 0;
    uint16_t header_size = 0;
    uint64_t fat_size = 0;
    std::memcpy(&magic, w->data, 4);
    std::memcpy(&header_size, w->data + 6, 2);
    std::memcpy(&fat_size, w->data + 8, 8);
    if (magic == 0xBA55ED50u && header_size >= 16 && fat_size < (1ull << 34))
      Recorder::get().register_fatbin(handle, std::string_view(reinterpret_cast<const char*>(w->data),
                                                               header_size + fat_size));
  }
  return handle;
}

void __cudaRegisterVar(void** handle, char* hostVar, char* deviceAddress, const char* deviceName, int ext,
                       size_t size, int constant, int global) {
  using Fn = void (*)(void**, char*, char*, const char*, int, size_t, int, int);
  static auto next = real<Fn>("__cudaRegisterVar");
  Recorder::get().register_var(hostVar, deviceName, size);
  next(handle, hostVar, deviceAddress, deviceName, ext, size, constant, global);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream) {
  REAL(cudaLaunchKernel);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernel(func, grid, block, args, shmem, stream);
  std::lock_guard<std::mutex> lock(r.mutex);
  return cudaError_t(r.launch_runtime(func, grid, block, args, shmem, reinterpret_cast<uint64_t>(stream),
                                      [&] { return int(real_cudaLaunchKernel(func, grid, block, args, shmem, stream)); }));
}

// Built with --default-stream per-thread, <<<>>> lands here.
cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                  cudaStream_t stream) {
  REAL(cudaLaunchKernel_ptsz);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernel_ptsz(func, grid, block, args, shmem, stream);
  std::lock_guard<std::mutex> lock(r.mutex);
  return cudaError_t(r.launch_runtime(func, grid, block, args, shmem, reinterpret_cast<uint64_t>(stream), [&] {
    return int(real_cudaLaunchKernel_ptsz(func, grid, block, args, shmem, stream));
  }));
}

// What nvcc 13's launch stubs call (crt/host_runtime.h): the kernel handle once per stub,
// then __cudaLaunchKernel with it.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_function) {
  using Fn = cudaError_t (*)(cudaKernel_t*, const void*);
  static auto next = real<Fn>("__cudaGetKernel");
  cudaError_t status = next(kernel, host_function);
  auto& r = Recorder::get();
  if (status == cudaSuccess && kernel && r.active()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.register_kernel_handle(*kernel, host_function);
  }
  return status;
}

// The public form: a cudaKernel_t for a registered kernel, launched as (void*)kernel.
cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* host_function) {
  REAL(cudaGetKernel);
  cudaError_t status = real_cudaGetKernel(kernel, host_function);
  auto& r = Recorder::get();
  if (status == cudaSuccess && kernel && r.active()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.register_kernel_handle(*kernel, host_function);
  }
  return status;
}

static cudaError_t launch_kernel_handle(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                                        cudaStream_t stream, const std::function<int()>& do_launch) {
  auto& r = Recorder::get();
  if (!r.active()) return cudaError_t(do_launch());
  std::lock_guard<std::mutex> lock(r.mutex);
  const void* host = r.host_of(kernel);
  return cudaError_t(r.launch(host ? r.name_of(host) : nullptr, grid, block, args, shmem,
                              reinterpret_cast<uint64_t>(stream), do_launch, nullptr, host));
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                               cudaStream_t stream) {
  using Fn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static auto next = real<Fn>("__cudaLaunchKernel");
  return launch_kernel_handle(kernel, grid, block, args, shmem, stream,
                              [&] { return int(next(kernel, grid, block, args, shmem, stream)); });
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                                    cudaStream_t stream) {
  using Fn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static auto next = real<Fn>("__cudaLaunchKernel_ptsz");
  return launch_kernel_handle(kernel, grid, block, args, shmem, stream,
                              [&] { return int(next(kernel, grid, block, args, shmem, stream)); });
}

// cudaLaunchKernelEx (a template in the headers) lands here.
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  REAL(cudaLaunchKernelExC);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernelExC(config, func, args);
  std::lock_guard<std::mutex> lock(r.mutex);
  return cudaError_t(r.launch_runtime(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                      reinterpret_cast<uint64_t>(config->stream),
                                      [&] { return int(real_cudaLaunchKernelExC(config, func, args)); }));
}

// Built with --default-stream per-thread, cudaLaunchKernelEx lands here.
cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  REAL(cudaLaunchKernelExC_ptsz);
  auto& r = Recorder::get();
  if (!r.active()) return real_cudaLaunchKernelExC_ptsz(config, func, args);
  std::lock_guard<std::mutex> lock(r.mutex);
  return cudaError_t(r.launch_runtime(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                      reinterpret_cast<uint64_t>(config->stream),
                                      [&] { return int(real_cudaLaunchKernelExC_ptsz(config, func, args)); }));
}

// Driver-API launches of functions and of CUkernels cast to CUfunction.
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void** params, void** extra) {
  REAL(cuLaunchKernel);
  auto& r = Recorder::get();
  auto launch = [&] { return int(real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)); };
  if (!r.active() || !params) return CUresult(launch());
  std::lock_guard<std::mutex> lock(r.mutex);
  return CUresult(r.launch_driver(f, dim3(gx, gy, gz), dim3(bx, by, bz), params, shmem,
                                  reinterpret_cast<uint64_t>(stream), launch));
}

// ---- modules the application loads itself (NVRTC output, cubins, fatbinaries), through
// the driver (CUmodule, CUlibrary) or the runtime (cudaLibrary_t)

using ModuleApi = Recorder::ModuleApi;

static void note_module(void* module, const void* image, ModuleApi api) {
  auto& r = Recorder::get();
  if (!r.active() || !module) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.module_loaded(module, image, api);
}

static void note_module_file(void* module, const char* path, ModuleApi api) {
  auto& r = Recorder::get();
  if (!r.active() || !module) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.module_file_loaded(module, path, api);
}

static void note_kernel(const void* handle, void* module, const char* name, bool is_kernel) {
  auto& r = Recorder::get();
  if (!r.active() || !handle) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.kernel_of_module(handle, module, name, is_kernel);
}

static void note_unload(void* module) {
  auto& r = Recorder::get();
  if (!r.active()) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.module_unloaded(module);
}

static void note_global(void* module, const char* name) {
  auto& r = Recorder::get();
  if (!r.active()) return;
  std::lock_guard<std::mutex> lock(r.mutex);
  r.global_of_module(module, name);
}

CUresult cuModuleLoad(CUmodule* module, const char* path) {
  REAL(cuModuleLoad);
  CUresult status = real_cuModuleLoad(module, path);
  if (status == CUDA_SUCCESS) note_module_file(*module, path, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadData(CUmodule* module, const void* image) {
  REAL(cuModuleLoadData);
  CUresult status = real_cuModuleLoadData(module, image);
  if (status == CUDA_SUCCESS) note_module(*module, image, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count, CUjit_option* options,
                            void** values) {
  REAL(cuModuleLoadDataEx);
  CUresult status = real_cuModuleLoadDataEx(module, image, count, options, values);
  if (status == CUDA_SUCCESS) note_module(*module, image, ModuleApi::module);
  return status;
}

CUresult cuModuleLoadFatBinary(CUmodule* module, const void* image) {
  REAL(cuModuleLoadFatBinary);
  CUresult status = real_cuModuleLoadFatBinary(module, image);
  if (status == CUDA_SUCCESS) note_module(*module, image, ModuleApi::module);
  return status;
}

CUresult cuModuleUnload(CUmodule module) {
  REAL(cuModuleUnload);
  note_unload(module);
  return real_cuModuleUnload(module);
}

CUresult cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  REAL(cuModuleGetFunction);
  CUresult status = real_cuModuleGetFunction(function, module, name);
  if (status == CUDA_SUCCESS) note_kernel(*function, module, name, false);
  return status;
}

// cuModuleGetGlobal is a macro for the _v2 function (64-bit CUdeviceptr).
CUresult cuModuleGetGlobal_v2(CUdeviceptr* address, size_t* bytes, CUmodule module, const char* name) {
  REAL(cuModuleGetGlobal_v2);
  CUresult status = real_cuModuleGetGlobal_v2(address, bytes, module, name);
  if (status == CUDA_SUCCESS) note_global(module, name);
  return status;
}

CUresult cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jit_options, void** jit_values,
                           unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count) {
  REAL(cuLibraryLoadData);
  CUresult status = real_cuLibraryLoadData(library, code, jit_options, jit_values, jit_count, options, values, count);
  if (status == CUDA_SUCCESS) note_module(*library, code, ModuleApi::library);
  return status;
}

CUresult cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option* jit_options, void** jit_values,
                               unsigned int jit_count, CUlibraryOption* options, void** values, unsigned int count) {
  REAL(cuLibraryLoadFromFile);
  CUresult status = real_cuLibraryLoadFromFile(library, path, jit_options, jit_values, jit_count, options, values, count);
  if (status == CUDA_SUCCESS) note_module_file(*library, path, ModuleApi::library);
  return status;
}

CUresult cuLibraryUnload(CUlibrary library) {
  REAL(cuLibraryUnload);
  note_unload(library);
  return real_cuLibraryUnload(library);
}

CUresult cuLibraryGetKernel(CUkernel* kernel, CUlibrary library, const char* name) {
  REAL(cuLibraryGetKernel);
  CUresult status = real_cuLibraryGetKernel(kernel, library, name);
  if (status == CUDA_SUCCESS) note_kernel(*kernel, library, name, true);  // launched cast to a CUfunction
  return status;
}

CUresult cuLibraryGetGlobal(CUdeviceptr* address, size_t* bytes, CUlibrary library, const char* name) {
  REAL(cuLibraryGetGlobal);
  CUresult status = real_cuLibraryGetGlobal(address, bytes, library, name);
  if (status == CUDA_SUCCESS) note_global(library, name);
  return status;
}

// The function of a library's kernel in the current context, launched like any other.
CUresult cuKernelGetFunction(CUfunction* function, CUkernel kernel) {
  REAL(cuKernelGetFunction);
  CUresult status = real_cuKernelGetFunction(function, kernel);
  auto& r = Recorder::get();
  if (status == CUDA_SUCCESS && r.active()) {
    std::lock_guard<std::mutex> lock(r.mutex);
    r.function_of_kernel(*function, kernel);
  }
  return status;
}

// The runtime's libraries (CUDA 12+): libcudart reaches the driver through entry points
// it looks up itself, so the driver functions above never see these loads.
cudaError_t cudaLibraryLoadData(cudaLibrary_t* library, const void* code, cudaJitOption* jit_options,
                                void** jit_values, unsigned int jit_count, cudaLibraryOption* options, void** values,
                                unsigned int count) {
  REAL(cudaLibraryLoadData);
  cudaError_t status = real_cudaLibraryLoadData(library, code, jit_options, jit_values, jit_count, options, values, count);
  if (status == cudaSuccess) note_module(*library, code, ModuleApi::runtime_library);
  return status;
}

cudaError_t cudaLibraryLoadFromFile(cudaLibrary_t* library, const char* path, cudaJitOption* jit_options,
                                    void** jit_values, unsigned int jit_count, cudaLibraryOption* options,
                                    void** values, unsigned int count) {
  REAL(cudaLibraryLoadFromFile);
  cudaError_t status =
      real_cudaLibraryLoadFromFile(library, path, jit_options, jit_values, jit_count, options, values, count);
  if (status == cudaSuccess) note_module_file(*library, path, ModuleApi::runtime_library);
  return status;
}

cudaError_t cudaLibraryUnload(cudaLibrary_t library) {
  REAL(cudaLibraryUnload);
  note_unload(library);
  return real_cudaLibraryUnload(library);
}

cudaError_t cudaLibraryGetKernel(cudaKernel_t* kernel, cudaLibrary_t library, const char* name) {
  REAL(cudaLibraryGetKernel);
  cudaError_t status = real_cudaLibraryGetKernel(kernel, library, name);
  if (status == cudaSuccess) note_kernel(*kernel, library, name, true);  // launched as (void*)kernel
  return status;
}

cudaError_t cudaLibraryGetGlobal(void** address, size_t* bytes, cudaLibrary_t library, const char* name) {
  REAL(cudaLibraryGetGlobal);
  cudaError_t status = real_cudaLibraryGetGlobal(address, bytes, library, name);
  if (status == cudaSuccess) note_global(library, name);
  return status;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
  REAL(cudaMalloc);
  return served_here() ? serve(ptr, size) : real_cudaMalloc(ptr, size);
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  REAL(cudaMallocAsync);
  return served_here() ? serve(ptr, size) : real_cudaMallocAsync(ptr, size, stream);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
  REAL(cudaMallocFromPoolAsync);
  return served_here() ? serve(ptr, size) : real_cudaMallocFromPoolAsync(ptr, size, pool, stream);
}

cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  REAL(cudaMallocPitch);
  if (!served_here()) return real_cudaMallocPitch(ptr, pitch, width, height);
  *pitch = (width + 511) / 512 * 512;
  return serve(ptr, *pitch * height);
}

cudaError_t cudaMalloc3D(cudaPitchedPtr* pitched, cudaExtent extent) {
  REAL(cudaMalloc3D);
  if (!served_here()) return real_cudaMalloc3D(pitched, extent);
  size_t pitch = (extent.width + 511) / 512 * 512;
  void* ptr = nullptr;
  cudaError_t status = serve(&ptr, pitch * extent.height * extent.depth);
  pitched->ptr = ptr;
  pitched->pitch = pitch;
  pitched->xsize = extent.width;
  pitched->ysize = extent.height;
  return status;
}

cudaError_t cudaFree(void* ptr) {
  REAL(cudaFree);
  if (Recorder::get().active() && release(ptr)) return cudaSuccess;
  if (forget_managed(reinterpret_cast<uint64_t>(ptr))) return cudaSuccess;
  return real_cudaFree(ptr);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  REAL(cudaFreeAsync);
  if (Recorder::get().active() && release(ptr)) return cudaSuccess;
  return real_cudaFreeAsync(ptr, stream);
}

CUresult cuMemAlloc_v2(CUdeviceptr* ptr, size_t size) {
  REAL(cuMemAlloc_v2);
  if (!served_here()) return real_cuMemAlloc_v2(ptr, size);
  void* p = nullptr;
  serve(&p, size);
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr) {
  REAL(cuMemFree_v2);
  if (Recorder::get().active() && release(reinterpret_cast<void*>(ptr))) return CUDA_SUCCESS;
  if (forget_managed(uint64_t(ptr))) return CUDA_SUCCESS;
  return real_cuMemFree_v2(ptr);
}

// Managed memory stays the driver's: host access keeps working through page faults.
// Its regions are snapshotted at their driver-chosen addresses (kind "managed"); replay
// maps device memory at exactly those addresses (docs/record.md).
cudaError_t cudaMallocManaged(void** ptr, size_t size, unsigned int flags) {
  REAL(cudaMallocManaged);
  auto& r = Recorder::get();
  if (!r.active() || !size || !ptr) return real_cudaMallocManaged(ptr, size, flags);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (uint64_t at = r.allocate_managed(size)) {
    r.track_managed(at, size);
    *ptr = reinterpret_cast<void*>(at);
    return cudaSuccess;
  }
  cudaError_t status = real_cudaMallocManaged(ptr, size, flags);
  if (status == cudaSuccess) r.track_managed(reinterpret_cast<uint64_t>(*ptr), size);
  return status;
}

CUresult cuMemAllocManaged(CUdeviceptr* ptr, size_t size, unsigned int flags) {
  REAL(cuMemAllocManaged);
  auto& r = Recorder::get();
  if (!r.active() || !size || !ptr) return real_cuMemAllocManaged(ptr, size, flags);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (uint64_t at = r.allocate_managed(size)) {
    r.track_managed(at, size);
    *ptr = at;
    return CUDA_SUCCESS;
  }
  CUresult status = real_cuMemAllocManaged(ptr, size, flags);
  if (status == CUDA_SUCCESS) r.track_managed(uint64_t(*ptr), size);
  return status;
}

// Prefetching and advice have no meaning for the arena's host memory: accepted, ignored
// (the driver would refuse them for memory that is not its managed memory).
cudaError_t cudaMemPrefetchAsync(const void* ptr, size_t count, cudaMemLocation location, unsigned int flags,
                                 cudaStream_t stream) {
  REAL(cudaMemPrefetchAsync);
  if (arena_owned(ptr, count)) return cudaSuccess;
  return real_cudaMemPrefetchAsync(ptr, count, location, flags, stream);
}

cudaError_t cudaMemAdvise(const void* ptr, size_t count, cudaMemoryAdvise advice, cudaMemLocation location) {
  REAL(cudaMemAdvise);
  if (arena_owned(ptr, count)) return cudaSuccess;
  return real_cudaMemAdvise(ptr, count, advice, location);
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned int flags,
                               CUstream stream) {
  REAL(cuMemPrefetchAsync_v2);
  if (arena_owned(reinterpret_cast<const void*>(ptr), count)) return CUDA_SUCCESS;
  return real_cuMemPrefetchAsync_v2(ptr, count, location, flags, stream);
}

CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location) {
  REAL(cuMemAdvise_v2);
  if (arena_owned(reinterpret_cast<const void*>(ptr), count)) return CUDA_SUCCESS;
  return real_cuMemAdvise_v2(ptr, count, advice, location);
}

// ---- stream capture and graphs (docs/record.md, "CUDA Graphs")

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  REAL(cudaStreamBeginCapture);
  return capture_begin(stream, real_cudaStreamBeginCapture(stream, mode));
}

cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode) {
  REAL(cudaStreamBeginCapture_ptsz);
  return capture_begin(stream, real_cudaStreamBeginCapture_ptsz(stream, mode));
}

cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                          const cudaGraphEdgeData* data, size_t count, cudaStreamCaptureMode mode) {
  REAL(cudaStreamBeginCaptureToGraph);
  return capture_begin(stream, real_cudaStreamBeginCaptureToGraph(stream, graph, deps, data, count, mode));
}

cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                               const cudaGraphEdgeData* data, size_t count, cudaStreamCaptureMode mode) {
  REAL(cudaStreamBeginCaptureToGraph_ptsz);
  return capture_begin(stream, real_cudaStreamBeginCaptureToGraph_ptsz(stream, graph, deps, data, count, mode));
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  REAL(cudaStreamEndCapture);
  return capture_end(stream, real_cudaStreamEndCapture(stream, graph));
}

cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t* graph) {
  REAL(cudaStreamEndCapture_ptsz);
  return capture_end(stream, real_cudaStreamEndCapture_ptsz(stream, graph));
}

CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
  REAL(cuStreamBeginCapture_v2);
  CUresult status = real_cuStreamBeginCapture_v2(stream, mode);
  capture_begin(reinterpret_cast<cudaStream_t>(stream), status == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown);
  return status;
}

CUresult cuStreamEndCapture(CUstream stream, CUgraph* graph) {
  REAL(cuStreamEndCapture);
  CUresult status = real_cuStreamEndCapture(stream, graph);
  capture_end(reinterpret_cast<cudaStream_t>(stream), cudaSuccess);
  return status;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  REAL(cudaGraphInstantiate);
  return instantiated(exec, graph, flags, real_cudaGraphInstantiate(exec, graph, flags));
}

cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  REAL(cudaGraphInstantiateWithFlags);
  return instantiated(exec, graph, flags, real_cudaGraphInstantiateWithFlags(exec, graph, flags));
}

cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t* exec, cudaGraph_t graph, cudaGraphInstantiateParams* params) {
  REAL(cudaGraphInstantiateWithParams);
  return instantiated(exec, graph, params ? params->flags : 0, real_cudaGraphInstantiateWithParams(exec, graph, params));
}

cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t* exec, cudaGraph_t graph,
                                                cudaGraphInstantiateParams* params) {
  REAL(cudaGraphInstantiateWithParams_ptsz);
  return instantiated(exec, graph, params ? params->flags : 0,
                      real_cudaGraphInstantiateWithParams_ptsz(exec, graph, params));
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  REAL(cuGraphInstantiateWithFlags);
  CUresult status = real_cuGraphInstantiateWithFlags(exec, graph, flags);
  instantiated(reinterpret_cast<cudaGraphExec_t*>(exec), reinterpret_cast<cudaGraph_t>(graph), flags,
               status == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown);
  return status;
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  REAL(cuGraphInstantiateWithParams);
  CUresult status = real_cuGraphInstantiateWithParams(exec, graph, params);
  instantiated(reinterpret_cast<cudaGraphExec_t*>(exec), reinterpret_cast<cudaGraph_t>(graph),
               params ? params->flags : 0, status == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown);
  return status;
}

cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaKernelNodeParams* p) {
  REAL(cudaGraphExecKernelNodeSetParams);
  return follow(exec, real_cudaGraphExecKernelNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_kernel_params(node, p); });
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  REAL(cuGraphExecKernelNodeSetParams_v2);
  CUresult status = real_cuGraphExecKernelNodeSetParams_v2(exec, node, p);
  follow(reinterpret_cast<cudaGraphExec_t>(exec), status == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown,
         [&](mneme::recorder::GraphMirror& m) { m.set_kernel_params_driver(reinterpret_cast<cudaGraphNode_t>(node), p); });
  return status;
}

cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaMemcpy3DParms* p) {
  REAL(cudaGraphExecMemcpyNodeSetParams);
  return follow(exec, real_cudaGraphExecMemcpyNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_memcpy_params(node, p); });
}

cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t exec, cudaGraphNode_t node, void* dst, const void* src,
                                               size_t count, cudaMemcpyKind kind) {
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
  REAL(cudaGraphExecMemsetNodeSetParams);
  return follow(exec, real_cudaGraphExecMemsetNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_memset_params(node, p); });
}

cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const cudaHostNodeParams* p) {
  REAL(cudaGraphExecHostNodeSetParams);
  return follow(exec, real_cudaGraphExecHostNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_host_params(node, p); });
}

cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t event) {
  REAL(cudaGraphExecEventRecordNodeSetEvent);
  return follow(exec, real_cudaGraphExecEventRecordNodeSetEvent(exec, node, event),
                [&](mneme::recorder::GraphMirror& m) { m.set_event(node, event, true); });
}

cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t exec, cudaGraphNode_t node, cudaEvent_t event) {
  REAL(cudaGraphExecEventWaitNodeSetEvent);
  return follow(exec, real_cudaGraphExecEventWaitNodeSetEvent(exec, node, event),
                [&](mneme::recorder::GraphMirror& m) { m.set_event(node, event, false); });
}

cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraph_t child) {
  REAL(cudaGraphExecChildGraphNodeSetParams);
  return follow(exec, real_cudaGraphExecChildGraphNodeSetParams(exec, node, child),
                [&](mneme::recorder::GraphMirror& m) { m.lose_track("a child graph node was replaced"); });
}

cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, cudaGraphNodeParams* p) {
  REAL(cudaGraphExecNodeSetParams);
  return follow(exec, real_cudaGraphExecNodeSetParams(exec, node, p),
                [&](mneme::recorder::GraphMirror& m) { m.set_node_params(node, p); });
}

cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t exec, cudaGraphNode_t node, unsigned int enabled) {
  REAL(cudaGraphNodeSetEnabled);
  return follow(exec, real_cudaGraphNodeSetEnabled(exec, node, enabled),
                [&](mneme::recorder::GraphMirror& m) { m.set_enabled(node, enabled != 0); });
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, cudaGraphExecUpdateResultInfo* info) {
  REAL(cudaGraphExecUpdate);
  return follow(exec, real_cudaGraphExecUpdate(exec, graph, info),
                [&](mneme::recorder::GraphMirror& m) { m.update_from(graph); });
}

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  REAL(cuGraphExecUpdate_v2);
  CUresult status = real_cuGraphExecUpdate_v2(exec, graph, info);
  follow(reinterpret_cast<cudaGraphExec_t>(exec), status == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown,
         [&](mneme::recorder::GraphMirror& m) { m.update_from(reinterpret_cast<cudaGraph_t>(graph)); });
  return status;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  REAL(cudaGraphExecDestroy);
  graph_gone(exec);
  return real_cudaGraphExecDestroy(exec);
}

CUresult cuGraphExecDestroy(CUgraphExec exec) {
  REAL(cuGraphExecDestroy);
  graph_gone(reinterpret_cast<cudaGraphExec_t>(exec));
  return real_cuGraphExecDestroy(exec);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  REAL(cudaGraphLaunch);
  return graph_launch(exec, stream, __builtin_return_address(0), [&] { return int(real_cudaGraphLaunch(exec, stream)); });
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream) {
  REAL(cudaGraphLaunch_ptsz);
  return graph_launch(exec, stream, __builtin_return_address(0),
                      [&] { return int(real_cudaGraphLaunch_ptsz(exec, stream)); });
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) {
  REAL(cuGraphLaunch);
  CUresult status = CUDA_SUCCESS;
  cudaError_t e = graph_launch(reinterpret_cast<cudaGraphExec_t>(exec), reinterpret_cast<cudaStream_t>(stream),
                               __builtin_return_address(0), [&] {
                                 status = real_cuGraphLaunch(exec, stream);
                                 return status == CUDA_SUCCESS ? 0 : int(cudaErrorLaunchFailure);
                               });
  return e == cudaSuccess ? CUDA_SUCCESS : (status != CUDA_SUCCESS ? status : CUDA_ERROR_LAUNCH_FAILED);
}

}  // extern "C"
