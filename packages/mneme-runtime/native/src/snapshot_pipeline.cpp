// The snapshot pipeline (snapshot_pipeline.hpp): its options, its construction, its
// background threads and its statistics. Its stages are beside it: staging memory
// (snapshot_staging.cpp), occurrence counts (snapshot_occurrences.cpp), the capture
// (snapshot_capture.cpp), the background writes and commits (snapshot_store.cpp), and the
// fatal-signal handler (snapshot_crash_handler.cpp).
#include "mneme/runtime/snapshot_pipeline.hpp"

#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "mneme/runtime/host_memory.hpp"
#include "snapshot_pipeline_types.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {
namespace {

// CPUs a cgroup v2 quota (cpu.max: "<quota> <period>") grants this process; 0: none.
unsigned cgroup_cpus() {
  std::FILE* f = std::fopen("/proc/self/cgroup", "r");
  if (!f) return 0;
  char line[4096];
  std::string group;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "0::", 3) == 0) {
      group = line + 3;
      while (!group.empty() && (group.back() == '\n' || group.back() == '\r')) group.pop_back();
    }
  std::fclose(f);
  if (group.empty()) return 0;
  unsigned least = 0;
  size_t start = group.find_first_not_of('/');
  const fs::path root = "/sys/fs/cgroup";
  fs::path dir = start == std::string::npos ? root : root / group.substr(start);
  // The quota of the process's group and of every group above it: the smallest holds.
  for (int depth = 0; depth < 64; ++depth, dir = dir.parent_path()) {
    if (std::FILE* q = std::fopen((dir / "cpu.max").c_str(), "r")) {
      char quota[32] = {0};
      unsigned long long period = 0;
      if (std::fscanf(q, "%31s %llu", quota, &period) == 2 && std::strcmp(quota, "max") != 0 && period > 0) {
        unsigned long long cpus = (std::strtoull(quota, nullptr, 10) + period - 1) / period;
        if (cpus > 0 && (!least || cpus < least)) least = unsigned(cpus);
      }
      std::fclose(q);
    }
    if (dir == root) break;
  }
  return least;
}

// The CPUs this process may run on (its affinity mask: a container's or taskset's share;
// a cgroup's CPU quota), not every CPU of the host that hardware_concurrency() counts:
// more background threads than CPUs only make each stage's thread-seconds longer.
unsigned usable_cpus() {
  unsigned n = std::max(1u, std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) n = unsigned(CPU_COUNT(&set));
  unsigned quota = cgroup_cpus();
  return quota ? std::min(n, quota) : n;
}

}  // namespace

// --- sizes -----------------------------------------------------------------------

uint64_t default_host_memory() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  // Room for a few instances of a large working set before back-pressure (the measured
  // limit of 8 GiB made the application wait for compression: docs/record.md).
  uint64_t quarter = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : (8ull << 30);
  return std::min<uint64_t>(32ull << 30, quarter);
}

// --- construction --------------------------------------------------------------

SnapshotPipeline::SnapshotPipeline(RecordingWriter& writer, SnapshotSource& source, PipelineOptions options)
    : writer_(writer), source_(source), block_(writer.chunk_size()) {
  cap_ = options.host_memory ? options.host_memory : default_host_memory();
  digests_ = options.digests;
  cap_ = std::max(cap_, 2 * block_);  // at least two blocks: one filling while one drains
  unsigned threads = options.threads;
  if (!threads) threads = std::clamp(usable_cpus(), 1u, 32u);
  stats_.host_memory_bytes = cap_;
  stats_.threads = threads;
  for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { run_worker(); });
}

SnapshotPipeline::~SnapshotPipeline() {
  try {
    flush();
  } catch (...) {
  }
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  for (auto& t : workers_) t.join();
  for (const auto& slab : slabs_) {
    if (slab.pinned) source_.deallocate(slab.pointer, slab.bytes);
    else unmap_resident(slab.pointer, slab.bytes);
  }
}

// --- background threads ---------------------------------------------------------

void SnapshotPipeline::submit(std::function<void(Worker&)> task, bool first) {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (first) queue_.push_front(std::move(task));
    else queue_.push_back(std::move(task));
  }
  queue_cv_.notify_one();
}

