// The recording-database writer of the recorder: the C++ twin of
// mneme.replay.db.DatabaseWriter, producing exactly the layout of docs/format.md
// (Zarr v3, zstd + crc32c chunks, XOR-delta epilogues, staging + rename commits,
// flock'd occurrence counts). Conformance tests read its output with zarr-python
// and with mneme's Python reader.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/recording_format.h"  // the one definition (mneme/runtime/recording_format.py)

namespace mneme::runtime {

struct RecordingInfo {
  uint64_t vas_base = 0;
  uint64_t vas_size = 0;
  std::string gpu_name, compute_capability, driver_version, runtime_version, host;
  std::vector<std::string> command_line;
  std::string tool_version = "0.1.0";
};

struct KernelParam {
  uint32_t size = 0, align = 0, offset = 0;
  bool is_pointer = false, by_value = false;
};

struct KernelGlobal {
  std::string name;
  uint64_t size = 0;
  uint32_t address_space = 1;
};

struct KernelInfo {
  std::string static_hash, name, demangled_name;
  std::vector<KernelParam> params;
  std::vector<KernelGlobal> globals;
  std::string ir;  // the kernel's code: LLVM bitcode, or (code "cuda-fatbin") the
                   // fatbinary it was registered from (nvcc builds; docs/format.md)
  std::string code = "llvm-bitcode";
  // The file the code came from (docs/format.md, kernel "origin"): metadata only, never
  // part of the static hash; empty when unknown (then not written).
  std::string origin;
};

struct RegionSnapshot {
  std::string kind;  // "heap" or "global"
  uint64_t address = 0;
  uint64_t size = 0;
  const uint8_t* before = nullptr;
  const uint8_t* after = nullptr;
  std::string symbol;  // device global name, empty for heap regions
  int device = -1;     // "peer" regions: the GPU (CUDA ordinal) whose memory it is
};

struct InstanceInfo {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_mem = 0;
  // Thread-block cluster shape set at launch (cuLaunchKernelEx's attribute); 1,1,1: none.
  uint32_t cluster[3] = {1, 1, 1};
  // A cooperative launch (cudaLaunchCooperativeKernel, cuLaunchCooperativeKernel or the
  // COOPERATIVE launch attribute): its blocks are co-resident and may synchronise the grid.
  bool cooperative = false;
  uint64_t stream = 0;
  std::string args;  // raw argument buffer
  std::vector<RegionSnapshot> regions;
  // "all" (every live allocation) or "reachable" (what the arguments and globals reach)
  std::string capture = "all";
  // The GPU it ran on (CUDA ordinal; -1: not said, the recording's only one) and that
  // GPU's address range (vas_size 0: the recording's, RecordingInfo).
  int device = -1;
  uint64_t vas_base = 0, vas_size = 0;
};

// One region's entry in an instance's metadata.
struct RegionRecord {
  std::string kind;
  uint64_t address = 0, size = 0;
  std::string symbol;
  std::string epilogue_encoding;  // "bytes" or "xor-prologue"
  // Format 2: CRC-32C of the region's full prologue and epilogue bytes (what a reader
  // reconstructs), recorded so that `mneme check` can verify what readers get.
  uint32_t prologue_crc32c = 0, epilogue_crc32c = 0;
  int device = -1;  // "peer" regions: the GPU whose memory it is
};

// Bytes owned by someone else (a codec's buffer, valid until its next call).
struct ChunkBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Encodes and decodes chunks as the format stores them: the chunk padded with zeros to
// the array's chunk size, a zstd frame, then the frame's CRC-32C (4 bytes, little-endian).
// Holds its zstd contexts and buffers: one per thread.
class ChunkCodec {
 public:
  explicit ChunkCodec(int level = 1);
  ~ChunkCodec();
  ChunkCodec(const ChunkCodec&) = delete;
  ChunkCodec& operator=(const ChunkCodec&) = delete;
  // The stored bytes of `n` data bytes padded to `chunk`; valid until the next call.
  ChunkBytes encode(const uint8_t* data, uint64_t n, uint64_t chunk);
  // Decodes a stored chunk file into `out` (`chunk` bytes); throws on a bad checksum.
  void decode_file(const std::filesystem::path& file, uint8_t* out, uint64_t chunk);

