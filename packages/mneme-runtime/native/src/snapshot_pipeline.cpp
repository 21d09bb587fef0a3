#include "mneme/runtime/snapshot_pipeline.hpp"

#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/host_memory.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr uint64_t kAlign = 256;             // piece offsets inside a block
constexpr uint64_t kSlabBytes = 64ull << 20;  // staging memory is allocated this much at a time
// Background threads allocating slabs at once: faulting pages in runs in parallel, the
// driver's page-locking barely does (measured on the H100 host), so two keep both busy.
constexpr int kGrowers = 2;

// out = a ^ b; true when any byte differs.
bool xor_into(uint8_t* out, const uint8_t* a, const uint8_t* b, uint64_t n) {
  uint64_t any = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    x ^= y;
    any |= x;
    std::memcpy(out + i, &x, 8);
  }
  for (; i < n; ++i) {
    uint8_t x = a[i] ^ b[i];
    any |= x;
    out[i] = x;
  }
  return any != 0;
}

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

class DoneFence : public Fence {
 public:
  DoneFence() { mark_done(); }

 protected:
  void wait_impl() override {}
};

}  // namespace

// --- sources, sizes ----------------------------------------------------------

void* HostSource::allocate(size_t) { return nullptr; }  // the pipeline's ordinary memory
void HostSource::deallocate(void*, size_t) noexcept {}
void HostSource::copy(void* destination, uint64_t source, size_t bytes) {
  std::memcpy(destination, reinterpret_cast<const void*>(source), bytes);
}
std::shared_ptr<Fence> HostSource::fence() { return std::make_shared<DoneFence>(); }
bool HostSource::digest(const std::vector<DigestRange>& ranges, uint64_t* out) {
  for (const auto& r : ranges)
    for (uint64_t off = 0; off < r.size; off += r.chunk) {
      std::string hex = chunk_digest(reinterpret_cast<const uint8_t*>(r.address) + off, std::min(r.chunk, r.size - off));
      *out++ = std::stoull(hex.substr(0, 16), nullptr, 16);
      *out++ = std::stoull(hex.substr(16), nullptr, 16);
    }
  return true;
}

uint64_t default_host_memory() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  // Room for a few instances of a large working set before back-pressure (the measured
  // limit of 8 GiB made the application wait for compression: docs/record.md).
  uint64_t quarter = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) / 4 : (8ull << 30);
  return std::min<uint64_t>(32ull << 30, quarter);
}

uint64_t parse_size(const std::string& text) {
  if (text.empty()) return 0;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno || end == text.c_str() || !(value > 0) || !std::isfinite(value)) return 0;
  std::string unit(end);
  for (auto& c : unit) c = char(std::toupper(static_cast<unsigned char>(c)));
  if (!unit.empty() && unit.back() == 'B') unit.pop_back();            // "GB", "MiB"
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();             // "Gi"
  double scale = 1;
  if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) return 0;
  double bytes = value * scale;
  return bytes >= 1 && bytes < 1.8e19 ? uint64_t(bytes) : 0;
}

// --- internal types ------------------------------------------------------------

struct SnapshotPipeline::Block {
  uint8_t* data = nullptr;
  std::atomic<int> refs{0};
};

struct SnapshotPipeline::Piece {
  uint32_t region;  // index into Instance::regions (address order)
  uint64_t index;   // chunk index in the region's array
  uint64_t n;       // bytes (the last chunk of an array may be short)
  uint64_t offset;  // inside the block
};

struct SnapshotPipeline::Worker {
  // Scratch buffers stay untouched (not resident) until used.
  explicit Worker(int level, uint64_t block)
      : codec(level), prologue(new uint8_t[block]), diff(new uint8_t[block]) {}
  ChunkCodec codec;
  std::unique_ptr<uint8_t[]> prologue, diff;
};

