// The snapshot pipeline's background work: each staged block's chunks checksummed, XORed
// against the prologue (diff epilogues), compressed and written; each instance's metadata
// written and its node committed (rename) once all of it is on disk.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mneme/runtime/errors.hpp"
#include "snapshot_pipeline_types.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {
namespace {

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

}  // namespace

uint32_t SnapshotPipeline::zero_crc(uint64_t n) {
  std::lock_guard<std::mutex> lock(zero_crc_mutex_);
  auto found = zero_crcs_.find(n);
  if (found != zero_crcs_.end()) return found->second;
  std::vector<uint8_t> zeros(n, 0);
  return zero_crcs_[n] = crc32c(zeros.data(), n);
}

void SnapshotPipeline::process(Instance& inst, bool epilogue, Block* block, const std::vector<Piece>& pieces,
                               Worker& w, bool& released) {
  const std::string& format = writer_.epilogue_format();
  std::vector<bool> changed_pieces;
  ChunkCodec::Times before_times = w.codec.times;
  double crc_s = 0, delta_s = 0, commit_s = 0;
  uint64_t zero_bytes = 0;
  struct Account {  // adds this block's stage times to the statistics, however it ends
    SnapshotPipeline& pipeline;
    Worker& w;
    const ChunkCodec::Times& before;
    double& crc_s;
    double& delta_s;
    double& commit_s;
    uint64_t& zero_bytes;
    ~Account() {
      const auto& now = w.codec.times;
      std::lock_guard<std::mutex> s(pipeline.stats_mutex_);
      pipeline.stats_.zero_bytes += zero_bytes;
      pipeline.stats_.crc_s += crc_s;
      pipeline.stats_.delta_s += delta_s;
      pipeline.stats_.commit_s += commit_s;
      pipeline.stats_.hash_s += now.hash_s - before.hash_s;
      pipeline.stats_.encode_s += now.encode_s - before.encode_s;
      pipeline.stats_.decode_s += now.decode_s - before.decode_s;
      pipeline.stats_.write_s += now.write_s - before.write_s;
      pipeline.stats_.deduplicated_chunks += now.deduplicated - before.deduplicated;
    }
  } account{*this, w, before_times, crc_s, delta_s, commit_s, zero_bytes};
  for (const Piece& p : pieces) {
    const RegionSpec& region = inst.regions[p.region];
    uint64_t chunk = inst.chunk[p.region];
    const uint8_t* data = block->data + p.offset;
    std::string name = region_name(region.address);
    auto crc_start = Clock::now();
    (epilogue ? inst.crc_after : inst.crc_before)[p.region][p.index] = crc32c(data, p.n);
    crc_s += seconds_since(crc_start);
    if (!epilogue) {
      if (all_zero(data, p.n)) {
        // Not stored (prologue arrays are sparse): a source that could not digest copied
        // it. A retained prologue keeps its block of zeros for the epilogue; otherwise the
        // epilogue XORs against zeros instead of reading a chunk file back.
        zero_bytes += p.n;
        std::lock_guard<std::mutex> lock(inst.m);
        inst.zero[p.region][p.index] = 1;
        inst.written[p.region][p.index] = 1;
        inst.cv.notify_all();
        continue;
      }
      if (p.index == 0) {  // (a region whose first chunk is zero is described at the commit)
        auto describe_start = Clock::now();
        describe(inst, p.region);
        commit_s += seconds_since(describe_start);
      }
      std::string content;
      inst.stored += writer_.write_chunk(inst.node / "prologue" / name, p.index, data, p.n, chunk, w.codec, &content);
      if (!content.empty()) remember_chunk(inst, p.region, p.index, p.n, content);
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
      bool zero;
      {
        // The prologue task of this chunk was queued earlier, so it is done or running.
        std::unique_lock<std::mutex> lock(inst.m);
        inst.cv.wait(lock, [&] { return inst.written[p.region][p.index] || inst.failed.load(); });
        if (inst.failed) return;
        zero = inst.zero[p.region][p.index];
      }
      if (zero)  // not stored: the prologue chunk is zeros
        std::memset(w.prologue.get(), 0, p.n);
      else
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

void SnapshotPipeline::remember_chunk(const Instance& inst, uint32_t region, uint64_t index, uint64_t n,
                                      const std::string& content) {
  if (inst.digest_before.size() <= region) return;  // the source cannot digest
  const std::vector<uint64_t>& digests = inst.digest_before[region];
  DigestKey key{digests[2 * index], digests[2 * index + 1], n, inst.chunk[region]};
  std::lock_guard<std::mutex> lock(known_chunks_mutex_);
  if (known_chunks_.size() < kKnownChunksMax)
    known_chunks_.try_emplace(key, KnownChunk{content, inst.crc_before[region][index]});
}

void SnapshotPipeline::link_known(const std::shared_ptr<Instance>& self, std::vector<Link> all) {
  // In batches over the background threads: a pool of 100 GB is 25,000 chunks to link.
  constexpr size_t kBatch = 1024;
  for (size_t from = 0; from < all.size(); from += kBatch) {
    std::vector<Link> links(all.begin() + from, all.begin() + std::min(all.size(), from + kBatch));
    self->pending.fetch_add(1);
    submit([this, self, links = std::move(links)](Worker&) {
      Instance& inst = *self;
      try {
        for (const Link& l : links) {
          if (inst.abandoned || inst.failed) break;
          std::string name = region_name(inst.regions[l.region].address);
          if (l.index == 0) describe(inst, l.region);  // (the task of a region's first chunk does)
          fs::path dir = inst.node / "prologue" / name;
          uint64_t chunk = inst.chunk[l.region];
          std::string content = l.chunk.content;
          {
            std::lock_guard<std::mutex> lock(known_chunks_mutex_);  // (a later generation, maybe)
            auto found = known_chunks_.find(l.key);
            if (found != known_chunks_.end()) content = found->second.content;
          }
          bool linked = writer_.link_chunk(dir, l.index, content, chunk);
          if (!linked && errno == EMLINK) {
            std::string next = writer_.next_generation(content, chunk);
            if (!next.empty() && writer_.link_chunk(dir, l.index, next, chunk)) {
              linked = true;
              std::lock_guard<std::mutex> lock(known_chunks_mutex_);
              auto found = known_chunks_.find(l.key);
              if (found != known_chunks_.end() && found->second.content == content) found->second.content = next;
            }
          }
          if (!linked && !writer_.copy_chunk(dir, l.index, content, chunk))
            throw Error("the stored chunk " + content + " its prologue links to cannot be read (removed by "
                        "another process?); record again");
          std::lock_guard<std::mutex> lock(inst.m);
          inst.crc_before[l.region][l.index] = l.chunk.crc;
          inst.written[l.region][l.index] = 1;  // an epilogue task may read it back now
          inst.cv.notify_all();
        }
      } catch (const std::exception& e) {
        fail(inst, e.what());
      }
      task_done(self);
    });
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
  writer_.write_array_metadata(pro, r.size, "bytes", true);  // sparse
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
        if (!described) writer_.write_array_metadata(node / "prologue" / name, r.size, "bytes", true);  // sparse
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
  inst.zero = {};
  inst.crc_before = {};
  inst.crc_after = {};
  if (inst.sealed) uncommitted_.fetch_sub(1);
}

}  // namespace mneme::runtime
