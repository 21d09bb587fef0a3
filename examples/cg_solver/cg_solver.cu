// cg_solver: conjugate gradients on the 3-D 7-point Poisson matrix of an n x n x n grid
// (Dirichlet boundary), stored in CSR, right-hand side all ones, x0 = 0.
//
//   cg_solver [--n N] [--iters K] [--tol T] [--block B]
//
// Prints the relative residual history and exits 0 when ||r|| / ||b|| <= T within K
// iterations and the true residual ||b - A x|| / ||b|| computed on the host agrees; exit 2
// (MNEME-RESULT fail ...) when it does not converge, 1 on a CUDA error, 64 on a bad
// argument. Around every launch it prints MNEME-CHECK lines (tests/corpus/README.md).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cg_kernels.cuh"

namespace {

const char USAGE[] = "[--n N] [--iters K] [--tol T] [--block B]";

struct Options {
  int n = 16;         // grid edge: n^3 unknowns
  int iters = 50;     // maximum CG iterations
  double tol = 1e-6;  // on ||r|| / ||b||
  int block = 256;    // threads per block of every kernel
};

Options parse(int argc, char **argv) {
  Options o;
  example::Args args(argc, argv, USAGE);
  while (args.next()) {
    if (args.is("--n"))
      o.n = (int)args.integer(2, 1000);
    else if (args.is("--iters"))
      o.iters = (int)args.integer(1, 1000000);
    else if (args.is("--tol"))
      o.tol = args.real(1e-300, 1.0);
    else if (args.is("--block"))
      o.block = (int)args.integer(1, 1024);
    else
      args.unknown();
  }
  if ((long long)o.n * o.n * o.n > 100000000LL)
    args.fail("--n %d gives more than 1e8 unknowns", o.n);
  return o;
}

struct HostCsr {
  int rows = 0;
  std::vector<int> row_ptr, cols;
  std::vector<double> vals;
};

// The 7-point Laplacian (6 on the diagonal, -1 to each grid neighbour) of an n^3 grid,
// row = (k * n + j) * n + i, columns ascending within each row.
HostCsr poisson3d(int n) {
  HostCsr A;
  A.rows = n * n * n;
  A.row_ptr.reserve(A.rows + 1);
  A.cols.reserve((size_t)A.rows * 7);
  A.vals.reserve((size_t)A.rows * 7);
  A.row_ptr.push_back(0);
  const int plane = n * n;
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < n; ++i) {
        const int row = (k * n + j) * n + i;
        auto add = [&](int col, double v) {
          A.cols.push_back(col);
          A.vals.push_back(v);
        };
        if (k > 0) add(row - plane, -1.0);
        if (j > 0) add(row - n, -1.0);
        if (i > 0) add(row - 1, -1.0);
        add(row, 6.0);
        if (i < n - 1) add(row + 1, -1.0);
        if (j < n - 1) add(row + n, -1.0);
        if (k < n - 1) add(row + plane, -1.0);
        A.row_ptr.push_back((int)A.cols.size());
      }
  return A;
}

template <class T>
T *device_copy(const std::vector<T> &host) {
  T *d = nullptr;
  CORPUS_CHECK(cudaMalloc(&d, host.size() * sizeof(T)));
  CORPUS_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

double *device_zeros(size_t count) {
  double *d = nullptr;
  CORPUS_CHECK(cudaMalloc(&d, count * sizeof(double)));
  CORPUS_CHECK(cudaMemset(d, 0, count * sizeof(double)));
  return d;
}

template <class T>
T zeroed() {
  T value;
  std::memset(&value, 0, sizeof(value));
  return value;
}

Vector make_vector(int n, double *data) {
  Vector v = zeroed<Vector>();
  v.n = n;
  v.data = data;
  return v;
}

// Kernel names as the checksum lines report them (demangled, as llvm-cxxfilt prints them).
const char K_SPMV[] = "spmv_csr(CsrMatrix, Vector, Vector)";
const char K_DOT[] = "dot_partial(Vector, Vector, double*)";
const char K_REDUCE[] = "cg_reduce(double const*, int, CgScalars*, ReduceOp)";
const char K_INIT[] = "cg_init(CgState const*)";
const char K_UPDATE_XR[] = "cg_update_xr(CgState const*)";
const char K_UPDATE_P[] = "cg_update_p(CgState const*)";

}  // namespace