struct SnapshotPipeline::Instance {
  std::string static_hash, dyn, key;
  InstanceInfo info;                // launch configuration and arguments (no regions)
  std::vector<RegionSpec> regions;  // address order
  std::vector<size_t> order;        // address-order position -> caller's index
  size_t given = 0;                 // regions the caller listed (exact repeats are stored once)
  // The region list breaks the layout rules: nothing is copied or committed; repeats of
  // it only count (and are never written).
  bool rejected = false;
  std::vector<uint64_t> chunk;      // each region's chunk length
  fs::path stage, node;
  // Diff epilogues need the prologue: kept in its staging block when the whole capture
  // fits the cap ("retained"), otherwise read back from the written chunk file.
  bool retain = false;
  struct Held {
    Block* block = nullptr;
    uint64_t offset = 0;
  };
  std::vector<std::vector<Held>> held;        // [region][chunk] retained prologue bytes
  std::vector<std::vector<uint8_t>> written;  // [region][chunk] prologue chunk on disk
  std::vector<uint64_t> diff_stored, bytes_stored;  // per region ("best" decides on them)
  // [region][chunk] CRC-32C of each chunk's bytes, prologue and epilogue, computed by the
  // background threads (each element written by one task) and combined at the commit.
  std::vector<std::vector<uint32_t>> crc_before, crc_after;
  // Each chunk's digest at the source before the kernel ([region][2 * chunk], empty when the
  // source cannot digest), and the epilogue chunks found unchanged (not copied; their
  // epilogue is the prologue: no delta stored, the same CRC).
  std::vector<std::vector<uint64_t>> digest_before;
  std::vector<std::vector<uint8_t>> unchanged;
  // The node's folders and the zarr.json of each region's arrays are written by the
  // background thread that stores the region's first prologue chunk (many threads at
  // once, while the capture goes on), not all at the commit: [region] done. The commit
  // writes those of regions without chunks and the epilogue arrays "best" decides late.
  std::once_flag skeleton;
  std::vector<uint8_t> described;
  std::atomic<uint64_t> stored{0};
  std::atomic<int> pending{1};  // queued tasks + 1 until sealed (or abandoned)
  std::atomic<bool> abandoned{false}, failed{false}, sealed{false};
  std::mutex m;
  std::condition_variable cv;
  uint64_t occurrences = 1;  // under m
  uint64_t unwritten = 0;    // under m: occurrences counted after the commit
  bool committed = false;    // under m
};

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

// --- staging memory ------------------------------------------------------------

void SnapshotPipeline::add_slab(uint64_t bytes) {
  void* pointer = nullptr;
  try {
    pointer = source_.allocate(bytes);
  } catch (...) {
    pointer = nullptr;
  }
  bool pinned = pointer != nullptr;
  if (!pointer) {
    try {
      pointer = map_resident(bytes);  // pageable, but resident before the first copy
    } catch (const Error&) {
      pointer = nullptr;
    }
  }
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!pointer) {
      allocated_ -= bytes;
      alloc_failed_ = true;
    } else {
      slabs_.push_back({pointer, bytes, pinned});
      for (uint64_t off = 0; off + block_ <= bytes; off += block_) {
        blocks_.push_back(std::make_unique<Block>());
        blocks_.back()->data = static_cast<uint8_t*>(pointer) + off;
        free_.push_back(blocks_.back().get());
      }
    }
    std::lock_guard<std::mutex> s(stats_mutex_);
    if (pointer) stats_.staging_bytes += bytes;
    if (pinned) stats_.pinned_bytes += bytes;
  }
  pool_cv_.notify_all();
}

void SnapshotPipeline::grow_in_background() {
  // Slab by slab until the target is reached, beside at most kGrowers - 1 other growers;
  // the remaining background threads stay free to compress.
  for (;;) {
    uint64_t bytes;
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      if (!grow_left_) {
        --growers_;
        break;
      }
      bytes = std::min(grow_left_, std::max(block_, kSlabBytes / block_ * block_));
      grow_left_ -= bytes;
    }
    add_slab(bytes);
  }
  pool_cv_.notify_all();
}

void SnapshotPipeline::reserve(uint64_t bytes) {
  int growers;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    uint64_t target = std::min(cap_, bytes) / block_ * block_;
    if (alloc_failed_ || allocated_ >= target) return;  // enough, or no more to be had
    grow_left_ += target - allocated_;
    allocated_ = target;
    if (growers_) return;  // the threads growing now take the rest too
    growers = int(std::min<uint64_t>(kGrowers, (grow_left_ + kSlabBytes - 1) / kSlabBytes));
    growers = std::max(1, std::min(growers, int(workers_.size())));
    growers_ = growers;
  }
  for (int g = 0; g < growers; ++g) submit([this](Worker&) { grow_in_background(); }, true);
}

