// libmneme_apply.so: preloaded into an unmodified application by `mneme run --apply`.
//
// Launches of the kernels a plan names run the tuned code (a cubin `mneme run` compiled
// from a best.json) with the tuned launch configuration; every other launch, and every
// launch the tuned code is not valid for, runs as the application wrote it. The plan
// (MNEME_APPLY_PLAN, a line format written by mneme.tune.apply_plan) says per kernel:
//
//   kernel NAME              the mangled device name the application launches
//   cubin PATH / function F  the tuned code and its entry point
//   recorded G3 B3 SHMEM     the launch it was tuned on
//   tuned G3 B3 SHMEM        the launch it was tuned to
//   grid cover|keep|fixed    how other grids follow a changed block (as the launch space)
//   shared_per_thread N      dynamic shared memory scales with the block (0: fixed)
//   bound N                  launch bound compiled in (0: none): larger blocks keep the original
//   dims exact|any           dimensions specialised into the code: only the recorded launch
//   arg I HEX                scalar argument I specialised: only launches with that value
//   global NAME SIZE         a device global the kernel uses: the application's copy is
//                            copied into the tuned module before and back after the launch
//   end
//
// With MNEME_APPLY_TIMING=1 each launch of a planned kernel is timed (the fidelity column
// of `mneme run`) by the GPU's own timestamps of the kernel (CUPTI kernel records,
// mneme::runtime::KernelTimer), the same method replay uses; CUDA events on its stream are
// recorded too and used when CUPTI is unusable or missed launches (the report says which,
// and why). Per kernel the report gives the first launch apart (module load, cold caches)
// and the median of the others. MNEME_APPLY_MODE=measure times the original kernels
// without swapping. With MNEME_APPLY_TOTAL=1 every kernel of the process is timed by CUPTI
// and summed (the application's kernel time, plain or tuned: `mneme run --apply` of a
// whole-application report). Per planned kernel the report counts the launches the tuned
// code was not used for, by reason, so that a kernel swapped into no launch says why.
// Results go to MNEME_APPLY_REPORT at exit (launch_report.cpp).
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cooperative_swap.hpp"
#include "interpose.hpp"
#include "launch_plan.hpp"
#include "launch_report.hpp"
#include "mneme/runtime/native_settings.hpp"
#include "mneme/runtime/kernel_timer.hpp"

namespace {

using namespace mneme::apply;
using mneme::recorder::driver_function;
using mneme::recorder::real;

// A launch with events around it, harvested once the events complete.
struct Timing {
  Plan* plan;
  bool same_config;
  CUcontext context;  // the events' (they go back to its pool)
  CUevent start, stop;
};

using mneme::runtime::KernelRecord;
using mneme::runtime::KernelTimer;

struct Driver {
  decltype(&cuModuleLoadData) load = driver_function<decltype(&cuModuleLoadData)>("cuModuleLoadData");
  decltype(&cuModuleGetFunction) get_function = driver_function<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
  decltype(&cuModuleGetGlobal_v2) get_global = driver_function<decltype(&cuModuleGetGlobal_v2)>("cuModuleGetGlobal_v2");
  decltype(&cuFuncSetAttribute) set_attribute = driver_function<decltype(&cuFuncSetAttribute)>("cuFuncSetAttribute");
  decltype(&cuLaunchKernel) launch = driver_function<decltype(&cuLaunchKernel)>("cuLaunchKernel");
  decltype(&cuLaunchCooperativeKernel) launch_cooperative =
      driver_function<decltype(&cuLaunchCooperativeKernel)>("cuLaunchCooperativeKernel");
  decltype(&cuMemcpyDtoDAsync_v2) copy = driver_function<decltype(&cuMemcpyDtoDAsync_v2)>("cuMemcpyDtoDAsync_v2");
  decltype(&cuEventCreate) event_create = driver_function<decltype(&cuEventCreate)>("cuEventCreate");
  decltype(&cuEventRecord) event_record = driver_function<decltype(&cuEventRecord)>("cuEventRecord");
  decltype(&cuEventQuery) event_query = driver_function<decltype(&cuEventQuery)>("cuEventQuery");
  decltype(&cuEventSynchronize) event_sync = driver_function<decltype(&cuEventSynchronize)>("cuEventSynchronize");
  decltype(&cuEventElapsedTime_v2) elapsed = driver_function<decltype(&cuEventElapsedTime_v2)>("cuEventElapsedTime_v2");
  decltype(&cuEventDestroy_v2) event_destroy = driver_function<decltype(&cuEventDestroy_v2)>("cuEventDestroy_v2");
  decltype(&cuStreamIsCapturing) is_capturing = driver_function<decltype(&cuStreamIsCapturing)>("cuStreamIsCapturing");
  decltype(&cuFuncGetName) func_name = driver_function<decltype(&cuFuncGetName)>("cuFuncGetName");
  decltype(&cuCtxGetCurrent) current_context = driver_function<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent");
  decltype(&cuCtxGetDevice) context_device = driver_function<decltype(&cuCtxGetDevice)>("cuCtxGetDevice");
};

void at_exit();

using Settings = mneme::runtime::settings::Apply;

// The swapper's settings (MNEME_APPLY_*: native_settings.hpp), read once; a malformed value
// ends the process with one line ("mneme run: MNEME_APPLY_TIMING=yes please is not a flag
// (1 or 0); unset it or give one"), exit 2.
const Settings& settings() {
  static const Settings parsed = [] {
    std::string error;
    auto s = mneme::runtime::settings::read<Settings>(error);
    if (!error.empty()) fatal(error, 2);
    return s;
  }();
  return parsed;
}

class Swapper {
 public:
  static Swapper& get() {
    static Swapper* instance = new Swapper();  // never destroyed: atexit order is unknowable
    return *instance;
  }
  bool active() const { return active_; }
  std::mutex mutex;

