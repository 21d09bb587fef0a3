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
// docs/record.md), read once by settings() (recorder_settings.cpp); kernel metadata
// and IR come from a manifest file it extracts from the executable's .mneme.kernels
// section.
#include "recorder.hpp"

#include <cxxabi.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

#include "mneme/runtime/devices.hpp"
#include "mneme/runtime/errors.hpp"

namespace mneme::recorder {

namespace {

// XLA's stream_executor::gpu::(anonymous namespace)::DelayKernel (cuda/delay_kernel_cuda.cu.cc,
// earlier gpu/gpu_timer_kernel.cu.cc), by its mangled name.
bool is_timer_delay_kernel(const std::string& name) {
  return name.rfind("_ZN15stream_executor3gpu", 0) == 0 && name.find("11DelayKernelE") != std::string::npos;
}

// Set once the recorder writes: instances captured before a fatal error still commit.
rt::SnapshotPipeline* g_pipeline = nullptr;
double g_commit_wait = 60;
pid_t g_owner_pid = 0;

}  // namespace

[[noreturn]] void fatal(const std::string& message, int code) {
  std::fprintf(stderr, "mneme record: %s\n", message.c_str());
  std::fflush(stderr);
  // `mneme record`'s summary then says the recording stopped, not that nothing ran. Read
  // here without settings(): a malformed setting ends the process through this function.
  std::string dir;
  rt::settings::Reader().text(MNEME_ENV_RECORD_REPORT_DIR, dir);
  if (!dir.empty()) {
    std::string path = dir + "/" + std::to_string(getpid()) + ".txt";
    if (FILE* f = std::fopen((path + ".tmp").c_str(), "w")) {
      std::fprintf(f, "fatal %s\n", message.c_str());
      std::fclose(f);
      std::rename((path + ".tmp").c_str(), path.c_str());
    }
  }
  if (g_pipeline && getpid() == g_owner_pid && g_pipeline->uncommitted() > 0 && !g_pipeline->drain_for(g_commit_wait))
    std::fprintf(stderr, "mneme record: gave up waiting for the captured instances to be written\n");
  _exit(code);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

Recorder::Recorder() {
  const rt::settings::Record& s = settings();  // (a malformed value ends the process here)
  active_ = !s.db.empty() && rank_selected();
  if (!active_) return;
  db_ = s.db;
  vass_ = s.vass;
  base_ = s.base ? s.base : rt::kDefaultBase;
  max_ = int(s.max);
  if (!s.filter.empty()) filter_ = std::make_unique<rt::NamePattern>(s.filter);
  epilogue_ = s.epilogue;
  discover_ = s.fatbin;
  capture_reachable_ = s.capture == "reachable";
  prestage_ = s.prestage;
  options_.digests = s.digests;
  // Negative levels are zstd's fast modes: less compression, more throughput.
  zstd_level_ = int(s.zstd_level);
  // Room for managed memory after the device range (0: the driver's managed memory).
  managed_size_ = s.managed_size;
  // How managed memory is served (managed_arena.hpp): the driver's placed in that room,
  // host memory mapped there, or the driver's wherever it puts it.
  managed_mode_ = s.managed;
  options_.host_memory = s.host_memory;  // (0: the pipeline's default)
  options_.threads = unsigned(s.threads);
  stats_ = s.stats;
  crash_wait_ = s.crash_wait;
  load_manifest(s.manifest);
  std::atexit(at_exit);  // the statistics line, or why nothing was recorded, even then
}


void Recorder::finish() {
  if (finished_) return;
  finished_ = true;
  write_report();
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
    timing_.write(*writer_);  // the instances are committed now
    predecessors_.write(*writer_);
  }
  // Preloaded by hand (no `mneme record` to sum the processes up): each says for itself.
  if (seen_.recorded == 0 && seen_.launches > 0 && settings().report_dir.empty())
    explain_nothing_recorded();
  if (stats_) {
    rt::PipelineStats none;  // nothing recorded: the same keys, zero
    none.host_memory_bytes = options_.host_memory ? options_.host_memory : rt::default_host_memory();
    std::string line = pipeline_ ? pipeline_->stats_line() : rt::format_stats(none);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
  }
}

void Recorder::unrecorded_call(const char* call, const char* why) {
  if (unrecorded_calls_.insert(std::string(call) + ": " + why).second)
    std::fprintf(stderr, "mneme record: launches through %s run unrecorded: %s\n", call, why);
}

void Recorder::notice_once(const std::string& text) {
  if (unrecorded_calls_.insert(text).second) std::fprintf(stderr, "mneme record: %s\n", text.c_str());
}

void Recorder::explain_nothing_recorded() const {
  std::string why;
  if (seen_.launches == 0)
    why = "no kernel launch was seen (no CUDA use in this process, or launches through calls the "
          "recorder does not follow; docs/record.md lists them)";
  else if (seen_.unknown == seen_.launches)
    why = std::to_string(seen_.launches) + " launches of kernels whose code or parameter layout was not found";
  else
    why = std::to_string(seen_.launches) + " launches, " + std::to_string(seen_.not_selected) +
          " of kernels not selected (--kernel " + (filter_ ? "matched none of them" : "unset") + ", -mr " +
          std::to_string(max_) + ")";
  std::fprintf(stderr, "mneme record: nothing recorded in process %d: %s\n", int(getpid()), why.c_str());
}

// What this process saw, for `mneme record`'s summary over the command's processes: one
// file per process in MNEME_RECORD_REPORT_DIR (keys docs/record.md lists).
void Recorder::write_report() const {
  const std::string& dir = settings().report_dir;
  if (dir.empty()) return;
  std::string path = dir + "/" + std::to_string(getpid()) + ".txt";
  if (FILE* f = std::fopen((path + ".tmp").c_str(), "w")) {
    std::fprintf(f, "launches %llu\nrecorded %llu\nunknown %llu\nnot_selected %llu\n",
                 (unsigned long long)seen_.launches, (unsigned long long)seen_.recorded,
                 (unsigned long long)seen_.unknown, (unsigned long long)seen_.not_selected);
    for (const auto& call : unrecorded_calls_) std::fprintf(f, "unrecorded_call %s\n", call.c_str());
    std::fclose(f);
    std::rename((path + ".tmp").c_str(), path.c_str());
  }
}

bool synchronize_device() {
  using CtxSynchronize = CUresult (*)();
  static auto synchronize = driver_function<CtxSynchronize>("cuCtxSynchronize");
  return synchronize && synchronize() == CUDA_SUCCESS;
}

void Recorder::load_manifest(const std::string& path) {
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
    k.info.origin = executable_path();  // the instrumented executable the manifest was read from
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

rt::RecordingWriter& Recorder::writer() {
  if (!writer_) {
    rt::RecordingInfo info;
    const auto& first = slots_.empty() ? slot() : *slots_.front();
    info.vas_base = first.space->base();
    info.vas_size = first.space->size();
    const auto& p = first.device->properties();
    info.gpu_name = p.name;
    info.compute_capability = std::to_string(p.compute_capability_major) + "." + std::to_string(p.compute_capability_minor);
    int driver = 0, runtime = 0;
    first.device->driver().cuDriverGetVersion(&driver);
    // A static runtime (or none: Triton, a driver-API program) has no version to ask.
    using RuntimeVersion = cudaError_t (*)(int*);
    auto runtime_version = reinterpret_cast<RuntimeVersion>(dlsym(RTLD_NEXT, "cudaRuntimeGetVersion"));
    auto dotted = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    info.driver_version = dotted(driver);
    info.runtime_version = runtime_version && runtime_version(&runtime) == cudaSuccess ? dotted(runtime) : "none";
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    info.host = host;
    std::ifstream cmd("/proc/self/cmdline", std::ios::binary);
    std::string arg;
    while (std::getline(cmd, arg, '\0')) info.command_line.push_back(arg);
    try {
      writer_ = std::make_unique<rt::RecordingWriter>(db_, info, epilogue_, MNEME_RECORDING_DEFAULT_CHUNK_SIZE,
                                                      zstd_level_);
      source_ = std::make_unique<CudaSource>(first.device);
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

void at_exit() { Recorder::get().finish(); }

void Recorder::note_predecessor(uint64_t stream, const std::string* device_name, const KernelEntry* kernel,
                                void** args) {
  std::string name = kernel ? kernel->info.demangled_name : device_name ? *device_name : std::string();
  if (!kernel || (kernel->info.params.empty() && kernel->args_size)) {
    predecessors_.launched(stream, name, {}, false);
    return;
  }
  predecessors_.launched(stream, name,
                         argument_traffic(kernel->info.demangled_name, kernel->info.params, args,
                                          {&live_, &managed_, &mapped_}),
                         true);
}

bool Recorder::capturing(uint64_t stream) const {
  if (!capturing_.empty()) return true;
  using IsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  static auto is_capturing = driver_function<IsCapturing>("cuStreamIsCapturing");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  // A capture begun where the recorder cannot see it (a handle from another library)
  return !is_capturing || is_capturing(reinterpret_cast<CUstream>(stream), &status) != CUDA_SUCCESS ||
         status != CU_STREAM_CAPTURE_STATUS_NONE;
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
  dim3 cluster = ClusterScope::current();
  inst.cluster[0] = cluster.x; inst.cluster[1] = cluster.y; inst.cluster[2] = cluster.z;
  inst.cooperative = CooperativeScope::current();
  inst.stream = stream;
  inst.args = buffer;
  out.kernel = kernel;
  out.module = module;
  out.dyn = rt::dynamic_hash(kernel->info.static_hash, inst);
  return true;
}

bool Recorder::would_record(const std::string* device_name, dim3 grid, dim3 block, void** args, size_t shmem,
                            CUfunction function, void* module) {
  Pending p;
  if (!pending(device_name, grid, block, args, shmem, 0, p, function, nullptr, module)) return false;
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
  // A launch into a capturing stream only adds a graph node: it is recorded when the
  // graph runs. Any synchronisation now would invalidate the capture.
  if (capturing(stream)) return do_launch();
  seen_.launches++;
  if (device_name && is_timer_delay_kernel(*device_name)) {
    // XLA's GPU timer queues this kernel to spin until the host has queued what it times
    // (autotuning), then releases it through a host-memory flag. A recorded launch behind
    // it synchronizes first, so it would spin to its timeout (about 100 ms) every time and
    // XLA would warn each time: it is not run while recording. XLA then finds its flag
    // untouched (not "timed out") and times its candidates without the delay.
    notice_once("XLA's timer delay kernel is not run while recording (every recorded launch behind it would "
                "keep it spinning to its timeout); XLA times without it");
    seen_.not_selected++;
    return 0;
  }
  timing_.on_launch();
  Pending launch;
  if (!pending(device_name, grid, block, args, shmem, stream, launch, function, host_function, module)) {
    void* from = module;
    KernelEntry* known = device_name ? entry(*device_name, function, host_function, from) : nullptr;
    bool selectable = known && !known->info.static_hash.empty();
    (selectable ? seen_.not_selected : seen_.unknown)++;
    note_predecessor(stream, device_name, known, args);
    if (tracing_lookups() && traced_.insert(device_name ? *device_name : "").second)
      std::fprintf(stderr, "mneme record: launches of %s (function %p) are not recorded: %s\n",
                   device_name ? device_name->c_str() : "a kernel without a name", static_cast<void*>(function),
                   selectable ? "not selected (--kernel, -mr, ranks)" : "no code or parameter layout known for it");
    return do_launch();
  }
  KernelEntry* kernel = launch.kernel;
  rt::InstanceInfo& inst = launch.inst;
  uint64_t tag = timing_.instance(kernel->info.static_hash, launch.dyn,
                                  {*device_name, {grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, uint32_t(shmem),
                                   uint32_t(slot().ordinal())});
  // CUPTI tags the kernel with its instance: its in-app time is its own launches' (app_timing.hpp).
  auto launch_tagged = [&] {
    if (!tag) return do_launch();
    auto& timer = rt::KernelTimer::instance();
    timer.push_tag(tag);
    int status = do_launch();
    timer.pop_tag();
    return status;
  };
  predecessors_.instance(stream, kernel->info.static_hash, launch.dyn);
  note_predecessor(stream, device_name, kernel, args);
  auto& w = writer();
  auto& pipeline = *pipeline_;
  std::string failure = pipeline.error();
  if (!failure.empty()) fatal("writing the recording failed: " + failure, 2);
  const std::string& static_hash = kernel->info.static_hash;
  const std::string& dyn = launch.dyn;
  try {
    // A repeat only counts: of an instance of this run (possibly still being written)...
    if (pipeline.count_repeat(static_hash, dyn)) return launch_tagged();
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
    if (pipeline.count_earlier(static_hash, dyn)) return launch_tagged();
  } catch (const std::exception& e) {
    fatal(std::string("writing the recording failed: ") + e.what(), 2);
  }
  // Complete outstanding work so the prologue is what the kernel will see.
  auto t0 = Clock::now();
  if (!synchronize_device()) return launch_tagged();
  auto t1 = Clock::now();
  std::vector<rt::RegionSpec> regions;
  std::vector<uint64_t> sources;
  DeviceSlot& here = slot();
  regions_now(regions, sources, here, inst.args, capture_reachable_, launch.module, kernel->fatbin);
  inst.capture = capture_reachable_ ? "reachable" : "all";
  inst.device = here.ordinal();
  inst.vas_base = here.space->base();
  inst.vas_size = here.space->size();
  source_->use(here.device);  // the copies and digests run on the launch's GPU
  std::shared_ptr<rt::SnapshotPipeline::Instance> snap;
  try {
    snap = pipeline.begin(static_hash, inst, regions);
    pipeline.capture_prologue(*snap, sources);  // returns once the bytes are in host memory
  } catch (const std::exception& e) {
    fatal(std::string("copying the prologue to the host failed: ") + e.what());
  }
  auto t2 = Clock::now();
  timing_.snapshot_begins();
  int status = launch_tagged();
  if (status != 0) {
    timing_.snapshot_ends();  // (else every later launch would count as perturbed)
    pipeline.abandon(*snap);
    return status;
  }
  bool done = synchronize_device();
  timing_.snapshot_ends();
  auto t3 = Clock::now();
  if (!done) {  // a failed launch is not recorded; the app sees the error
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
  seen_.recorded++;
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

}  // namespace mneme::recorder
