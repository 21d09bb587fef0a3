// Library-heavy device code (thrust + cub: deep templates, many kernels, launch bounds
// from policies) for the mneme pass: compile-only, never run by the tests.
#include <cstdio>
#include <cub/cub.cuh>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

struct square {
  __host__ __device__ float operator()(float x) const { return x * x; }
};

int main() {
  thrust::device_vector<float> v(1000, 2.0f);
  thrust::transform(v.begin(), v.end(), v.begin(), square());
  thrust::sort(v.begin(), v.end());
  float sum = thrust::reduce(v.begin(), v.end());
  std::printf("%f\n", sum);
  return 0;
}