SnapshotPipeline::Block* SnapshotPipeline::acquire() {
  std::unique_lock<std::mutex> lock(pool_mutex_);
  double waited = 0, allocating = 0;
  for (;;) {
    if (!free_.empty()) {
      Block* b = free_.back();
      free_.pop_back();
      b->refs.store(1);
      in_use_ += block_;
      need_ = need_ > block_ ? need_ - block_ : 0;  // what the current capture still needs
      std::lock_guard<std::mutex> s(stats_mutex_);
      stats_.peak_staged_bytes = std::max(stats_.peak_staged_bytes, in_use_);
      stats_.wait_s += waited;
      stats_.alloc_s += allocating;
      return b;
    }
    if (alloc_failed_ && allocated_ == 0)
      throw Error("cannot allocate " + std::to_string(block_ >> 20) + " MiB of host staging memory");
    auto start = Clock::now();
    if (!alloc_failed_ && !growers_ && allocated_ + block_ <= cap_) {
      // Grow toward what this capture needs at once on top of what earlier captures
      // still hold (at least a slab: one block at a time is slow to page-lock): the
      // first slab here, the rest on background threads while the copies proceed.
      uint64_t slab = std::max(block_, kSlabBytes / block_ * block_);
      uint64_t target = std::min(cap_, std::max(allocated_ + slab, in_use_ + need_));
      uint64_t total = std::max(block_, (target - allocated_) / block_ * block_);
      uint64_t first = std::min(total, slab);
      allocated_ += total;
      grow_left_ = total - first;
      int growers = int(std::min<uint64_t>(kGrowers, (grow_left_ + kSlabBytes - 1) / kSlabBytes));
      growers = std::min(growers, int(workers_.size()));
      growers_ = growers;
      lock.unlock();
      for (int g = 0; g < growers; ++g) submit([this](Worker&) { grow_in_background(); }, true);
      add_slab(first);
      lock.lock();
      allocating += seconds_since(start);
      continue;
    }
    bool growth = growers_ > 0;
    pool_cv_.wait(lock);  // a slab arrives, or (back-pressure) a background thread frees a block
    (growth ? allocating : waited) += seconds_since(start);
  }
}

void SnapshotPipeline::release(Block* block) {
  if (block->refs.fetch_sub(1) != 1) return;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    free_.push_back(block);
    in_use_ -= block_;
  }
  pool_cv_.notify_all();
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

// --- capture ------------------------------------------------------------------

bool SnapshotPipeline::knows(const std::string& static_hash, const std::string& dyn) const {
  std::lock_guard<std::mutex> lock(known_mutex_);
  return known_.count(static_hash + "/" + dyn) != 0;
}

bool SnapshotPipeline::count_repeat(const std::string& static_hash, const std::string& dyn) {
  std::shared_ptr<Instance> inst;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = known_.find(static_hash + "/" + dyn);
    if (it == known_.end()) return false;
    inst = it->second;
  }
  uint64_t batch = 0;
  {
    std::lock_guard<std::mutex> lock(inst->m);
    // Before the commit the count goes into the metadata the commit writes.
    uint64_t& count = inst->committed ? inst->unwritten : inst->occurrences;
    if (++count == kOccurrencesBatch && inst->committed) batch = std::exchange(inst->unwritten, 0);
  }
  if (batch) writer_.count_occurrences(static_hash, dyn, batch);
  std::lock_guard<std::mutex> s(stats_mutex_);
  ++stats_.repeats;
  return true;
}

bool SnapshotPipeline::count_earlier(const std::string& static_hash, const std::string& dyn) {
  const std::string key = static_hash + "/" + dyn;
  uint64_t batch = 0;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = earlier_.find(key);
    if (it != earlier_.end()) {
      if (++it->second == kOccurrencesBatch) batch = std::exchange(it->second, 0);
    } else if (writer_.has_instance(static_hash, dyn)) {  // a look at the disk the first time only
      earlier_[key] = 1;
    } else {
      return false;
    }
  }
  if (batch) writer_.count_occurrences(static_hash, dyn, batch);
  return true;
}

void SnapshotPipeline::write_occurrences() {
  std::vector<std::pair<std::string, uint64_t>> pending;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    for (auto& [key, count] : earlier_)
      if (count) pending.emplace_back(key, std::exchange(count, 0));
    for (auto& [key, inst] : known_) {
      std::lock_guard<std::mutex> m(inst->m);
      if (inst->committed && inst->unwritten) pending.emplace_back(key, std::exchange(inst->unwritten, 0));
    }
  }
  for (const auto& [key, count] : pending) {
    size_t slash = key.find('/');
    writer_.count_occurrences(key.substr(0, slash), key.substr(slash + 1), count);
  }
}

