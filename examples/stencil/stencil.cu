// stencil: explicit 2-D heat equation (5-point Jacobi) on an nx x ny grid of floats, run
// twice on the device, once with the naive one-thread-per-cell kernel and once with the
// shared-memory tiled kernel, and checked bit for bit against a host reference.
//
//   stencil [--nx NX] [--ny NY] [--steps S] [--block BX[xBY[xBZ]]]
//
// Exit 0 when both device results equal the host's, 2 (MNEME-RESULT fail ...) when not, 1
// on a CUDA error, 64 on a bad argument. Around every launch it prints MNEME-CHECK lines
// (tests/corpus/README.md).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "stencil_kernels.cuh"

namespace {

const char USAGE[] = "[--nx NX] [--ny NY] [--steps S] [--block BX[xBY[xBZ]]]";

struct Options {
  int nx = 250;  // deliberately not multiples of the tile (32 x 8)
  int ny = 130;
  int steps = 50;
  dim3 block{32, 8, 1};
};

// "256", "32x8" or "8x8x4"
bool parse_block(const char *text, dim3 &block) {
  unsigned dims[3] = {1, 1, 1};
  const char *s = text;
  for (int d = 0; d < 3; ++d) {
    char *end = nullptr;
    const long v = std::strtol(s, &end, 10);
    if (end == s || v < 1 || v > 1024) return false;
    dims[d] = (unsigned)v;
    if (*end == '\0') {
      block = dim3(dims[0], dims[1], dims[2]);
      return dims[0] * dims[1] * dims[2] <= 1024 && dims[2] <= 64;
    }
    if (*end != 'x' || d == 2) return false;
    s = end + 1;
  }
  return false;
}

Options parse(int argc, char **argv) {
  Options o;
  example::Args args(argc, argv, USAGE);
  while (args.next()) {
    if (args.is("--nx"))
      o.nx = (int)args.integer(3, 1 << 15);
    else if (args.is("--ny"))
      o.ny = (int)args.integer(3, 1 << 15);
    else if (args.is("--steps"))
      o.steps = (int)args.integer(1, 100000);
    else if (args.is("--block")) {
      if (!parse_block(args.value(), o.block))
        args.fail("--block wants BX, BXxBY or BXxBYxBZ with at most 1024 threads, not '%s'",
                  args.value());
    } else
      args.unknown();
  }
  return o;
}

// Initial temperature: the top row (y = 0) is hot, the other edges cold, the interior a
// deterministic pattern of small values.
std::vector<float> initial(int nx, int ny) {
  std::vector<float> u((size_t)nx * ny);
  for (int y = 0; y < ny; ++y)
    for (int x = 0; x < nx; ++x) {
      float v;
      if (y == 0)
        v = 1.0f;
      else if (on_boundary(x, y, nx, ny))
        v = 0.0f;
      else
        v = (float)((x * 37 + y * 91) % 17) / 64.0f;
      u[(size_t)y * nx + x] = v;
    }
  return u;
}

void reference_step(const std::vector<float> &in, std::vector<float> &out, int nx, int ny,
                    float r) {
  for (int y = 0; y < ny; ++y)
    for (int x = 0; x < nx; ++x) {
      const size_t i = (size_t)y * nx + x;
      out[i] = on_boundary(x, y, nx, ny)
                   ? in[i]
                   : heat5(in[i], in[i - nx], in[i + nx], in[i - 1], in[i + 1], r);
    }
}

// Bit-for-bit comparison; reports the first difference.
void require_equal(const char *what, const std::vector<float> &got,
                   const std::vector<float> &want, int nx) {
  if (std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0) return;
  size_t i = 0;
  while (std::memcmp(&got[i], &want[i], sizeof(float)) == 0) ++i;
  char message[200];
  std::snprintf(message, sizeof(message),
                "%s result differs from the host reference at x=%zu y=%zu: %.9g != %.9g", what,
                i % (size_t)nx, i / (size_t)nx, (double)got[i], (double)want[i]);
  CORPUS_REQUIRE(false, message);
}

const char K_NAIVE[] = "heat_naive(float const*, float*, int, int, float)";
const char K_TILED[] = "heat_tiled(float const*, float*, int, int, float)";

}  // namespace

int main(int argc, char **argv) {
  const Options opt = parse(argc, argv);
  const int nx = opt.nx, ny = opt.ny;
  const float rate = 0.2f;  // explicit scheme: stable for rate <= 0.25
  const size_t cells = (size_t)nx * ny, bytes = cells * sizeof(float);
  const dim3 block = opt.block;
  const dim3 grid_naive((unsigned)example::ceil_div(nx, block.x),
                        (unsigned)example::ceil_div(ny, block.y));
  const dim3 grid_tiled((unsigned)example::ceil_div(nx, TILE_X),
                        (unsigned)example::ceil_div(ny, TILE_Y));
  std::printf("stencil: %d x %d cells, %d steps, block %ux%ux%u, tile %dx%d\n", nx, ny,
              opt.steps, block.x, block.y, block.z, TILE_X, TILE_Y);

  const std::vector<float> u0 = initial(nx, ny);
  // Two buffers per kernel (in and out swap every step), one allocation each.
  float *naive[2], *tiled[2];
  for (float **pair : {naive, tiled})
    for (int k = 0; k < 2; ++k) {
      CORPUS_CHECK(cudaMalloc(&pair[k], bytes));
      CORPUS_CHECK(cudaMemcpy(pair[k], u0.data(), bytes, cudaMemcpyHostToDevice));
    }
  const corpus::Region R_naive[2] = {corpus::buffer("naive_0", naive[0], bytes),
                                     corpus::buffer("naive_1", naive[1], bytes)};
  const corpus::Region R_tiled[2] = {corpus::buffer("tiled_0", tiled[0], bytes),
                                     corpus::buffer("tiled_1", tiled[1], bytes)};

  for (int step = 0; step < opt.steps; ++step) {
    const int in = step % 2, out = 1 - in;
    example::checked_launch(K_NAIVE, {R_naive[in], R_naive[out]}, [&] {
      heat_naive<<<grid_naive, block>>>(naive[in], naive[out], nx, ny, rate);
    });
    example::checked_launch(K_TILED, {R_tiled[in], R_tiled[out]}, [&] {
      heat_tiled<<<grid_tiled, block>>>(tiled[in], tiled[out], nx, ny, rate);
    });
  }

  std::vector<float> want = u0, scratch(cells);
  for (int step = 0; step < opt.steps; ++step) {
    reference_step(want, scratch, nx, ny, rate);
    std::swap(want, scratch);
  }
  const int last = opt.steps % 2;
  std::vector<float> got_naive(cells), got_tiled(cells);
  CORPUS_CHECK(cudaMemcpy(got_naive.data(), naive[last], bytes, cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(got_tiled.data(), tiled[last], bytes, cudaMemcpyDeviceToHost));
  require_equal("heat_naive", got_naive, want, nx);
  require_equal("heat_tiled", got_tiled, want, nx);

  double total = 0.0;
  for (float v : want) total += v;
  std::printf("stencil: %d launches; heat_naive and heat_tiled match the host reference bit for "
              "bit (total heat %.6f)\n",
              example::launch_count(), total);
  for (float *ptr : {naive[0], naive[1], tiled[0], tiled[1]}) CORPUS_CHECK(cudaFree(ptr));
  corpus::result_ok();
  return 0;
}
