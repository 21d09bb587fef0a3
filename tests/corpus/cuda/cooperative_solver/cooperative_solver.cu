// Solvers in one kernel each, synchronising the whole grid between phases with
// cooperative_groups::this_grid().sync(), as real codes write them: the grid is sized from
// the occupancy (cudaOccupancyMaxActiveBlocksPerMultiprocessor x multiprocessors) so that
// every block is resident, and the work is spread over gridDim by grid-stride loops.
//   jacobi_solve      Jacobi sweeps of a 2-D Poisson problem until the largest update is
//                     below a tolerance (a max-norm, exact in any order: every block takes
//                     the same decision), launched with cudaLaunchCooperativeKernel
//   power_iteration   the largest eigenvalue of the 1-D Laplacian by power iteration with
//                     max-norm normalisation, launched with cudaLaunchKernelEx and the
//                     cooperative launch attribute
// Prints its own timings and checksums of the results, and checks both on the host.
//   cooperative_solver [n] [sweeps]   (default 384 x 384 interior points, at most 400 sweeps)
#include <cooperative_groups.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "corpus_check.h"
#include "corpus_output.h"
#include "fidelity_timing.h"

namespace cg = cooperative_groups;

// |a| of non-negative floats orders like their bit patterns: atomicMax on the bits is an
// exact, order-independent max.
__device__ void block_max_to(unsigned *global_bits, float value) {
  __shared__ unsigned block_bits;
  cg::thread_block block = cg::this_thread_block();
  if (block.thread_rank() == 0) block_bits = 0;
  block.sync();
  atomicMax(&block_bits, __float_as_uint(value));
  block.sync();
  if (block.thread_rank() == 0) atomicMax(global_bits, block_bits);
}

// u, v: (n + 2) x (n + 2) with a fixed zero boundary; rhs holds h^2 f. The solution ends in u.
// residual_bits: three words (written, read and cleared in turn: one sweep's value stays
// until every block has read it).
__global__ void jacobi_solve(const float *rhs, float *u, float *v, unsigned *residual_bits, int *sweeps_done,
                             int n, int max_sweeps, float tolerance) {
  cg::grid_group grid = cg::this_grid();
  const int stride = (n + 2);
  const long long points = (long long)n * n;
  if (grid.thread_rank() == 0) residual_bits[0] = residual_bits[1] = residual_bits[2] = 0;
  grid.sync();
  float *from = u, *to = v;
  int sweep = 0;
  while (sweep < max_sweeps) {
    float largest = 0.0f;
    for (long long p = grid.thread_rank(); p < points; p += grid.size()) {
      int y = int(p / n) + 1, x = int(p % n) + 1;
      int at = y * stride + x;
      float next = 0.25f * (from[at - 1] + from[at + 1] + from[at - stride] + from[at + stride] + rhs[at]);
      to[at] = next;
      largest = fmaxf(largest, fabsf(next - from[at]));
    }
    block_max_to(&residual_bits[sweep % 3], largest);
    if (grid.thread_rank() == 0) residual_bits[(sweep + 1) % 3] = 0;
    grid.sync();
    float residual = __uint_as_float(residual_bits[sweep % 3]);
    float *swap = from;
    from = to;
    to = swap;
    ++sweep;
    if (residual < tolerance) break;
  }
  if (from != u)  // an odd number of sweeps: the solution is in v
    for (long long p = grid.thread_rank(); p < points; p += grid.size()) {
      int at = (int(p / n) + 1) * stride + int(p % n) + 1;
      u[at] = from[at];
    }
  if (grid.thread_rank() == 0) *sweeps_done = sweep;
}

// x: m values with a zero on each side (x[0] and x[m + 1]); y: the same shape. After each
// iteration x = A x / max|A x| with A = tridiag(-1, 2, -1); eigenvalue = max|A x| of the
// last one.
__global__ void power_iteration(float *x, float *y, unsigned *norm_bits, float *eigenvalue, int m,
                                int iterations) {
  cg::grid_group grid = cg::this_grid();
  if (grid.thread_rank() == 0) norm_bits[0] = norm_bits[1] = norm_bits[2] = 0;
  grid.sync();
  float norm = 0.0f;
  for (int it = 0; it < iterations; ++it) {
    float largest = 0.0f;
    for (long long i = grid.thread_rank() + 1; i <= m; i += grid.size()) {
      float value = (x[i] + x[i]) - x[i - 1] - x[i + 1];
      y[i] = value;
      largest = fmaxf(largest, fabsf(value));
    }
    block_max_to(&norm_bits[it % 3], largest);
    if (grid.thread_rank() == 0) norm_bits[(it + 1) % 3] = 0;
    grid.sync();
    norm = __uint_as_float(norm_bits[it % 3]);
    for (long long i = grid.thread_rank() + 1; i <= m; i += grid.size()) x[i] = y[i] / norm;
    grid.sync();
  }
  if (grid.thread_rank() == 0) *eigenvalue = norm;
}