std::shared_ptr<SnapshotPipeline::Instance> SnapshotPipeline::begin(const std::string& static_hash,
                                                                    const InstanceInfo& info,
                                                                    std::vector<RegionSpec> regions) {
  auto inst = std::make_shared<Instance>();
  inst->static_hash = static_hash;
  inst->info = info;
  inst->info.regions.clear();
  inst->dyn = dynamic_hash(static_hash, info);
  inst->key = static_hash + "/" + inst->dyn;
  inst->given = regions.size();
  inst->order.resize(regions.size());
  std::iota(inst->order.begin(), inst->order.end(), size_t(0));
  order_regions(regions, inst->order);
  auto [vas_base, vas_size] = writer_.range_of(info);
  std::string problem = region_list_problem(regions, inst->order, vas_base, vas_size);
  if (!problem.empty()) {
    // The reader would refuse the instance, and with it every listing of the database:
    // this launch runs unrecorded, the others are recorded as usual.
    std::fprintf(stderr, "mneme record: instance %s of kernel %s not recorded: %s\n", inst->dyn.c_str(),
                 writer_.kernel_label(static_hash).c_str(), problem.c_str());
    inst->rejected = true;
    inst->order.clear();
  }
  uint64_t blocks = 0, used = block_;  // staging blocks one side needs (packing as capture does)
  for (size_t k = 0; k < inst->order.size(); ++k) {
    inst->regions.push_back(regions[inst->order[k]]);
    uint64_t size = inst->regions.back().size, chunk = writer_.chunk_for(size);
    uint64_t chunks = (size + chunk - 1) / chunk;
    inst->chunk.push_back(chunk);
    inst->held.emplace_back(chunks);
    inst->written.emplace_back(chunks, 0);
    inst->crc_before.emplace_back(chunks, 0);
    inst->crc_after.emplace_back(chunks, 0);
    for (uint64_t off = 0; off < size; off += chunk) {
      uint64_t n = std::min(chunk, size - off);
      if (used + n > block_) {
        ++blocks;
        used = 0;
      }
      used = (used + n + kAlign - 1) / kAlign * kAlign;
    }
  }
  inst->diff_stored.assign(inst->regions.size(), 0);
  inst->bytes_stored.assign(inst->regions.size(), 0);
  inst->described.assign(inst->regions.size(), 0);
  // Retaining the prologue must leave at least one block for the epilogue to stream through.
  inst->retain = writer_.epilogue_format() != "bytes" && (blocks + 1) * block_ <= cap_;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    need_ = 2 * blocks * block_;  // both sides staged at once, if the cap allows
  }
  inst->stage = writer_.new_staging_dir();
  inst->node = inst->stage / inst->dyn;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    known_[inst->key] = inst;
  }
  return inst;
}

const std::string& SnapshotPipeline::dynamic_hash_of(const Instance& instance) const { return instance.dyn; }

void SnapshotPipeline::capture_prologue(Instance& instance, const std::vector<uint64_t>& sources) {
  capture(instance, false, sources);
}

void SnapshotPipeline::capture_epilogue(Instance& instance, const std::vector<uint64_t>& sources) {
  capture(instance, true, sources);
  instance.sealed = true;
  uncommitted_.fetch_add(1);
  {
    std::lock_guard<std::mutex> s(stats_mutex_);
    ++stats_.instances;
  }
  std::shared_ptr<Instance> self;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    self = known_.at(instance.key);
  }
  task_done(self);  // the seal token
}

void SnapshotPipeline::abandon(Instance& instance) {
  instance.abandoned = true;
  std::shared_ptr<Instance> self;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = known_.find(instance.key);
    if (it == known_.end() || it->second.get() != &instance) return;
    self = it->second;
    known_.erase(it);  // a later launch of it may be captured again
  }
  task_done(self);
}

