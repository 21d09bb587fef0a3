// Stream compaction the way particle codes and graph frontiers do it: every thread that
// keeps its element claims an output slot with atomicAdd on a global counter, so the kept
// elements land in a different order on every run (the set and the count never change).
// Elements are 8-byte records (key, payload). The program checks the result as a set.
#include <algorithm>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

struct Particle {
  unsigned key;
  float energy;
};

__global__ void select_hot(const Particle *in, int n, float threshold, Particle *out, unsigned *count) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && in[i].energy > threshold) {
    unsigned slot = atomicAdd(count, 1u);
    out[slot] = in[i];
  }
}

int main() {
  const int n = 1 << 18;
  std::vector<Particle> host(n);
  for (int i = 0; i < n; ++i) {
    unsigned x = (unsigned)i * 2654435761u;
    host[i] = Particle{(unsigned)i, (float)((x >> 8) % 1000) * 0.001f};
  }
  Particle *in, *out;
  unsigned *count;
  const size_t bytes = n * sizeof(Particle);
  CORPUS_CHECK(cudaMalloc(&in, bytes));
  CORPUS_CHECK(cudaMalloc(&out, bytes));
  CORPUS_CHECK(cudaMalloc(&count, sizeof(unsigned)));
  CORPUS_CHECK(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(out, 0, bytes));
  unsigned long long digest = 0;
  const float thresholds[] = {0.9f, 0.5f};
  for (float threshold : thresholds) {
    CORPUS_CHECK(cudaMemset(count, 0, sizeof(unsigned)));
    { corpus::Launch l("select_hot(Particle const*, int, float, Particle*, unsigned int*)",
                       {corpus::buffer("in", in, bytes), corpus::buffer("out", out, bytes),
                        corpus::buffer("count", count, sizeof(unsigned))});
      l.before(); select_hot<<<(n + 255) / 256, 256>>>(in, n, threshold, out, count); l.after(); }
    unsigned kept = 0;
    CORPUS_CHECK(cudaMemcpy(&kept, count, sizeof kept, cudaMemcpyDeviceToHost));
    std::vector<Particle> got(kept);
    CORPUS_CHECK(cudaMemcpy(got.data(), out, kept * sizeof(Particle), cudaMemcpyDeviceToHost));
    std::sort(got.begin(), got.end(), [](const Particle &a, const Particle &b) { return a.key < b.key; });
    std::vector<Particle> want;
    for (const auto &p : host)
      if (p.energy > threshold) want.push_back(p);
    CORPUS_REQUIRE(got.size() == want.size(), "as many particles kept as are hot");
    for (size_t i = 0; i < want.size(); ++i) CORPUS_REQUIRE(got[i].key == want[i].key, "the hot particles, each once");
    digest = digest * 1099511628211ull ^ corpus::fnv1a64(got.data(), got.size() * sizeof(Particle));
  }
  corpus::output("kept-sorted", digest);
  corpus::result_ok();
  return 0;
}
