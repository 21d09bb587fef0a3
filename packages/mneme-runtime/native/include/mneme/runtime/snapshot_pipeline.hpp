// The recorder's snapshot pipeline: device memory is copied chunk by chunk into
// staging blocks (pinned host memory, device-to-host copies in flight on their own
// stream), and a pool of background threads XORs epilogues against prologues,
// compresses (zstd + crc32c), writes the chunk files and commits each instance
// (staging folder, then rename) once all of it is on disk. The application waits only
// for the copies; staged-but-unwritten bytes are bounded by a host-memory cap
// (back-pressure, never dropped data). docs/record.md describes it.
//
// The device side is a SnapshotSource: the recorder's copies with the CUDA driver,
// HostSource (plain memcpy) for tests and tools.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mneme/runtime/recording_writer.hpp"

namespace mneme::runtime {

// A point in the source's copy order: wait() returns once every copy issued before it
// is in host memory.
class Fence {
 public:
  virtual ~Fence() = default;
  void wait() {
    if (done_.load(std::memory_order_acquire)) return;
    wait_impl();
    done_.store(true, std::memory_order_release);
  }
  // The issuer saw the copies complete: later waits need no device call.
  void mark_done() { done_.store(true, std::memory_order_release); }

 protected:
  virtual void wait_impl() = 0;

 private:
  std::atomic<bool> done_{false};
};

class SnapshotSource {
 public:
  virtual ~SnapshotSource() = default;
  // Staging memory (page-locked for the device); nullptr when none can be had (the
  // pipeline then uses ordinary memory).
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* pointer, size_t bytes) noexcept = 0;
  // Issues a copy of `bytes` from `source` (a device address) to `destination`.
  virtual void copy(void* destination, uint64_t source, size_t bytes) = 0;
  // A fence after every copy issued so far.
  virtual std::shared_ptr<Fence> fence() = 0;
  // Waits until every copy issued so far is in host memory.
  virtual void wait_all() = 0;
  // Called once on each background thread before its first task.
  virtual void thread_started() {}
  // A region's chunks to digest: `size` bytes from `address`, `chunk` bytes per digest.
  struct DigestRange {
    uint64_t address = 0, size = 0, chunk = 0;
  };
  // Two 64-bit words per chunk of each range, in order, into `out`, and one byte per chunk
  // into `zero` (1: the chunk's bytes are all zero), computed where the bytes are (the
  // device), once every copy issued before has completed and before any issued after.
  // Equal digests of a chunk before and after a kernel mean it did not change, so the
  // epilogue need not copy it; a prologue chunk of zeros is neither copied nor stored
  // (prologue arrays are sparse: docs/format.md). False when this source cannot digest.
  virtual bool digest(const std::vector<DigestRange>& /*ranges*/, uint64_t* /*out*/, uint8_t* /*zero*/) {
    return false;
  }
};

// Host memory as the "device": copies are memcpy from the address as a pointer.
class HostSource : public SnapshotSource {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* pointer, size_t bytes) noexcept override;
  void copy(void* destination, uint64_t source, size_t bytes) override;
  std::shared_ptr<Fence> fence() override;
  void wait_all() override {}
  bool digest(const std::vector<DigestRange>& ranges, uint64_t* out, uint8_t* zero) override;  // chunk_digest's words
};

struct PipelineOptions {
  uint64_t host_memory = 0;  // cap on staged bytes; 0: default_host_memory()
  unsigned threads = 0;      // background threads; 0: hardware threads, at most 32
  bool digests = true;       // skip epilogue chunks whose source digest did not change
};

// min(32 GiB, a quarter of physical memory).
uint64_t default_host_memory();
// parse_size ("64M", "8G"): settings_reader.hpp.

struct RegionSpec {
  std::string kind;  // a kind of MNEME_RECORDING_REGION_KINDS
  uint64_t address = 0, size = 0;
  std::string symbol;
  int device = -1;  // "peer" regions: the GPU whose memory it is
};