int main(int argc, char **argv) {
  const Options opt = parse(argc, argv);
  const HostCsr host = poisson3d(opt.n);
  const int N = host.rows;
  const int nnz = host.row_ptr.back();
  const int tiles = (int)example::ceil_div(N, DOT_TILE);
  std::printf("cg_solver: n=%d unknowns=%d nonzeros=%d block=%d tol=%g max_iters=%d\n", opt.n, N,
              nnz, opt.block, opt.tol, opt.iters);

  // Device memory: one allocation per array, so each is a region of its own in a recording.
  int *d_row_ptr = device_copy(host.row_ptr);
  int *d_cols = device_copy(host.cols);
  double *d_vals = device_copy(host.vals);
  double *d_b = device_copy(std::vector<double>(N, 1.0));
  double *d_x = device_zeros(N);
  double *d_r = device_zeros(N);
  double *d_p = device_zeros(N);
  double *d_Ap = device_zeros(N);
  double *d_partials = device_zeros(tiles);
  CgScalars *d_scalars = nullptr;
  CORPUS_CHECK(cudaMalloc(&d_scalars, sizeof(CgScalars)));
  CORPUS_CHECK(cudaMemset(d_scalars, 0, sizeof(CgScalars)));

  // Padding is zeroed: it reaches device memory (CgState) and the recorded argument bytes,
  // whose hash tells a repeated launch from a new one.
  CsrMatrix A = zeroed<CsrMatrix>();
  A.rows = N;
  A.row_ptr = d_row_ptr;
  A.cols = d_cols;
  A.vals = d_vals;
  const Vector x = make_vector(N, d_x), r = make_vector(N, d_r), p = make_vector(N, d_p);
  const Vector Ap = make_vector(N, d_Ap), b = make_vector(N, d_b);
  CgState host_state = zeroed<CgState>();
  host_state.x = x;
  host_state.r = r;
  host_state.p = p;
  host_state.Ap = Ap;
  host_state.b = b;
  host_state.scalars = d_scalars;
  CgState *d_state = nullptr;
  CORPUS_CHECK(cudaMalloc(&d_state, sizeof(CgState)));
  CORPUS_CHECK(cudaMemcpy(d_state, &host_state, sizeof(CgState), cudaMemcpyHostToDevice));

  const size_t vec_bytes = (size_t)N * sizeof(double);
  const corpus::Region R_row_ptr = corpus::buffer("row_ptr", d_row_ptr, (N + 1) * sizeof(int));
  const corpus::Region R_cols = corpus::buffer("cols", d_cols, (size_t)nnz * sizeof(int));
  const corpus::Region R_vals = corpus::buffer("vals", d_vals, (size_t)nnz * sizeof(double));
  const corpus::Region R_x = corpus::buffer("x", d_x, vec_bytes);
  const corpus::Region R_r = corpus::buffer("r", d_r, vec_bytes);
  const corpus::Region R_p = corpus::buffer("p", d_p, vec_bytes);
  const corpus::Region R_Ap = corpus::buffer("Ap", d_Ap, vec_bytes);
  const corpus::Region R_b = corpus::buffer("b", d_b, vec_bytes);
  const corpus::Region R_partials =
      corpus::buffer("partials", d_partials, (size_t)tiles * sizeof(double));
  const corpus::Region R_scalars = corpus::buffer("scalars", d_scalars, sizeof(CgScalars));
  const corpus::Region R_state = corpus::buffer("state", d_state, sizeof(CgState));

  // Launch shapes: --block threads; per-element kernels get a grid covering N, dot_partial
  // one block per tile, cg_reduce one block.
  const dim3 block(opt.block);
  const dim3 grid_rows((unsigned)example::ceil_div(N, opt.block));
  const dim3 grid_tiles((unsigned)tiles);

  auto spmv = [&](const Vector &in, const corpus::Region &in_region) {
    example::checked_launch(K_SPMV, {R_row_ptr, R_cols, R_vals, in_region, R_Ap},
                            [&] { spmv_csr<<<grid_rows, block>>>(A, in, Ap); });
  };
  auto dot = [&](const Vector &u, const corpus::Region &u_region, const Vector &v,
                 const corpus::Region &v_region) {
    if (u.data == v.data)
      example::checked_launch(K_DOT, {u_region, R_partials},
                              [&] { dot_partial<<<grid_tiles, block>>>(u, v, d_partials); });
    else
      example::checked_launch(K_DOT, {u_region, v_region, R_partials},
                              [&] { dot_partial<<<grid_tiles, block>>>(u, v, d_partials); });
  };
  auto reduce = [&](ReduceOp op) {
    example::checked_launch(K_REDUCE, {R_partials, R_scalars},
                            [&] { cg_reduce<<<1, block>>>(d_partials, tiles, d_scalars, op); });
  };
  auto scalars = [&] {
    CgScalars s;
    CORPUS_CHECK(cudaMemcpy(&s, d_scalars, sizeof(s), cudaMemcpyDeviceToHost));
    return s;
  };

  // r0 = b - A x0, p0 = r0, rr = r0.r0
  spmv(x, R_x);
  example::checked_launch(K_INIT, {R_state, R_r, R_p, R_Ap, R_b},
                          [&] { cg_init<<<grid_rows, block>>>(d_state); });
  dot(r, R_r, r, R_r);
  reduce(ReduceOp::Init);

  const double rr0 = scalars().rr0;
  CORPUS_REQUIRE(rr0 > 0.0 && std::isfinite(rr0), "the initial residual is not positive");
  std::printf("cg_solver: iter %4d  |r|/|b| = %.6e\n", 0, 1.0);
  double rel = 1.0;
  int iter = 0;
  bool converged = false;
  while (iter < opt.iters) {
    ++iter;
    spmv(p, R_p);                                      // Ap = A p
    dot(p, R_p, Ap, R_Ap);                             // partial sums of p.Ap
    reduce(ReduceOp::Alpha);                           // alpha = rr / p.Ap
    example::checked_launch(K_UPDATE_XR,               // x += alpha p, r -= alpha Ap
                            {R_state, R_scalars, R_x, R_r, R_p, R_Ap},
                            [&] { cg_update_xr<<<grid_rows, block>>>(d_state); });
    dot(r, R_r, r, R_r);                               // partial sums of r.r
    reduce(ReduceOp::Beta);                            // beta = rr_new / rr, rr = rr_new
    const CgScalars s = scalars();
    rel = std::sqrt(s.rr / rr0);
    converged = rel <= opt.tol;
    if (converged || iter % 5 == 0 || iter == opt.iters || !std::isfinite(rel))
      std::printf("cg_solver: iter %4d  |r|/|b| = %.6e\n", iter, rel);
    if (converged || !std::isfinite(rel)) break;
    example::checked_launch(K_UPDATE_P, {R_state, R_scalars, R_r, R_p},  // p = r + beta p
                            [&] { cg_update_p<<<grid_rows, block>>>(d_state); });
  }
  std::printf("cg_solver: %d launches\n", example::launch_count());

  if (!converged) {
    char what[200];
    std::snprintf(what, sizeof(what),
                  "CG did not converge: |r|/|b| = %.3e after %d iterations (--tol %g); raise "
                  "--iters",
                  rel, iter, opt.tol);
    CORPUS_REQUIRE(false, what);
  }

  // The true residual of the computed x, on the host.
  std::vector<double> xh(N);
  CORPUS_CHECK(cudaMemcpy(xh.data(), d_x, vec_bytes, cudaMemcpyDeviceToHost));
  double res2 = 0.0, b2 = 0.0;
  for (int row = 0; row < N; ++row) {
    double ax = 0.0;
    for (int k = host.row_ptr[row]; k < host.row_ptr[row + 1]; ++k)
      ax += host.vals[k] * xh[host.cols[k]];
    const double d = 1.0 - ax;
    res2 += d * d;
    b2 += 1.0;
  }
  const double true_rel = std::sqrt(res2 / b2);
  std::printf("cg_solver: converged in %d iterations, |r|/|b| = %.6e, true |b-Ax|/|b| = %.6e\n",
              iter, rel, true_rel);
  CORPUS_REQUIRE(true_rel <= 10.0 * opt.tol + 1e-12,
                 "the true residual of x disagrees with the iterated one");

  for (void *ptr : {(void *)d_row_ptr, (void *)d_cols, (void *)d_vals, (void *)d_b, (void *)d_x,
                    (void *)d_r, (void *)d_p, (void *)d_Ap, (void *)d_partials, (void *)d_scalars,
                    (void *)d_state})
    CORPUS_CHECK(cudaFree(ptr));
  corpus::result_ok();
  return 0;
}
