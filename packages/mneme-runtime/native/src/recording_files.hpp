// Files and folders of a recording database as the writer and its chunk store make them: a
// file written whole through its descriptor, and folders made with the fewest calls.
#pragma once

#include <filesystem>

#include "mneme/runtime/recording_writer.hpp"

namespace mneme::runtime {

// Writes all of `bytes` to `fd` (left open); false with errno set.
bool put_all(int fd, ChunkBytes bytes);
// The whole of `bytes` into the file at `path`, opened with `flags` (its folder made when
// missing).
void write_all(const std::filesystem::path& path, ChunkBytes bytes, int flags);
// A folder whose parent exists (the usual case inside a staged node): one mkdir, not
// create_directories' stat of every component; the whole path when the parent is missing.
bool make_dir(const std::filesystem::path& dir);
// An array's chunk folder `dir/c`, and `dir` first when it is missing.
bool make_chunk_dir(const std::filesystem::path& dir);

}  // namespace mneme::runtime
