#include "mneme/runtime/host_memory.hpp"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mneme/runtime/errors.hpp"

namespace mneme::runtime {
namespace {

constexpr size_t kHuge = 2u << 20;
constexpr size_t kPerThread = 16u << 20;  // below this a thread costs more than it saves
constexpr unsigned kMaxThreads = 16;

// One write per 4 KiB page faults the range in (a whole huge page on the first write).
void fault_in(uint8_t* begin, uint8_t* end) {
  for (volatile uint8_t* p = begin; p < end; p += 4096) *p = 0;
}

}  // namespace

size_t resident_size(size_t bytes) { return (std::max<size_t>(bytes, 1) + kHuge - 1) / kHuge * kHuge; }

void* map_resident(size_t bytes) {
  size_t size = resident_size(bytes);
  // Over-map by one huge page so the start can be aligned to one (THP needs aligned ranges).
  void* raw = mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    throw Error("cannot map " + std::to_string(size >> 20) + " MiB of host memory: " + std::strerror(errno));
  auto start = reinterpret_cast<uintptr_t>(raw);
  uintptr_t aligned = (start + kHuge - 1) / kHuge * kHuge;
  if (aligned > start) munmap(raw, aligned - start);
  size_t tail = start + size + kHuge - (aligned + size);
  if (tail) munmap(reinterpret_cast<void*>(aligned + size), tail);
  auto* memory = reinterpret_cast<uint8_t*>(aligned);
  madvise(memory, size, MADV_HUGEPAGE);  // advice only: without THP the pages stay 4 KiB

  unsigned threads = unsigned(std::clamp<size_t>(size / kPerThread, 1, kMaxThreads));
  threads = std::min(threads, std::max(1u, std::thread::hardware_concurrency()));
  size_t share = (size / threads + kHuge - 1) / kHuge * kHuge;
  std::vector<std::thread> helpers;
  // Helper threads take no asynchronous signals: they belong to the application's threads.
  sigset_t all, previous;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &previous);
  try {
    for (unsigned t = 1; t < threads && t * share < size; ++t)
      helpers.emplace_back(fault_in, memory + t * share, memory + std::min(size, (t + 1) * share));
  } catch (...) {  // no more threads: this one faults in the rest
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  size_t covered = (helpers.size() + 1) * share;
  fault_in(memory, memory + std::min(size, share));
  if (covered < size) fault_in(memory + covered, memory + size);
  for (auto& h : helpers) h.join();
  return memory;
}

void unmap_resident(void* pointer, size_t bytes) noexcept {
  if (pointer) munmap(pointer, resident_size(bytes));
}

}  // namespace mneme::runtime
