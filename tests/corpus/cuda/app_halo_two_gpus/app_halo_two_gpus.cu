// Heat diffusion on a plate split across two GPUs, as multi-GPU stencil codes are written
// by hand: each GPU owns half of the rows and, every step, reads its neighbour's boundary
// row where it lies (peer access: no halo copies); every 25 steps each GPU sums the change
// of its half (a block reduction). The stencil's 8 x 8 block was chosen long ago, for
// another GPU. Prints each GPU's time (events), the residual and a checksum.
//   app_halo_two_gpus [steps]   (default 100; with one GPU both halves live on it)
#include <cmath>
#include <cstdlib>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

// One Jacobi step of this GPU's rows; `above` / `below` are the neighbour's boundary row
// (another GPU's memory) or null at the plate's edge (held at 0).
__global__ void jacobi_halo(const float *in, float *out, const float *above, const float *below,
                            int nx, int rows) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= nx || y >= rows) return;
  size_t at = size_t(y) * nx + x;
  float up = y > 0 ? in[at - nx] : (above ? above[x] : 0.0f);
  float down = y < rows - 1 ? in[at + nx] : (below ? below[x] : 0.0f);
  float left = x > 0 ? in[at - 1] : 0.0f, right = x < nx - 1 ? in[at + 1] : 0.0f;
  out[at] = 0.25f * (up + down + left + right);
}

// Sum of |new - old| over the half, one partial per block, added up by atomics.
__global__ void residual(const float *a, const float *b, size_t n, float *sum) {
  __shared__ float partial[256];
  float local = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    local += fabsf(a[i] - b[i]);
  partial[threadIdx.x] = local;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sum, partial[0]);
}

struct Half {
  int device;
  float *grid[2];
  float *change;
  cudaStream_t stream;
};

