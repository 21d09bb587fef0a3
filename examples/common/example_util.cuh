// Helpers shared by the mneme example applications (examples/README.md).
//
// * command-line parsing: `--name VALUE` or `--name=VALUE`; a bad argument prints one line
//   and exits 64, as the corpus programs do;
// * launch-shape-independent thread indexing: every kernel of the examples computes the
//   same result for any block shape and any grid that covers its work, so a replay may
//   change both (mneme tune --space launch);
// * `checked_launch`: the corpus checksum protocol (tests/corpus/README.md) around one
//   kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "corpus_check.h"

// Floating-point contraction: the application's build, the host reference and a replay
// under any LLVM pipeline must round the same way (bit-identical results). Every
// multiply-add of the kernels is therefore an explicit fma()/fmaf(), and no multiply feeds
// an add otherwise: clang's CUDA default, -ffp-contract=fast, lets the backend fuse such a
// pair whatever the IR says, while a replay's backend fuses only IR marked `contract`. The
// pragma keeps those marks out of the kernels' IR (tests/examples checks both).
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace example {

// ---------------------------------------------------------------- device indexing

// Rank of this thread in its block, for any block shape (x fastest).
__device__ inline int thread_rank() {
  return (int)((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x);
}

__device__ inline int block_threads() { return (int)(blockDim.x * blockDim.y * blockDim.z); }

// Rank of this block in the grid and the number of blocks, for any grid shape.
__device__ inline long long block_rank() {
  return ((long long)blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
}

__device__ inline long long grid_blocks() {
  return (long long)gridDim.x * gridDim.y * gridDim.z;
}

// Global rank of this thread and the total number of threads: the start and the stride of
// a grid-stride loop that visits every element exactly once for any launch shape.
__device__ inline long long global_rank() { return block_rank() * block_threads() + thread_rank(); }

__device__ inline long long grid_threads() { return grid_blocks() * block_threads(); }

// ---------------------------------------------------------------- host side

inline long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

// Walks argv: `--name VALUE` and `--name=VALUE`.
class Args {
 public:
  Args(int argc, char **argv, const char *usage) : argc_(argc), argv_(argv), usage_(usage) {
    const char *slash = std::strrchr(argv[0], '/');
    program_ = slash ? slash + 1 : argv[0];
  }

  // Advances to the next option; false at the end. Sets name() and value().
  bool next() {
    if (index_ >= argc_) return false;
    const char *arg = argv_[index_++];
    if (std::strcmp(arg, "-h") == 0 || std::strcmp(arg, "--help") == 0) {
      std::printf("usage: %s %s\n", program_, usage_);
      std::exit(0);
    }
    if (std::strncmp(arg, "--", 2) != 0) fail("unexpected argument '%s'", arg);
    const char *eq = std::strchr(arg, '=');
    if (eq) {
      size_t len = (size_t)(eq - arg);
      if (len >= sizeof(name_)) fail("unknown option '%s'", arg);
      std::memcpy(name_, arg, len);
      name_[len] = '\0';
      value_ = eq + 1;
    } else {
      if (std::strlen(arg) >= sizeof(name_)) fail("unknown option '%s'", arg);
      std::strcpy(name_, arg);
      if (index_ >= argc_) fail("option '%s' needs a value", arg);
      value_ = argv_[index_++];
    }
    return true;
  }

  bool is(const char *option) const { return std::strcmp(name_, option) == 0; }
  const char *value() const { return value_; }

  long long integer(long long lo, long long hi) const {
    char *end = nullptr;
    errno = 0;
    long long v = std::strtoll(value_, &end, 10);
    if (errno != 0 || end == value_ || *end != '\0' || v < lo || v > hi) {
      fail("%s wants an integer in [%lld, %lld], not '%s'", name_, lo, hi, value_);
    }
    return v;
  }

  double real(double lo, double hi) const {
    char *end = nullptr;
    errno = 0;
    double v = std::strtod(value_, &end);
    if (errno != 0 || end == value_ || *end != '\0' || !(v >= lo && v <= hi)) {
      fail("%s wants a number in [%g, %g], not '%s'", name_, lo, hi, value_);
    }
    return v;
  }

  [[noreturn]] void unknown() const { fail("unknown option '%s'", name_); }

  // One line on stderr, the usage, exit status 64.
  [[noreturn]] __attribute__((format(printf, 2, 3))) void fail(const char *fmt, ...) const {
    std::fprintf(stderr, "%s: error: ", program_);
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\nusage: %s %s\n", program_, usage_);
    std::exit(64);
  }

  const char *program() const { return program_; }

 private:
  int argc_;
  char **argv_;
  const char *usage_;
  const char *program_;
  int index_ = 1;
  char name_[64] = {0};
  const char *value_ = nullptr;
};

// One kernel launch under the checksum protocol: MNEME-CHECK lines for every region the
// kernel can touch before and after it, then cudaGetLastError().
// Launches made through checked_launch so far.
inline int &launch_count() {
  static int count = 0;
  return count;
}

template <class LaunchFn>
void checked_launch(const char *kernel, std::initializer_list<corpus::Region> regions,
                    LaunchFn &&launch) {
  corpus::Launch l(kernel, regions);
  l.before();
  launch();
  l.after();
  ++launch_count();
}

}  // namespace example
