// Chunk digests computed where the bytes are (the recorder's epilogue copies only the
// chunks whose digest changed during the kernel). Compiled to PTX once and checked in as
// snapshot_digest_ptx.inc, which the recorder hands to the driver's JIT:
//   python -m mneme.runtime.snapshot_digest   (tests/runtime/test_snapshot_digest_ptx.py checks it)
//
// Block b digests bytes [b*chunk, min(size, (b+1)*chunk)) of `base` into out[2b], out[2b+1]:
// two 64-bit lanes, each the wrapping sum over the 8-byte words (bytes at the tail and for
// unaligned bases) of a finalizer of the word mixed with its position, so any change of a
// value or a position changes both lanes but for a 2^-64 accident each. zero[b] is 1 when
// those bytes are all zero (the recorder neither copies nor stores such a prologue chunk).
// The sums do not depend on the order of their terms: a 16-byte-aligned chunk is read
// with 16-byte loads, four in flight per thread before their math, with the same values.
// Built without the CUDA headers (clang -nocudainc), so that the PTX needs no toolkit.
#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))
typedef unsigned long long u64;
typedef u64 u64x2 __attribute__((ext_vector_type(2)));

__device__ __forceinline__ u64 fmix(u64 k) {
  k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33;
  return k;
}

// Word i (its value v) added to both lanes.
__device__ __forceinline__ void add_word(u64 v, u64 i, u64& a, u64& b) {
  a += fmix(v ^ (i * 0x9e3779b97f4a7c15ULL));
  b += fmix((v + 0x632be59bd9b4e019ULL) ^ (i * 0xc2b2ae3d27d4eb4fULL) ^ 0x165667b19e3779f9ULL);
}

extern "C" __global__ void __launch_bounds__(256) mneme_chunk_digest(const unsigned char* base, u64 size, u64 chunk,
                                                                       u64* out, unsigned char* zero) {
  __shared__ u64 lane_a[256], lane_b[256];
  const unsigned tid = __nvvm_read_ptx_sreg_tid_x(), threads = __nvvm_read_ptx_sreg_ntid_x();
  const unsigned block = __nvvm_read_ptx_sreg_ctaid_x();
  u64 begin = (u64)block * chunk;
  u64 end = begin + chunk < size ? begin + chunk : size;
  u64 a = 0, b = 0, any = 0;
  const unsigned char* p = base + begin;
  u64 n = end - begin;
  u64 words = ((u64)p & 7) == 0 ? n / 8 : 0;
  const u64* w = (const u64*)p;
  u64 i = tid;  // the next 8-byte word of this thread
  if (((u64)p & 15) == 0) {
    // Pair j is words 2j and 2j+1; a thread takes pairs tid, tid + threads, ...
    const u64x2* q = (const u64x2*)p;
    u64 pairs = words / 2, j = tid;
    for (; j + 3 * (u64)threads < pairs; j += 4 * (u64)threads) {
      u64x2 v0 = q[j], v1 = q[j + threads], v2 = q[j + 2 * threads], v3 = q[j + 3 * threads];
      any |= v0.x | v0.y | v1.x | v1.y | v2.x | v2.y | v3.x | v3.y;
      add_word(v0.x, 2 * j, a, b);
      add_word(v0.y, 2 * j + 1, a, b);
      add_word(v1.x, 2 * (j + threads), a, b);
      add_word(v1.y, 2 * (j + threads) + 1, a, b);
      add_word(v2.x, 2 * (j + 2 * threads), a, b);
      add_word(v2.y, 2 * (j + 2 * threads) + 1, a, b);
      add_word(v3.x, 2 * (j + 3 * threads), a, b);
      add_word(v3.y, 2 * (j + 3 * threads) + 1, a, b);
    }
    for (; j < pairs; j += threads) {
      u64x2 v = q[j];
      any |= v.x | v.y;
      add_word(v.x, 2 * j, a, b);
      add_word(v.y, 2 * j + 1, a, b);
    }
    i = 2 * pairs + tid;  // an odd last word, below
  }
  for (; i < words; i += threads) {
    u64 v = w[i];
    any |= v;
    add_word(v, i, a, b);
  }
  for (u64 i = words * 8 + tid; i < n; i += threads) {  // tail, or unaligned bytes
    any |= p[i];
    u64 v = p[i] | 0x100ULL;
    a += fmix(v ^ (i * 0x27d4eb2f165667c5ULL) ^ 0x5851f42d4c957f2dULL);
    b += fmix((v * 0x94d049bb133111ebULL) ^ (i * 0xbf58476d1ce4e5b9ULL));
  }
  lane_a[tid] = a;
  lane_b[tid] = b;
  int nonzero = __nvvm_bar0_or(any != 0);  // a barrier as well
  for (unsigned s = threads / 2; s > 0; s >>= 1) {
    if (tid < s) {
      lane_a[tid] += lane_a[tid + s];
      lane_b[tid] += lane_b[tid + s];
    }
    __nvvm_bar_sync(0);
  }
  if (tid == 0) {
    out[2 * block] = fmix(lane_a[0] ^ n);
    out[2 * block + 1] = fmix(lane_b[0] + n);
    zero[block] = nonzero ? 0 : 1;
  }
}
