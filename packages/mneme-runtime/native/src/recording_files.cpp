// Files written whole and folders made for the recording writer (recording_files.hpp).
#include "recording_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "mneme/runtime/errors.hpp"

namespace fs = std::filesystem;

namespace mneme::runtime {

bool put_all(int fd, ChunkBytes bytes) {
  size_t done = 0;
  while (done < bytes.size) {
    ssize_t put = ::write(fd, bytes.data + done, bytes.size - done);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      if (put == 0) errno = EIO;
      return false;
    }
    done += size_t(put);
  }
  return true;
}

void write_all(const fs::path& path, ChunkBytes bytes, int flags) {
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0 && errno == ENOENT) {
    std::error_code ec;
    fs::create_directories(path.parent_path(), ec);
    fd = ::open(path.c_str(), flags, 0644);
  }
  if (fd < 0) throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
  if (!put_all(fd, bytes)) {
    int err = errno;
    ::close(fd);
    throw Error("cannot write " + path.string() + ": " + std::strerror(err));
  }
  if (::close(fd) != 0) throw Error("cannot write " + path.string() + ": " + std::strerror(errno));
}

bool make_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) return true;
  std::error_code ec;
  fs::create_directories(dir, ec);
  return !ec;
}

bool make_chunk_dir(const fs::path& dir) {
  fs::path c = dir / "c";
  if (::mkdir(c.c_str(), 0755) == 0 || errno == EEXIST) return true;
  if (errno != ENOENT) return false;
  return make_dir(dir) && (::mkdir(c.c_str(), 0755) == 0 || errno == EEXIST);
}

}  // namespace mneme::runtime
