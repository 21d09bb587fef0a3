#include "mneme/runtime/kernel_timer.hpp"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <cstring>

#include "cupti_abi.hpp"
#include "mneme/runtime/native_settings.hpp"

namespace mneme::runtime {
namespace {

cupti::Api api{};
constexpr size_t kBufferBytes = 8u << 20;  // CUPTI's own samples use 8 MiB buffers

std::string result_text(cupti::Result result) {
  const char* text = nullptr;
  if (api.cuptiGetResultString && api.cuptiGetResultString(result, &text) == cupti::kSuccess && text)
    return text;
  return "CUPTI error " + std::to_string(result);
}

void buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void buffer_completed(void*, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  KernelTimer::instance().completed(buffer, valid_size);
  std::free(buffer);
}

// The first file a glob pattern names, or the pattern itself when it has no wildcard.
std::string first_match(const std::string& pattern) {
  if (pattern.find('*') == std::string::npos) return pattern;
  glob_t found{};
  std::string out;
  if (::glob(pattern.c_str(), 0, nullptr, &found) == 0 && found.gl_pathc > 0) out = found.gl_pathv[0];
  ::globfree(&found);
  return out;
}

// The timer's settings (native_settings.hpp), read once; `problem` gets a malformed
// value's line, which is then why CUPTI is not used.
const settings::Cupti& timer_settings(std::string* problem = nullptr) {
  static std::string error;
  static const settings::Cupti parsed = settings::read<settings::Cupti>(error);
  if (problem) *problem = error;
  return parsed;
}

}  // namespace

KernelTimer& KernelTimer::instance() {
  static KernelTimer* timer = new KernelTimer();  // never destroyed: CUPTI may call back at exit
  return *timer;
}

void KernelTimer::set_search_paths(std::vector<std::string> paths) {
  std::lock_guard lock(mutex_);
  search_paths_ = std::move(paths);
}

std::vector<std::string> KernelTimer::candidates() const {
  std::lock_guard lock(mutex_);
  return candidates_locked();
}

std::vector<std::string> KernelTimer::candidates_locked() const {
  const settings::Cupti& s = timer_settings();
  std::vector<std::string> out;
  if (!s.library.empty()) out.push_back(s.library);
  out.insert(out.end(), search_paths_.begin(), search_paths_.end());
  std::vector<std::string> roots;
  for (const std::string* root : {&s.cuda_home, &s.cuda_path})
    if (!root->empty()) roots.push_back(*root);
  roots.push_back("/usr/local/cuda");
  for (const auto& root : roots)
    for (const char* sub : {"/extras/CUPTI/lib64/", "/targets/x86_64-linux/lib/", "/lib64/", "/lib/"})
      out.push_back(root + sub + "libcupti.so*");
  for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"}) out.push_back(name);
  return out;
}

// Under mutex_.
bool KernelTimer::load() {
  if (tried_) return loaded_;
  tried_ = true;
  std::string last_error = "not found";
  void* library = nullptr;
  std::string problem;
  const std::string& chosen = timer_settings(&problem).library;
  if (!problem.empty()) {
    reason_ = problem;
    return false;
  }
  for (const auto& candidate : candidates_locked()) {
    std::string path = first_match(candidate);
    if (path.empty()) continue;
    library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library) {
      library_ = path;
      break;
    }
    const char* why = ::dlerror();
    last_error = why ? why : "cannot be loaded";
    if (!chosen.empty() && candidate == chosen) {  // the user's choice: no silent substitute
      reason_ = MNEME_ENV_CUPTI_LIBRARY "=" + candidate + " cannot be loaded (" + last_error + ")";
      return false;
    }
  }
  if (!library) {
    reason_ = "libcupti not found (install nvidia-cuda-cupti, or set " MNEME_ENV_CUPTI_LIBRARY ")";
    return false;
  }
#define MNEME_CUPTI_RESOLVE(name)                                                          \
  api.name = reinterpret_cast<decltype(api.name)>(::dlsym(library, #name));              \
  if (!api.name) {                                                                         \
    reason_ = library_ + " lacks " #name " (CUPTI too old)";                               \
    return false;                                                                          \
  }
  MNEME_CUPTI_RESOLVE(cuptiActivityRegisterCallbacks)
  MNEME_CUPTI_RESOLVE(cuptiActivityEnable)
  MNEME_CUPTI_RESOLVE(cuptiActivityDisable)
  MNEME_CUPTI_RESOLVE(cuptiActivityFlushAll)
  MNEME_CUPTI_RESOLVE(cuptiActivityGetNextRecord)
  MNEME_CUPTI_RESOLVE(cuptiActivityGetNumDroppedRecords)
  MNEME_CUPTI_RESOLVE(cuptiGetTimestamp)
  MNEME_CUPTI_RESOLVE(cuptiGetResultString)
#undef MNEME_CUPTI_RESOLVE
  // (optional: tagging launches)
  api.cuptiActivityPushExternalCorrelationId = reinterpret_cast<decltype(api.cuptiActivityPushExternalCorrelationId)>(
      ::dlsym(library, "cuptiActivityPushExternalCorrelationId"));
  api.cuptiActivityPopExternalCorrelationId = reinterpret_cast<decltype(api.cuptiActivityPopExternalCorrelationId)>(
      ::dlsym(library, "cuptiActivityPopExternalCorrelationId"));
  api.cuptiActivityEnableDriverApi = reinterpret_cast<decltype(api.cuptiActivityEnableDriverApi)>(
      ::dlsym(library, "cuptiActivityEnableDriverApi"));
  api.cuptiActivityEnableRuntimeApi = reinterpret_cast<decltype(api.cuptiActivityEnableRuntimeApi)>(
      ::dlsym(library, "cuptiActivityEnableRuntimeApi"));
  loaded_ = true;
  return true;
}

bool KernelTimer::start() {
  std::lock_guard lock(mutex_);
  if (collecting_) return true;
  if (!load()) return false;
  if (!registered_) {
    cupti::Result r = api.cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != cupti::kSuccess) {
      reason_ = "CUPTI refused its buffers: " + result_text(r);
      return false;
    }
    registered_ = true;
  }
  cupti::Result r = api.cuptiActivityEnable(cupti::kConcurrentKernel);
  if (r != cupti::kSuccess) {
    if (r == cupti::kErrorMultipleSubscribers || r == cupti::kErrorMaxLimitReached)
      reason_ = "another profiler holds CUPTI (" + result_text(r) + ")";
    else if (r == cupti::kErrorInsufficientPrivileges)
      reason_ = "CUPTI needs profiling permission (" + result_text(r) + ")";
    else
      reason_ = "CUPTI cannot collect kernel records: " + result_text(r);
    return false;
  }
  reason_.clear();
  collecting_ = true;
  return true;
}

void KernelTimer::stop() {
  bool tagging;
  {
    std::lock_guard lock(mutex_);
    if (!collecting_) return;
    collecting_ = false;
    tagging = tagging_.exchange(false);
  }
  api.cuptiActivityFlushAll(cupti::kFlushForced);  // calls completed(): not under the lock
  api.cuptiActivityDisable(cupti::kConcurrentKernel);
  if (tagging) {
    api.cuptiActivityDisable(cupti::kExternalCorrelation);
    api.cuptiActivityDisable(cupti::kDriverApi);
    api.cuptiActivityDisable(cupti::kRuntimeApi);
    for (auto cbid : cupti::kDriverLaunches) api.cuptiActivityEnableDriverApi(cbid, 0);
    for (auto cbid : cupti::kRuntimeLaunches) api.cuptiActivityEnableRuntimeApi(cbid, 0);
  }
}

bool KernelTimer::tag_launches(const std::string& api_records) {
  std::lock_guard lock(mutex_);
  if (tagging_) return true;
  if (!collecting_ || !api.cuptiActivityPushExternalCorrelationId || !api.cuptiActivityPopExternalCorrelationId ||
      !api.cuptiActivityEnableDriverApi || !api.cuptiActivityEnableRuntimeApi)
    return false;
  if (api.cuptiActivityEnable(cupti::kExternalCorrelation) != cupti::kSuccess) return false;
  // CUPTI writes a tag's record beside the API record of the call made under it: the
  // launch functions' records are needed, the others are overhead.
  if (api_records != "launches") {
    api.cuptiActivityEnable(cupti::kDriverApi);
    api.cuptiActivityEnable(cupti::kRuntimeApi);
  }
  if (api_records != "all") {
    if (api_records == "filtered")
      for (cupti::CallbackId cbid = 1; cbid < cupti::kLastCallbackId; ++cbid) {
        api.cuptiActivityEnableDriverApi(cbid, 0);
        api.cuptiActivityEnableRuntimeApi(cbid, 0);
      }
    for (auto cbid : cupti::kDriverLaunches) api.cuptiActivityEnableDriverApi(cbid, 1);
    for (auto cbid : cupti::kRuntimeLaunches) api.cuptiActivityEnableRuntimeApi(cbid, 1);
  }
  tag_api_ = api_records;
  tagging_ = true;
  return true;
}

bool KernelTimer::tagging() const { return tagging_.load(std::memory_order_relaxed); }

void KernelTimer::push_tag(uint64_t tag) {
  if (tagging()) api.cuptiActivityPushExternalCorrelationId(cupti::kCustom0, tag);
}

void KernelTimer::pop_tag() {
  uint64_t last = 0;
  if (tagging()) api.cuptiActivityPopExternalCorrelationId(cupti::kCustom0, &last);
}

std::vector<LaunchTag> KernelTimer::take_tags() {
  std::lock_guard lock(mutex_);
  std::vector<LaunchTag> out;
  out.swap(tags_);
  return out;
}

bool KernelTimer::collecting() const {
  std::lock_guard lock(mutex_);
  return collecting_;
}

bool KernelTimer::available() const {
  std::lock_guard lock(mutex_);
  return loaded_ && reason_.empty();
}

const std::string& KernelTimer::reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

const std::string& KernelTimer::library() const {
  std::lock_guard lock(mutex_);
  return library_;
}

void KernelTimer::completed(uint8_t* buffer, size_t valid_size) {
  std::vector<KernelRecord> batch;
  std::vector<LaunchTag> tags;
  cupti::Activity* record = nullptr;
  while (valid_size && api.cuptiActivityGetNextRecord(buffer, valid_size, &record) == cupti::kSuccess) {
    if (record->kind == cupti::kExternalCorrelation) {
      const auto* e = reinterpret_cast<const cupti::ExternalCorrelationActivity*>(record);
      if (e->external_kind == cupti::kCustom0) tags.push_back({e->correlation_id, e->external_id});
      continue;
    }
    if (record->kind != cupti::kConcurrentKernel) continue;  // (the launch functions' API records)
    const auto* k = reinterpret_cast<const cupti::KernelActivity*>(record);
    KernelRecord out;
    out.name = k->name ? k->name : "";
    out.start_ns = k->start;
    out.end_ns = k->end;
    out.grid[0] = uint32_t(k->grid_x); out.grid[1] = uint32_t(k->grid_y); out.grid[2] = uint32_t(k->grid_z);
    out.block[0] = uint32_t(k->block_x); out.block[1] = uint32_t(k->block_y); out.block[2] = uint32_t(k->block_z);
    out.dynamic_shared = uint32_t(k->dynamic_shared_memory);
    out.device = k->device_id;
    out.stream_id = k->stream_id;
    out.correlation = k->correlation_id;
    batch.push_back(std::move(out));
  }
  size_t dropped = 0;
  api.cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped);
  std::lock_guard lock(mutex_);
  dropped_ += dropped;
  tags_.insert(tags_.end(), tags.begin(), tags.end());
  if (records_.empty()) {
    records_ = std::move(batch);
  } else {
    records_.insert(records_.end(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
  }
}

std::vector<KernelRecord> KernelTimer::drain() {
  bool flush;
  {
    std::lock_guard lock(mutex_);
    flush = loaded_ && (collecting_ || registered_);
  }
  if (flush) api.cuptiActivityFlushAll(cupti::kFlushForced);
  return take();
}

std::vector<KernelRecord> KernelTimer::take() {
  std::lock_guard lock(mutex_);
  std::vector<KernelRecord> out;
  out.swap(records_);
  return out;
}

uint64_t KernelTimer::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

uint64_t KernelTimer::timestamp() const {
  uint64_t now = 0;
  bool loaded;
  {
    std::lock_guard lock(mutex_);
    loaded = loaded_;
  }
  if (loaded) api.cuptiGetTimestamp(&now);
  return now;
}

}  // namespace mneme::runtime
