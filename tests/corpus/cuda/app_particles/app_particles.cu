// A particle simulation step as real codes write one: many small kernels per step (forces
// from a uniform grid, integration, boundaries, binning with a counting sort, energies),
// each launched every step with the block sizes the authors picked. Prints its own step
// time (events) and checksums of the final state.
//   app_particles [steps]   (default 40)
#include <cstdlib>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

constexpr int kCells = 64;  // cells per axis of the unit square
constexpr float kDt = 1e-4f;

struct Particles {
  float *x, *y, *vx, *vy, *fx, *fy;
};

__global__ void clear_counts(unsigned *counts, int cells) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < cells) counts[i] = 0;
}

__global__ void bin_particles(Particles p, unsigned *cell_of, unsigned *counts, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int cx = min(int(p.x[i] * kCells), kCells - 1), cy = min(int(p.y[i] * kCells), kCells - 1);
  unsigned c = cy * kCells + cx;
  cell_of[i] = c;
  atomicAdd(&counts[c], 1u);
}

// One block scans all cell counts (4096 cells) in shared memory.
__global__ void scan_counts(const unsigned *counts, unsigned *starts, int cells) {
  __shared__ unsigned s[kCells * kCells];
  for (int i = threadIdx.x; i < cells; i += blockDim.x) s[i] = counts[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned run = 0;
    for (int i = 0; i < cells; ++i) {
      unsigned c = s[i];
      s[i] = run;
      run += c;
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < cells; i += blockDim.x) starts[i] = s[i];
}

__global__ void scatter(const unsigned *cell_of, unsigned *cursor, unsigned *order, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) order[atomicAdd(&cursor[cell_of[i]], 1u)] = i;
}

__global__ void copy_starts(const unsigned *starts, unsigned *cursor, int cells) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < cells) cursor[i] = starts[i];
}

// Soft repulsion from the particles of the 3x3 neighbouring cells.
__global__ void forces(Particles p, const unsigned *order, const unsigned *starts, const unsigned *counts, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float xi = p.x[i], yi = p.y[i], fx = 0, fy = 0;
  int cx = min(int(xi * kCells), kCells - 1), cy = min(int(yi * kCells), kCells - 1);
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) {
      int x = cx + dx, y = cy + dy;
      if (x < 0 || y < 0 || x >= kCells || y >= kCells) continue;
      unsigned c = y * kCells + x;
      for (unsigned k = starts[c]; k < starts[c] + counts[c]; ++k) {
        unsigned j = order[k];
        float rx = xi - p.x[j], ry = yi - p.y[j], r2 = rx * rx + ry * ry + 1e-6f;
        if (j != unsigned(i) && r2 < 1.0f / (kCells * kCells)) {
          float s = 1e-7f / (r2 * r2);
          fx += s * rx;
          fy += s * ry;
        }
      }
    }
  p.fx[i] = fx;
  p.fy[i] = fy;
}

__global__ void gravity(Particles p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p.fy[i] -= 1e-3f;
}

__global__ void integrate(Particles p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  p.vx[i] = 0.999f * p.vx[i] + kDt * p.fx[i];
  p.vy[i] = 0.999f * p.vy[i] + kDt * p.fy[i];
  p.x[i] += kDt * p.vx[i];
  p.y[i] += kDt * p.vy[i];
}

__global__ void walls(Particles p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if (p.x[i] < 0) { p.x[i] = -p.x[i]; p.vx[i] = -p.vx[i]; }
  if (p.x[i] > 1) { p.x[i] = 2 - p.x[i]; p.vx[i] = -p.vx[i]; }
  if (p.y[i] < 0) { p.y[i] = -p.y[i]; p.vy[i] = -p.vy[i]; }
  if (p.y[i] > 1) { p.y[i] = 2 - p.y[i]; p.vy[i] = -p.vy[i]; }
}

__global__ void kinetic_energy(Particles p, float *energy, int n) {
  __shared__ float part[128];
  float e = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    e += 0.5f * (p.vx[i] * p.vx[i] + p.vy[i] * p.vy[i]);
  part[threadIdx.x] = e;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(energy, part[0]);
}

