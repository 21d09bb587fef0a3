// A kernel that reaches a second buffer through a pointer it computes from an integer:
// the distance between two allocations, passed as a plain integer (as codes that pack
// several arrays into one "arena" and pass offsets do). `--capture reachable` cannot see
// that buffer; its replay must fault or fail verification, never pass silently.
#include <cstdint>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"

__global__ void add_far(float *a, long long distance, int n) {
  float *b = reinterpret_cast<float *>(reinterpret_cast<char *>(a) + distance);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] += 2.0f * a[i];
}

int main() {
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(float);
  float *a, *b;
  CORPUS_CHECK(cudaMalloc(&a, bytes));
  CORPUS_CHECK(cudaMalloc(&b, bytes));
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = (float)(i % 100);
  CORPUS_CHECK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice));
  long long distance = reinterpret_cast<char *>(b) - reinterpret_cast<char *>(a);
  { corpus::Launch l("add_far(float*, long long, int)", {corpus::buffer("a", a, bytes), corpus::buffer("b", b, bytes)});
    l.before(); add_far<<<n / 256, 256>>>(a, distance, n); l.after(); }
  CORPUS_CHECK(cudaMemcpy(host.data(), b, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(host[i] == 3.0f * (float)(i % 100), "b += 2a");
  corpus::output("b", corpus::fnv1a64(host.data(), bytes));
  corpus::result_ok();
  return 0;
}
