// RecordingWriter (recording_writer.hpp): the database created or opened, kernels and
// instances added, their metadata documents, commits and occurrence counts. Beside it: chunks
// and the content store (chunk_store.cpp), checksums and digests (checksums.cpp), files and
// folders (recording_files.cpp), instance attributes updated in place (instance_attributes.cpp).
#include "mneme/runtime/recording_writer.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <sstream>

#include "mneme/runtime/errors.hpp"
#include "recording_files.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {
namespace {

uint64_t fnv1a64(const void* data, size_t size, uint64_t value = MNEME_RECORDING_FNV1A64_OFFSET) {
  auto bytes = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) value = (value ^ bytes[i]) * MNEME_RECORDING_FNV1A64_PRIME;
  return value;
}

std::string hex16(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string now_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S+00:00", &tm);
  return buf;
}

void write_file(const fs::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw Error("cannot write " + path.string());
}

// A document inside a staged node: nothing reads it before the node's rename commits it,
// so it is written in place (no temporary, no rename: two directory operations fewer per
// array, which add up over the thousands of small regions of a framework process).
void write_staged_json(const fs::path& path, const std::string& text) {
  write_all(path, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
            O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);
}

// Metadata documents are replaced atomically: temporary file, then rename.
void write_json(const fs::path& path, const std::string& text) {
  fs::path tmp = path.parent_path() / ("." + path.filename().string() + "." + std::to_string(getpid()) + ".tmp");
  write_file(tmp, text.data(), text.size());
  fs::rename(tmp, path);
}

