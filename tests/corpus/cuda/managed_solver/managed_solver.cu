// A Jacobi solver on unified memory, written the way tutorials and many applications do:
// cudaMallocManaged arrays touched directly by the host between kernels (boundary values
// set on the host each sweep, the residual read on the host without a copy) and a
// convergence check on the host. A second, cuMemAllocManaged-style pattern: one managed
// parameter block that the host edits and kernels read.
#include <cmath>

#include "corpus_check.h"
#include "corpus_output.h"

struct Params {
  int nx, ny;
  float boundary;
  float omega;
};

__global__ void jacobi(const Params *p, const float *in, float *out) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  int nx = p->nx, ny = p->ny;
  if (x <= 0 || y <= 0 || x >= nx - 1 || y >= ny - 1) return;
  float v = 0.25f * (in[(y - 1) * nx + x] + in[(y + 1) * nx + x] + in[y * nx + x - 1] + in[y * nx + x + 1]);
  out[y * nx + x] = in[y * nx + x] + p->omega * (v - in[y * nx + x]);
}

// Row sums of |out - in|, one thread per row: deterministic.
__global__ void row_change(const Params *p, const float *in, const float *out, float *rows) {
  int y = blockIdx.x * blockDim.x + threadIdx.x;
  if (y >= p->ny) return;
  float s = 0.0f;
  for (int x = 0; x < p->nx; ++x) s += fabsf(out[y * p->nx + x] - in[y * p->nx + x]);
  rows[y] = s;
}

int main() {
  const int nx = 256, ny = 256;
  Params *p;
  float *a, *b, *rows;
  CORPUS_CHECK(cudaMallocManaged(&p, sizeof(Params)));
  CORPUS_CHECK(cudaMallocManaged(&a, nx * ny * sizeof(float)));
  CORPUS_CHECK(cudaMallocManaged(&b, nx * ny * sizeof(float)));
  CORPUS_CHECK(cudaMallocManaged(&rows, ny * sizeof(float)));
  *p = Params{nx, ny, 1.0f, 0.8f};
  for (int i = 0; i < nx * ny; ++i) a[i] = b[i] = 0.0f;
  dim3 block(16, 16), grid(nx / 16, ny / 16);
  double change = 0.0;
  int sweep = 0;
  for (; sweep < 40; ++sweep) {
    // The host sets the boundary every sweep (a time-dependent boundary condition).
    p->boundary = 1.0f + 0.01f * sweep;
    for (int x = 0; x < nx; ++x) a[x] = b[x] = p->boundary;
    const size_t bytes = nx * ny * sizeof(float);
    if (sweep < 2) {  // both argument orders (a->b, b->a) once with checksums
      corpus::Launch l("jacobi(Params const*, float const*, float*)",
                       {corpus::buffer("p", p, sizeof(Params)), corpus::buffer("a", a, bytes), corpus::buffer("b", b, bytes)});
      l.before(); jacobi<<<grid, block>>>(p, a, b); l.after();
    } else {
      jacobi<<<grid, block>>>(p, a, b);
    }
    if (sweep % 10 == 9) {
      if (sweep == 9) {
        corpus::Launch l("row_change(Params const*, float const*, float const*, float*)",
                         {corpus::buffer("p", p, sizeof(Params)), corpus::buffer("a", a, bytes),
                          corpus::buffer("b", b, bytes), corpus::buffer("rows", rows, ny * sizeof(float))});
        l.before(); row_change<<<(ny + 127) / 128, 128>>>(p, a, b, rows); l.after();
      } else {
        row_change<<<(ny + 127) / 128, 128>>>(p, a, b, rows);
      }
      CORPUS_CHECK(cudaDeviceSynchronize());
      change = 0.0;
      for (int y = 0; y < ny; ++y) change += rows[y];  // read on the host, no copy
    }
    CORPUS_CHECK(cudaDeviceSynchronize());
    float *t = a; a = b; b = t;
  }
  CORPUS_CHECK(cudaDeviceSynchronize());
  double total = 0.0;
  for (int i = 0; i < nx * ny; ++i) total += a[i];
  corpus::output("field", corpus::fnv1a64(a, nx * ny * sizeof(float)));
  corpus::output("last-change", change, 9);
  CORPUS_REQUIRE(std::isfinite(total) && total > 0.0, "heat entered from the boundary");
  CORPUS_CHECK(cudaFree(p));
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaFree(rows));
  corpus::result_ok();
  return 0;
}
