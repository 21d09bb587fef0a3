// mneme.runtime._native's bindings, one file per topic; native_module.cpp makes the
// module and calls each:
//   bind_timing.cpp         KernelTimer (CUPTI kernel records) and GpuClocks (NVML)
//   bind_address_space.cpp  Allocation, AddressSpace (device or host memory)
//   bind_device.cpp         devices, their properties, modules, functions, streams, events
//   bind_recording.cpp      the recording's writers: RecordingWriter and the snapshot
//                           pipeline over host memory (SnapshotWriter), the format's hashes
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/errors.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace rt = mneme::runtime;

namespace mneme::bindings {

using ReadBuffer = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using WriteBuffer = nb::ndarray<nb::c_contig, nb::device::cpu>;
using ReleaseGil = nb::call_guard<nb::gil_scoped_release>;

// An AddressSpace that Python can close deterministically (device memory
// should not wait for the garbage collector).
class AddressSpaceObject {
 public:
  explicit AddressSpaceObject(std::unique_ptr<rt::AddressSpace> space) : space_(std::move(space)) {}
  rt::AddressSpace& get() {
    if (!space_) throw rt::AllocationError("the address space is closed");
    return *space_;
  }
  void close() { space_.reset(); }
  bool closed() const { return !space_; }

 private:
  std::unique_ptr<rt::AddressSpace> space_;
};

}  // namespace mneme::bindings

void bind_timing(nb::module_& m);
void bind_address_space(nb::module_& m);
void bind_device(nb::module_& m);
void bind_recording(nb::module_& m);