int main(int argc, char **argv) {
  const int n = 1 << 20, steps = argc > 1 ? std::atoi(argv[1]) : 40, cells = kCells * kCells;
  if (steps < 1) {
    std::fprintf(stderr, "app_particles: steps must be at least 1\n");
    return 64;
  }
  std::vector<float> hx(n), hy(n), zero(n, 0.0f);
  unsigned seed = 2024;
  for (int i = 0; i < n; ++i) {
    hx[i] = float((seed = seed * 1664525u + 1013904223u) >> 8) / float(1 << 24);
    hy[i] = float((seed = seed * 1664525u + 1013904223u) >> 8) / float(1 << 24);
  }
  Particles p;
  float **fields[] = {&p.x, &p.y, &p.vx, &p.vy, &p.fx, &p.fy};
  for (float **f : fields) CORPUS_CHECK(cudaMalloc(f, n * sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(p.x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(p.y, hy.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  for (float *f : {p.vx, p.vy, p.fx, p.fy}) CORPUS_CHECK(cudaMemcpy(f, zero.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  unsigned *cell_of, *counts, *starts, *cursor, *order;
  float *energy;
  CORPUS_CHECK(cudaMalloc(&cell_of, n * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&order, n * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&counts, cells * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&starts, cells * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&cursor, cells * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&energy, sizeof(float)));
  const int b = 128, g = (n + b - 1) / b, gc = (cells + 255) / 256;
  auto step = [&](bool report) {
    // (the corpus protocol around each kernel's first launch: its regions before and after)
    auto run = [&](const char *name, std::initializer_list<corpus::Region> regions, auto &&launch) {
      if (!report) return launch();
      corpus::Launch l(name, regions);
      l.before();
      launch();
      l.after();
    };
    const size_t fb = n * sizeof(float), ub = n * sizeof(unsigned), cb = cells * sizeof(unsigned);
    run("clear_counts(unsigned int*, int)", {corpus::buffer("counts", counts, cb)},
        [&] { clear_counts<<<gc, 256>>>(counts, cells); });
    run("bin_particles(Particles, unsigned int*, unsigned int*, int)",
        {corpus::buffer("x", p.x, fb), corpus::buffer("y", p.y, fb), corpus::buffer("cell_of", cell_of, ub),
         corpus::buffer("counts", counts, cb)},
        [&] { bin_particles<<<g, b>>>(p, cell_of, counts, n); });
    run("scan_counts(unsigned int const*, unsigned int*, int)",
        {corpus::buffer("counts", counts, cb), corpus::buffer("starts", starts, cb)},
        [&] { scan_counts<<<1, 1024>>>(counts, starts, cells); });
    run("copy_starts(unsigned int const*, unsigned int*, int)",
        {corpus::buffer("starts", starts, cb), corpus::buffer("cursor", cursor, cb)},
        [&] { copy_starts<<<gc, 256>>>(starts, cursor, cells); });
    run("scatter(unsigned int const*, unsigned int*, unsigned int*, int)",
        {corpus::buffer("cell_of", cell_of, ub), corpus::buffer("cursor", cursor, cb)},
        [&] { scatter<<<g, b>>>(cell_of, cursor, order, n); });
    run("forces(Particles, unsigned int const*, unsigned int const*, unsigned int const*, int)",
        {corpus::buffer("x", p.x, fb), corpus::buffer("y", p.y, fb), corpus::buffer("fx", p.fx, fb),
         corpus::buffer("fy", p.fy, fb), corpus::buffer("starts", starts, cb), corpus::buffer("counts", counts, cb)},
        [&] { forces<<<g, b>>>(p, order, starts, counts, n); });
    run("gravity(Particles, int)", {corpus::buffer("fy", p.fy, fb)}, [&] { gravity<<<g, b>>>(p, n); });
    run("integrate(Particles, int)",
        {corpus::buffer("x", p.x, fb), corpus::buffer("y", p.y, fb), corpus::buffer("vx", p.vx, fb),
         corpus::buffer("vy", p.vy, fb)},
        [&] { integrate<<<g, b>>>(p, n); });
    run("walls(Particles, int)",
        {corpus::buffer("x", p.x, fb), corpus::buffer("y", p.y, fb), corpus::buffer("vx", p.vx, fb),
         corpus::buffer("vy", p.vy, fb)},
        [&] { walls<<<g, b>>>(p, n); });
  };
  step(true);
  fidelity::EventTimer timer;
  timer.start();
  for (int s = 1; s < steps; ++s) step(false);
  CORPUS_CHECK(cudaGetLastError());
  float ms = timer.stop_ms();
  CORPUS_CHECK(cudaMemset(energy, 0, sizeof(float)));
  {
    corpus::Launch l("kinetic_energy(Particles, float*, int)", {corpus::buffer("energy", energy, sizeof(float))});
    l.before();
    kinetic_energy<<<132, 128>>>(p, energy, n);
    l.after();
  }
  std::printf("particles: %d steps of %d particles in %.3f ms (%.3f ms per step)\n", steps - 1, n, ms,
              ms / (steps > 1 ? steps - 1 : 1));
  float e = 0;
  CORPUS_CHECK(cudaMemcpy(&e, energy, sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hx.data(), p.x, n * sizeof(float), cudaMemcpyDeviceToHost));
  double sx = fidelity::sum(hx.data(), n);
  CORPUS_REQUIRE(sx > 0.0 && sx < double(n), "particles stay in the box");
  corpus::output("particles_x_sum", sx, 3);
  corpus::output("particles_energy", double(e), 2);
  corpus::result_ok();
  return 0;
}