void SnapshotPipeline::capture(Instance& instance, bool epilogue, const std::vector<uint64_t>& sources) {
  if (sources.size() != instance.given)
    throw Error("snapshot: " + std::to_string(sources.size()) + " sources for " +
                std::to_string(instance.given) + " regions");
  if (instance.rejected) return;  // nothing of it is stored
  std::shared_ptr<Instance> self;
  {
    std::lock_guard<std::mutex> lock(known_mutex_);
    self = known_.at(instance.key);
  }
  // Digests at the source: of every chunk before the kernel; after it, those that did not
  // change are not copied (diff epilogues only: their delta is zero, nothing is stored).
  std::vector<std::vector<uint8_t>> skip(instance.regions.size());
  if (digests_ && (!epilogue || (!instance.digest_before.empty() && writer_.epilogue_format() == "diff"))) {
    std::vector<SnapshotSource::DigestRange> ranges;
    uint64_t words = 0;
    for (size_t k = 0; k < instance.regions.size(); ++k) {
      uint64_t size = instance.regions[k].size, chunk = instance.chunk[k];
      ranges.push_back({sources[instance.order[k]], size, chunk});
      words += 2 * ((size + chunk - 1) / chunk);
    }
    std::vector<uint64_t> digests(words);
    if (source_.digest(ranges, digests.data())) {
      uint64_t at = 0;
      for (size_t k = 0; k < instance.regions.size(); ++k) {
        uint64_t n = 2 * ((instance.regions[k].size + instance.chunk[k] - 1) / instance.chunk[k]);
        if (!epilogue) {
          instance.digest_before.emplace_back(digests.begin() + at, digests.begin() + at + n);
        } else {
          skip[k].resize(n / 2);
          for (uint64_t c = 0; c < n / 2; ++c)
            skip[k][c] = digests[at + 2 * c] == instance.digest_before[k][2 * c] &&
                         digests[at + 2 * c + 1] == instance.digest_before[k][2 * c + 1];
        }
        at += n;
      }
    } else if (!epilogue) {
      instance.digest_before.clear();
    }
  }
  if (epilogue) instance.unchanged = skip;
  std::vector<std::shared_ptr<Fence>> fences;
  std::vector<Piece> pieces;
  Block* current = nullptr;
  uint64_t used = 0, copied = 0, unchanged = 0;
  auto dispatch = [&] {
    if (!current) return;
    auto fence = source_.fence();
    fences.push_back(fence);
    instance.pending.fetch_add(1);
    submit([this, self, epilogue, block = current, fence, list = std::move(pieces)](Worker& worker) {
      bool released = false;
      try {
        fence->wait();  // always: the block may not be reused while a copy still lands in it
        if (!self->abandoned && !self->failed) process(*self, epilogue, block, list, worker, released);
      } catch (const std::exception& e) {
        fail(*self, e.what());
      }
      if (!released) release(block);
      task_done(self);
    });
    pieces = {};
    current = nullptr;
  };
  try {
    for (size_t k = 0; k < instance.regions.size(); ++k) {
      uint64_t source = sources[instance.order[k]], size = instance.regions[k].size, chunk = instance.chunk[k];
      for (uint64_t index = 0, off = 0; off < size; ++index, off += chunk) {
        uint64_t n = std::min(chunk, size - off);
        if (epilogue && !skip[k].empty() && skip[k][index]) {
          Instance::Held& held = instance.held[k][index];  // no epilogue task will need it
          if (held.block) {
            release(held.block);
            held.block = nullptr;
          }
          unchanged += n;
          continue;
        }
        if (current && used + n > block_) dispatch();
        if (!current) {
          current = acquire();
          used = 0;
        }
        source_.copy(current->data + used, source + off, n);
        pieces.push_back({uint32_t(k), index, n, used});
        if (!epilogue && instance.retain) {
          instance.held[k][index] = {current, used};
          current->refs.fetch_add(1);
        }
        used = (used + n + kAlign - 1) / kAlign * kAlign;
        copied += n;
      }
    }
    dispatch();
    source_.wait_all();
  } catch (...) {
    instance.abandoned = true;  // the caller abandons it; queued work only frees blocks
    dispatch();
    throw;
  }
  for (auto& f : fences) f->mark_done();
  std::lock_guard<std::mutex> s(stats_mutex_);
  stats_.snapshot_bytes += copied + unchanged;
  stats_.unchanged_bytes += unchanged;
}

// --- background work -------------------------------------------------------------

