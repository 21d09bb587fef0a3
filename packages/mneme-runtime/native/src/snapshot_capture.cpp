// The snapshot pipeline's capture, on the application's thread: an instance begun (its
// region list checked and ordered), then its prologue and epilogue copied into staging
// blocks, chunk by chunk, each block handed to a background thread once filled.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>

#include "mneme/runtime/errors.hpp"
#include "snapshot_pipeline_types.hpp"

namespace mneme::runtime {
namespace {

constexpr uint64_t kAlign = 256;             // piece offsets inside a block

// Staging blocks of `block` bytes that one side of `instance` fills, packing its chunks as
// capture() does; chunks `skip` marks (the digests said: no copy) take none.
uint64_t staged_blocks(const SnapshotPipeline::Instance& instance, uint64_t block,
                       const std::vector<std::vector<uint8_t>>* skip = nullptr) {
  uint64_t blocks = 0, used = block;
  for (size_t k = 0; k < instance.regions.size(); ++k) {
    uint64_t size = instance.regions[k].size, chunk = instance.chunk[k];
    for (uint64_t index = 0, off = 0; off < size; ++index, off += chunk) {
      if (skip && !(*skip)[k].empty() && (*skip)[k][index]) continue;
      uint64_t n = std::min(chunk, size - off);
      if (used + n > block) {
        ++blocks;
        used = 0;
      }
      used = (used + n + kAlign - 1) / kAlign * kAlign;
    }
  }
  return blocks;
}

}  // namespace

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
  for (size_t k = 0; k < inst->order.size(); ++k) {
    inst->regions.push_back(regions[inst->order[k]]);
    uint64_t size = inst->regions.back().size, chunk = writer_.chunk_for(size);
    uint64_t chunks = (size + chunk - 1) / chunk;
    inst->chunk.push_back(chunk);
    inst->held.emplace_back(chunks);
    inst->written.emplace_back(chunks, 0);
    inst->zero.emplace_back(chunks, 0);
    inst->crc_before.emplace_back(chunks, 0);
    inst->crc_after.emplace_back(chunks, 0);
  }
  uint64_t blocks = staged_blocks(*inst, block_);  // one side, every chunk copied
  inst->diff_stored.assign(inst->regions.size(), 0);
  inst->bytes_stored.assign(inst->regions.size(), 0);
  inst->described.assign(inst->regions.size(), 0);
  // Retaining the prologue must leave at least one block for the epilogue to stream through.
  inst->retain = writer_.epilogue_format() != "bytes" && (blocks + 1) * block_ <= cap_;
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
  // Before it, those whose bytes the database already holds are not copied either: they
  // are linked to the stored chunk (link_known); nor are those whose bytes are all zero:
  // they are not stored at all (prologue arrays are sparse). skip: 1 unchanged or known,
  // kZero all zero.
  constexpr uint8_t kZero = 2;
  std::vector<std::vector<uint8_t>> skip(instance.regions.size());
  std::vector<Link> links;
  if (digests_ && (!epilogue || (!instance.digest_before.empty() && writer_.epilogue_format() == "diff"))) {
    std::vector<SnapshotSource::DigestRange> ranges;
    uint64_t words = 0;
    for (size_t k = 0; k < instance.regions.size(); ++k) {
      uint64_t size = instance.regions[k].size, chunk = instance.chunk[k];
      ranges.push_back({sources[instance.order[k]], size, chunk});
      words += 2 * ((size + chunk - 1) / chunk);
    }
    std::vector<uint64_t> digests(words);
    std::vector<uint8_t> zeros(words / 2);
    if (source_.digest(ranges, digests.data(), zeros.data())) {
      uint64_t at = 0;
      for (size_t k = 0; k < instance.regions.size(); ++k) {
        uint64_t n = 2 * ((instance.regions[k].size + instance.chunk[k] - 1) / instance.chunk[k]);
        if (!epilogue) {
          instance.digest_before.emplace_back(digests.begin() + at, digests.begin() + at + n);
          for (uint64_t c = 0; c < n / 2; ++c)
            if (zeros[at / 2 + c]) {
              if (skip[k].empty()) skip[k].resize(n / 2);
              skip[k][c] = kZero;
            }
          std::lock_guard<std::mutex> lock(known_chunks_mutex_);
          if (!known_chunks_.empty()) {
            uint64_t size = instance.regions[k].size, chunk = instance.chunk[k];
            for (uint64_t c = 0; c < n / 2; ++c) {
              if (!skip[k].empty() && skip[k][c]) continue;  // zero: nothing to link
              DigestKey key{digests[at + 2 * c], digests[at + 2 * c + 1], std::min(chunk, size - c * chunk), chunk};
              auto found = known_chunks_.find(key);
              if (found == known_chunks_.end()) continue;
              if (skip[k].empty()) skip[k].resize(n / 2);
              skip[k][c] = 1;
              links.push_back({uint32_t(k), c, key, found->second});
            }
          }
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
  // What this side stages (packed as the copies below pack it): the staging memory grows
  // toward that at once, and toward as much again for a retained prologue's epilogue,
  // never toward chunks the digests showed need no copy (a pool's zeros).
  {
    uint64_t blocks = staged_blocks(instance, block_, &skip);
    std::lock_guard<std::mutex> lock(pool_mutex_);
    need_ = (!epilogue && instance.retain ? 2 : 1) * blocks * block_;
  }
  uint64_t known = 0, zero = 0;
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
        if (!skip[k].empty() && skip[k][index]) {
          if (!epilogue && skip[k][index] == kZero) {  // not stored: its epilogue XORs against zeros
            instance.crc_before[k][index] = zero_crc(n);
            instance.zero[k][index] = 1;
            instance.written[k][index] = 1;  // (the epilogue task has nothing to wait for)
            zero += n;
            continue;
          }
          if (!epilogue) {  // linked to the stored chunk (link_known)
            known += n;
            continue;
          }
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
    if (!links.empty()) link_known(self, std::move(links));
    source_.wait_all();
  } catch (...) {
    instance.abandoned = true;  // the caller abandons it; queued work only frees blocks
    dispatch();
    throw;
  }
  for (auto& f : fences) f->mark_done();
  std::lock_guard<std::mutex> s(stats_mutex_);
  stats_.snapshot_bytes += copied + unchanged + known + zero;
  stats_.unchanged_bytes += unchanged;
  stats_.known_bytes += known;
  stats_.zero_bytes += zero;
}

}  // namespace mneme::runtime
