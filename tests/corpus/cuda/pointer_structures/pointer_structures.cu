// Pointer-based data structures in device memory: a linked list whose nodes hold absolute
// device pointers, a __device__ global pointing at its head, and a descriptor struct of
// device pointers stored in device memory. Replay must restore memory at the same addresses.
#include "corpus_check.h"

struct Node {
  int value;
  Node *next;
};

struct Arrays {  // lives in device memory; kernels receive only its address
  const float *a;
  const float *b;
  float *out;
  int n;
  Node *list;
};

__device__ Node *g_head;

// Node k of the list is pool[(k * 7) % count] (count is not a multiple of 7).
__global__ void build_list(Node *pool, int count) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= count) return;
  Node *node = &pool[(k * 7) % count];
  node->value = k + 1;
  node->next = k + 1 < count ? &pool[((k + 1) * 7) % count] : nullptr;
  if (k == 0) g_head = node;
}

// Single thread: reverse the list in place and move g_head.
__global__ void reverse_list() {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  Node *prev = nullptr, *cur = g_head;
  while (cur) {
    Node *next = cur->next;
    cur->next = prev;
    prev = cur;
    cur = next;
  }
  g_head = prev;
}

// Reads every pointer through the descriptor; out[i] also depends on the list order.
__global__ void combine(const Arrays *arrays, int *weighted_sum) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < arrays->n) arrays->out[i] = arrays->a[i] * arrays->b[i];
  if (i == 0) {
    int pos = 1, acc = 0;
    for (const Node *p = g_head; p; p = p->next) acc += pos++ * p->value;
    *weighted_sum = acc + (g_head == arrays->list ? 0 : 1);
  }
}

int main() {
  const int count = 300, n = 256;
  Node *pool;
  Arrays *desc;
  float *a, *b, *out;
  int *sum;
  CORPUS_CHECK(cudaMalloc(&pool, count * sizeof(Node)));
  CORPUS_CHECK(cudaMalloc(&desc, sizeof(Arrays)));
  CORPUS_CHECK(cudaMalloc(&a, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&b, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&out, n * sizeof(float)));
  CORPUS_CHECK(cudaMalloc(&sum, sizeof(int)));
  CORPUS_CHECK(cudaMemset(pool, 0, count * sizeof(Node)));  // also zeroes the padding after `value`
  CORPUS_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  CORPUS_CHECK(cudaMemset(sum, 0, sizeof(int)));
  std::vector<float> ha(n), hb(n);
  for (int i = 0; i < n; ++i) {
    ha[i] = (float)(i % 9);
    hb[i] = 0.5f * (float)(i % 4);
  }
  CORPUS_CHECK(cudaMemcpy(a, ha.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CORPUS_CHECK(cudaMemcpy(b, hb.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Arrays host_desc{a, b, out, n, pool};  // list: the pool itself (node 0 of the reversed list is elsewhere)
  CORPUS_CHECK(cudaMemcpy(desc, &host_desc, sizeof(host_desc), cudaMemcpyHostToDevice));
  const size_t pool_bytes = count * sizeof(Node);

  { corpus::Launch l("build_list(Node*, int)", {corpus::buffer("pool", pool, pool_bytes), CORPUS_SYMBOL(g_head)});
    l.before(); build_list<<<(count + 127) / 128, 128>>>(pool, count); l.after(); }
  { corpus::Launch l("reverse_list()", {corpus::buffer("pool", pool, pool_bytes), CORPUS_SYMBOL(g_head)});
    l.before(); reverse_list<<<1, 32>>>(); l.after(); }
  { corpus::Launch l("combine(Arrays const*, int*)",
                     {corpus::buffer("desc", desc, sizeof(Arrays)), corpus::buffer("a", a, n * sizeof(float)),
                      corpus::buffer("b", b, n * sizeof(float)), corpus::buffer("out", out, n * sizeof(float)),
                      corpus::buffer("pool", pool, pool_bytes), corpus::buffer("sum", sum, sizeof(int)),
                      CORPUS_SYMBOL(g_head)});
    l.before(); combine<<<n / 64, 64>>>(desc, sum); l.after(); }

  // After reversal the list holds values count, count-1, ..., 1 and starts at pool[((count-1)*7) % count].
  Node *head = nullptr;
  int got = 0;
  std::vector<float> hout(n);
  CORPUS_CHECK(cudaMemcpyFromSymbol(&head, g_head, sizeof(head)));
  CORPUS_CHECK(cudaMemcpy(&got, sum, sizeof(int), cudaMemcpyDeviceToHost));
  CORPUS_CHECK(cudaMemcpy(hout.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  int expect = 0;
  for (int pos = 1; pos <= count; ++pos) expect += pos * (count + 1 - pos);
  expect += head == pool ? 0 : 1;
  CORPUS_REQUIRE(head == &pool[((count - 1) * 7) % count], "g_head after reversal");
  CORPUS_REQUIRE(got == expect, "weighted list sum");
  for (int i = 0; i < n; ++i) CORPUS_REQUIRE(hout[i] == ha[i] * hb[i], "combine through the descriptor");
  CORPUS_CHECK(cudaFree(pool));
  CORPUS_CHECK(cudaFree(desc));
  CORPUS_CHECK(cudaFree(a));
  CORPUS_CHECK(cudaFree(b));
  CORPUS_CHECK(cudaFree(out));
  CORPUS_CHECK(cudaFree(sum));
  corpus::result_ok();
  return 0;
}
