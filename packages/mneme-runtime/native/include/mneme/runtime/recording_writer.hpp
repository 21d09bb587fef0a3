// The recording-database writer of the recorder: the C++ twin of
// mneme.replay.db.DatabaseWriter, producing exactly the layout of docs/format.md
// (Zarr v3, zstd + crc32c chunks, XOR-delta epilogues, staging + rename commits,
// flock'd occurrence counts). Conformance tests read its output with zarr-python
// and with mneme's Python reader.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

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
  std::string ir;  // bitcode bytes
};

struct RegionSnapshot {
  std::string kind;  // "heap" or "global"
  uint64_t address = 0;
  uint64_t size = 0;
  const uint8_t* before = nullptr;
  const uint8_t* after = nullptr;
  std::string symbol;  // device global name, empty for heap regions
};

struct InstanceInfo {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t shared_mem = 0;
  uint64_t stream = 0;
  std::string args;  // raw argument buffer
  std::vector<RegionSnapshot> regions;
};

// FNV-1a 64 of the format's dynamic-hash serialization, as 16 hex digits.
std::string dynamic_hash(const std::string& static_hash, const uint32_t grid[3],
                         const uint32_t block[3], uint32_t shared_mem, const std::string& args);

class RecordingWriter {
 public:
  // Creates the database at `root`, or appends to one of the same address range.
  RecordingWriter(std::filesystem::path root, RecordingInfo info, std::string epilogue_format = "diff",
                  uint64_t chunk_size = 4u << 20, int level = 1);

  bool has_kernel(const std::string& static_hash) const;
  bool has_instance(const std::string& static_hash, const std::string& dynamic_hash) const;
  // False when the kernel was already stored.
  bool add_kernel(const KernelInfo& kernel);
  // (dynamic hash, newly stored); a repeat only increments the occurrence count.
  std::pair<std::string, bool> add_instance(const std::string& static_hash, const InstanceInfo& instance);
  // Counts one more occurrence of a stored instance.
  void count_occurrence(const std::string& static_hash, const std::string& dynamic_hash);

  const std::filesystem::path& root() const { return root_; }

 private:
  std::filesystem::path staging() const;
  uint64_t write_array(const std::filesystem::path& dir, const uint8_t* data, uint64_t size,
                       const std::string& encoding, bool skip_zero_chunks) const;

  std::filesystem::path root_;
  RecordingInfo info_;
  std::string epilogue_format_;
  uint64_t chunk_size_;
  int level_;
};

}  // namespace mneme::runtime
