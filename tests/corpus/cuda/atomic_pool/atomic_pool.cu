// A hash table in one big arena, the way B-tree and hash-map codes run on the GPU:
// `atomic_pool [MiB] [--quiet]` allocates one pool of MiB MiB (default 16; 1..16384) with a
// single cudaMalloc and lays it out as
//
//   [0, 256)            header: the node cursor (unsigned) a bump allocator hands slots from
//   [256, heads_end)    bucket heads: node index + 1 of each chain's first node, 0 = empty
//   [nodes, end)        nodes {key, next}: next = node index + 1 of the next one, 0 = end
//
// init_pool (deterministic) empties the heads and threads every node slot onto a free list.
// insert_keys places 3/4 of the pool's node capacity of distinct keys: each warp claims
// slots with one atomicAdd on the cursor, each thread pushes its node onto its bucket's
// chain with an atomicCAS loop. Which slot holds which key and how the chains are linked
// depend on thread scheduling, so the pool after insert_keys differs on every run; its
// 4-byte words are the same multiset every time (keys, node links, the cursor), only their
// positions move. check_pool (deterministic) walks every chain and sums, xors and counts
// the keys it finds; the host compares those with the keys it inserted.
//
// --quiet skips the per-launch checksums (benchmarks/large_instance.py passes 8192 --quiet:
// an FNV of gigabytes on the host would take longer than everything else).
#include <cstdlib>
#include <cstring>

#include "corpus_check.h"
#include "corpus_output.h"

struct Node {
  unsigned key;
  unsigned next;  // node index + 1, 0 = end of chain
};

constexpr size_t HEADER = 256;

__host__ __device__ inline unsigned mix(unsigned v) {
  v ^= v >> 16;
  v *= 0x7feb352du;
  v ^= v >> 15;
  v *= 0x846ca68bu;
  v ^= v >> 16;
  return v;
}

// Distinct keys: an odd multiplier is a bijection on 32 bits.
__host__ __device__ inline unsigned key_of(unsigned i) { return i * 2654435761u + 0x9e3779b9u; }

__host__ __device__ inline size_t heads_end(unsigned buckets) {
  return (HEADER + (size_t)buckets * sizeof(unsigned) + 255) / 256 * 256;
}

__global__ void init_pool(unsigned char *pool, unsigned buckets, unsigned capacity) {
  unsigned *header = reinterpret_cast<unsigned *>(pool);
  unsigned *heads = reinterpret_cast<unsigned *>(pool + HEADER);
  Node *nodes = reinterpret_cast<Node *>(pool + heads_end(buckets));
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  for (size_t i = first; i < HEADER / sizeof(unsigned); i += stride) header[i] = 0;
  for (size_t b = first; b < buckets; b += stride) heads[b] = 0;
  for (size_t i = first; i < capacity; i += stride)  // the free list: slot i links to i + 1
    nodes[i] = Node{0xffffffffu, i + 1 < capacity ? (unsigned)(i + 2) : 0u};
}

__global__ void insert_keys(unsigned char *pool, unsigned buckets, unsigned capacity, unsigned n) {
  unsigned *cursor = reinterpret_cast<unsigned *>(pool);
  unsigned *heads = reinterpret_cast<unsigned *>(pool + HEADER);
  Node *nodes = reinterpret_cast<Node *>(pool + heads_end(buckets));
  const unsigned lane = threadIdx.x & 31u;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    // Warp-aggregated bump allocation: the first active lane claims a run of slots.
    const unsigned active = __activemask();
    const unsigned leader = __ffs(active) - 1;
    unsigned base = 0;
    if (lane == leader) base = atomicAdd(cursor, (unsigned)__popc(active));
    base = __shfl_sync(active, base, leader);
    const unsigned slot = base + __popc(active & ((1u << lane) - 1u));
    if (slot >= capacity) return;  // the host sizes n to fit; never taken
    const unsigned key = key_of((unsigned)i);
    const unsigned bucket = mix(key) % buckets;
    nodes[slot].key = key;
    unsigned head = atomicAdd(&heads[bucket], 0u);
    for (;;) {  // lock-free push onto the bucket's chain
      nodes[slot].next = head;
      const unsigned seen = atomicCAS(&heads[bucket], head, slot + 1);
      if (seen == head) break;
      head = seen;
    }
  }
}

