// A kernel consuming the output of a different, large kernel (cold): each step the
// producer writes a 160 MiB field, more than L2 holds, and the consumer then reduces its
// first 16 MiB, which the producer wrote first and L2 has long evicted. Prints its own
// timings (host clock, events) and checksums.
//   fidelity_producer_consumer [steps]   (default 12)
#include <cstdlib>
#include <vector>

#include "corpus_output.h"
#include "fidelity_timing.h"

__global__ void produce_field(float *field, size_t n, int step) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    field[i] = float((i * 2654435761u + step * 97u) % 1024u) * (1.0f / 1024.0f);
}

// One partial sum per block, in a fixed order (a shared-memory tree): deterministic.
__global__ void consume_window(const float *field, size_t count, float *partial) {
  __shared__ float tree[256];
  float sum = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x)
    sum += field[i] * field[i];
  tree[threadIdx.x] = sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) tree[threadIdx.x] += tree[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = tree[0];
}

int main(int argc, char **argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 12;
  if (steps < 1) {
    std::fprintf(stderr, "fidelity_producer_consumer: steps must be positive\n");
    return 64;
  }
  const size_t n = size_t(40) << 20, window = size_t(4) << 20;  // 160 MiB field, 16 MiB read
  const int blocks = 264, threads = 256;                         // 2 waves of 132 SMs
  float *field, *partial;
  CORPUS_CHECK(cudaMalloc(&field, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&partial, blocks * sizeof(float)));
  CORPUS_CHECK(cudaMemset(partial, 0, blocks * sizeof(float)));
  std::vector<float> host(blocks);
  double checksum = 0;
  float produce_ms = 0, consume_ms = 0;
  fidelity::EventTimer produce_timer, consume_timer;
  double started = fidelity::host_ms();
  for (int step = 0; step < steps; ++step) {
    if (step == 0) {  // the protocol's checksums on the first launch of each kernel
      corpus::Launch l("produce_field(float*, unsigned long, int)", {corpus::buffer("field", field, n * sizeof(float))});
      l.before();
      produce_field<<<blocks * 4, threads>>>(field, n, step);
      l.after();
      corpus::Launch c("consume_window(float const*, unsigned long, float*)",
                       {corpus::buffer("window", field, window * sizeof(float)),
                        corpus::buffer("partial", partial, blocks * sizeof(float))});
      c.before();
      consume_window<<<blocks, threads>>>(field, window, partial);
      c.after();
    } else {
      produce_timer.start();
      produce_field<<<blocks * 4, threads>>>(field, n, step);
      produce_ms += produce_timer.stop_ms();
      consume_timer.start();
      consume_window<<<blocks, threads>>>(field, window, partial);
      consume_ms += consume_timer.stop_ms();
    }
    CORPUS_CHECK(cudaMemcpy(host.data(), partial, blocks * sizeof(float), cudaMemcpyDeviceToHost));
    checksum += fidelity::sum(host.data(), host.size());
  }
  double host_total = fidelity::host_ms() - started;
  std::printf("producer: %.3f ms, consumer: %.3f ms over %d steps (events)\n", produce_ms, consume_ms, steps - 1);
  std::printf("Host time: %.0f ms\n", host_total);
  CORPUS_REQUIRE(checksum > 0, "the window is not all zeros");
  corpus::output("window_energy", checksum, 6);
  corpus::result_ok();
  return 0;
}