  void register_function(const void* host, const char* name) { names_[host] = name; }
  void register_var(const void* host, const char* name) { vars_[name] = host; }
  void register_kernel_handle(cudaKernel_t kernel, const void* host) { handles_[kernel] = host; }
  const void* host_of(cudaKernel_t kernel) const {
    auto it = handles_.find(kernel);
    return it == handles_.end() ? nullptr : it->second;
  }
  Plan* plan_for_host(const void* host) {
    auto it = names_.find(host);
    return it == names_.end() ? nullptr : plan_named(it->second);
  }
  Plan* plan_named(const std::string& name) {
    auto it = plans_.find(name);
    return it == plans_.end() ? nullptr : &it->second;
  }
  Plan* plan_for_function(CUfunction f) {
    const char* name = nullptr;
    if (!driver_.func_name || driver_.func_name(&name, f) != CUDA_SUCCESS || !name) return nullptr;
    return plan_named(name);
  }

  // Any launch the swapper sees: with MNEME_APPLY_TOTAL, CUPTI starts with the first (the
  // application's context exists by then) to time every kernel of the process.
  void saw_launch() {
    if (total_ && !cupti_tried_) {
      std::lock_guard<std::mutex> lock(mutex);
      start_cupti();
    }
  }

  // A launch of a planned kernel with launch attributes: the original code runs.
  void attribute_launch(Plan& plan) {
    ++plan.launches;
    ++plan.attributes;
  }