// totals: keys found, their sum, their xor, keys found in the wrong bucket or past the
// capacity (a broken chain).
__global__ void check_pool(const unsigned char *pool, unsigned buckets, unsigned capacity,
                           unsigned long long *totals) {
  const unsigned *heads = reinterpret_cast<const unsigned *>(pool + HEADER);
  const Node *nodes = reinterpret_cast<const Node *>(pool + heads_end(buckets));
  unsigned long long count = 0, sum = 0, x = 0, bad = 0;
  for (size_t b = blockIdx.x * (size_t)blockDim.x + threadIdx.x; b < buckets; b += (size_t)gridDim.x * blockDim.x) {
    unsigned steps = 0;
    for (unsigned at = heads[b]; at != 0; at = nodes[at - 1].next) {
      if (at > capacity || ++steps > capacity) { ++bad; break; }
      const unsigned key = nodes[at - 1].key;
      if (mix(key) % buckets != b) ++bad;
      ++count;
      sum += key;
      x ^= key;
    }
  }
  atomicAdd(&totals[0], count);
  atomicAdd(&totals[1], sum);
  atomicXor(&totals[2], x);
  atomicAdd(&totals[3], bad);
}

int main(int argc, char **argv) {
  long mib = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 16;
  if (mib < 1 || mib > 16384) {
    std::fprintf(stderr, "usage: %s [pool MiB, 1..16384] [--quiet]\n", argv[0]);
    return 64;
  }
  const bool quiet = argc > 2 && std::strcmp(argv[2], "--quiet") == 0;
  auto before = [&](corpus::Launch &l) { if (!quiet) l.before(); };
  auto after = [&](corpus::Launch &l) {
    if (quiet) CORPUS_CHECK(cudaGetLastError());
    else l.after();
  };
  const size_t bytes = (size_t)mib << 20;
  const unsigned buckets = (unsigned)(bytes / 256);
  const unsigned capacity = (unsigned)((bytes - heads_end(buckets)) / sizeof(Node));
  const unsigned n = capacity / 4 * 3;
  const int grid = 1056, block = 256;  // 8 blocks per SM on 132 SMs; grid-stride loops
  unsigned char *pool;
  unsigned long long *totals;
  CORPUS_CHECK(cudaMalloc(&pool, bytes));
  CORPUS_CHECK(cudaMalloc(&totals, 4 * sizeof(unsigned long long)));
  CORPUS_CHECK(cudaMemset(totals, 0, 4 * sizeof(unsigned long long)));
  std::printf("atomic_pool: %ld MiB pool, %u buckets, %u node slots, %u keys\n", mib, buckets,
              capacity, n);

  { corpus::Launch l("init_pool(unsigned char*, unsigned int, unsigned int)",
                     {corpus::buffer("pool", pool, bytes)});
    before(l); init_pool<<<grid, block>>>(pool, buckets, capacity); after(l); }
  { corpus::Launch l("insert_keys(unsigned char*, unsigned int, unsigned int, unsigned int)",
                     {corpus::buffer("pool", pool, bytes)});
    before(l); insert_keys<<<grid, block>>>(pool, buckets, capacity, n); after(l); }
  { corpus::Launch l("check_pool(unsigned char const*, unsigned int, unsigned int, unsigned long long*)",
                     {corpus::buffer("pool", pool, bytes),
                      corpus::buffer("totals", totals, 4 * sizeof(unsigned long long))});
    before(l); check_pool<<<grid, block>>>(pool, buckets, capacity, totals); after(l); }

  unsigned long long got[4];
  unsigned cursor = 0;
  CORPUS_CHECK(cudaMemcpy(got, totals, sizeof got, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(&cursor, pool, sizeof cursor, cudaMemcpyDeviceToHost));
  unsigned long long sum = 0, x = 0;
  for (unsigned i = 0; i < n; ++i) {
    sum += key_of(i);
    x ^= key_of(i);
  }
  CORPUS_REQUIRE(cursor == n, "the cursor handed out one slot per key");
  CORPUS_REQUIRE(got[3] == 0, "every key in its own bucket, every chain ends");
  CORPUS_REQUIRE(got[0] == n, "as many keys in the chains as were inserted");
  CORPUS_REQUIRE(got[1] == sum && got[2] == x, "the chains hold the inserted keys");
  corpus::output("keys-found", got[0]);
  corpus::output("key-sum", got[1]);
  corpus::output("key-xor", got[2]);
  CORPUS_CHECK(cudaFree(pool));
  CORPUS_CHECK(cudaFree(totals));
  corpus::result_ok();
  return 0;
}