std::string group_json(const std::string& mneme_attrs) {
  std::string attrs = mneme_attrs.empty() ? "{}" : "{\"mneme\": " + mneme_attrs + "}";
  return "{\"zarr_format\": 3, \"node_type\": \"group\", \"attributes\": " + attrs + "}";
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool commit(const fs::path& node, const fs::path& final_path) {
  if (::rename(node.c_str(), final_path.c_str()) == 0) return true;
  if (errno == ENOTEMPTY || errno == EEXIST) return false;
  throw Error("cannot commit " + final_path.string() + ": " + std::strerror(errno));
}

class Staging {
 public:
  explicit Staging(fs::path dir) : dir_(std::move(dir)) { fs::create_directories(dir_); }
  ~Staging() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

}  // namespace

std::string region_name(uint64_t address) { return "r-" + hex16(address); }

std::string dynamic_hash(const std::string& static_hash, const uint32_t grid[3], const uint32_t block[3],
                         uint32_t shared_mem, const std::string& args, const uint32_t cluster[3],
                         bool cooperative) {
  bool clustered = cluster && uint64_t(cluster[0]) * cluster[1] * cluster[2] > 1;
  uint32_t dims[11] = {grid[0], grid[1], grid[2], block[0], block[1], block[2], shared_mem};
  if (clustered) std::copy(cluster, cluster + 3, dims + 7);
  size_t count = clustered ? 10 : 7;
  if (cooperative) dims[count++] = 1;
  uint8_t head[11 * 4];
  for (size_t i = 0; i < count; ++i)
    for (int b = 0; b < 4; ++b) head[i * 4 + b] = static_cast<uint8_t>(dims[i] >> (8 * b));
  uint64_t h = fnv1a64(static_hash.data(), static_hash.size());
  h = fnv1a64(head, count * 4, h);
  return hex16(fnv1a64(args.data(), args.size(), h));
}

std::string dynamic_hash(const std::string& static_hash, const InstanceInfo& inst) {
  return dynamic_hash(static_hash, inst.grid, inst.block, inst.shared_mem, inst.args, inst.cluster,
                      inst.cooperative);
}

RecordingWriter::RecordingWriter(fs::path root, RecordingInfo info, std::string epilogue_format,
                                 uint64_t chunk_size, int level)
    : root_(std::move(root)), info_(std::move(info)), epilogue_format_(std::move(epilogue_format)),
      chunk_size_(chunk_size), level_(level) {
  if (epilogue_format_ != "diff" && epilogue_format_ != "bytes" && epilogue_format_ != "best")
    throw UserError("unknown epilogue format '" + epilogue_format_ + "': use diff, bytes or best");
  std::error_code ec;
  fs::create_directories(root_, ec);
  if (ec) throw UserError("cannot create " + root_.string() + ": " + ec.message());
  if (::access(root_.c_str(), W_OK | X_OK) != 0)
    throw UserError(root_.string() + " is not writable: choose another --record-db-dir");
  fs::path meta = root_ / "zarr.json";
  auto foreign = [&] {
    for (const auto& entry : fs::directory_iterator(root_)) {
      std::string name = entry.path().filename().string();
      // .zarr.json.<pid>.tmp: another writer is creating this database right now
      bool temporary = name.rfind(".zarr.json.", 0) == 0 && name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0;
      if (name != ".mneme" && name != "kernels" && !temporary) return true;
    }
    return false;
  };
  if (!fs::exists(meta) && foreign())
    throw UserError(root_.string() + " is not empty and not a mneme database: choose a new or empty directory");
  // Several ranks may create the same database at once: decide under the lock.
  fs::create_directories(root_ / ".mneme");
  std::string lock_path = (root_ / ".mneme" / "lock").string();
  int lock_fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock_fd < 0) throw UserError("cannot open " + lock_path);
  ::flock(lock_fd, LOCK_EX);
  struct Unlock {
    int fd;
    ~Unlock() { ::flock(fd, LOCK_UN); ::close(fd); }
  } unlock{lock_fd};
  // The root metadata: what was recorded where (GPU, driver, address range, command).
  int format_version = kFormatVersion;
  auto root_attributes = [&] {
    std::ostringstream a;
    a << "{\"format_version\": " << format_version << ", \"tool_version\": " << json_string(info_.tool_version)
      << ", \"created\": " << json_string(now_iso()) << ", \"host\": " << json_string(info_.host)
      << ", \"gpu\": {\"name\": " << json_string(info_.gpu_name)
      << ", \"compute_capability\": " << json_string(info_.compute_capability) << "}"
      << ", \"driver_version\": " << json_string(info_.driver_version)
      << ", \"runtime_version\": " << json_string(info_.runtime_version)
      << ", \"address_space\": {\"base\": " << info_.vas_base << ", \"size\": " << info_.vas_size << "}"
      << ", \"command_line\": [";
    for (size_t i = 0; i < info_.command_line.size(); ++i)
      a << (i ? ", " : "") << json_string(info_.command_line[i]);
    a << "]}";
    return a.str();
  };
  if (fs::exists(meta)) {
    std::string text = read_text(meta);
    std::string want_base = "\"base\": " + std::to_string(info_.vas_base);
    std::string want_size = "\"size\": " + std::to_string(info_.vas_size);
    if (text.find("\"mneme\"") == std::string::npos)
      throw UserError(root_.string() + " is a Zarr hierarchy but not a mneme database");
    if (text.find(want_base) == std::string::npos || text.find(want_size) == std::string::npos)
      throw UserError(root_.string() + " holds a recording of another address range: use a new directory");
    // `mneme record` creates the database before the application starts, when no GPU
    // facts are known yet: the recorder's writer completes them.
    if (text.find("\"gpu\": {\"name\": \"\"") != std::string::npos && !info_.gpu_name.empty()) {
      // A database keeps its format version (a format-1 one has no content checksums).
      const std::string key = "\"format_version\": ";
      size_t at = text.find(key);
      if (at != std::string::npos) format_version = std::atoi(text.c_str() + at + key.size());
      if (format_version < 1 || format_version > kFormatVersion) format_version = kFormatVersion;
      write_json(meta, group_json(root_attributes()));
    }
  } else {
    if (foreign())
      throw UserError(root_.string() + " is not empty and not a mneme database: choose a new or empty directory");
    fs::create_directories(root_ / "kernels");
    fs::create_directories(staging());
    write_json(root_ / "kernels" / "zarr.json", group_json(""));
    write_json(meta, group_json(root_attributes()));  // last: this makes the directory a database
  }
  fs::create_directories(staging());
}

fs::path RecordingWriter::staging() const { return root_ / ".mneme" / "staging"; }

bool RecordingWriter::has_kernel(const std::string& static_hash) const {
  return fs::exists(root_ / "kernels" / static_hash / "zarr.json");
}