int main(int argc, char **argv) {
  const int nx = 4096, ny = 4096, steps = argc > 1 ? std::atoi(argv[1]) : 100;
  if (steps < 1) {
    std::fprintf(stderr, "app_halo_two_gpus: steps must be at least 1\n");
    return 64;
  }
  int count = 0;
  CORPUS_CHECK(cudaGetDeviceCount(&count));
  Half halves[2] = {{0, {}, nullptr, nullptr}, {count > 1 ? 1 : 0, {}, nullptr, nullptr}};
  if (halves[1].device != halves[0].device) {
    int reach01 = 0, reach10 = 0;
    CORPUS_CHECK(cudaDeviceCanAccessPeer(&reach01, 0, 1));
    CORPUS_CHECK(cudaDeviceCanAccessPeer(&reach10, 1, 0));
    CORPUS_REQUIRE(reach01 && reach10, "the two GPUs reach each other (peer access)");
    for (int g = 0; g < 2; ++g) {
      CORPUS_CHECK(cudaSetDevice(halves[g].device));
      CORPUS_CHECK(cudaDeviceEnablePeerAccess(halves[1 - g].device, 0));
    }
  }
  const int rows = ny / 2;
  const size_t n = size_t(nx) * rows, bytes = n * sizeof(float);
  std::vector<float> initial(n);
  for (int g = 0; g < 2; ++g) {
    Half &h = halves[g];
    for (int y = 0; y < rows; ++y)  // a warm band across the middle, a hot spot: off the edges
      for (int x = 0; x < nx; ++x) {
        int gy = g * rows + y;
        initial[size_t(y) * nx + x] = (std::abs(gy - ny / 2) < 64 && x >= 64 && x < nx - 64 ? 1.0f : 0.0f) +
                                      ((x - nx / 3) * (x - nx / 3) + (gy - ny / 4) * (gy - ny / 4) < 400 ? 4.0f : 0.0f);
      }
    CORPUS_CHECK(cudaSetDevice(h.device));
    CORPUS_CHECK(cudaStreamCreate(&h.stream));
    for (float *&p : h.grid) {
      CORPUS_CHECK(cudaMalloc(&p, bytes));
      CORPUS_CHECK(cudaMemcpy(p, initial.data(), bytes, cudaMemcpyHostToDevice));
    }
    CORPUS_CHECK(cudaMalloc(&h.change, sizeof(float)));
  }
  std::printf("app_halo_two_gpus: %dx%d plate, %d steps on GPUs %d and %d\n", nx, ny, steps, halves[0].device,
              halves[1].device);
  const dim3 block(8, 8), grid((nx + 7) / 8, (rows + 7) / 8);
  double total_ms[2] = {0, 0};
  float last_change = 0;
  std::vector<fidelity::EventTimer *> timers;
  for (int g = 0; g < 2; ++g) {
    CORPUS_CHECK(cudaSetDevice(halves[g].device));
    timers.push_back(new fidelity::EventTimer(halves[g].stream));
  }
  double host_start = fidelity::host_ms();
  for (int s = 0; s < steps; ++s) {
    const int cur = s % 2, next = 1 - cur;
    for (int g = 0; g < 2; ++g) {
      Half &h = halves[g];
      CORPUS_CHECK(cudaSetDevice(h.device));
      // windows of 25 steps, the first after step 0 (checked under the corpus protocol)
      if (steps == 1 ? s == 0 : (s == 1 || (s > 1 && s % 25 == 0))) timers[g]->start();
      // the neighbour's boundary row: GPU 0's last row for GPU 1, GPU 1's first for GPU 0
      const float *above = g == 1 ? halves[0].grid[cur] + size_t(rows - 1) * nx : nullptr;
      const float *below = g == 0 ? halves[1].grid[cur] : nullptr;
      if (s == 0) {  // the first step under the corpus protocol (its regions before and after)
        const float *edge = above ? above : below;
        corpus::Launch l("jacobi_halo(float const*, float*, float const*, float const*, int, int)",
                         {corpus::buffer("in", h.grid[cur], bytes), corpus::buffer("out", h.grid[next], bytes),
                          corpus::slice("edge", edge, nx * sizeof(float))});
        l.before();
        jacobi_halo<<<grid, block, 0, h.stream>>>(h.grid[cur], h.grid[next], above, below, nx, rows);
        l.after();
      } else {
        jacobi_halo<<<grid, block, 0, h.stream>>>(h.grid[cur], h.grid[next], above, below, nx, rows);
      }
    }
    for (int g = 0; g < 2; ++g) {  // both halves of this step done before the next reads them
      CORPUS_CHECK(cudaSetDevice(halves[g].device));
      CORPUS_CHECK(cudaStreamSynchronize(halves[g].stream));
    }
    if ((s + 1) % 25 == 0 || s + 1 == steps) {
      float change = 0;
      for (int g = 0; g < 2; ++g) {
        Half &h = halves[g];
        CORPUS_CHECK(cudaSetDevice(h.device));
        CORPUS_CHECK(cudaMemsetAsync(h.change, 0, sizeof(float), h.stream));
        if (s + 1 == 25 || (steps < 25 && s + 1 == steps)) {  // the first, under the protocol
          corpus::Launch l("residual(float const*, float const*, unsigned long, float*)",
                           {corpus::buffer("new", h.grid[next], bytes), corpus::buffer("old", h.grid[cur], bytes),
                            corpus::buffer("change", h.change, sizeof(float))});
          l.before();
          residual<<<264, 256, 0, h.stream>>>(h.grid[next], h.grid[cur], n, h.change);
          l.after();
        } else {
          residual<<<264, 256, 0, h.stream>>>(h.grid[next], h.grid[cur], n, h.change);
        }
        float part = 0;
        CORPUS_CHECK(cudaMemcpyAsync(&part, h.change, sizeof(float), cudaMemcpyDeviceToHost, h.stream));
        total_ms[g] += timers[g]->stop_ms();
        change += part;
      }
      last_change = change;
    }
  }
  CORPUS_CHECK(cudaGetLastError());
  std::printf("app_halo_two_gpus: GPU %d %.3f ms, GPU %d %.3f ms, host %.1f ms, last change %.4f\n",
              halves[0].device, total_ms[0], halves[1].device, total_ms[1], fidelity::host_ms() - host_start,
              last_change);
  std::vector<float> plate(size_t(nx) * ny);
  for (int g = 0; g < 2; ++g) {
    CORPUS_CHECK(cudaSetDevice(halves[g].device));
    CORPUS_CHECK(cudaMemcpy(plate.data() + g * n, halves[g].grid[steps % 2], bytes, cudaMemcpyDeviceToHost));
  }
  // Heat only leaves through the plate's edges, which are far from it: it is kept.
  double heat = 0, heat0 = 0;
  for (size_t i = 0; i < plate.size(); ++i) heat += plate[i];
  for (int y = 0; y < ny; ++y)
    for (int x = 0; x < nx; ++x)
      heat0 += (std::abs(y - ny / 2) < 64 && x >= 64 && x < nx - 64 ? 1.0 : 0.0) +
               ((x - nx / 3) * (x - nx / 3) + (y - ny / 4) * (y - ny / 4) < 400 ? 4.0 : 0.0);
  CORPUS_REQUIRE(std::fabs(heat - heat0) <= 1e-3 * heat0, "the plate keeps its heat");
  corpus::output("halo_heat", heat, 5);
  corpus::output("halo_center", double(plate[size_t(ny / 2) * nx + nx / 2]), 4);
  for (auto *t : timers) delete t;
  corpus::result_ok();
  return 0;
}
