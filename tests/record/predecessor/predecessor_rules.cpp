// Calls the recorder's own rules for "what the launch before an instance may have
// written and read" (stream_predecessors.cpp) and prints what they decide, one line per case, for
// tests/record/test_predecessor_rules.py.
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "stream_predecessors.hpp"

namespace rec = mneme::recorder;
namespace rt = mneme::runtime;

static void print(const char* label, const rec::Ranges& ranges) {
  std::printf("%s", label);
  for (auto& [a, s] : ranges) std::printf(" %#llx+%#llx", (unsigned long long)a, (unsigned long long)s);
  std::printf("\n");
}

static void flags(const char* label, const std::string& demangled) {
  std::printf("%s", label);
  auto found = rec::const_pointer_params(demangled);
  if (found.empty()) std::printf(" -");
  for (bool b : found) std::printf(" %d", b ? 1 : 0);
  std::printf("\n");
}

int main() {
  flags("advect", "advect(float const*, float const*, float*, int)");
  flags("restrict", "k(float const* __restrict__, float* __restrict__, double const*)");
  flags("template", "void ns::(anonymous namespace)::k<float, std::pair<int, int> >(float const*, ns::S<float*, int>, float* const)");
  flags("extern_c", "mneme_saxpy");
  flags("no_params", "k()");

  // Allocations: device [0x1000, +0x1000), managed [0x9000, +0x100)
  std::map<uint64_t, uint64_t> device{{0x1000, 0x1000}}, managed{{0x9000, 0x100}};
  std::vector<rt::KernelParam> params(4);
  params[0].size = 8; params[0].is_pointer = true;                  // float const* in
  params[1].size = 8; params[1].is_pointer = true;                  // float* out
  params[2].size = 16; params[2].by_value = true;                   // struct {float* p; int n;}
  params[3].size = 4;                                               // int
  uint64_t in = 0x1100, out = 0x1800, n = 3;
  struct { uint64_t p; uint64_t n; } pack{0x9010, 7};
  void* args[] = {&in, &out, &pack, &n};
  auto traffic = rec::argument_traffic("k(float const*, float*, Pack, int)", params, args, {&device, &managed});
  print("written", traffic.writes);
  print("read", traffic.reads);
  // Without a signature every pointer may be written.
  traffic = rec::argument_traffic("k", params, args, {&device, &managed});
  print("unknown_signature", traffic.writes);
  print("unknown_signature_read", traffic.reads);
  return 0;
}