void SnapshotPipeline::process(Instance& inst, bool epilogue, Block* block, const std::vector<Piece>& pieces,
                               Worker& w, bool& released) {
  const std::string& format = writer_.epilogue_format();
  std::vector<bool> changed_pieces;
  ChunkCodec::Times before_times = w.codec.times;
  double crc_s = 0, delta_s = 0, commit_s = 0;
  struct Account {  // adds this block's stage times to the statistics, however it ends
    SnapshotPipeline& pipeline;
    Worker& w;
    const ChunkCodec::Times& before;
    double& crc_s;
    double& delta_s;
    double& commit_s;
    ~Account() {
      const auto& now = w.codec.times;
      std::lock_guard<std::mutex> s(pipeline.stats_mutex_);
      pipeline.stats_.crc_s += crc_s;
      pipeline.stats_.delta_s += delta_s;
      pipeline.stats_.commit_s += commit_s;
      pipeline.stats_.hash_s += now.hash_s - before.hash_s;
      pipeline.stats_.encode_s += now.encode_s - before.encode_s;
      pipeline.stats_.decode_s += now.decode_s - before.decode_s;
      pipeline.stats_.write_s += now.write_s - before.write_s;
      pipeline.stats_.deduplicated_chunks += now.deduplicated - before.deduplicated;
    }
  } account{*this, w, before_times, crc_s, delta_s, commit_s};
  for (const Piece& p : pieces) {
    const RegionSpec& region = inst.regions[p.region];
    uint64_t chunk = inst.chunk[p.region];
    const uint8_t* data = block->data + p.offset;
    std::string name = region_name(region.address);
    auto crc_start = Clock::now();
    (epilogue ? inst.crc_after : inst.crc_before)[p.region][p.index] = crc32c(data, p.n);
    crc_s += seconds_since(crc_start);
    if (!epilogue) {
      if (p.index == 0) {
        auto describe_start = Clock::now();
        describe(inst, p.region);
        commit_s += seconds_since(describe_start);
      }
      inst.stored += writer_.write_chunk(inst.node / "prologue" / name, p.index, data, p.n, chunk, w.codec);
      if (!inst.retain) {
        std::lock_guard<std::mutex> lock(inst.m);
        inst.written[p.region][p.index] = 1;
        inst.cv.notify_all();
      }
      continue;
    }
    fs::path epi = inst.node / "epilogue" / name;
    if (format == "bytes") {
      inst.stored += writer_.write_chunk(epi, p.index, data, p.n, chunk, w.codec);
      continue;
    }
    Instance::Held held = inst.retain ? inst.held[p.region][p.index] : Instance::Held{};
    const uint8_t* before;
    if (held.block) {
      before = held.block->data + held.offset;
    } else {
      {
        // The prologue task of this chunk was queued earlier, so it is done or running.
        std::unique_lock<std::mutex> lock(inst.m);
        inst.cv.wait(lock, [&] { return inst.written[p.region][p.index] || inst.failed.load(); });
        if (inst.failed) return;
      }
      w.codec.decode_file(inst.node / "prologue" / name / "c" / std::to_string(p.index), w.prologue.get(), chunk);
      before = w.prologue.get();
    }
    uint64_t diff = 0, bytes = 0;
    auto delta_start = Clock::now();
    uint8_t* delta = w.diff.get() + p.offset;  // where the piece sits in its block
    bool changed = xor_into(delta, data, before, p.n);
    delta_s += seconds_since(delta_start);
    if (format == "diff") {  // compressed and written below, once the block is given back
      changed_pieces.push_back(changed);
      if (held.block) {
        inst.held[p.region][p.index].block = nullptr;
        release(held.block);
      }
      continue;
    }
    if (changed)  // all-zero delta chunks are not stored
      diff = writer_.write_chunk(epi, p.index, delta, p.n, chunk, w.codec);
    if (format == "best")
      bytes = writer_.write_chunk(inst.node / "epilogue" / (name + ".bytes"), p.index, data, p.n, chunk, w.codec);
    if (held.block) {
      inst.held[p.region][p.index].block = nullptr;
      release(held.block);
    }
    inst.stored += diff + bytes;  // "best" subtracts the variant it drops
    std::lock_guard<std::mutex> lock(inst.m);
    inst.diff_stored[p.region] += diff;
    inst.bytes_stored[p.region] += bytes;
  }
  if (!epilogue || format != "diff") return;
  // The deltas are in this thread's scratch: the staging block (and the prologue blocks,
  // above) go back to the pool now, not after compression, the slow part. Staging then
  // holds less at its peak, so less of it has to be page-locked and back-pressure comes later.
  release(block);
  released = true;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!changed_pieces[i]) continue;  // all-zero delta chunks are not stored
    const Piece& p = pieces[i];
    fs::path epi = inst.node / "epilogue" / region_name(inst.regions[p.region].address);
    uint64_t diff = writer_.write_chunk(epi, p.index, w.diff.get() + p.offset, p.n, inst.chunk[p.region], w.codec);
    inst.stored += diff;
    std::lock_guard<std::mutex> lock(inst.m);
    inst.diff_stored[p.region] += diff;
  }
}

void SnapshotPipeline::make_skeleton(Instance& inst) {
  std::call_once(inst.skeleton, [&] {
    std::error_code ec;
    fs::create_directories(inst.node, ec);  // its zarr.json is written at the commit
    writer_.write_group_metadata(inst.node / "prologue");
    writer_.write_group_metadata(inst.node / "epilogue");
  });
}

void SnapshotPipeline::describe(Instance& inst, size_t k) {
  make_skeleton(inst);
  const RegionSpec& r = inst.regions[k];
  std::string name = region_name(r.address);
  const std::string& format = writer_.epilogue_format();
  fs::path pro = inst.node / "prologue" / name;
  writer_.write_array_metadata(pro, r.size, "bytes");
  std::error_code ec;
  fs::create_directory(pro / "c", ec);  // its chunks follow at once
  if (format != "best") writer_.write_array_metadata(inst.node / "epilogue" / name, r.size,
                                                     format == "bytes" ? "bytes" : "xor-prologue");
  inst.described[k] = 1;
}