struct PipelineStats {
  uint64_t instances = 0;         // captured (sealed) instances
  uint64_t committed = 0;         // instances committed to the database
  uint64_t repeats = 0;           // occurrences counted without a capture
  uint64_t snapshot_bytes = 0;    // bytes the snapshots hold (prologue + epilogue)
  uint64_t unchanged_bytes = 0;   // of which epilogue bytes not copied: their digest did not change
  uint64_t known_bytes = 0;       // of which prologue bytes not copied: the database held their chunk
  uint64_t zero_bytes = 0;        // of which prologue bytes not stored: all-zero chunks (not copied
                                  // either where the source digests)
  uint64_t stored_bytes = 0;      // chunk bytes written
  uint64_t peak_staged_bytes = 0; // most staging memory in use at once
  uint64_t host_memory_bytes = 0; // the cap
  uint64_t staging_bytes = 0;     // staging memory allocated (<= cap)
  uint64_t pinned_bytes = 0;      // of which page-locked
  double blocked_s = 0;           // the application waited in snapshots (kernel time excluded)
  double wait_s = 0;              // of which: waiting for a block to be freed (back-pressure)
  double alloc_s = 0;             // of which: waiting while staging memory is allocated
  double kernel_s = 0;            // recorded kernels' own run time
  double sync_s = 0;              // waiting for the application's earlier device work
  double drain_s = 0;             // waiting for the background writes at exit
  // Background thread-seconds per stage (summed over the threads): checksums, epilogue
  // deltas, content hashes, compression, reading back prologues that were not retained,
  // file writes; and chunks found already stored (no compression, no write).
  double crc_s = 0, delta_s = 0, hash_s = 0, encode_s = 0, decode_s = 0, write_s = 0;
  // Folders, zarr.json documents and the commit (rename) of the instances' nodes.
  double commit_s = 0;
  uint64_t deduplicated_chunks = 0;
  unsigned threads = 0;
};

// "mneme record: stats instances=... threads=..." (docs/record.md: one line, stable keys).
std::string format_stats(const PipelineStats& stats);

class SnapshotPipeline {
 public:
  struct Instance;  // one instance being captured or written

  SnapshotPipeline(RecordingWriter& writer, SnapshotSource& source, PipelineOptions options = {});
  ~SnapshotPipeline();  // flushes, then stops the threads
  SnapshotPipeline(const SnapshotPipeline&) = delete;
  SnapshotPipeline& operator=(const SnapshotPipeline&) = delete;

  // One more occurrence of an instance this pipeline captured (in flight or committed):
  // false when it does not know the instance. Counted in memory (a launch of the
  // application never waits for the disk): write_occurrences stores what a commit missed.
  bool count_repeat(const std::string& static_hash, const std::string& dynamic_hash);
  // One more occurrence of an instance an earlier recording into this database holds:
  // false when the database does not hold it. Counted in memory as well.
  bool count_earlier(const std::string& static_hash, const std::string& dynamic_hash);
  // Adds the occurrences counted since each instance's commit to its metadata (flush
  // calls it; for an instance also whenever kOccurrencesBatch more have piled up).
  void write_occurrences();
  // Whether this run already captured the instance (counts nothing).
  bool knows(const std::string& static_hash, const std::string& dynamic_hash) const;

  // Capturing, from one thread at a time: begin, capture_prologue, (the launch),
  // capture_epilogue; abandon instead of capture_epilogue when the launch failed.
  // `sources[i]` is where region i (in the order given to begin) is read from.
  std::shared_ptr<Instance> begin(const std::string& static_hash, const InstanceInfo& info,
                                  std::vector<RegionSpec> regions);
  const std::string& dynamic_hash_of(const Instance& instance) const;
  // Both return once the bytes are in staging memory (the application may then change
  // the device memory); everything else happens in the background.
  void capture_prologue(Instance& instance, const std::vector<uint64_t>& sources);
  void capture_epilogue(Instance& instance, const std::vector<uint64_t>& sources);
  void abandon(Instance& instance);

  // Waits until every captured instance is committed (or failed), then writes the
  // occurrences counted since (write_occurrences).
  void flush();
  // For fatal-signal handlers: waits at most `seconds` for captured instances to commit,
  // polling (no locks taken). True when none is left.
  bool drain_for(double seconds) noexcept;
  // Captured instances not yet committed.
  int uncommitted() const noexcept { return uncommitted_.load(); }

  // Grows the staging memory toward `bytes` on background threads, so that the first
  // snapshots find it page-locked: the recorder calls it as the application allocates
  // device memory. At most the cap, and at most `reserve_lead()` ahead: a framework's pool
  // (JAX takes 75 % of the GPU at start) is allocated whole but snapshots stage little of
  // it (its zero and known chunks are not copied). Returns at once.
  void reserve(uint64_t bytes);
  // How far `reserve` grows ahead: an eighth of the cap, or four times the most any
  // snapshot has staged at once, whichever is more.
  uint64_t reserve_lead() const;

  void note_launch(double blocked_s, double kernel_s, double sync_s);
  void note_drain(double seconds);
  PipelineStats stats() const;
  // One line: "mneme record: stats key=value ..." (docs/record.md).
  std::string stats_line() const;
  // The first background failure ("" when none).
  std::string error() const;

