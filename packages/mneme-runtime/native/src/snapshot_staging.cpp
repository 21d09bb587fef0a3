// The snapshot pipeline's staging memory: slabs of page-locked (else resident) host memory
// cut into blocks of the format's chunk size, grown on background threads up to the cap;
// a capture waits for a free block when the cap is reached (back-pressure).
#include <algorithm>
#include <string>

#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/host_memory.hpp"
#include "snapshot_pipeline_types.hpp"

namespace mneme::runtime {
namespace {

constexpr uint64_t kSlabBytes = 64ull << 20;  // staging memory is allocated this much at a time
// Background threads allocating slabs at once: faulting pages in runs in parallel, the
// driver's page-locking barely does (measured on the H100 host), so two keep both busy.
constexpr int kGrowers = 2;

}  // namespace

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

uint64_t SnapshotPipeline::reserve_lead() const {
  std::lock_guard<std::mutex> s(stats_mutex_);
  return std::max(cap_ / 8, 4 * stats_.peak_staged_bytes);
}

void SnapshotPipeline::reserve(uint64_t bytes) {
  int growers;
  uint64_t lead = reserve_lead();
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    uint64_t target = std::min({cap_, bytes, lead}) / block_ * block_;
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

}  // namespace mneme::runtime