  // Seconds this codec's thread spent per stage (the recorder's statistics line says where
  // background time goes), and chunks found already stored.
  struct Times {
    double encode_s = 0, decode_s = 0, hash_s = 0, write_s = 0;
    uint64_t deduplicated = 0;
  } times;

 private:
  void* cctx_ = nullptr;
  void* dctx_ = nullptr;
  int level_;
  std::vector<uint8_t> padded_, compressed_, file_;
};

// "r-<address as 16 hex digits>": a region's array name inside prologue/ and epilogue/.
std::string region_name(uint64_t address);

// An instance whose region list breaks the format's layout rules: never written (the
// reader would refuse it, and with it every listing of the database).
class InvalidRegionsError : public UserError {
 public:
  using UserError::UserError;
};

// --- The layout rules of an instance's region list (docs/format.md, "Layout rules"; the
// reader's mneme/replay/db/region_layout.py): sorted by address, no address twice, no two
// overlapping, known kinds, heap regions inside the recorded address range. They work on
// any region type with `kind`, `address`, `size` and `symbol` (RegionSnapshot,
// RegionSpec, RegionRecord), through an index order so that callers keep their own.

// `order` (indices into `regions`) sorted by address, exact repeats removed: the same
// address, size, kind and symbol listed twice (one allocation reached by two paths) is
// one region, its bytes the same, so keeping one is safe. Anything else stays for
// region_list_problem to refuse.
template <class Region>
void order_regions(const std::vector<Region>& regions, std::vector<size_t>& order) {
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return regions[a].address < regions[b].address; });
  auto same = [&](size_t a, size_t b) {
    const Region &x = regions[a], &y = regions[b];
    return x.address == y.address && x.size == y.size && x.kind == y.kind && x.symbol == y.symbol;
  };
  order.erase(std::unique(order.begin(), order.end(), same), order.end());
}

// "" when `regions` taken in `order` obey the rules; otherwise one line saying which
// regions break which rule (the reader's words).
template <class Region>
std::string region_list_problem(const std::vector<Region>& regions, const std::vector<size_t>& order,
                                uint64_t vas_base, uint64_t vas_size) {
  static const char* const kinds[] = {MNEME_RECORDING_REGION_KINDS};
  for (size_t k = 0; k < order.size(); ++k) {
    const Region& r = regions[order[k]];
    if (std::find(std::begin(kinds), std::end(kinds), r.kind) == std::end(kinds))
      return "region " + region_name(r.address) + " has an unknown kind '" + r.kind + "'";
    if (r.size > UINT64_MAX - r.address)
      return "region " + region_name(r.address) + " runs past the end of the address space";
    if (k == 0) continue;
    const Region& p = regions[order[k - 1]];
    if (r.address == p.address) return "region " + region_name(r.address) + " is recorded twice";
    if (r.address < p.address)
      return "regions " + region_name(p.address) + " and " + region_name(r.address) + " are not sorted by address";
    if (p.address + p.size > r.address)
      return "regions " + region_name(p.address) + " and " + region_name(r.address) + " overlap";
  }
  for (size_t index : order) {
    const Region& r = regions[index];
    bool inside = vas_base <= r.address && r.address - vas_base <= vas_size && r.size <= vas_size - (r.address - vas_base);
    if (r.kind == MNEME_RECORDING_IN_RANGE_KIND && !inside)
      return "heap region " + region_name(r.address) + " lies outside the recorded address range";
    if (r.kind == MNEME_RECORDING_PEER_KIND && (r.device < 0 || r.address < vas_base + vas_size && vas_base < r.address + r.size))
      return "peer region " + region_name(r.address) + (r.device < 0 ? " names no device" : " lies inside the instance's own address range");
  }
  return "";
}

