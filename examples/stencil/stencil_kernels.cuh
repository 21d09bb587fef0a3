// Device side of the 2-D heat stencil (examples/README.md).
//
// One explicit Jacobi step of the heat equation on an nx x ny grid of floats, row-major
// (index y * nx + x), Dirichlet boundary (the outermost cells keep their values):
//
//   out = c + r * ((north + south) + (west + east) - 4 c)     (two fmaf, see heat5)
//
// Both kernels give bit-identical results for any block shape and any grid that covers the
// work (heat_tiled: for any grid at all), and the host reference (heat5 below) rounds the
// same way: the same operations in the same order, multiply-adds as explicit fmaf().
#pragma once

#include "example_util.cuh"

// Cells per shared-memory tile: compile-time constants, so the tile (and the static shared
// memory) does not depend on the block shape.
constexpr int TILE_X = 32;
constexpr int TILE_Y = 8;

// Both multiply-adds are explicit fmaf(), correctly rounded on the device and on the host,
// and no separate multiply is left for a compiler to fuse with an add: the result does not
// depend on -ffp-contract or on the pipeline a replay compiles the kernel with.
__host__ __device__ inline float heat5(float c, float north, float south, float west, float east,
                                       float r) {
  const float laplacian = fmaf(-4.0f, c, (north + south) + (west + east));
  return fmaf(r, laplacian, c);
}

__host__ __device__ inline bool on_boundary(int x, int y, int nx, int ny) {
  return x == 0 || y == 0 || x == nx - 1 || y == ny - 1;
}

// One thread per cell (x from the x dimensions of the launch, y from the y dimensions),
// bounds-checked: any block shape works with a grid that covers nx x ny.
__global__ void heat_naive(const float *in, float *out, int nx, int ny, float r) {
  const int x = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  const int y = (int)(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= nx || y >= ny) return;
  const long long i = (long long)y * nx + x;
  out[i] = on_boundary(x, y, nx, ny)
               ? in[i]
               : heat5(in[i], in[i - nx], in[i + nx], in[i - 1], in[i + 1], r);
}

// Shared-memory tiling: a block loads a TILE_X x TILE_Y tile plus a one-cell halo, then
// updates the tile. The threads of any block shape stride over the tile together, and the
// blocks stride over the tiles (grid y and z together walk the tile rows), so every grid
// works; the natural one is ceil(nx / TILE_X) x ceil(ny / TILE_Y).
__global__ void heat_tiled(const float *in, float *out, int nx, int ny, float r) {
  __shared__ float tile[TILE_Y + 2][TILE_X + 2];
  const int t = example::thread_rank(), nt = example::block_threads();
  const int tiles_x = (nx + TILE_X - 1) / TILE_X;
  const int tiles_y = (ny + TILE_Y - 1) / TILE_Y;
  const int row_start = (int)(blockIdx.z * gridDim.y + blockIdx.y);
  const int row_stride = (int)(gridDim.y * gridDim.z);
  for (int ty = row_start; ty < tiles_y; ty += row_stride) {
    for (int tx = (int)blockIdx.x; tx < tiles_x; tx += (int)gridDim.x) {
      const int x0 = tx * TILE_X - 1, y0 = ty * TILE_Y - 1;  // grid cell of tile[0][0]
      for (int i = t; i < (TILE_Y + 2) * (TILE_X + 2); i += nt) {
        const int ly = i / (TILE_X + 2), lx = i % (TILE_X + 2);
        const int gx = x0 + lx, gy = y0 + ly;
        const bool inside = gx >= 0 && gx < nx && gy >= 0 && gy < ny;
        tile[ly][lx] = inside ? in[(long long)gy * nx + gx] : 0.0f;
      }
      __syncthreads();
      for (int i = t; i < TILE_Y * TILE_X; i += nt) {
        const int ly = i / TILE_X + 1, lx = i % TILE_X + 1;
        const int gx = x0 + lx, gy = y0 + ly;
        if (gx >= nx || gy >= ny) continue;
        const float c = tile[ly][lx];
        out[(long long)gy * nx + gx] =
            on_boundary(gx, gy, nx, ny)
                ? c
                : heat5(c, tile[ly - 1][lx], tile[ly + 1][lx], tile[ly][lx - 1], tile[ly][lx + 1],
                        r);
      }
      __syncthreads();  // the tile is read before the next one overwrites it
    }
  }
}
