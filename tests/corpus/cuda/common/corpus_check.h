// Checksum protocol shared by every CUDA corpus program (see tests/corpus/README.md).
//
// Around every kernel launch a program reports each device region the kernel can touch:
//
//   corpus::Launch launch("void scale<float>(float*, int)",
//                         {corpus::buffer("x", d_x, bytes), CORPUS_SYMBOL(g_total)});
//   launch.before();
//   scale<<<grid, block>>>(d_x, n);
//   launch.after();
//
// which prints, per region and phase,
//   MNEME-CHECK <launch-index> <kernel> <before|after> <label> <size-bytes> <fnv1a64-hex>
// A part of an allocation (corpus::slice: a neighbour's boundary row) is labelled
// <label>@<device address in hex>, so that a checker finds it inside the region that
// holds it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <vector>

// Any failing CUDA runtime call ends the program with exit status 1 and one line on stderr.
#define CORPUS_CHECK(call) ::corpus::check_cuda((call), #call, __FILE__, __LINE__)

// The program's own result check: exit status 2 with the reason when it does not hold.
#define CORPUS_REQUIRE(cond, what)                                                        \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "MNEME-RESULT fail %s:%d: %s\n", __FILE__, __LINE__, (what)); \
      std::exit(2);                                                                       \
    }                                                                                     \
  } while (0)

// A __device__ or __constant__ variable, labelled global:<name>.
#define CORPUS_SYMBOL(sym) ::corpus::symbol("global:" #sym, (const void *)&(sym), sizeof(sym))

namespace corpus {

inline void check_cuda(cudaError_t err, const char *what, const char *file, int line) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "corpus: %s:%d: %s failed: %s (%s)\n", file, line, what,
                 cudaGetErrorName(err), cudaGetErrorString(err));
    std::exit(1);
  }
}

inline uint64_t fnv1a64(const void *data, size_t bytes) {
  const unsigned char *p = static_cast<const unsigned char *>(data);
  uint64_t hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < bytes; ++i) {
    hash ^= p[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

struct Region {
  const char *label;    // no whitespace
  const void *address;  // device pointer, or the symbol for a device global
  size_t bytes;
  bool is_symbol;
  bool is_slice = false;  // part of an allocation: the label carries the address
};

inline Region buffer(const char *label, const void *device_ptr, size_t bytes) {
  return Region{label, device_ptr, bytes, false};
}

inline Region slice(const char *label, const void *device_ptr, size_t bytes) {
  return Region{label, device_ptr, bytes, false, true};
}

inline Region symbol(const char *label, const void *sym, size_t bytes) {
  return Region{label, sym, bytes, true};
}

inline void print_check(int launch, const char *kernel, const char *phase, const char *label,
                        const void *host_bytes, size_t bytes) {
  std::printf("MNEME-CHECK %d %s %s %s %zu %016llx\n", launch, kernel, phase, label, bytes,
              (unsigned long long)fnv1a64(host_bytes, bytes));
}

// Launches are numbered in program order across the whole program, from 0.
inline int next_launch_index() {
  static int next = 0;
  return next++;
}

class Launch {
 public:
  Launch(const char *kernel, std::initializer_list<Region> regions)
      : kernel_(kernel), regions_(regions), index_(next_launch_index()) {}

  void before() { report("before"); }

  // Also surfaces launch-configuration errors and faults of the kernel itself.
  void after() {
    CORPUS_CHECK(cudaGetLastError());
    report("after");
  }

  int index() const { return index_; }

 private:
  void report(const char *phase) {
    CORPUS_CHECK(cudaDeviceSynchronize());
    for (const Region &r : regions_) {
      std::vector<unsigned char> host(r.bytes);
      if (r.bytes > 0) {
        if (r.is_symbol)
          CORPUS_CHECK(cudaMemcpyFromSymbol(host.data(), r.address, r.bytes, 0,
                                            cudaMemcpyDeviceToHost));
        else
          CORPUS_CHECK(cudaMemcpy(host.data(), r.address, r.bytes, cudaMemcpyDeviceToHost));
      }
      char label[256];
      if (r.is_slice)
        std::snprintf(label, sizeof label, "%s@%llx", r.label,
                      (unsigned long long)reinterpret_cast<uintptr_t>(r.address));
      print_check(index_, kernel_, phase, r.is_slice ? label : r.label, host.data(), r.bytes);
    }
    // Flushed now so the lines survive a later crash (stdout to a pipe is fully buffered).
    std::fflush(stdout);
  }

  const char *kernel_;
  std::vector<Region> regions_;
  int index_;
};

inline void result_ok() {
  std::printf("MNEME-RESULT ok\n");
  std::fflush(stdout);
}

}  // namespace corpus
