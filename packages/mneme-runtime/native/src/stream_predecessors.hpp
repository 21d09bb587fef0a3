// What ran just before each recorded instance on its stream, and the memory that launch
// may have written and read (issue 20: replay's `app` cache mode replays that traffic
// through L2, so the cache is as the application's previous kernel left it). Written at
// exit as the instance's optional "predecessor" attribute (docs/format.md).
//
// "May have written": the allocations the previous launch's pointer arguments point into,
// from the pointer to the allocation's end, leaving out parameters the kernel's demangled
// signature declares as pointers to const; those are what it "read". Pointers stored
// inside by-value structures (PyTorch's and Thrust's argument packs; their first 512
// bytes) count as written, without const information.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "mneme/runtime/recording_writer.hpp"

namespace mneme::recorder {

// `text` as the inside of a JSON string (the recorder writes its attributes' JSON by hand).
std::string json_escaped(const std::string& text);

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;  // (address, bytes)

// Ranges that a launch may write and those it only reads (each sorted, overlaps joined).
struct Traffic {
  Ranges writes;
  Ranges reads;
};

// The traffic of a launch of a kernel with `params` and demangled name `demangled`, given
// `args` (one pointer per parameter, as cudaLaunchKernel takes them).
// `allocations`: each map is start -> size of live memory (device, managed, mapped).
Traffic argument_traffic(const std::string& demangled, const std::vector<mneme::runtime::KernelParam>& params,
                         void** args, const std::vector<const std::map<uint64_t, uint64_t>*>& allocations);

// Which parameters a demangled signature declares as pointers to const ("float const*"),
// one flag per parameter; empty when the signature cannot be split.
std::vector<bool> const_pointer_params(const std::string& demangled);

class StreamPredecessors {
 public:
  // A launch on `stream` (known: its `traffic`; unknown: its arguments could not be read).
  void launched(uint64_t stream, const std::string& kernel, Traffic traffic, bool known);
  // A recorded instance launched on `stream` now: the launch before it there is its
  // predecessor (the first launch of an instance decides).
  void instance(uint64_t stream, const std::string& static_hash, const std::string& dynamic_hash);
  // At exit, after the instances are committed.
  void write(mneme::runtime::RecordingWriter& writer) const;

 private:
  struct Launch {
    std::string kernel;
    Traffic traffic;
    bool known = false;
  };
  static std::string json(const Launch& launch);
  std::map<uint64_t, Launch> last_;
  std::map<std::pair<std::string, std::string>, Launch> instances_;
};

}  // namespace mneme::recorder