  // Runs one launch of a planned kernel: the tuned code when the plan applies to it, else
  // `original`. Returns the launch's status as a CUresult/cudaError_t number. A cooperative
  // launch runs the tuned code cooperatively too (its grid synchronises).
  int launch(Plan& plan, Dims grid, Dims block, size_t shared, CUstream stream, void** args,
             const std::function<int()>& original, bool cooperative = false) {
    ++plan.launches;
    bool same = grid == plan.recorded_grid && block == plan.recorded_block && shared == plan.recorded_shared;
    if (same) ++plan.same_config;
    Dims new_grid = grid, new_block = block;
    size_t new_shared = shared;
    CUcontext context = current_context();
    // Loaded before the timing starts: a module load is not the kernel's time.
    Plan::Loaded* code = nullptr;
    if (!measure_only_) {
      Fit fit = applies(plan, grid, block, shared, args, new_grid, new_block, new_shared);
      if (fit == Fit::kOtherDims) ++plan.other_dims;
      else if (fit == Fit::kOtherArgs) ++plan.other_args;
      else if (fit == Fit::kOverBound) ++plan.over_bound;
      if (fit == Fit::kApplies) code = load(plan, context);
    }
    bool timed = timing_ && !capturing(stream);
    CUevent start = nullptr, stop = nullptr;
    if (timed) {
      start_cupti();
      harvest(false);
      start = event(context);
      stop = event(context);
      driver_.event_record(start, stream);
    }
    int status = CUDA_ERROR_NOT_FOUND;
    if (code) {
      for (auto& [app, mine] : code->global_pairs) driver_.copy(mine, app, global_sizes_[mine], stream);
      status = cooperative
                   ? driver_.launch_cooperative(code->tuned, new_grid.v[0], new_grid.v[1], new_grid.v[2], new_block.v[0],
                                                new_block.v[1], new_block.v[2], unsigned(new_shared), stream, args)
                   : driver_.launch(code->tuned, new_grid.v[0], new_grid.v[1], new_grid.v[2], new_block.v[0],
                                    new_block.v[1], new_block.v[2], unsigned(new_shared), stream, args, nullptr);
      if (status == CUDA_SUCCESS) {
        ++plan.swapped;
        ++plan.swapped_on[device_of(context)];
        for (auto& [app, mine] : code->global_pairs) driver_.copy(app, mine, global_sizes_[mine], stream);
      } else {
        refused(plan, CUresult(status), new_grid, new_block, new_shared);
      }
    }
    // A refused tuned launch enqueued nothing: the application's own launch runs instead,
    // and the application sees that launch's status (in the API it called).
    if (status != CUDA_SUCCESS) status = original();
    if (timed) {
      driver_.event_record(stop, stream);
      pending_.push_back({&plan, same, context, start, stop});
    }
    return status;
  }

  // A tuned launch the driver refused (a launch shape beyond the tuned code's resources):
  // counted, and said once per kernel with the launch that was refused.
  void refused(Plan& p, CUresult why, Dims grid, Dims block, size_t shared) {
    if (p.refused++ > 0) return;
    const char* name = "?";
    if (auto get_name = driver_function<decltype(&cuGetErrorName)>("cuGetErrorName")) get_name(why, &name);
    std::fprintf(stderr, "mneme run: %s: the tuned launch (grid %u,%u,%u block %u,%u,%u shared %zu) was refused "
                         "(%s); such launches run the original code\n", p.kernel.c_str(), grid.v[0], grid.v[1],
                 grid.v[2], block.v[0], block.v[1], block.v[2], shared, name);
  }

  void finish() {
    std::lock_guard<std::mutex> lock(mutex);
    if (finished_) return;
    finished_ = true;
    harvest(true);
    if (cupti_) {
      keep(KernelTimer::instance().drain());
      KernelTimer::instance().stop();
    }
    const std::string& path = settings().report;
    if (path.empty()) return;
    write_report(path, plans_, records_, total_ ? &totals_ : nullptr, timing_, cupti_,
                 cupti_ ? std::string() : KernelTimer::instance().reason());
  }

 private:
  Swapper() {
    const Settings& s = settings();  // (a malformed value ends the process here)
    const std::string& path = s.plan;
    if (path.empty()) return;
    plans_ = read_plan(path);
    for (auto& [name, plan] : plans_) {  // CUPTI keeps these kernels' records
      timed_names_.insert(plan.kernel);
      timed_names_.insert(plan.function);
    }
    active_ = true;
    timing_ = s.timing;
    total_ = s.total;
    measure_only_ = s.mode == "measure";
    std::atexit(at_exit);
  }

  // The context launches run in (the runtime's, created lazily, made current first).
  CUcontext current_context() {
    static auto runtime_free = real<cudaError_t (*)(void*)>("cudaFree");
    CUcontext context = nullptr;
    if (driver_.current_context && driver_.current_context(&context) == CUDA_SUCCESS && context) return context;
    runtime_free(nullptr);
    if (driver_.current_context) driver_.current_context(&context);
    return context;
  }

  int device_of(CUcontext context) {
    auto it = devices_.find(context);
    if (it != devices_.end()) return it->second;
    CUdevice device = 0;
    if (driver_.context_device) driver_.context_device(&device);  // (context is current here)
    return devices_[context] = int(device);
  }