// CRC-32C (Castagnoli) as Zarr's crc32c codec computes it (SSE4.2 where available).
uint32_t crc32c(const uint8_t* data, size_t size);
// The CRC-32C of A followed by B from crc32c(A), crc32c(B) and B's length: chunks are
// checksummed on several threads and combined in order.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t length_b);

// 128-bit content digest of a chunk's raw bytes (docs/format.md, "Content store"), as 32
// hex digits: the name under which identical chunks are stored once. Not cryptographic:
// it names what the writer itself wrote, never data read from elsewhere.
std::string chunk_digest(const uint8_t* data, size_t size);

// Whether every byte is zero (a chunk a sparse prologue leaves out); stops at the first
// non-zero 64-byte line.
bool all_zero(const uint8_t* data, size_t size);

// Version of the layout written (docs/format.md): 2 adds the content checksums.
constexpr int kFormatVersion = MNEME_RECORDING_FORMAT_VERSION;

// FNV-1a 64 of the format's dynamic-hash serialization, as 16 hex digits.
// A launch in thread-block clusters adds its cluster shape (three more uint32), and a
// cooperative launch one more uint32 (1), so that every launch recorded before them keeps
// its hash.
std::string dynamic_hash(const std::string& static_hash, const uint32_t grid[3],
                         const uint32_t block[3], uint32_t shared_mem, const std::string& args,
                         const uint32_t cluster[3] = nullptr, bool cooperative = false);
// The dynamic hash of a launch as recorded.
std::string dynamic_hash(const std::string& static_hash, const InstanceInfo& inst);

class RecordingWriter {
 public:
  // Creates the database at `root`, or appends to one of the same address range.
  RecordingWriter(std::filesystem::path root, RecordingInfo info, std::string epilogue_format = "diff",
                  uint64_t chunk_size = MNEME_RECORDING_DEFAULT_CHUNK_SIZE,
                  int level = MNEME_RECORDING_DEFAULT_ZSTD_LEVEL);

  bool has_kernel(const std::string& static_hash) const;
  bool has_instance(const std::string& static_hash, const std::string& dynamic_hash) const;
  // False when the kernel was already stored.
  bool add_kernel(const KernelInfo& kernel);
  // (dynamic hash, newly stored); a repeat only increments the occurrence count. Exact
  // repeats in the region list are stored once (order_regions); a list that breaks the
  // layout rules otherwise throws InvalidRegionsError before anything is written.
  std::pair<std::string, bool> add_instance(const std::string& static_hash, const InstanceInfo& instance);
  // Counts one more occurrence of a stored instance.
  void count_occurrence(const std::string& static_hash, const std::string& dynamic_hash);

  const std::filesystem::path& root() const { return root_; }
  // Replaces or adds `key` (its value: JSON text) in a stored instance's mneme attributes,
  // atomically (instance_attributes.cpp): the recorder's in-application times.
  void set_instance_attribute(const std::string& static_hash, const std::string& dynamic_hash,
                              const std::string& key, const std::string& json_value);
  // The same for the root group's mneme attributes (the application's profile).
  void set_root_attribute(const std::string& key, const std::string& json_value);
  uint64_t vas_base() const { return info_.vas_base; }
  uint64_t vas_size() const { return info_.vas_size; }
  // "<demangled name> (<static hash>)" of a kernel this writer stored or found stored
  // (add_kernel); the hash alone for others. For messages about an instance.
  std::string kernel_label(const std::string& static_hash) const;
  // The address range an instance's heap regions lie in: its GPU's (InstanceInfo), else
  // the recording's.
  std::pair<uint64_t, uint64_t> range_of(const InstanceInfo& inst) const;

