// Chunk digests computed where the bytes are (the recorder's epilogue copies only the
// chunks whose digest changed during the kernel). Compiled to PTX once and checked in as
// snapshot_digest_ptx.inc, which the recorder hands to the driver's JIT:
//   python -m mneme.runtime.snapshot_digest   (tests/runtime/test_snapshot_digest_ptx.py checks it)
//
// Block b digests bytes [b*chunk, min(size, (b+1)*chunk)) of `base` into out[2b], out[2b+1]:
// two 64-bit lanes, each the wrapping sum over the 8-byte words (bytes at the tail and for
// unaligned bases) of a finalizer of the word mixed with its position, so any change of a
// value or a position changes both lanes but for a 2^-64 accident each.
// Built without the CUDA headers (clang -nocudainc), so that the PTX needs no toolkit.
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))
typedef unsigned long long u64;

__device__ __forceinline__ u64 fmix(u64 k) {
  k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
  return k;
}

extern "C" __global__ void __launch_bounds__(256) mneme_chunk_digest(const unsigned char* base, u64 size, u64 chunk,
                                                                       u64* out) {
  __shared__ u64 lane_a[256], lane_b[256];
  u64 begin = (u64)__nvvm_read_ptx_sreg_ctaid_x() * chunk;
  u64 end = begin + chunk < size ? begin + chunk : size;
  u64 a = 0, b = 0;
  const unsigned char* p = base + begin;
  u64 n = end - begin;
  u64 words = ((u64)p & 7) == 0 ? n / 8 : 0;
  const u64* w = (const u64*)p;
  for (u64 i = __nvvm_read_ptx_sreg_tid_x(); i < words; i += __nvvm_read_ptx_sreg_ntid_x()) {
    u64 v = w[i];
    a += fmix(v ^ (i * 0x9e3779b97f4a7c15ULL));
    b += fmix((v + 0x632be59bd9b4e019ULL) ^ (i * 0xc2b2ae3d27d4eb4fULL) ^ 0x165667b19e3779f9ULL);
  }
  for (u64 i = words * 8 + __nvvm_read_ptx_sreg_tid_x(); i < n; i += __nvvm_read_ptx_sreg_ntid_x()) {  // tail, or unaligned bytes
    u64 v = p[i] | 0x100ULL;
    a += fmix(v ^ (i * 0x27d4eb2f165667c5ULL) ^ 0x5851f42d4c957f2dULL);
    b += fmix((v * 0x94d049bb133111ebULL) ^ (i * 0xbf58476d1ce4e5b9ULL));
  }
  lane_a[__nvvm_read_ptx_sreg_tid_x()] = a;
  lane_b[__nvvm_read_ptx_sreg_tid_x()] = b;
  __nvvm_bar_sync(0);
  for (unsigned s = __nvvm_read_ptx_sreg_ntid_x() / 2; s > 0; s >>= 1) {
    if (__nvvm_read_ptx_sreg_tid_x() < s) {
      lane_a[__nvvm_read_ptx_sreg_tid_x()] += lane_a[__nvvm_read_ptx_sreg_tid_x() + s];
      lane_b[__nvvm_read_ptx_sreg_tid_x()] += lane_b[__nvvm_read_ptx_sreg_tid_x() + s];
    }
    __nvvm_bar_sync(0);
  }
  if (__nvvm_read_ptx_sreg_tid_x() == 0) {
    out[2 * __nvvm_read_ptx_sreg_ctaid_x()] = fmix(lane_a[0] ^ n);
    out[2 * __nvvm_read_ptx_sreg_ctaid_x() + 1] = fmix(lane_b[0] + n);
  }
}