bool RecordingWriter::has_instance(const std::string& static_hash, const std::string& dyn) const {
  return fs::exists(root_ / "kernels" / static_hash / "instances" / dyn / "zarr.json");
}

uint64_t RecordingWriter::chunk_for(uint64_t size) const { return std::max<uint64_t>(1, std::min(chunk_size_, size)); }

fs::path RecordingWriter::new_staging_dir() const {
  static std::atomic<uint64_t> serial{0};
  fs::path dir = staging() / (std::to_string(getpid()) + "-" + hex16(std::random_device{}()) + "-" +
                              std::to_string(serial.fetch_add(1)));
  fs::create_directories(dir);
  return dir;
}

void RecordingWriter::write_group_metadata(const fs::path& dir) const {
  if (!make_dir(dir)) throw Error("cannot create " + dir.string());
  write_staged_json(dir / "zarr.json", group_json(""));
}

void RecordingWriter::write_array_metadata(const fs::path& dir, uint64_t size, const std::string& encoding,
                                           bool sparse) const {
  if (!make_dir(dir)) throw Error("cannot create " + dir.string());
  std::ostringstream m;
  m << "{\"zarr_format\": 3, \"node_type\": \"array\", \"shape\": [" << size
    << "], \"data_type\": \"uint8\", \"chunk_grid\": {\"name\": \"regular\", \"configuration\": "
       "{\"chunk_shape\": ["
    << chunk_for(size)
    << "]}}, \"chunk_key_encoding\": {\"name\": \"default\", \"configuration\": {\"separator\": "
       "\"/\"}}, \"fill_value\": 0, \"codecs\": [{\"name\": \"bytes\"}, {\"name\": \"zstd\", "
       "\"configuration\": {\"level\": "
    << level_ << ", \"checksum\": false}}, {\"name\": \"crc32c\"}], \"attributes\": {\"mneme\": "
    << "{\"encoding\": " << json_string(encoding) << (sparse ? ", \"sparse\": true" : "")
    << "}}, \"storage_transformers\": []}";
  write_staged_json(dir / "zarr.json", m.str());
}

uint64_t RecordingWriter::write_array(const fs::path& dir, const uint8_t* data, uint64_t size,
                                      const std::string& encoding, bool skip_zero_chunks, bool sparse) const {
  uint64_t chunk = chunk_for(size);
  fs::create_directories(dir / "c");
  uint64_t stored = 0;
  ChunkCodec codec(level_);
  for (uint64_t index = 0, start = 0; start < size; ++index, start += chunk) {
    uint64_t n = std::min(chunk, size - start);
    const uint8_t* piece = data + start;
    if ((skip_zero_chunks || sparse) && all_zero(piece, n)) continue;
    stored += write_chunk(dir, index, piece, n, chunk, codec);
  }
  write_array_metadata(dir, size, encoding, sparse);
  return stored;
}

