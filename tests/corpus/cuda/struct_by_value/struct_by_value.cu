// Structs passed to kernels by value: mixed-size fields with padding, a struct holding a
// device pointer, an over-aligned struct and a large (128-byte) struct.
#include <cstddef>
#include <cstring>

#include "corpus_check.h"

struct Mixed {     // offsets: tag 0, scale 8, shift 16, count 20, flags 24, out 32; size 40
  char tag;        // 7 bytes of padding follow
  double scale;
  short shift;     // 2 bytes of padding follow
  int count;
  char flags[3];   // 5 bytes of padding follow
  float *out;
};
static_assert(sizeof(Mixed) == 40 && offsetof(Mixed, out) == 32, "Mixed layout");

struct Vec3 {
  float x, y, z;
};

struct alignas(16) Aligned {  // 32 bytes
  float4 v;
  int k;
};

struct Big {
  int values[32];
};

__global__ void apply_mixed(Mixed m, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || i >= m.count) return;
  float flag_sum = (float)(m.flags[0] + m.flags[1] + m.flags[2]);
  m.out[i] = (float)((double)in[i] * m.scale) + (float)(m.shift + m.tag) + flag_sum;
}

__global__ void translate(Vec3 offset, Vec3 scale, Vec3 *points, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Vec3 p = points[i];
  points[i] = Vec3{p.x * scale.x + offset.x, p.y * scale.y + offset.y, p.z * scale.z + offset.z};
}

__global__ void weigh(Big w, int *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = w.values[i % 32] * (i / 32);
}

__global__ void aligned_kernel(Aligned a, float4 *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = make_float4(a.v.x * i, a.v.y + i, a.v.z - i, a.v.w * (float)a.k);
}

int main() {
  const int n = 512;
  float *in, *out;
  Vec3 *points;
  int *weights;
  float4 *quads;
  CORPUS_CHECK(cudaMalloc(&in, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&out, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&points, n * sizeof(Vec3)));
  CORPUS_CHECK(cudaMalloc(&weights, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&quads, n * sizeof(float4)));
  std::vector<float> hin(n);
  std::vector<Vec3> hpoints(n);
  for (int i = 0; i < n; ++i) {
    hin[i] = 0.5f * (float)(i % 40);
    hpoints[i] = Vec3{(float)i, (float)(i % 7), -(float)(i % 5)};
  }
  CORPUS_CHECK(cudaMemcpy(in, hin.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(points, hpoints.data(), n * sizeof(Vec3), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(weights, 0, n * sizeof(int)));
  CORPUS_CHECK(cudaMemset(quads, 0, n * sizeof(float4)));

  Mixed m;
  std::memset(&m, 0, sizeof(m));  // deterministic padding in the parameter buffer
  m.tag = 3;
  m.scale = 1.5;
  m.shift = -2;
  m.count = n - 12;
  m.flags[0] = 1; m.flags[1] = 2; m.flags[2] = 4;
  m.out = out;
  Vec3 offset{1.0f, -2.0f, 0.5f}, scale{2.0f, 0.5f, -1.0f};
  Big big;
  for (int j = 0; j < 32; ++j) big.values[j] = j * j - 5;
  Aligned al;
  std::memset(&al, 0, sizeof(al));
  al.v = make_float4(0.5f, 1.0f, 2.0f, 4.0f);
  al.k = 3;

  { corpus::Launch l("apply_mixed(Mixed, float const*, int)",
                     {corpus::buffer("in", in, n * sizeof(float)), corpus::buffer("out", out, n * sizeof(float))});
    l.before(); apply_mixed<<<n / 128, 128>>>(m, in, n); l.after(); }
  { corpus::Launch l("translate(Vec3, Vec3, Vec3*, int)", {corpus::buffer("points", points, n * sizeof(Vec3))});
    l.before(); translate<<<n / 64, 64>>>(offset, scale, points, n); l.after(); }
  { corpus::Launch l("weigh(Big, int*, int)", {corpus::buffer("weights", weights, n * sizeof(int))});
    l.before(); weigh<<<n / 256, 256>>>(big, weights, n); l.after(); }
  { corpus::Launch l("aligned_kernel(Aligned, float4*, int)", {corpus::buffer("quads", quads, n * sizeof(float4))});
    l.before(); aligned_kernel<<<n / 128, 128>>>(al, quads, n); l.after(); }

  std::vector<float> hout(n);
  std::vector<int> hw(n);
  std::vector<float4> hq(n);
  CORPUS_CHECK(cudaMemcpy(hout.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hpoints.data(), points, n * sizeof(Vec3), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hw.data(), weights, n * sizeof(int), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hq.data(), quads, n * sizeof(float4), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    float expect = i < m.count ? (float)(hin[i] * 1.5) + 1.0f + 7.0f : 0.0f;
    CORPUS_REQUIRE(hout[i] == expect, "apply_mixed");
    CORPUS_REQUIRE(hpoints[i].x == 2.0f * i + 1.0f && hpoints[i].z == (float)(i % 5) + 0.5f, "translate");
    CORPUS_REQUIRE(hw[i] == big.values[i % 32] * (i / 32), "weigh");
    CORPUS_REQUIRE(hq[i].y == 1.0f + i && hq[i].w == 12.0f, "aligned_kernel");
  }
  CORPUS_CHECK(cudaFree(in));
  CORPUS_CHECK(cudaFree(out));
  CORPUS_CHECK(cudaFree(points));
  CORPUS_CHECK(cudaFree(weights));
  CORPUS_CHECK(cudaFree(quads));
  corpus::result_ok();
  return 0;
}
