// The snapshot pipeline's own types, shared by its source files (snapshot_pipeline.cpp,
// snapshot_staging.cpp, snapshot_occurrences.cpp, snapshot_capture.cpp, snapshot_store.cpp):
// staging blocks, the pieces of a block, a background thread's scratch, and one instance
// being captured or written.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "mneme/runtime/recording_writer.hpp"
#include "mneme/runtime/snapshot_pipeline.hpp"

namespace mneme::runtime {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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
  std::filesystem::path stage, node;
  // Diff epilogues need the prologue: kept in its staging block when the whole capture
  // fits the cap ("retained"), otherwise read back from the written chunk file.
  bool retain = false;
  struct Held {
    Block* block = nullptr;
    uint64_t offset = 0;
  };
  std::vector<std::vector<Held>> held;        // [region][chunk] retained prologue bytes
  std::vector<std::vector<uint8_t>> written;  // [region][chunk] prologue chunk on disk (or known zero)
  // [region][chunk] prologue chunk all zero: not stored (prologue arrays are sparse), its
  // epilogue XORs against zeros. Set before `written` (capture: where the source digests;
  // process: where a copied chunk turns out zero).
  std::vector<std::vector<uint8_t>> zero;
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

}  // namespace mneme::runtime
