// Chunks as the database stores them: ChunkCodec encodes (padding, zstd, CRC-32C) and
// decodes them; RecordingWriter::write_chunk stores each distinct chunk once, in the content
// store (.mneme/chunks), and links the array's chunk file to it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/recording_writer.hpp"
#include "recording_files.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {

ChunkCodec::ChunkCodec(int level) : cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()), level_(level) {
  if (!cctx_ || !dctx_) throw Error("zstd: cannot create a context");
}

ChunkCodec::~ChunkCodec() {
  ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_));
  ZSTD_freeDCtx(static_cast<ZSTD_DCtx*>(dctx_));
}

namespace {
using StageClock = std::chrono::steady_clock;
double since(StageClock::time_point start) {
  return std::chrono::duration<double>(StageClock::now() - start).count();
}
}  // namespace

ChunkBytes ChunkCodec::encode(const uint8_t* data, uint64_t n, uint64_t chunk) {
  auto start = StageClock::now();
  if (n < chunk) {  // Zarr pads the last chunk of an array to the full chunk shape
    if (padded_.size() < chunk) padded_.resize(chunk);
    std::memcpy(padded_.data(), data, n);
    std::memset(padded_.data() + n, 0, chunk - n);
    data = padded_.data();
  }
  // The buffer keeps its size between chunks: resizing it down to each frame and back up
  // zero-filled megabytes per chunk.
  size_t bound = ZSTD_compressBound(chunk) + 4;
  if (compressed_.size() < bound) compressed_.resize(bound);
  size_t z = ZSTD_compressCCtx(static_cast<ZSTD_CCtx*>(cctx_), compressed_.data(), bound - 4, data, chunk, level_);
  if (ZSTD_isError(z)) throw Error(std::string("zstd: ") + ZSTD_getErrorName(z));
  uint32_t crc = crc32c(compressed_.data(), z);
  for (int b = 0; b < 4; ++b) compressed_[z + b] = static_cast<uint8_t>(crc >> (8 * b));
  times.encode_s += since(start);
  return {compressed_.data(), z + 4};
}

void ChunkCodec::decode_file(const fs::path& file, uint8_t* out, uint64_t chunk) {
  auto start = StageClock::now();
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot read " + file.string() + ": " + std::strerror(errno));
  file_.clear();
  uint8_t buffer[1 << 16];
  for (;;) {
    ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    file_.insert(file_.end(), buffer, buffer + got);
  }
  ::close(fd);
  if (file_.size() < 4) throw Error(file.string() + ": truncated chunk");
  size_t z = file_.size() - 4;
  uint32_t stored = 0;
  for (int b = 0; b < 4; ++b) stored |= uint32_t(file_[z + b]) << (8 * b);
  if (crc32c(file_.data(), z) != stored) throw Error(file.string() + ": chunk checksum mismatch");
  size_t got = ZSTD_decompressDCtx(static_cast<ZSTD_DCtx*>(dctx_), out, chunk, file_.data(), z);
  if (ZSTD_isError(got) || got != chunk) throw Error(file.string() + ": chunk does not decode");
  times.decode_s += since(start);
}