  // The tuned code in `context`, loaded on first use there; null where it cannot load.
  Plan::Loaded* load(Plan& p, CUcontext context) {
    Plan::Loaded& code = p.loaded[context];
    if (code.tuned) return &code;
    if (code.failed) return nullptr;  // failed before: said so once
    std::ifstream in(p.cubin, std::ios::binary);
    std::string image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CUresult r = image.empty() ? CUDA_ERROR_FILE_NOT_FOUND : driver_.load(&code.module, image.data());
    if (r == CUDA_SUCCESS) r = driver_.get_function(&code.tuned, code.module, p.function.c_str());
    for (auto& [name, size] : p.globals) {
      if (r != CUDA_SUCCESS) break;
      auto var = vars_.find(name);
      void* app = nullptr;
      static auto symbol_address = real<cudaError_t (*)(void**, const void*)>("cudaGetSymbolAddress");
      CUdeviceptr mine = 0;
      size_t mine_size = 0;
      if (var == vars_.end() || symbol_address(&app, var->second) != cudaSuccess) {
        std::fprintf(stderr, "mneme run: %s: the application's global %s is not registered with the CUDA "
                             "runtime; this kernel runs unchanged\n", p.kernel.c_str(), name.c_str());
        p.load_error = "its global " + name + " is not registered with the CUDA runtime";
        r = CUDA_ERROR_NOT_FOUND;
      } else if ((r = driver_.get_global(&mine, &mine_size, code.module, name.c_str())) == CUDA_SUCCESS) {
        code.global_pairs.push_back({CUdeviceptr(app), mine});
        global_sizes_[mine] = std::min(size, mine_size);
      }
    }
    unsigned long long most_shared = std::max(p.tuned_shared, p.shared_per_thread * p.tuned_block.threads());
    if (r == CUDA_SUCCESS && most_shared > 48 * 1024)
      r = driver_.set_attribute(code.tuned, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(most_shared));
    int device = device_of(context);
    if (r != CUDA_SUCCESS) {
      const char* why = "?";
      if (auto name = driver_function<decltype(&cuGetErrorName)>("cuGetErrorName")) name(r, &why);
      std::fprintf(stderr, "mneme run: the tuned code of %s did not load on GPU %d (%s); it runs unchanged there\n",
                   p.kernel.c_str(), device, why);
      if (p.load_error.empty()) p.load_error = std::string("the tuned code did not load (") + why + ")";
      code.failed = true;
      code.tuned = nullptr;
      return nullptr;
    }
    std::fprintf(stderr, "mneme run: %s runs its tuned code on GPU %d\n", p.kernel.c_str(), device);
    return &code;
  }

  bool capturing(CUstream stream) const {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return driver_.is_capturing && driver_.is_capturing(stream, &status) == CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
  }

  // An event of `context` (events belong to one; `context` is current).
  CUevent event(CUcontext context) {
    std::vector<CUevent>& spare = spare_[context];
    CUevent e = nullptr;
    if (!spare.empty()) {
      e = spare.back();
      spare.pop_back();
    } else {
      driver_.event_create(&e, CU_EVENT_DEFAULT);
    }
    return e;
  }

  // Adds the finished launches' times (all of them when `wait`); keeps the queue short.
  void harvest(bool wait) {
    if (cupti_ && !wait) keep(KernelTimer::instance().take());
    while (!pending_.empty()) {
      Timing& t = pending_.front();
      if (wait) driver_.event_sync(t.stop);
      else if (driver_.event_query(t.stop) != CUDA_SUCCESS) break;
      float ms = 0;
      if (driver_.elapsed(&ms, t.start, t.stop) == CUDA_SUCCESS) t.plan->event_times.push_back({ms, t.same_config});
      spare_[t.context].push_back(t.start);
      spare_[t.context].push_back(t.stop);
      pending_.pop_front();
    }
  }

  // CUPTI starts on the first timed launch (the application's context exists by then), and
  // the exit handler is registered again then, so it runs before the runtime's and CUPTI's.
  void start_cupti() {
    if (cupti_tried_) return;
    cupti_tried_ = true;
    cupti_ = KernelTimer::instance().start();
    std::atexit(at_exit);
  }

  // CUPTI records every kernel of the process: only the planned kernels' are kept.
  void keep(std::vector<KernelRecord> records) {
    for (auto& r : records) {
      if (total_) totals_.add(r);
      if (timed_names_.count(r.name)) records_.push_back(std::move(r));
    }
  }

