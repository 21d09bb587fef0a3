// mneme.runtime._native: KernelTimer (CUPTI kernel records) and GpuClocks (NVML), which
// mneme.runtime.kernel_timing wraps for Python.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "mneme/runtime/gpu_clocks.hpp"
#include "mneme/runtime/kernel_timer.hpp"

namespace nb = nanobind;
using namespace nb::literals;
namespace rt = mneme::runtime;

void bind_timing(nb::module_& m) {
  using ReleaseGil = nb::call_guard<nb::gil_scoped_release>;
  nb::class_<rt::KernelRecord>(m, "KernelRecord")
      .def_ro("name", &rt::KernelRecord::name)
      .def_ro("start_ns", &rt::KernelRecord::start_ns)
      .def_ro("end_ns", &rt::KernelRecord::end_ns)
      .def_prop_ro("grid", [](const rt::KernelRecord& r) { return std::make_tuple(r.grid[0], r.grid[1], r.grid[2]); })
      .def_prop_ro("block", [](const rt::KernelRecord& r) { return std::make_tuple(r.block[0], r.block[1], r.block[2]); })
      .def_ro("dynamic_shared", &rt::KernelRecord::dynamic_shared)
      .def_ro("device", &rt::KernelRecord::device)
      .def_ro("stream_id", &rt::KernelRecord::stream_id)
      .def_ro("correlation", &rt::KernelRecord::correlation)
      .def_prop_ro("duration_ms", &rt::KernelRecord::duration_ms);

  nb::class_<rt::KernelTimer>(m, "KernelTimer")
      .def_static("instance", &rt::KernelTimer::instance, nb::rv_policy::reference)
      .def("start", &rt::KernelTimer::start, ReleaseGil())
      .def("stop", &rt::KernelTimer::stop, ReleaseGil())
      .def_prop_ro("collecting", &rt::KernelTimer::collecting)
      .def_prop_ro("available", &rt::KernelTimer::available)
      .def_prop_ro("reason", [](const rt::KernelTimer& t) { return t.reason(); })
      .def_prop_ro("library", [](const rt::KernelTimer& t) { return t.library(); })
      .def("drain", &rt::KernelTimer::drain, ReleaseGil())
      .def("take", &rt::KernelTimer::take)
      .def_prop_ro("dropped", &rt::KernelTimer::dropped)
      .def("timestamp", &rt::KernelTimer::timestamp)
      .def("set_search_paths", &rt::KernelTimer::set_search_paths, "paths"_a)
      .def("candidates", &rt::KernelTimer::candidates)
      .def_static("method", []() { return std::string(rt::KernelTimer::method()); });

  nb::class_<rt::GpuSample>(m, "GpuSample")
      .def_ro("sm_clock_mhz", &rt::GpuSample::sm_clock_mhz)
      .def_ro("power_mw", &rt::GpuSample::power_mw)
      .def_ro("energy_mj", &rt::GpuSample::energy_mj)
      .def_ro("has_energy", &rt::GpuSample::has_energy);

  nb::class_<rt::GpuClocks>(m, "GpuClocks")
      .def_static("instance", &rt::GpuClocks::instance, nb::rv_policy::reference)
      .def_prop_ro("available", &rt::GpuClocks::available)
      .def_prop_ro("reason", [](rt::GpuClocks& c) { return c.reason(); })
      .def("sample", [](rt::GpuClocks& c, uint32_t index) -> nb::object {
        rt::GpuSample s;
        if (!c.sample(index, s)) return nb::none();
        return nb::cast(s);
      }, "index"_a)
      .def("name", &rt::GpuClocks::name, "index"_a);
}