  // Building blocks of the background snapshot pipeline (snapshot_pipeline.hpp), which
  // writes an instance chunk by chunk from several threads; add_instance uses them too.
  uint64_t chunk_size() const { return chunk_size_; }
  int level() const { return level_; }
  const std::string& epilogue_format() const { return epilogue_format_; }
  // The chunk length of an array of `size` bytes (small arrays: one chunk of their size).
  uint64_t chunk_for(uint64_t size) const;
  // A fresh private folder under .mneme/staging (created).
  std::filesystem::path new_staging_dir() const;
  // Writes chunk `index` (`n` bytes, padded to `chunk`) of the array at `dir`, creating
  // the folder as needed; returns the stored size. A chunk whose bytes the database
  // already holds is not compressed or written again: its file is a hard link to the
  // content store's copy (.mneme/chunks), which any Zarr reader reads as a plain file.
  // `content`, when given, is set to the name of the store entry the chunk file links to
  // (left as it is when the file had to be written plain).
  uint64_t write_chunk(const std::filesystem::path& dir, uint64_t index, const uint8_t* data, uint64_t n,
                       uint64_t chunk, ChunkCodec& codec, std::string* content = nullptr) const;
  // Makes chunk `index` of the array at `dir` a link to the store entry `content` (a name
  // write_chunk gave): false when there is no such entry or no hard links.
  bool link_chunk(const std::filesystem::path& dir, uint64_t index, const std::string& content,
                  uint64_t chunk) const;
  // A store entry that takes no more links (ext4 allows 65,000 per file: a pool of zeros
  // is one entry linked by every snapshot) gets a next generation, a copy of its bytes
  // named `content.N`: its name, "" when it cannot be made.
  std::string next_generation(const std::string& content, uint64_t chunk) const;
  // The same chunk as a plain file, a copy of the entry's (encoded) bytes (the last resort).
  bool copy_chunk(const std::filesystem::path& dir, uint64_t index, const std::string& content,
                  uint64_t chunk) const;
  // A plain group's zarr.json (the folder is created).
  void set_node_attribute(const std::filesystem::path& node, const std::string& key,
                          const std::string& json_value);
  void write_group_metadata(const std::filesystem::path& dir) const;
  // The array's zarr.json (its chunks are written separately). `sparse` (instances'
  // prologue arrays): attributes.mneme.sparse = true, its all-zero chunks are not stored
  // and read as zeros (docs/format.md).
  void write_array_metadata(const std::filesystem::path& dir, uint64_t size, const std::string& encoding,
                            bool sparse = false) const;
  // `skip_zero_chunks`: all-zero chunks are not stored (xor-prologue deltas; `sparse`
  // arrays, which say so in their zarr.json).
  uint64_t write_array(const std::filesystem::path& dir, const uint8_t* data, uint64_t size,
                       const std::string& encoding, bool skip_zero_chunks, bool sparse = false) const;
  // The instance's zarr.json inside its staged node. Throws InvalidRegionsError, writing
  // nothing, when `regions` break the layout rules: no such instance is committed.
  void write_instance_metadata(const std::filesystem::path& node, const std::string& dynamic_hash,
                               const InstanceInfo& instance, const std::vector<RegionRecord>& regions,
                               uint64_t occurrences) const;
  // Renames a staged instance node into place: false when another writer was first.
  bool commit_instance(const std::filesystem::path& node, const std::string& static_hash,
                       const std::string& dynamic_hash) const;
  // Adds `count` occurrences to a stored instance.
  void count_occurrences(const std::string& static_hash, const std::string& dynamic_hash, uint64_t count);

 private:
  std::filesystem::path staging() const;
  // The content store's entry for `content` stored as chunks of `chunk` bytes.
  std::filesystem::path stored_chunk(const std::string& content, uint64_t chunk) const;

  std::filesystem::path root_;
  RecordingInfo info_;
  std::string epilogue_format_;
  uint64_t chunk_size_;
  int level_;
  // kernel names by static hash, for kernel_label (shared: the writer stays copyable)
  struct Names {
    std::mutex mutex;
    std::map<std::string, std::string> by_hash;
  };
  std::shared_ptr<Names> names_ = std::make_shared<Names>();
};

}  // namespace mneme::runtime