void SnapshotPipeline::fail(Instance& inst, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(inst.m);
    inst.failed = true;
  }
  inst.cv.notify_all();
  std::lock_guard<std::mutex> s(stats_mutex_);
  if (error_.empty()) error_ = "writing instance " + inst.dyn + " of kernel " + inst.static_hash + ": " + message;
}

void SnapshotPipeline::task_done(const std::shared_ptr<Instance>& inst) {
  if (inst->pending.fetch_sub(1) != 1) return;
  submit([this, inst](Worker&) { finalize(*inst); });
}

void SnapshotPipeline::finalize(Instance& inst) {
  auto release_held = [&] {
    for (auto& chunks : inst.held)
      for (auto& h : chunks)
        if (h.block) {
          release(h.block);
          h.block = nullptr;
        }
  };
  release_held();  // normally none is left: each epilogue chunk released its prologue
  std::error_code ec;
  auto commit_start = Clock::now();
  if (!inst.abandoned && !inst.failed && !inst.rejected) {
    try {
      fs::path node = inst.node;
      make_skeleton(inst);
      writer_.write_array(node / "args", reinterpret_cast<const uint8_t*>(inst.info.args.data()),
                          inst.info.args.size(), "bytes", false);
      const std::string& format = writer_.epilogue_format();
      std::vector<RegionRecord> records;
      uint64_t stored = inst.stored;
      for (size_t k = 0; k < inst.regions.size(); ++k) {
        const RegionSpec& r = inst.regions[k];
        std::string name = region_name(r.address);
        bool described = inst.described[k];  // its arrays' zarr.json are written (describe)
        if (!described) writer_.write_array_metadata(node / "prologue" / name, r.size, "bytes");
        fs::path epi = node / "epilogue" / name;
        std::string encoding = format == "bytes" ? "bytes" : "xor-prologue";
        if (format == "best") {
          fs::path alt = node / "epilogue" / (name + ".bytes");
          if (inst.bytes_stored[k] < inst.diff_stored[k]) {
            fs::remove_all(epi);
            fs::rename(alt, epi);
            encoding = "bytes";
            stored -= inst.diff_stored[k];
          } else {
            fs::remove_all(alt);
            stored -= inst.bytes_stored[k];
          }
        }
        if (!described || format == "best") writer_.write_array_metadata(epi, r.size, encoding);
        if (!inst.unchanged.empty() && !inst.unchanged[k].empty())
          for (size_t c = 0; c < inst.unchanged[k].size(); ++c)
            if (inst.unchanged[k][c]) inst.crc_after[k][c] = inst.crc_before[k][c];
        uint32_t before = 0, after = 0;
        for (size_t c = 0; c < inst.crc_before[k].size(); ++c) {
          uint64_t n = std::min(inst.chunk[k], r.size - c * inst.chunk[k]);
          before = crc32c_combine(before, inst.crc_before[k][c], n);
          after = crc32c_combine(after, inst.crc_after[k][c], n);
        }
        records.push_back({r.kind, r.address, r.size, r.symbol, encoding, before, after, r.device});
      }
      bool mine;
      uint64_t occurrences;
      {
        std::lock_guard<std::mutex> lock(inst.m);  // repeats counted until the rename are in it
        occurrences = inst.occurrences;
        writer_.write_instance_metadata(node, inst.dyn, inst.info, records, occurrences);
        mine = writer_.commit_instance(node, inst.static_hash, inst.dyn);
        inst.committed = true;
      }
      if (!mine) writer_.count_occurrences(inst.static_hash, inst.dyn, occurrences);  // another writer was first
      std::lock_guard<std::mutex> s(stats_mutex_);
      ++stats_.committed;
      stats_.stored_bytes += stored;
    } catch (const InvalidRegionsError& e) {  // begin refuses these: only a bug gets here
      std::fprintf(stderr, "mneme record: instance of kernel %s not recorded: %s\n",
                   writer_.kernel_label(inst.static_hash).c_str(), e.what());
    } catch (const std::exception& e) {
      fail(inst, e.what());
    }
  }
  if (inst.failed) {
    std::lock_guard<std::mutex> lock(known_mutex_);
    auto it = known_.find(inst.key);
    if (it != known_.end() && it->second.get() == &inst) known_.erase(it);
  }
  fs::remove_all(inst.stage, ec);
  {
    std::lock_guard<std::mutex> s(stats_mutex_);
    stats_.commit_s += seconds_since(commit_start);
  }
  // Only metadata stays for repeat counting.
  inst.held = {};
  inst.written = {};
  inst.crc_before = {};
  inst.crc_after = {};
  if (inst.sealed) uncommitted_.fetch_sub(1);
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
                "blocked_s=%.6f snapshot_gbs=%.3f peak_staged_bytes=%llu host_memory_bytes=%llu "
                "staging_bytes=%llu pinned_bytes=%llu stored_bytes=%llu wait_s=%.6f alloc_s=%.6f "
                "kernel_s=%.6f sync_s=%.6f drain_s=%.6f crc_s=%.3f delta_s=%.3f hash_s=%.3f encode_s=%.3f "
                "decode_s=%.3f write_s=%.3f commit_s=%.3f deduplicated_chunks=%llu threads=%u",
                (unsigned long long)s.instances, (unsigned long long)s.committed, (unsigned long long)s.repeats,
                (unsigned long long)s.snapshot_bytes, (unsigned long long)s.unchanged_bytes, s.blocked_s, gbs, (unsigned long long)s.peak_staged_bytes,
                (unsigned long long)s.host_memory_bytes, (unsigned long long)s.staging_bytes,
                (unsigned long long)s.pinned_bytes, (unsigned long long)s.stored_bytes, s.wait_s, s.alloc_s,
                s.kernel_s, s.sync_s, s.drain_s, s.crc_s, s.delta_s, s.hash_s, s.encode_s, s.decode_s, s.write_s,
                s.commit_s, (unsigned long long)s.deduplicated_chunks, s.threads);
  return line;
}