namespace {

// Unnamed files (O_TMPFILE: Linux 3.11, ext4, XFS, btrfs, tmpfs) until a file system or the
// process's privileges refuse them; then named temporaries.
std::atomic<bool> g_named_temporaries{false};


// Gives the unnamed file `fd` the name `name`: 0, or errno (EEXIST: the name is taken).
int link_unnamed(int fd, const fs::path& name) {
  char proc[40];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (::linkat(AT_FDCWD, proc, AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) return 0;
  int err = errno;
  if (err == EEXIST) return err;
  // No /proc: the descriptor itself (needs CAP_DAC_READ_SEARCH on older kernels).
  if (::linkat(fd, "", AT_FDCWD, name.c_str(), AT_EMPTY_PATH) == 0) return 0;
  return errno == EEXIST ? EEXIST : err;
}

}  // namespace

fs::path RecordingWriter::stored_chunk(const std::string& content, uint64_t chunk) const {
  char suffix[48];
  std::snprintf(suffix, sizeof suffix, "-%llx-%d", static_cast<unsigned long long>(chunk), level_);
  return root_ / ".mneme" / "chunks" / content.substr(0, 2) / (content + suffix);
}

bool RecordingWriter::link_chunk(const fs::path& dir, uint64_t index, const std::string& content,
                                 uint64_t chunk) const {
  // The chunk file as a link to the store entry; the array's folders are made on the way
  // (one mkdir each when the node's folder exists, as it does in the pipeline).
  fs::path stored = stored_chunk(content, chunk), path = dir / "c" / std::to_string(index);
  if (::link(stored.c_str(), path.c_str()) == 0) return true;
  if (errno != ENOENT || !make_chunk_dir(dir)) return false;
  return ::link(stored.c_str(), path.c_str()) == 0;
}

std::string RecordingWriter::next_generation(const std::string& content, uint64_t chunk) const {
  size_t dot = content.find('.');
  int generation = dot == std::string::npos ? 1 : std::atoi(content.c_str() + dot + 1) + 1;
  std::string next = content.substr(0, dot) + "." + std::to_string(generation);
  fs::path from = stored_chunk(content, chunk), to = stored_chunk(next, chunk);
  struct stat st {};
  if (::stat(to.c_str(), &st) == 0) return next;  // another thread made it
  // Published by a link, as write_chunk publishes: never seen half-copied.
  static std::atomic<uint64_t> serial{0};
  fs::path temporary = to.parent_path() / (".gen-" + std::to_string(getpid()) + "-" + std::to_string(serial++));
  std::error_code ec;
  if (!fs::copy_file(from, temporary, ec) || ec) return "";
  bool published = ::link(temporary.c_str(), to.c_str()) == 0 || errno == EEXIST;
  ::unlink(temporary.c_str());
  return published ? next : "";
}

bool RecordingWriter::copy_chunk(const fs::path& dir, uint64_t index, const std::string& content, uint64_t chunk) const {
  fs::path stored = stored_chunk(content, chunk), path = dir / "c" / std::to_string(index);
  std::error_code ec;
  if (!fs::exists(dir / "c", ec)) make_chunk_dir(dir);
  return fs::copy_file(stored, path, fs::copy_options::overwrite_existing, ec) && !ec;
}

uint64_t RecordingWriter::write_chunk(const fs::path& dir, uint64_t index, const uint8_t* data, uint64_t n,
                                      uint64_t chunk, ChunkCodec& codec, std::string* content) const {
  fs::path path = dir / "c" / std::to_string(index);
  // The content store: one copy per distinct (bytes, chunk length, level).
  auto start = StageClock::now();
  std::string digest = chunk_digest(data, n);
  codec.times.hash_s += since(start);
  fs::path stored = stored_chunk(digest, chunk);
  auto link_chunk = [&] {
    bool linked = this->link_chunk(dir, index, digest, chunk);
    if (linked && content) *content = digest;  // (a plain chunk file leaves it empty)
    return linked;
  };
  struct stat st {};
  if (::stat(stored.c_str(), &st) == 0) {
    if (link_chunk()) {  // already in the database
      ++codec.times.deduplicated;
      return 0;
    }
    // a file system without hard links, or the store entry just collected: write it
  }
  ChunkBytes bytes = codec.encode(data, n, chunk);
  start = StageClock::now();
  struct WriteTimer {  // every way out of here counts as writing
    ChunkCodec& codec;
    StageClock::time_point start;
    ~WriteTimer() { codec.times.write_s += since(start); }
  } timer{codec, start};
  // Published by a link, not a rename: of writers (threads or processes) racing to store
  // the same bytes the first wins, and the others link to its entry instead of replacing
  // it under the chunks already linked to it; the content stays one inode.
  auto linked = [&](bool published, bool lost_race) -> int64_t {  // -1: write a plain file
    if ((published || lost_race) && link_chunk()) {
      if (published) return int64_t(bytes.size);
      ++codec.times.deduplicated;
      return 0;
    }
    return -1;
  };
  fs::path shard = stored.parent_path();
  if (!g_named_temporaries.load(std::memory_order_relaxed)) {
    // An unnamed file in the store's folder, named by the link that publishes it: no
    // temporary name to create and remove (two directory operations per chunk), and a
    // writer killed before the link leaves nothing behind.
    int fd = ::open(shard.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT && make_dir(shard)) fd = ::open(shard.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (put_all(fd, bytes)) {
        int err = link_unnamed(fd, stored);
        ::close(fd);
        if (err == 0 || err == EEXIST) {
          int64_t result = linked(err == 0, err == EEXIST);
          if (result >= 0) return uint64_t(result);
        } else {
          g_named_temporaries = true;  // cannot name unnamed files here: named temporaries
        }
      } else {
        ::close(fd);
      }
    } else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
      g_named_temporaries = true;  // the file system has no unnamed files
    }
  }
  if (g_named_temporaries.load(std::memory_order_relaxed)) {
    static std::atomic<uint64_t> serial{0};
    fs::path temporary = shard / (".tmp-" + std::to_string(getpid()) + "-" + std::to_string(serial++));
    try {
      write_all(temporary, bytes, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC);
      bool published = ::link(temporary.c_str(), stored.c_str()) == 0;
      bool lost_race = !published && errno == EEXIST;
      ::unlink(temporary.c_str());
      int64_t result = linked(published, lost_race);
      if (result >= 0) return uint64_t(result);
    } catch (const Error&) {
      ::unlink(temporary.c_str());
    }
  }
  make_chunk_dir(dir);
  write_all(path, bytes, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC);  // no store: a plain chunk file
  return bytes.size;
}

}  // namespace mneme::runtime