  bool active_ = false, timing_ = false, measure_only_ = false, finished_ = false, total_ = false;
  KernelTotals totals_;  // every kernel of the process (total_)
  std::unordered_map<CUcontext, int> devices_;  // each context's GPU ordinal
  bool cupti_tried_ = false, cupti_ = false;
  std::vector<KernelRecord> records_;
  std::unordered_set<std::string> timed_names_;  // the planned kernels' and their tuned entry points'
  Driver driver_;
  std::map<std::string, Plan> plans_;
  std::unordered_map<const void*, std::string> names_;
  std::unordered_map<std::string, const void*> vars_;
  std::unordered_map<cudaKernel_t, const void*> handles_;
  std::unordered_map<CUdeviceptr, size_t> global_sizes_;
  std::deque<Timing> pending_;
  std::unordered_map<CUcontext, std::vector<CUevent>> spare_;  // per context
};

void at_exit() { Swapper::get().finish(); }

Dims dims(dim3 d) { return Dims{{d.x, d.y, d.z}}; }

// A runtime-API launch of `host` (the kernel's host stub), per-thread default stream or not.
int runtime_launch(const void* host, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream,
                   bool per_thread, const std::function<int()>& original, bool cooperative = false) {
  auto& s = Swapper::get();
  if (!s.active() || !host) return original();
  s.saw_launch();
  std::lock_guard<std::mutex> lock(s.mutex);
  Plan* plan = s.plan_for_host(host);
  if (!plan) return original();
  CUstream driver_stream = (!stream && per_thread) ? CU_STREAM_PER_THREAD : reinterpret_cast<CUstream>(stream);
  return s.launch(*plan, dims(grid), dims(block), shared, driver_stream, args, original, cooperative);
}

// A driver-API launch of `f` (its kernel parameters in `params`).
int driver_launch(CUfunction f, Dims grid, Dims block, unsigned shared, CUstream stream, void** params,
                  const std::function<int()>& original, bool cooperative = false) {
  auto& s = Swapper::get();
  if (!s.active()) return original();
  s.saw_launch();
  if (!params) return original();
  std::lock_guard<std::mutex> lock(s.mutex);
  Plan* plan = s.plan_for_function(f);
  if (!plan) return original();
  return s.launch(*plan, grid, block, shared, stream, params, original, cooperative);
}

}  // namespace

namespace mneme::apply {

int swap_runtime_launch(const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t stream,
                        bool per_thread, bool cooperative, const std::function<int()>& original) {
  auto& s = Swapper::get();
  const void* host = func;
  if (s.active()) {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (const void* stub = s.host_of(static_cast<cudaKernel_t>(const_cast<void*>(func)))) host = stub;
  }
  return runtime_launch(host, grid, block, args, shared, stream, per_thread, original, cooperative);
}

int swap_driver_launch(CUfunction f, dim3 grid, dim3 block, unsigned shared, CUstream stream, void** params,
                       bool cooperative, const std::function<int()>& original) {
  return driver_launch(f, dims(grid), dims(block), shared, stream, params, original, cooperative);
}

}  // namespace mneme::apply

extern "C" {

void __cudaRegisterFunction(void** handle, const char* hostFun, char* deviceFun, const char* deviceName,
                            int thread_limit, uint3* tid, uint3* bid, dim3* bDim, dim3* gDim, int* wSize) {
  using Fn = void (*)(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*, dim3*, int*);
  static auto next = real<Fn>("__cudaRegisterFunction");
  if (Swapper::get().active()) Swapper::get().register_function(hostFun, deviceName);
  next(handle, hostFun, deviceFun, deviceName, thread_limit, tid, bid, bDim, gDim, wSize);
}

void __cudaRegisterVar(void** handle, char* hostVar, char* deviceAddress, const char* deviceName, int ext,
                       size_t size, int constant, int global) {
  using Fn = void (*)(void**, char*, char*, const char*, int, size_t, int, int);
  static auto next = real<Fn>("__cudaRegisterVar");
  if (Swapper::get().active()) Swapper::get().register_var(hostVar, deviceName);
  next(handle, hostVar, deviceAddress, deviceName, ext, size, constant, global);
}

cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shmem, cudaStream_t stream) {
  REAL(cudaLaunchKernel);
  return cudaError_t(runtime_launch(func, grid, block, args, shmem, stream, false, [&] {
    return int(real_cudaLaunchKernel(func, grid, block, args, shmem, stream));
  }));
}

cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shmem,
                                  cudaStream_t stream) {
  REAL(cudaLaunchKernel_ptsz);
  return cudaError_t(runtime_launch(func, grid, block, args, shmem, stream, true, [&] {
    return int(real_cudaLaunchKernel_ptsz(func, grid, block, args, shmem, stream));
  }));
}

cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  REAL(cudaLaunchKernelExC);
  // COOPERATIVE is the one launch attribute the tuned launch carries (cooperative_swap.cpp);
  // others (clusters, priorities) have no tuned equivalent here: counted, so that the
  // report says why such launches kept their code.
  auto& s = Swapper::get();
  bool cooperative = false;
  if (config->numAttrs && swappable_attributes(config->attrs, config->numAttrs, cooperative))
    return cudaError_t(swap_runtime_launch(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                           config->stream, false, cooperative,
                                           [&] { return int(real_cudaLaunchKernelExC(config, func, args)); }));
  if (config->numAttrs) {
    if (s.active()) {
      s.saw_launch();
      std::lock_guard<std::mutex> lock(s.mutex);
      const void* host = s.host_of(static_cast<cudaKernel_t>(const_cast<void*>(func)));
      if (Plan* plan = s.plan_for_host(host ? host : func)) s.attribute_launch(*plan);
    }
    return real_cudaLaunchKernelExC(config, func, args);
  }
  return cudaError_t(runtime_launch(func, config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
                                    config->stream, false,
                                    [&] { return int(real_cudaLaunchKernelExC(config, func, args)); }));
}

// nvcc 13's launch stubs: a kernel handle per stub, then __cudaLaunchKernel with it.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_function) {
  using Fn = cudaError_t (*)(cudaKernel_t*, const void*);
  static auto next = real<Fn>("__cudaGetKernel");
  cudaError_t status = next(kernel, host_function);
  auto& s = Swapper::get();
  if (status == cudaSuccess && kernel && s.active()) {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.register_kernel_handle(*kernel, host_function);
  }
  return status;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                               cudaStream_t stream) {
  using Fn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static auto next = real<Fn>("__cudaLaunchKernel");
  auto& s = Swapper::get();
  return cudaError_t(runtime_launch(s.active() ? s.host_of(kernel) : nullptr, grid, block, args, shmem, stream,
                                    false, [&] { return int(next(kernel, grid, block, args, shmem, stream)); }));
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shmem,
                                    cudaStream_t stream) {
  using Fn = cudaError_t (*)(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t);
  static auto next = real<Fn>("__cudaLaunchKernel_ptsz");
  auto& s = Swapper::get();
  return cudaError_t(runtime_launch(s.active() ? s.host_of(kernel) : nullptr, grid, block, args, shmem, stream,
                                    true, [&] { return int(next(kernel, grid, block, args, shmem, stream)); }));
}

// Driver-API launches, by the function's name.
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, CUstream stream, void** params, void** extra) {
  REAL(cuLaunchKernel);
  auto original = [&] { return int(real_cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra)); };
  return CUresult(driver_launch(f, Dims{{gx, gy, gz}}, Dims{{bx, by, bz}}, shmem, stream, params, original));
}

// cuLaunchKernelEx (Triton's launcher, libraries): without attributes, or with COOPERATIVE
// alone, as cuLaunchKernel; with other attributes the original runs, counted.
CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  REAL(cuLaunchKernelEx);
  auto original = [&] { return int(real_cuLaunchKernelEx(config, f, params, extra)); };
  auto& s = Swapper::get();
  if (!s.active() || !config) return CUresult(original());
  bool cooperative = false;
  if (!config->numAttrs || swappable_attributes(config->attrs, config->numAttrs, cooperative))
    return CUresult(driver_launch(f, Dims{{config->gridDimX, config->gridDimY, config->gridDimZ}},
                                  Dims{{config->blockDimX, config->blockDimY, config->blockDimZ}},
                                  config->sharedMemBytes, config->hStream, params, original, cooperative));
  s.saw_launch();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (Plan* plan = s.plan_for_function(f)) s.attribute_launch(*plan);
  return CUresult(original());
}

// Reset destroys the events: the times so far are taken first.
cudaError_t cudaDeviceReset() {
  REAL(cudaDeviceReset);
  if (Swapper::get().active()) Swapper::get().finish();
  return real_cudaDeviceReset();
}

}  // extern "C"