  uint64_t host_memory() const { return cap_; }
  unsigned threads() const { return unsigned(workers_.size()); }

  // On SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT (and SIGINT/SIGTERM left at their
  // default): let the captured instances commit (at most `wait_seconds`), then restore
  // the previous disposition and re-raise. One pipeline per process.
  static void install_crash_handler(SnapshotPipeline* pipeline, double wait_seconds);

 private:
  struct Block;
  struct Piece;
  struct Worker;

  Block* acquire();
  void add_slab(uint64_t bytes);
  void grow_in_background();
  void release(Block* block);
  void capture(Instance& instance, bool epilogue, const std::vector<uint64_t>& sources);
  static constexpr uint64_t kOccurrencesBatch = 4096;
  void submit(std::function<void(Worker&)> task, bool first = false);
  void run_worker();
  // `released`: set once it gave `block` back to the pool itself (early, for diff epilogues).
  void process(Instance& instance, bool epilogue, Block* block, const std::vector<Piece>& pieces, Worker& worker,
               bool& released);
  void task_done(const std::shared_ptr<Instance>& instance);
  void finalize(Instance& instance);
  void fail(Instance& instance, const std::string& message);
  // The node's folders and group documents (once), and region k's array documents.
  void make_skeleton(Instance& instance);
  void describe(Instance& instance, size_t region);

  RecordingWriter& writer_;
  SnapshotSource& source_;
  uint64_t block_ = 0;  // staging block = the format's chunk size
  uint64_t cap_ = 0;
  bool digests_ = true;

  // staging memory
  mutable std::mutex pool_mutex_;
  std::condition_variable pool_cv_;
  struct Slab {
    void* pointer;
    size_t bytes;
    bool pinned;
  };
  std::vector<Slab> slabs_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<Block*> free_;
  uint64_t allocated_ = 0, in_use_ = 0;  // allocated_ counts slabs still being allocated
  uint64_t need_ = 0;                    // staging the current capture still needs (both sides)
  bool alloc_failed_ = false;
  int growers_ = 0;         // background threads allocating grow_left_ more bytes
  uint64_t grow_left_ = 0;

  // background threads
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<std::function<void(Worker&)>> queue_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;

  // instances this pipeline knows, by "<static>/<dynamic>"
  mutable std::mutex known_mutex_;
  std::map<std::string, std::shared_ptr<Instance>> known_;
  std::map<std::string, uint64_t> earlier_;  // under known_mutex_: occurrences of instances of earlier recordings
  std::atomic<int> uncommitted_{0};

  // Chunks this pipeline stored in the content store, by their digest at the source (the
  // digest a prologue computes where the bytes are) and length: a later prologue chunk
  // with the same digest is linked to the stored copy instead of copied. A framework's
  // memory pool (JAX takes 75 % of the GPU at start) is mostly bytes stored before: each
  // snapshot then copies only the chunks written since (docs/record.md).
  struct DigestKey {
    uint64_t a = 0, b = 0, n = 0, chunk = 0;
    bool operator==(const DigestKey&) const = default;
  };
  struct DigestKeyHash {
    size_t operator()(const DigestKey& k) const noexcept { return size_t(k.a ^ (k.b * 0x9e3779b97f4a7c15ULL) ^ k.n); }
  };
  struct KnownChunk {
    std::string content;  // its store entry (RecordingWriter::write_chunk)
    uint32_t crc = 0;     // CRC-32C of its bytes
  };
  static constexpr size_t kKnownChunksMax = 1 << 20;  // 4 TiB of distinct 4 MiB chunks, ~100 MiB of entries
  std::mutex known_chunks_mutex_;
  std::unordered_map<DigestKey, KnownChunk, DigestKeyHash> known_chunks_;
  void remember_chunk(const Instance& instance, uint32_t region, uint64_t index, uint64_t n, const std::string& content);
  // CRC-32C of `n` zero bytes (an omitted prologue chunk's), computed once per length.
  uint32_t zero_crc(uint64_t n);
  std::mutex zero_crc_mutex_;
  std::map<uint64_t, uint32_t> zero_crcs_;
  // The prologue chunks of `instance` found in known_chunks_, linked on a background thread.
  struct Link {
    uint32_t region;
    uint64_t index;
    DigestKey key;
    KnownChunk chunk;
  };
  void link_known(const std::shared_ptr<Instance>& instance, std::vector<Link> links);

  mutable std::mutex stats_mutex_;
  PipelineStats stats_;
  std::string error_;
};

}  // namespace mneme::runtime