void SnapshotPipeline::run_worker() {
  // Asynchronous signals go to the application's threads, not to ours.
  sigset_t mask;
  sigfillset(&mask);
  for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) sigdelset(&mask, s);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  try {
    source_.thread_started();
  } catch (...) {
  }
  Worker worker(writer_.level(), block_);
  std::unique_lock<std::mutex> lock(queue_mutex_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    auto task = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    task(worker);  // tasks catch their own exceptions
    lock.lock();
    if (--running_ == 0 && queue_.empty()) idle_cv_.notify_all();
  }
}

void SnapshotPipeline::flush() {
  {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && running_ == 0; });
  }
  try {
    write_occurrences();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> s(stats_mutex_);
    if (error_.empty()) error_ = std::string("writing occurrence counts: ") + e.what();
  }
}

bool SnapshotPipeline::drain_for(double seconds) noexcept {
  timespec start{}, now{};
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (uncommitted_.load() > 0) {
    clock_gettime(CLOCK_MONOTONIC, &now);
    double elapsed = double(now.tv_sec - start.tv_sec) + 1e-9 * double(now.tv_nsec - start.tv_nsec);
    if (elapsed >= seconds) return false;
    timespec pause{0, 2000000};  // 2 ms
    nanosleep(&pause, nullptr);
  }
  return true;
}

// --- statistics ------------------------------------------------------------------

void SnapshotPipeline::note_launch(double blocked_s, double kernel_s, double sync_s) {
  std::lock_guard<std::mutex> s(stats_mutex_);
  stats_.blocked_s += blocked_s;
  stats_.kernel_s += kernel_s;
  stats_.sync_s += sync_s;
}

void SnapshotPipeline::note_drain(double seconds) {
  std::lock_guard<std::mutex> s(stats_mutex_);
  stats_.drain_s += seconds;
}

PipelineStats SnapshotPipeline::stats() const {
  std::lock_guard<std::mutex> s(stats_mutex_);
  return stats_;
}

std::string SnapshotPipeline::error() const {
  std::lock_guard<std::mutex> s(stats_mutex_);
  return error_;
}

std::string SnapshotPipeline::stats_line() const { return format_stats(stats()); }

std::string format_stats(const PipelineStats& s) {
  double gbs = s.blocked_s > 0 ? double(s.snapshot_bytes) / s.blocked_s / 1e9 : 0.0;
  char line[1536];
  std::snprintf(line, sizeof line,
                "mneme record: stats instances=%llu committed=%llu repeats=%llu snapshot_bytes=%llu unchanged_bytes=%llu "
                "known_bytes=%llu zero_bytes=%llu "
                "blocked_s=%.6f snapshot_gbs=%.3f peak_staged_bytes=%llu host_memory_bytes=%llu "
                "staging_bytes=%llu pinned_bytes=%llu stored_bytes=%llu wait_s=%.6f alloc_s=%.6f "
                "kernel_s=%.6f sync_s=%.6f drain_s=%.6f crc_s=%.3f delta_s=%.3f hash_s=%.3f encode_s=%.3f "
                "decode_s=%.3f write_s=%.3f commit_s=%.3f deduplicated_chunks=%llu threads=%u",
                (unsigned long long)s.instances, (unsigned long long)s.committed, (unsigned long long)s.repeats,
                (unsigned long long)s.snapshot_bytes, (unsigned long long)s.unchanged_bytes,
                (unsigned long long)s.known_bytes, (unsigned long long)s.zero_bytes, s.blocked_s, gbs, (unsigned long long)s.peak_staged_bytes,
                (unsigned long long)s.host_memory_bytes, (unsigned long long)s.staging_bytes,
                (unsigned long long)s.pinned_bytes, (unsigned long long)s.stored_bytes, s.wait_s, s.alloc_s,
                s.kernel_s, s.sync_s, s.drain_s, s.crc_s, s.delta_s, s.hash_s, s.encode_s, s.decode_s, s.write_s,
                s.commit_s, (unsigned long long)s.deduplicated_chunks, s.threads);
  return line;
}

}  // namespace mneme::runtime
