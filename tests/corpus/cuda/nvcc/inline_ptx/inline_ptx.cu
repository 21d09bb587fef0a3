// Inline PTX (asm volatile) in kernels: special registers (%laneid), a 64-bit add from
// 32-bit halves with carry (add.cc/addc), bit reversal (brev), byte permute (prmt), lop3,
// fma.rn and a predicate set with setp/selp. Results are checked on the host.
#include <cstdint>
#include <cstring>

#include "corpus_check.h"

__device__ unsigned lane_id() {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}

__global__ void bit_tricks(const unsigned *in, unsigned *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned x = in[i], reversed, permuted, mixed, smaller;
  asm("brev.b32 %0, %1;" : "=r"(reversed) : "r"(x));
  asm("prmt.b32 %0, %1, 0, 0x0123;" : "=r"(permuted) : "r"(x));  // byte swap
  // lop3 with immLut 0x96: a ^ b ^ c
  asm("lop3.b32 %0, %1, %2, %3, 0x96;" : "=r"(mixed) : "r"(x), "r"(reversed), "r"(permuted));
  asm("{\n\t.reg .pred p;\n\tsetp.lt.u32 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(smaller)
      : "r"(x), "r"(reversed));
  out[4 * i + 0] = reversed;
  out[4 * i + 1] = permuted;
  out[4 * i + 2] = mixed;
  out[4 * i + 3] = smaller | (lane_id() << 1);
}

__global__ void wide_add(const uint2 *a, const uint2 *b, uint2 *c, float *fused, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint2 r;
  asm("add.cc.u32 %0, %2, %4;\n\taddc.u32 %1, %3, %5;"
      : "=r"(r.x), "=r"(r.y)
      : "r"(a[i].x), "r"(a[i].y), "r"(b[i].x), "r"(b[i].y));
  c[i] = r;
  float f;
  // exact: small integers
  asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(f) : "f"((float)(i % 64)), "f"(3.0f), "f"(0.5f));
  fused[i] = f;
}

static unsigned host_brev(unsigned x) {
  unsigned r = 0;
  for (int b = 0; b < 32; ++b) r |= ((x >> b) & 1u) << (31 - b);
  return r;
}

int main() {
  const int n = 4096, threads = 128;
  std::vector<unsigned> hin(n);
  std::vector<uint2> ha(n), hb(n);
  for (int i = 0; i < n; ++i) {
    hin[i] = (unsigned)(i * 2654435761u) ^ 0x5a5a1234u;
    ha[i] = make_uint2((unsigned)(i * 40503u) | 0x80000000u, (unsigned)i);
    hb[i] = make_uint2((unsigned)(i * 9973u) | 0x90000000u, (unsigned)(3 * i));
  }
  unsigned *in, *out;
  uint2 *a, *b, *c;
  float *fused;
  CORPUS_CHECK(cudaMalloc(&in, n * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&out, 4 * n * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(uint2)));
  CORPUS_CHECK(cudaMalloc(&b, n * sizeof(uint2)));
  CORPUS_CHECK(cudaMalloc(&c, n * sizeof(uint2)));
  CORPUS_CHECK(cudaMalloc(&fused, n * sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(in, hin.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(a, ha.data(), n * sizeof(uint2), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(b, hb.data(), n * sizeof(uint2), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(out, 0, 4 * n * sizeof(unsigned)));
  CORPUS_CHECK(cudaMemset(c, 0, n * sizeof(uint2)));
  CORPUS_CHECK(cudaMemset(fused, 0, n * sizeof(float)));

  {
    corpus::Launch l("bit_tricks(unsigned int const*, unsigned int*, int)",
                     {corpus::buffer("in", in, n * sizeof(unsigned)),
                      corpus::buffer("out", out, 4 * n * sizeof(unsigned))});
    l.before();
    bit_tricks<<<n / threads, threads>>>(in, out, n);
    l.after();
  }
  {
    corpus::Launch l("wide_add(uint2 const*, uint2 const*, uint2*, float*, int)",
                     {corpus::buffer("a", a, n * sizeof(uint2)),
                      corpus::buffer("b", b, n * sizeof(uint2)),
                      corpus::buffer("c", c, n * sizeof(uint2)),
                      corpus::buffer("fused", fused, n * sizeof(float))});
    l.before();
    wide_add<<<n / threads, threads>>>(a, b, c, fused, n);
    l.after();
  }

  std::vector<unsigned> hout(4 * n);
  std::vector<uint2> hc(n);
  std::vector<float> hf(n);
  CORPUS_CHECK(cudaMemcpy(hout.data(), out, 4 * n * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hc.data(), c, n * sizeof(uint2), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hf.data(), fused, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    unsigned x = hin[i], rev = host_brev(x);
    unsigned swapped = (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
    CORPUS_REQUIRE(hout[4 * i] == rev, "brev");
    CORPUS_REQUIRE(hout[4 * i + 1] == swapped, "prmt byte swap");
    CORPUS_REQUIRE(hout[4 * i + 2] == (x ^ rev ^ swapped), "lop3 xor");
    CORPUS_REQUIRE(hout[4 * i + 3] == ((x < rev ? 1u : 0u) | ((unsigned)(i % 32) << 1)),
                   "setp/selp and laneid");
    uint64_t wa = ((uint64_t)ha[i].y << 32) | ha[i].x, wb = ((uint64_t)hb[i].y << 32) | hb[i].x;
    uint64_t wc = ((uint64_t)hc[i].y << 32) | hc[i].x;
    CORPUS_REQUIRE(wc == wa + wb, "add.cc/addc 64-bit add");
    CORPUS_REQUIRE(hf[i] == (float)(i % 64) * 3.0f + 0.5f, "fma.rn");
  }
  corpus::result_ok();
  return 0;
}
