// Device side of the conjugate-gradient solver (examples/README.md).
//
// Data structures hold raw device pointers: CsrMatrix and Vector are passed to kernels by
// value, CgState lives in device memory and the update kernels dereference it, so a replay
// only works when every device pointer is valid again at its recorded address.
//
// Determinism: dot products are summed per DOT_TILE-element tile in a fixed tree order in
// shared memory (dot_partial), then the tile sums in the same fixed order by one block
// (cg_reduce). No floating-point atomics: every result is bit-identical from run to run and
// for any block shape and any grid that covers the work.
#pragma once

#include "example_util.cuh"

// The 4 bytes after each int are explicit members (zeroed once): as implicit padding they
// would reach the launch's argument buffer with whatever a copy left there, and identical
// launches would differ in their bytes (and be recorded as different instances).
struct CsrMatrix {
  int rows;
  int unused;
  const int *row_ptr;  // rows + 1 entries
  const int *cols;     // row_ptr[rows] entries, ascending within a row
  const double *vals;
};

struct Vector {
  int n;
  int unused;
  double *data;
};

// Scalars of the iteration, kept on the device so every launch of a kernel has the same
// arguments (the host only reads rr to decide when to stop).
struct CgScalars {
  double rr;     // r.r of the current residual
  double rr0;    // r.r of the initial residual
  double pAp;    // p.Ap of this iteration
  double alpha;  // rr / pAp
  double beta;   // rr_new / rr
};

struct CgState {
  Vector x, r, p, Ap, b;
  CgScalars *scalars;
};

enum class ReduceOp : int {
  Init = 0,   // rr = rr0 = sum
  Alpha = 1,  // pAp = sum, alpha = rr / pAp
  Beta = 2,   // beta = sum / rr, rr = sum
};

// Elements per partial sum of a dot product: fixes the summation order.
constexpr int DOT_TILE = 256;

// Sums sh[0..DOT_TILE) into sh[0] in a fixed pairwise order, whatever the block size. The
// caller has written sh and synchronised; on return every thread may read sh[0].
__device__ inline void tile_tree_sum(double *sh) {
  const int t = example::thread_rank(), nt = example::block_threads();
  for (int half = DOT_TILE / 2; half > 0; half >>= 1) {
    for (int i = t; i < half; i += nt) sh[i] = sh[i] + sh[i + half];
    __syncthreads();
  }
}

// y = A x, one row per thread, grid-stride loop.
__global__ void spmv_csr(CsrMatrix A, Vector x, Vector y) {
  for (long long row = example::global_rank(); row < A.rows; row += example::grid_threads()) {
    const int end = A.row_ptr[row + 1];
    double sum = 0.0;
    for (int k = A.row_ptr[row]; k < end; ++k) sum = fma(A.vals[k], x.data[A.cols[k]], sum);
    y.data[row] = sum;
  }
}

// partials[t] = sum of a[i] * b[i] over tile t = [t * DOT_TILE, (t + 1) * DOT_TILE) of the
// vectors, for every tile; blocks take tiles in a block-stride loop.
__global__ void dot_partial(Vector a, Vector b, double *partials) {
  __shared__ double sh[DOT_TILE];
  const int t = example::thread_rank(), nt = example::block_threads();
  const long long n = a.n;
  const long long tiles = (n + DOT_TILE - 1) / DOT_TILE;
  for (long long tile = example::block_rank(); tile < tiles; tile += example::grid_blocks()) {
    const long long base = tile * DOT_TILE;
    for (int i = t; i < DOT_TILE; i += nt) {
      const long long k = base + i;
      sh[i] = k < n ? a.data[k] * b.data[k] : 0.0;
    }
    __syncthreads();
    tile_tree_sum(sh);
    if (t == 0) partials[tile] = sh[0];
    __syncthreads();  // sh[0] is read before the next tile overwrites sh
  }
}

// Sums partials[0..count) in a fixed order (DOT_TILE at a time, each a fixed tree) and
// updates the iteration's scalars. Block 0 does it all; any other block returns at once.
__global__ void cg_reduce(const double *partials, int count, CgScalars *s, ReduceOp op) {
  if (example::block_rank() != 0) return;
  __shared__ double sh[DOT_TILE];
  const int t = example::thread_rank(), nt = example::block_threads();
  double total = 0.0;  // meaningful in thread 0
  for (int base = 0; base < count; base += DOT_TILE) {
    for (int i = t; i < DOT_TILE; i += nt) sh[i] = base + i < count ? partials[base + i] : 0.0;
    __syncthreads();
    tile_tree_sum(sh);
    if (t == 0) total = total + sh[0];
    __syncthreads();
  }
  if (t != 0) return;
  switch (op) {
    case ReduceOp::Init:
      s->rr = total;
      s->rr0 = total;
      break;
    case ReduceOp::Alpha:
      s->pAp = total;
      s->alpha = s->rr / total;
      break;
    case ReduceOp::Beta:
      s->beta = total / s->rr;
      s->rr = total;
      break;
  }
}

// r = b - Ap (Ap = A x0), p = r.
__global__ void cg_init(const CgState *st) {
  const Vector r = st->r, p = st->p, Ap = st->Ap, b = st->b;
  for (long long i = example::global_rank(); i < r.n; i += example::grid_threads()) {
    const double v = b.data[i] - Ap.data[i];
    r.data[i] = v;
    p.data[i] = v;
  }
}

// x += alpha p, r -= alpha Ap.
__global__ void cg_update_xr(const CgState *st) {
  const Vector x = st->x, r = st->r, p = st->p, Ap = st->Ap;
  const double alpha = st->scalars->alpha;
  for (long long i = example::global_rank(); i < x.n; i += example::grid_threads()) {
    x.data[i] = fma(alpha, p.data[i], x.data[i]);
    r.data[i] = fma(-alpha, Ap.data[i], r.data[i]);
  }
}

// p = r + beta p.
__global__ void cg_update_p(const CgState *st) {
  const Vector r = st->r, p = st->p;
  const double beta = st->scalars->beta;
  for (long long i = example::global_rank(); i < p.n; i += example::grid_threads())
    p.data[i] = fma(beta, p.data[i], r.data[i]);
}