void RecordingWriter::write_instance_metadata(const fs::path& node, const std::string& dyn, const InstanceInfo& inst,
                                              const std::vector<RegionRecord>& regions, uint64_t occurrences) const {
  // The last point before the commit: whatever the caller did, no instance the reader
  // refuses gets a zarr.json (the records are in the order they are stored).
  std::vector<size_t> stored(regions.size());
  for (size_t k = 0; k < stored.size(); ++k) stored[k] = k;
  auto [vas_base, vas_size] = range_of(inst);
  std::string problem = region_list_problem(regions, stored, vas_base, vas_size);
  if (!problem.empty())
    throw InvalidRegionsError("instance " + dyn + " not written: " + problem);
  std::ostringstream rs;
  for (size_t i = 0; i < regions.size(); ++i) {
    const auto& r = regions[i];
    rs << (i ? ", " : "") << "{\"name\": " << json_string(region_name(r.address)) << ", \"kind\": " << json_string(r.kind)
       << ", \"address\": " << r.address << ", \"size\": " << r.size
       << ", \"symbol\": " << (r.symbol.empty() ? "null" : json_string(r.symbol))
       << ", \"epilogue_encoding\": " << json_string(r.epilogue_encoding)
       << ", \"prologue_crc32c\": " << r.prologue_crc32c << ", \"epilogue_crc32c\": " << r.epilogue_crc32c;
    if (r.device >= 0) rs << ", \"device\": " << r.device;
    rs << "}";
  }
  std::ostringstream a;
  a << "{\"kind\": \"instance\", \"dynamic_hash\": " << json_string(dyn) << ", \"grid\": [" << inst.grid[0]
    << ", " << inst.grid[1] << ", " << inst.grid[2] << "], \"block\": [" << inst.block[0] << ", "
    << inst.block[1] << ", " << inst.block[2] << "], \"shared_mem\": " << inst.shared_mem
    << ", \"stream\": " << inst.stream << ", \"args_size\": " << inst.args.size()
    << ", \"occurrences\": " << occurrences << ", \"epilogue_format\": " << json_string(epilogue_format_)
    << ", \"regions\": [" << rs.str() << "], \"annotations\": {}, \"recorded\": " << json_string(now_iso())
    << ", \"address_space\": {\"base\": " << vas_base << ", \"size\": " << vas_size << "}";
  if (inst.device >= 0) a << ", \"device\": " << inst.device;
  if (uint64_t(inst.cluster[0]) * inst.cluster[1] * inst.cluster[2] > 1)
    a << ", \"cluster\": [" << inst.cluster[0] << ", " << inst.cluster[1] << ", " << inst.cluster[2] << "]";
  if (inst.cooperative) a << ", \"cooperative\": true";
  if (inst.capture != "all") a << ", \"capture\": " << json_string(inst.capture);
  a << "}";
  write_json(node / "zarr.json", group_json(a.str()));
}

std::pair<uint64_t, uint64_t> RecordingWriter::range_of(const InstanceInfo& inst) const {
  if (inst.vas_size) return {inst.vas_base, inst.vas_size};
  return {info_.vas_base, info_.vas_size};
}

bool RecordingWriter::commit_instance(const fs::path& node, const std::string& static_hash,
                                      const std::string& dyn) const {
  return commit(node, root_ / "kernels" / static_hash / "instances" / dyn);
}

std::string RecordingWriter::kernel_label(const std::string& static_hash) const {
  std::lock_guard<std::mutex> lock(names_->mutex);
  auto it = names_->by_hash.find(static_hash);
  return it == names_->by_hash.end() ? static_hash : it->second + " (" + static_hash + ")";
}

bool RecordingWriter::add_kernel(const KernelInfo& k) {
  {
    std::lock_guard<std::mutex> lock(names_->mutex);
    names_->by_hash[k.static_hash] = k.demangled_name.empty() ? k.name : k.demangled_name;
  }
  fs::path final_path = root_ / "kernels" / k.static_hash;
  if (fs::exists(final_path / "zarr.json")) return false;
  Staging stage(staging() / (std::to_string(getpid()) + "-" + hex16(std::random_device{}())));
  fs::path node = stage.dir() / k.static_hash;
  fs::create_directories(node / "instances");
  write_array(node / "ir", reinterpret_cast<const uint8_t*>(k.ir.data()), k.ir.size(), k.code, false);
  write_json(node / "instances" / "zarr.json", group_json(""));
  std::ostringstream a;
  a << "{\"kind\": \"kernel\", \"static_hash\": " << json_string(k.static_hash)
    << ", \"name\": " << json_string(k.name)
    << ", \"demangled_name\": " << json_string(k.demangled_name.empty() ? k.name : k.demangled_name)
    << ", \"params\": [";
  for (size_t i = 0; i < k.params.size(); ++i) {
    const auto& p = k.params[i];
    a << (i ? ", " : "") << "{\"size\": " << p.size << ", \"align\": " << p.align << ", \"offset\": " << p.offset
      << ", \"is_pointer\": " << (p.is_pointer ? "true" : "false")
      << ", \"by_value\": " << (p.by_value ? "true" : "false") << "}";
  }
  a << "], \"globals\": [";
  for (size_t i = 0; i < k.globals.size(); ++i) {
    const auto& g = k.globals[i];
    a << (i ? ", " : "") << "{\"name\": " << json_string(g.name) << ", \"size\": " << g.size
      << ", \"address_space\": " << g.address_space << "}";
  }
  a << "], \"launch_bounds\": null";
  if (k.code != "llvm-bitcode") a << ", \"code\": " << json_string(k.code);
  if (!k.origin.empty()) a << ", \"origin\": " << json_string(k.origin);
  a << ", \"ir_size\": " << k.ir.size()
    << ", \"ir_crc32c\": " << crc32c(reinterpret_cast<const uint8_t*>(k.ir.data()), k.ir.size()) << "}";
  write_json(node / "zarr.json", group_json(a.str()));
  return commit(node, final_path);
}