// The grid real codes use: as many blocks as can be resident at once.
template <typename Kernel>
static int resident_blocks(Kernel kernel, int block, int device) {
  int per_sm = 0, sms = 0;
  CORPUS_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, block, 0));
  CORPUS_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  CORPUS_REQUIRE(per_sm > 0, "the kernel fits on a multiprocessor");
  return per_sm * sms;
}

int main(int argc, char **argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 384, max_sweeps = argc > 2 ? std::atoi(argv[2]) : 400;
  if (n < 8 || n > 4096 || max_sweeps < 1) {
    std::fprintf(stderr, "cooperative_solver: n in [8, 4096] and sweeps >= 1\n");
    return 64;
  }
  int device = 0, cooperative = 0;
  CORPUS_CHECK(cudaGetDevice(&device));
  CORPUS_CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  CORPUS_REQUIRE(cooperative, "the GPU supports cooperative launches");
  const int block = 256;

  // ---- Jacobi: -laplace(u) = f on the unit square, f = 1 in the middle quarter
  const int side = n + 2;
  const size_t cells = size_t(side) * side, bytes = cells * sizeof(float);
  const float h = 1.0f / float(n + 1), tolerance = 1e-6f;
  std::vector<float> rhs(cells, 0.0f);
  for (int y = n / 4 + 1; y <= 3 * n / 4; ++y)
    for (int x = n / 4 + 1; x <= 3 * n / 4; ++x) rhs[size_t(y) * side + x] = h * h;
  float *d_rhs, *d_u, *d_v;
  unsigned *d_bits;
  int *d_sweeps;
  CORPUS_CHECK(cudaMalloc(&d_rhs, bytes));
  CORPUS_CHECK(cudaMalloc(&d_u, bytes));
  CORPUS_CHECK(cudaMalloc(&d_v, bytes));
  CORPUS_CHECK(cudaMalloc(&d_bits, 3 * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&d_sweeps, sizeof(int)));
  CORPUS_CHECK(cudaMemcpy(d_rhs, rhs.data(), bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(d_u, 0, bytes));
  CORPUS_CHECK(cudaMemset(d_v, 0, bytes));
  CORPUS_CHECK(cudaMemset(d_bits, 0, 3 * sizeof(unsigned)));
  CORPUS_CHECK(cudaMemset(d_sweeps, 0, sizeof(int)));
  const int jacobi_grid = resident_blocks(jacobi_solve, block, device);
  fidelity::EventTimer timer;
  float jacobi_ms = 0;
  {
    corpus::Launch l("jacobi_solve(float const*, float*, float*, unsigned int*, int*, int, int, float)",
                     {corpus::buffer("rhs", d_rhs, bytes), corpus::buffer("u", d_u, bytes),
                      corpus::buffer("v", d_v, bytes), corpus::buffer("residual", d_bits, 3 * sizeof(unsigned)),
                      corpus::buffer("sweeps", d_sweeps, sizeof(int))});
    l.before();
    int n_arg = n, sweeps_arg = max_sweeps;
    float tolerance_arg = tolerance;
    void *args[] = {&d_rhs, &d_u, &d_v, &d_bits, &d_sweeps, &n_arg, &sweeps_arg, &tolerance_arg};
    timer.start();
    CORPUS_CHECK(cudaLaunchCooperativeKernel((const void *)jacobi_solve, dim3(jacobi_grid), dim3(block), args, 0,
                                             cudaStream_t(0)));
    jacobi_ms = timer.stop_ms();
    l.after();
  }
  std::vector<float> u(cells);
  int sweeps = 0;
  CORPUS_CHECK(cudaMemcpy(u.data(), d_u, bytes, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(&sweeps, d_sweeps, sizeof(int), cudaMemcpyDeviceToHost));
  std::printf("cooperative_solver: jacobi %dx%d, %d sweeps on %d blocks of %d in %.3f ms\n", n, n, sweeps,
              jacobi_grid, block, jacobi_ms);
  // The host repeats the sweeps (double precision) and compares.
  {
    std::vector<double> a(cells, 0.0), b(cells, 0.0);
    for (int s = 0; s < sweeps; ++s) {
      for (int y = 1; y <= n; ++y)
        for (int x = 1; x <= n; ++x) {
          size_t at = size_t(y) * side + x;
          b[at] = 0.25 * (a[at - 1] + a[at + 1] + a[at - side] + a[at + side] + rhs[at]);
        }
      a.swap(b);
    }
    double worst = 0, peak = 0;
    for (size_t i = 0; i < cells; ++i) {
      worst = std::fmax(worst, std::fabs(a[i] - u[i]));
      peak = std::fmax(peak, a[i]);
    }
    CORPUS_REQUIRE(sweeps >= 1 && sweeps <= max_sweeps, "the solver ran between 1 and the allowed sweeps");
    CORPUS_REQUIRE(peak > 0 && worst <= 1e-4 * peak, "the device's Jacobi sweeps match the host's");
  }
  corpus::output("jacobi_sweeps", (unsigned long long)sweeps);
  corpus::output("jacobi_sum", fidelity::sum(u.data(), u.size()), 5);
  corpus::output("jacobi_center", double(u[size_t(side / 2) * side + side / 2]), 5);

  // ---- power iteration, launched with the cooperative launch attribute
  const int m = 1 << 18, iterations = 60;
  const size_t vector_bytes = size_t(m + 2) * sizeof(float);
  std::vector<float> x0(m + 2, 0.0f);
  for (int i = 1; i <= m; ++i) x0[i] = (i % 2 ? 1.0f : -1.0f) * (1.0f + float(i % 7) / 8.0f);
  float *d_x, *d_y, *d_eigenvalue;
  unsigned *d_norm;
  CORPUS_CHECK(cudaMalloc(&d_x, vector_bytes));
  CORPUS_CHECK(cudaMalloc(&d_y, vector_bytes));
  CORPUS_CHECK(cudaMalloc(&d_norm, 3 * sizeof(unsigned)));
  CORPUS_CHECK(cudaMalloc(&d_eigenvalue, sizeof(float)));
  CORPUS_CHECK(cudaMemcpy(d_x, x0.data(), vector_bytes, cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemset(d_y, 0, vector_bytes));
  CORPUS_CHECK(cudaMemset(d_norm, 0, 3 * sizeof(unsigned)));
  CORPUS_CHECK(cudaMemset(d_eigenvalue, 0, sizeof(float)));
  const int power_grid = resident_blocks(power_iteration, block, device);
  float power_ms = 0;
  {
    corpus::Launch l("power_iteration(float*, float*, unsigned int*, float*, int, int)",
                     {corpus::buffer("x", d_x, vector_bytes), corpus::buffer("y", d_y, vector_bytes),
                      corpus::buffer("norm", d_norm, 3 * sizeof(unsigned)),
                      corpus::buffer("eigenvalue", d_eigenvalue, sizeof(float))});
    l.before();
    cudaLaunchAttribute attribute = {};
    attribute.id = cudaLaunchAttributeCooperative;
    attribute.val.cooperative = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(power_grid);
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = 0;
    config.stream = 0;
    config.attrs = &attribute;
    config.numAttrs = 1;
    timer.start();
    CORPUS_CHECK(cudaLaunchKernelEx(&config, power_iteration, d_x, d_y, d_norm, d_eigenvalue, m, iterations));
    power_ms = timer.stop_ms();
    l.after();
  }
  float eigenvalue = 0;
  std::vector<float> x(m + 2);
  CORPUS_CHECK(cudaMemcpy(&eigenvalue, d_eigenvalue, sizeof(float), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(x.data(), d_x, vector_bytes, cudaMemcpyDeviceToHost));
  std::printf("cooperative_solver: power iteration, %d iterations of %d on %d blocks of %d in %.3f ms: %.6f\n",
              iterations, m, power_grid, block, power_ms, eigenvalue);
  // The host repeats the iterations (double precision) and compares.
  {
    std::vector<double> a(x0.begin(), x0.end()), b(m + 2, 0.0);
    double norm = 0;
    for (int it = 0; it < iterations; ++it) {
      norm = 0;
      for (int i = 1; i <= m; ++i) {
        b[i] = 2 * a[i] - a[i - 1] - a[i + 1];
        norm = std::fmax(norm, std::fabs(b[i]));
      }
      for (int i = 1; i <= m; ++i) a[i] = b[i] / norm;
    }
    double worst = 0;
    for (int i = 1; i <= m; ++i) worst = std::fmax(worst, std::fabs(a[i] - x[i]));
    CORPUS_REQUIRE(std::fabs(norm - eigenvalue) <= 1e-4 * norm, "the device's eigenvalue matches the host's");
    CORPUS_REQUIRE(worst <= 1e-3, "the device's eigenvector matches the host's");
    CORPUS_REQUIRE(eigenvalue > 3.0f && eigenvalue <= 4.0f + 1e-4f, "the eigenvalue lies below 4");
  }
  corpus::output("power_eigenvalue", double(eigenvalue), 5);
  corpus::output("power_vector_sum", fidelity::sum(x.data(), x.size()), 4);
  corpus::result_ok();
  return 0;
}