// --- fatal signals ----------------------------------------------------------------

namespace {

std::atomic<SnapshotPipeline*> g_pipeline{nullptr};
double g_wait_seconds = 60;
struct sigaction g_previous[NSIG];
std::atomic<int> g_entered{0};
std::atomic<bool> g_drained{false};
pid_t g_owner = 0;  // a forked child has no background threads: nothing to wait for

void say(const char* text) {
  ssize_t ignored = ::write(2, text, std::strlen(text));
  (void)ignored;
}

void on_signal(int sig, siginfo_t*, void*) {
  int saved_errno = errno;
  if (g_entered.fetch_add(1) == 0) {
    SnapshotPipeline* p = getpid() == g_owner ? g_pipeline.load() : nullptr;
    int left = p ? p->uncommitted() : 0;
    if (left > 0) {
      char text[160];
      char digits[16];
      int n = 0;
      for (int v = left; v > 0 && n < 15; v /= 10) digits[n++] = char('0' + v % 10);
      std::strcpy(text, "mneme record: signal received; committing ");
      size_t at = std::strlen(text);
      while (n > 0) text[at++] = digits[--n];
      text[at] = 0;
      std::strcat(text, " captured instance(s) first\n");
      say(text);
      if (!p->drain_for(g_wait_seconds))
        say("mneme record: gave up waiting; uncommitted instances are left in .mneme/staging\n");
    }
    g_drained = true;
  } else {  // another thread crashed too: wait for the first one's drain
    timespec pause{0, 2000000};
    for (int i = 0; !g_drained.load() && i < int(g_wait_seconds * 500) + 1; ++i) nanosleep(&pause, nullptr);
  }
  sigaction(sig, &g_previous[sig], nullptr);
  errno = saved_errno;
  raise(sig);  // delivered when this handler returns, with the previous disposition
}

}  // namespace

void SnapshotPipeline::install_crash_handler(SnapshotPipeline* pipeline, double wait_seconds) {
  g_wait_seconds = wait_seconds;
  g_owner = getpid();
  if (g_pipeline.exchange(pipeline) != nullptr) return;  // installed already
  // Room for the handler when the application overflowed its stack.
  stack_t current{};
  if (sigaltstack(nullptr, &current) == 0 && (current.ss_flags & SS_DISABLE)) {
    stack_t alt{};
    alt.ss_size = 64 * 1024;
    alt.ss_sp = std::malloc(alt.ss_size);
    if (alt.ss_sp) sigaltstack(&alt, nullptr);
  }
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGINT, SIGTERM}) {
    struct sigaction previous{};
    if (sigaction(sig, nullptr, &previous) != 0) continue;
    bool fatal = sig != SIGINT && sig != SIGTERM;
    if (!fatal && (previous.sa_flags & SA_SIGINFO || previous.sa_handler != SIG_DFL)) continue;
    g_previous[sig] = previous;
    struct sigaction action{};
    action.sa_sigaction = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(sig, &action, nullptr);
  }
}

}  // namespace mneme::runtime