void RecordingWriter::count_occurrence(const std::string& static_hash, const std::string& dyn) {
  count_occurrences(static_hash, dyn, 1);
}

void RecordingWriter::count_occurrences(const std::string& static_hash, const std::string& dyn, uint64_t more) {
  fs::path meta = root_ / "kernels" / static_hash / "instances" / dyn / "zarr.json";
  fs::path lock_path = root_ / ".mneme" / "lock";
  int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (fd < 0) throw Error("cannot open " + lock_path.string());
  ::flock(fd, LOCK_EX);
  std::string text = read_text(meta);
  const std::string key = "\"occurrences\": ";
  size_t at = text.find(key);
  if (at != std::string::npos) {
    size_t start = at + key.size(), end = start;
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    uint64_t count = std::stoull(text.substr(start, end - start)) + more;
    text.replace(start, end - start, std::to_string(count));
    write_json(meta, text);
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  if (at == std::string::npos) throw Error(meta.string() + ": malformed instance metadata");
}

std::pair<std::string, bool> RecordingWriter::add_instance(const std::string& static_hash,
                                                           const InstanceInfo& inst) {
  if (!has_kernel(static_hash)) throw Error("kernel " + static_hash + " is not stored: add_kernel first");
  std::string dyn = dynamic_hash(static_hash, inst);
  if (has_instance(static_hash, dyn)) {
    count_occurrence(static_hash, dyn);
    return {dyn, false};
  }
  std::vector<size_t> order(inst.regions.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  order_regions(inst.regions, order);
  auto [vas_base, vas_size] = range_of(inst);
  std::string problem = region_list_problem(inst.regions, order, vas_base, vas_size);
  if (!problem.empty())
    throw InvalidRegionsError("instance " + dyn + " of kernel " + kernel_label(static_hash) + " not written: " + problem);
  std::vector<RegionSnapshot> regions;
  for (size_t index : order) regions.push_back(inst.regions[index]);
  Staging stage(new_staging_dir());
  fs::path node = stage.dir() / dyn;
  fs::create_directories(node / "prologue");
  fs::create_directories(node / "epilogue");
  write_array(node / "args", reinterpret_cast<const uint8_t*>(inst.args.data()), inst.args.size(), "bytes", false);
  write_json(node / "prologue" / "zarr.json", group_json(""));
  write_json(node / "epilogue" / "zarr.json", group_json(""));
  std::vector<RegionRecord> records;
  std::vector<uint8_t> delta;
  for (const auto& r : regions) {
    std::string name = region_name(r.address);
    write_array(node / "prologue" / name, r.before, r.size, "bytes", true, true);  // sparse
    std::string encoding = "xor-prologue";
    fs::path epi = node / "epilogue" / name;
    if (epilogue_format_ == "bytes") {
      encoding = "bytes";
      write_array(epi, r.after, r.size, "bytes", false);
    } else {
      delta.resize(r.size);
      for (uint64_t b = 0; b < r.size; ++b) delta[b] = r.before[b] ^ r.after[b];
      uint64_t delta_size = write_array(epi, delta.data(), r.size, encoding, true);
      if (epilogue_format_ == "best") {
        fs::path alt = node / "epilogue" / (name + ".bytes");
        if (write_array(alt, r.after, r.size, "bytes", false) < delta_size) {
          fs::remove_all(epi);
          fs::rename(alt, epi);
          encoding = "bytes";
        } else {
          fs::remove_all(alt);
        }
      }
    }
    records.push_back({r.kind, r.address, r.size, r.symbol, encoding, crc32c(r.before, r.size),
                       crc32c(r.after, r.size), r.device});
  }
  write_instance_metadata(node, dyn, inst, records, 1);
  if (commit_instance(node, static_hash, dyn)) return {dyn, true};
  count_occurrence(static_hash, dyn);
  return {dyn, false};
}

}  // namespace mneme::runtime
