// Cooperative groups: thread_block, tiled_partition (static and dynamic tiles), tile
// shuffles, cg::reduce and tile ballots. Integer sums keep results order-independent.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include "corpus_check.h"

namespace cg = cooperative_groups;

// Block sums via warp tiles: shuffle down inside each 32-thread tile, then tile leaders
// combine through shared memory.
__global__ void tile_shuffle_sum(const int *in, int *block_out, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  __shared__ int warp_sums[32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? in[i] : 0;
  for (int offset = warp.size() / 2; offset > 0; offset /= 2) v += warp.shfl_down(v, offset);
  if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = v;
  block.sync();
  if (block.thread_rank() == 0) {
    int s = 0;
    for (unsigned w = 0; w < warp.meta_group_size(); ++w) s += warp_sums[w];
    block_out[blockIdx.x] = s;
  }
}

// cg::reduce over 16-thread tiles: one output per tile (sum) and per tile max.
__global__ void tile_reduce(const int *in, int *tile_sum, int *tile_max, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<16> tile = cg::tiled_partition<16>(block);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = i < n ? in[i] : 0;
  int s = cg::reduce(tile, v, cg::plus<int>());
  int m = cg::reduce(tile, v, cg::greater<int>());
  int t = i / 16;
  if (tile.thread_rank() == 0 && t * 16 < n) {
    tile_sum[t] = s;
    tile_max[t] = m;
  }
}

// Dynamic partition into groups of 8; ballot counts the odd values per group.
__global__ void odd_counts(const int *in, int *counts, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_group group = cg::tiled_partition(block, 8);
  cg::thread_block_tile<8> tile8 = cg::tiled_partition<8>(block);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  bool odd = i < n && (in[i] & 1);
  unsigned mask = tile8.ballot(odd);
  group.sync();
  if (group.thread_rank() == 0 && i < n) counts[i / 8] = __popc(mask);
}

int main() {
  const int n = 4096, block = 256, grid = n / block;
  int *in, *block_out, *tsum, *tmax, *counts;
  CORPUS_CHECK(cudaMalloc(&in, n * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&block_out, grid * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&tsum, n / 16 * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&tmax, n / 16 * sizeof(int)));
  CORPUS_CHECK(cudaMalloc(&counts, n / 8 * sizeof(int)));
  std::vector<int> h(n);
  for (int i = 0; i < n; ++i) h[i] = (i * 31 + 7) % 1000 - 500;
  CORPUS_CHECK(cudaMemcpy(in, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(block_out, 0, grid * sizeof(int)));
  CORPUS_CHECK(cudaMemset(tsum, 0, n / 16 * sizeof(int)));
  CORPUS_CHECK(cudaMemset(tmax, 0, n / 16 * sizeof(int)));
  CORPUS_CHECK(cudaMemset(counts, 0, n / 8 * sizeof(int)));

  { corpus::Launch l("tile_shuffle_sum(int const*, int*, int)",
                     {corpus::buffer("in", in, n * sizeof(int)), corpus::buffer("block_out", block_out, grid * sizeof(int))});
    l.before(); tile_shuffle_sum<<<grid, block>>>(in, block_out, n); l.after(); }
  { corpus::Launch l("tile_reduce(int const*, int*, int*, int)",
                     {corpus::buffer("in", in, n * sizeof(int)), corpus::buffer("tile_sum", tsum, n / 16 * sizeof(int)),
                      corpus::buffer("tile_max", tmax, n / 16 * sizeof(int))});
    l.before(); tile_reduce<<<grid, block>>>(in, tsum, tmax, n); l.after(); }
  { corpus::Launch l("odd_counts(int const*, int*, int)",
                     {corpus::buffer("in", in, n * sizeof(int)), corpus::buffer("counts", counts, n / 8 * sizeof(int))});
    l.before(); odd_counts<<<grid, block>>>(in, counts, n); l.after(); }

  std::vector<int> hb(grid), hs(n / 16), hm(n / 16), hc(n / 8);
  CORPUS_CHECK(cudaMemcpy(hb.data(), block_out, grid * sizeof(int), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hs.data(), tsum, n / 16 * sizeof(int), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hm.data(), tmax, n / 16 * sizeof(int), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hc.data(), counts, n / 8 * sizeof(int), cudaMemcpyDeviceToHost));
  for (int b = 0; b < grid; ++b) {
    int s = 0;
    for (int i = b * block; i < (b + 1) * block; ++i) s += h[i];
    CORPUS_REQUIRE(hb[b] == s, "tile_shuffle_sum");
  }
  for (int t = 0; t < n / 16; ++t) {
    int s = 0, m = h[t * 16];
    for (int i = t * 16; i < t * 16 + 16; ++i) {
      s += h[i];
      m = h[i] > m ? h[i] : m;
    }
    CORPUS_REQUIRE(hs[t] == s && hm[t] == m, "tile_reduce");
  }
  for (int g = 0; g < n / 8; ++g) {
    int c = 0;
    for (int i = g * 8; i < g * 8 + 8; ++i) c += h[i] & 1;
    CORPUS_REQUIRE(hc[g] == c, "odd_counts");
  }
  CORPUS_CHECK(cudaFree(in));
  CORPUS_CHECK(cudaFree(block_out));
  CORPUS_CHECK(cudaFree(tsum));
  CORPUS_CHECK(cudaFree(tmax));
  CORPUS_CHECK(cudaFree(counts));
  corpus::result_ok();
  return 0;
}
