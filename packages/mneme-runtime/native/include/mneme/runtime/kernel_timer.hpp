// KernelTimer: one way to time a kernel, in the application (the recorder) and in replay
// alike: the GPU's own start/end timestamps of every kernel, from CUPTI's Activity API
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL records, which leave kernels concurrent).
//
// libcupti is dlopen-ed when collection starts, so this library loads on machines
// without CUDA; where CUPTI cannot be used (not installed, another profiler holds it)
// start() returns false and reason() says why in one line, and callers time with CUDA
// events instead (docs/replay.md, "Timing and fidelity").
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mneme::runtime {

// One kernel execution as the GPU timed it. Times are CUPTI timestamps (ns).
struct KernelRecord {
  std::string name;  // the kernel's (mangled) function name
  uint64_t start_ns = 0, end_ns = 0;
  uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t dynamic_shared = 0;
  uint32_t device = 0, stream_id = 0;
  uint32_t correlation = 0;
  double duration_ms() const { return double(end_ns - start_ns) * 1e-6; }
};

// A launch made between push_tag(tag) and pop_tag() on its thread: CUPTI's correlation id
// of the launch (KernelRecord::correlation) and the tag.
struct LaunchTag {
  uint32_t correlation = 0;
  uint64_t tag = 0;
};

class KernelTimer {
 public:
  // Process-wide: CUPTI's activity buffers belong to the process.
  static KernelTimer& instance();

  // Enables collection (loading libcupti on first use); false, with reason(), when CUPTI
  // is unusable. Calling it again while collecting returns true.
  bool start();
  // Flushes what the GPU finished and stops collecting; records stay until drained.
  void stop();
  bool collecting() const;
  // Whether CUPTI loaded and collection could start (false before the first start()).
  bool available() const;
  // Why CUPTI is unusable ("" when it is usable).
  const std::string& reason() const;
  // The libcupti file loaded ("" before start() or when none loaded).
  const std::string& library() const;

  // cuptiActivityFlushAll, then the records collected since the last drain/take.
  std::vector<KernelRecord> drain();
  // The records CUPTI has handed over so far, without forcing a flush (cheap: the
  // recorder takes them now and then to keep memory bounded).
  std::vector<KernelRecord> take();
  // Tagging launches (CUPTI external correlation): after start(), asks CUPTI for a
  // LaunchTag of every kernel launched while a tag is pushed. False, with nothing changed,
  // where this CUPTI cannot (too old); then push_tag/pop_tag do nothing.
  // `api`: how CUPTI is asked for the API records the tags ride on: "launches" (the
  // launch functions' records only), "filtered" (the driver and runtime kinds on, every
  // other function off), "all" (every API record).
  bool tag_launches(const std::string& api = "filtered");
  bool tagging() const;
  void push_tag(uint64_t tag);
  void pop_tag();
  // The tags CUPTI has handed over so far (after drain() or take() of the same records).
  std::vector<LaunchTag> take_tags();

  // Records CUPTI reported dropped (buffers full) since collection began.
  uint64_t dropped() const;
  // Now, on the clock of KernelRecord's timestamps (0 when CUPTI is not loaded).
  uint64_t timestamp() const;

  // Files to try after MNEME_CUPTI_LIBRARY and before the CUDA toolkit's (the Python
  // layer passes the nvidia-cuda-cupti wheel's libraries); before start() only.
  void set_search_paths(std::vector<std::string> paths);
  // Where libcupti is looked for, in order (MNEME_CUPTI_LIBRARY, the paths above, the
  // toolkit's folders, then the loader's default search).
  std::vector<std::string> candidates() const;

  // "cupti": the reports print it beside each time.
  static const char* method() { return "cupti"; }

  // Called from CUPTI's thread; public for the C callbacks only.
  void completed(uint8_t* buffer, size_t valid_size);

 private:
  KernelTimer() = default;
  bool load();
  std::vector<std::string> candidates_locked() const;

  mutable std::mutex mutex_;
  std::vector<KernelRecord> records_;
  std::vector<LaunchTag> tags_;
  // read without the mutex: push_tag/pop_tag run around every tagged launch
  std::atomic<bool> tagging_{false};
  std::string tag_api_;
  std::vector<std::string> search_paths_;
  std::string reason_, library_;
  bool loaded_ = false, tried_ = false, registered_ = false, collecting_ = false;
  uint64_t dropped_ = 0;
};

}  // namespace mneme::runtime
