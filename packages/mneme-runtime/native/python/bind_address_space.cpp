// mneme.runtime._native: allocations and address spaces (on a device, or on host memory
// for GPU-less use and tests).
#include "bindings.hpp"
#include "mneme/runtime/host_mapping_backend.hpp"

using namespace mneme::bindings;

void bind_address_space(nb::module_& m) {
  nb::class_<rt::Allocation>(m, "Allocation")
      .def(nb::init<>())
      .def_ro("address", &rt::Allocation::address)
      .def_ro("size", &rt::Allocation::size)
      .def_ro("requested_size", &rt::Allocation::requested_size)
      .def_ro("sequence", &rt::Allocation::sequence)
      .def("__int__", [](const rt::Allocation& a) { return a.address; })
      .def("__eq__", [](const rt::Allocation& a, const rt::Allocation& b) {
        return a.address == b.address && a.size == b.size &&
               a.requested_size == b.requested_size && a.sequence == b.sequence;
      })
      .def("__hash__", [](const rt::Allocation& a) { return a.address ^ (a.sequence << 1); })
      .def("__repr__", [](const rt::Allocation& a) {
        return "Allocation(address=" + rt::format_address(a.address) +
               ", size=" + std::to_string(a.size) +
               ", requested_size=" + std::to_string(a.requested_size) +
               ", sequence=" + std::to_string(a.sequence) + ")";
      });

  nb::class_<rt::AddressSpaceStats>(m, "AddressSpaceStats")
      .def_ro("live_allocations", &rt::AddressSpaceStats::live_allocations)
      .def_ro("live_bytes", &rt::AddressSpaceStats::live_bytes)
      .def_ro("peak_live_bytes", &rt::AddressSpaceStats::peak_live_bytes)
      .def_ro("mapped_bytes", &rt::AddressSpaceStats::mapped_bytes)
      .def_ro("peak_mapped_bytes", &rt::AddressSpaceStats::peak_mapped_bytes)
      .def_ro("free_bytes", &rt::AddressSpaceStats::free_bytes)
      .def_ro("largest_free_block", &rt::AddressSpaceStats::largest_free_block)
      .def_ro("allocations_total", &rt::AddressSpaceStats::allocations_total)
      .def_ro("frees_total", &rt::AddressSpaceStats::frees_total);

  nb::class_<AddressSpaceObject>(m, "AddressSpace")
      .def_prop_ro("base", [](AddressSpaceObject& s) { return s.get().base(); })
      .def_prop_ro("size", [](AddressSpaceObject& s) { return s.get().size(); })
      .def_prop_ro("granularity", [](AddressSpaceObject& s) { return s.get().granularity(); })
      .def_prop_ro("backend", [](AddressSpaceObject& s) { return s.get().backend().name(); })
      .def_prop_ro("closed", &AddressSpaceObject::closed)
      .def("share_with", [](AddressSpaceObject& s, int ordinal) { s.get().share_with(ordinal); },
           "ordinal"_a, ReleaseGil())
      .def("allocate", [](AddressSpaceObject& s, uint64_t size, uint64_t alignment) {
             return s.get().allocate(size, alignment);
           }, "size"_a, "alignment"_a = rt::kMinAlignment, ReleaseGil())
      .def("allocate_at", [](AddressSpaceObject& s, uint64_t address, uint64_t size) {
             return s.get().allocate_at(address, size);
           }, "address"_a, "size"_a, ReleaseGil())
      .def("free", [](AddressSpaceObject& s, uint64_t address) { s.get().free(address); },
           "address"_a, ReleaseGil())
      .def("reserve_unmapped", [](AddressSpaceObject& s, uint64_t size, uint64_t alignment) {
             return s.get().reserve_unmapped(size, alignment);
           }, "size"_a, "alignment"_a = 0, ReleaseGil())
      .def("release_unmapped", [](AddressSpaceObject& s, uint64_t address) {
             return s.get().release_unmapped(address);
           }, "address"_a)
      .def("live", [](AddressSpaceObject& s) { return s.get().live(); })
      .def("find", [](AddressSpaceObject& s, uint64_t address) { return s.get().find(address); },
           "address"_a)
      .def("mapped_ranges", [](AddressSpaceObject& s) { return s.get().mapped_ranges(); })
      .def("stats", [](AddressSpaceObject& s) { return s.get().stats(); })
      .def("close", &AddressSpaceObject::close, ReleaseGil());

  m.def("host_address_space", [](uint64_t base, uint64_t size, uint64_t granularity) {
          return new AddressSpaceObject(std::make_unique<rt::AddressSpace>(
              std::make_unique<rt::HostMappingBackend>(granularity), base, size));
        }, "base"_a, "size"_a, "granularity"_a, nb::rv_policy::take_ownership,
        "An address space mapped on host memory (mmap), for GPU-less use and tests.");
}
