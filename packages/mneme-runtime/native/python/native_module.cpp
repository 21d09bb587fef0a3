// mneme.runtime._native: the device layer for Python. The Pythonic surface
// (argument conversion, convenience) lives in mneme.runtime; this file binds
// the C++ objects and ties handle lifetimes to Python objects.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "mneme/runtime/address_space.hpp"
#include "mneme/runtime/cuda_driver.hpp"
#include "mneme/runtime/devices.hpp"
#include "mneme/runtime/errors.hpp"
#include "mneme/runtime/host_mapping_backend.hpp"
#include "mneme/runtime/recording_writer.hpp"
#include "mneme/runtime/settings_reader.hpp"
#include "mneme/runtime/snapshot_pipeline.hpp"
#include <nanobind/stl/map.h>

namespace nb = nanobind;
using namespace nb::literals;
namespace rt = mneme::runtime;

void bind_timing(nb::module_& m);  // timing_bindings.cpp

namespace {

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

class ModuleObject {
 public:
  ModuleObject(std::shared_ptr<rt::Device> device, rt::ModuleHandle handle)
      : device(std::move(device)), handle(handle) {}
  ~ModuleObject() { device->unload_module(handle); }
  std::shared_ptr<rt::Device> device;
  rt::ModuleHandle handle;
};

// A kernel; holds its module so the code stays loaded while it is used.
struct FunctionObject {
  std::shared_ptr<ModuleObject> module;
  rt::FunctionHandle handle;
  std::string name;
};

class StreamObject {
 public:
  explicit StreamObject(std::shared_ptr<rt::Device> device)
      : device(std::move(device)), handle(this->device->create_stream()) {}
  ~StreamObject() { device->destroy_stream(handle); }
  std::shared_ptr<rt::Device> device;
  rt::StreamHandle handle;
};

class EventObject {
 public:
  explicit EventObject(std::shared_ptr<rt::Device> device)
      : device(std::move(device)), handle(this->device->create_event()) {}
  ~EventObject() { device->destroy_event(handle); }
  std::shared_ptr<rt::Device> device;
  rt::EventHandle handle;
};

rt::StreamHandle stream_handle(const StreamObject* stream) { return stream ? stream->handle : 0; }

rt::Dim3 to_dim3(const std::tuple<unsigned, unsigned, unsigned>& t) {
  return {std::get<0>(t), std::get<1>(t), std::get<2>(t)};
}

// Raise the matching class of mneme.runtime.errors (pure Python, so the
// classes carry `mneme_user_error` and can be caught without this module).
template <typename... Keywords>
void raise_python(const char* class_name, const char* message, Keywords&&... keywords) {
  try {
    nb::object cls = nb::module_::import_("mneme.runtime.errors").attr(class_name);
    nb::object exc = cls(message, std::forward<Keywords>(keywords)...);
    PyErr_SetObject(cls.ptr(), exc.ptr());
  } catch (nb::python_error& e) {
    e.restore();
  }
}

void translate_exception(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const rt::OutOfSpaceError& e) {
    raise_python("OutOfSpaceError", e.what(), "requested"_a = e.requested,
                 "range_size"_a = e.range_size, "needed_size"_a = e.needed_size);
  } catch (const rt::RangeUnavailableError& e) {
    raise_python("RangeUnavailableError", e.what());
  } catch (const rt::OutOfRangeError& e) {
    raise_python("OutOfRangeError", e.what());
  } catch (const rt::NoDriverError& e) {
    raise_python("NoDriverError", e.what());
  } catch (const rt::NoDeviceError& e) {
    raise_python("NoDeviceError", e.what());
  } catch (const rt::UserError& e) {
    raise_python("UserError", e.what());
  } catch (const rt::DriverError& e) {
    raise_python("DriverError", e.what(), "code"_a = e.code, "name"_a = e.name);
  } catch (const rt::AllocationError& e) {
    raise_python("AllocationError", e.what());
  } catch (const rt::Error& e) {
    raise_python("DeviceLayerError", e.what());
  }
}

// The recorder's snapshot pipeline over host memory (HostSource): the same background
// threads, staging cap and commit order as in `mneme record`, testable without a GPU.
class SnapshotWriterObject {
 public:
  SnapshotWriterObject(const std::string& root, rt::RecordingInfo info, const std::string& epilogue_format,
                       uint64_t chunk_size, int level, uint64_t host_memory, unsigned threads)
      : writer_(std::make_unique<rt::RecordingWriter>(root, std::move(info), epilogue_format, chunk_size, level)),
        source_(std::make_unique<rt::HostSource>()),
        pipeline_(std::make_unique<rt::SnapshotPipeline>(*writer_, *source_, rt::PipelineOptions{host_memory, threads})) {}
  ~SnapshotWriterObject() { close(); }

  rt::RecordingWriter& writer() { return *writer_; }
  rt::SnapshotPipeline& pipeline() {
    if (!pipeline_) throw rt::Error("the snapshot writer is closed");
    return *pipeline_;
  }
  std::mutex& capture_mutex() { return capture_; }
  void close() { pipeline_.reset(); }  // flushes, then stops the threads

 private:
  std::unique_ptr<rt::RecordingWriter> writer_;
  std::unique_ptr<rt::HostSource> source_;
  std::unique_ptr<rt::SnapshotPipeline> pipeline_;
  std::mutex capture_;
};

struct CaptureObject {
  std::shared_ptr<rt::SnapshotPipeline::Instance> instance;
  std::string dynamic_hash;
  std::vector<uint64_t> sizes;  // of the regions, in begin_instance's order
};

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What the bound writers record about the recording (the recorder fills the same fields).
rt::RecordingInfo recording_info(uint64_t vas_base, uint64_t vas_size, const std::string& gpu_name,
                                 const std::string& compute_capability,
                                 const std::vector<std::string>& command_line) {
  rt::RecordingInfo info;
  info.vas_base = vas_base;
  info.vas_size = vas_size;
  info.gpu_name = gpu_name;
  info.compute_capability = compute_capability;
  info.command_line = command_line;
  return info;
}

// A kernel as the bound writers' add_kernel receives it from Python (origin: docs/format.md).
using ParamTuples = std::vector<std::tuple<uint32_t, uint32_t, uint32_t, bool, bool>>;
using GlobalTuples = std::vector<std::tuple<std::string, uint64_t, uint32_t>>;
rt::KernelInfo kernel_info(const std::string& static_hash, const std::string& name,
                           const std::string& demangled, nb::bytes ir, const ParamTuples& params,
                           const GlobalTuples& globals, const std::string& origin) {
  rt::KernelInfo k{static_hash, name, demangled, {}, {}, std::string(ir.c_str(), ir.size())};
  k.origin = origin;
  for (auto& [size, align, offset, ptr, byval] : params) k.params.push_back({size, align, offset, ptr, byval});
  for (auto& [gname, size, space] : globals) k.globals.push_back({gname, size, space});
  return k;
}

}  // namespace

// Several GPUs (docs/format.md, "Devices"): the instance's GPU and range, and each
// region's GPU, as add_instance takes them.
struct DeviceOptions {
  DeviceOptions() = default;
  DeviceOptions(int d, uint64_t base, uint64_t size, std::vector<int> r)
      : device(d), vas_base(base), vas_size(size), regions(std::move(r)) {}
  int device = -1;
  uint64_t vas_base = 0, vas_size = 0;
  std::vector<int> regions;
  int of_region(size_t k) const { return k < regions.size() ? regions[k] : -1; }
  void apply(rt::InstanceInfo& inst) const {
    inst.device = device;
    inst.vas_base = vas_base;
    inst.vas_size = vas_size;
  }
};

NB_MODULE(_native, m) {
  m.doc() = "mneme device layer (native part); use mneme.runtime";
  nb::register_exception_translator(translate_exception);
  bind_timing(m);

  m.attr("DEFAULT_BASE") = rt::kDefaultBase;
  m.attr("DEFAULT_SIZE") = rt::kDefaultSize;
  m.attr("MIN_ALIGNMENT") = rt::kMinAlignment;
  m.def("cuda_driver_available", &rt::cuda::Driver::available,
        "True when libcuda.so.1 loads and cuInit succeeds.");
  m.def("format_bytes", &rt::format_bytes);

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

  nb::class_<rt::DeviceProperties>(m, "DeviceProperties")
      .def_ro("backend", &rt::DeviceProperties::backend)
      .def_ro("ordinal", &rt::DeviceProperties::ordinal)
      .def_ro("name", &rt::DeviceProperties::name)
      .def_ro("compute_capability_major", &rt::DeviceProperties::compute_capability_major)
      .def_ro("compute_capability_minor", &rt::DeviceProperties::compute_capability_minor)
      .def_ro("multiprocessor_count", &rt::DeviceProperties::multiprocessor_count)
      .def_ro("max_threads_per_block", &rt::DeviceProperties::max_threads_per_block)
      .def_ro("warp_size", &rt::DeviceProperties::warp_size)
      .def_ro("max_threads_per_multiprocessor", &rt::DeviceProperties::max_threads_per_multiprocessor)
      .def_ro("max_blocks_per_multiprocessor", &rt::DeviceProperties::max_blocks_per_multiprocessor)
      .def_ro("max_shared_memory_per_block", &rt::DeviceProperties::max_shared_memory_per_block)
      .def_ro("max_shared_memory_per_block_optin",
              &rt::DeviceProperties::max_shared_memory_per_block_optin)
      .def_ro("l2_cache_size", &rt::DeviceProperties::l2_cache_size)
      .def_ro("clock_rate_khz", &rt::DeviceProperties::clock_rate_khz)
      .def_ro("memory_clock_rate_khz", &rt::DeviceProperties::memory_clock_rate_khz)
      .def_ro("memory_bus_width_bits", &rt::DeviceProperties::memory_bus_width_bits)
      .def_ro("total_memory", &rt::DeviceProperties::total_memory)
      .def_ro("granularity", &rt::DeviceProperties::granularity)
      .def_ro("recommended_granularity", &rt::DeviceProperties::recommended_granularity)
      .def_ro("driver_version", &rt::DeviceProperties::driver_version)
      .def_ro("virtual_memory_management", &rt::DeviceProperties::virtual_memory_management);

  nb::class_<rt::ParamInfo>(m, "ParamInfo")
      .def_ro("offset", &rt::ParamInfo::offset)
      .def_ro("size", &rt::ParamInfo::size)
      .def("__repr__", [](const rt::ParamInfo& p) {
        return "ParamInfo(offset=" + std::to_string(p.offset) + ", size=" + std::to_string(p.size) + ")";
      });

  nb::class_<rt::FunctionAttributes>(m, "FunctionAttributes")
      .def_ro("num_registers", &rt::FunctionAttributes::num_registers)
      .def_ro("local_size_bytes", &rt::FunctionAttributes::local_size_bytes)
      .def_ro("shared_size_bytes", &rt::FunctionAttributes::shared_size_bytes)
      .def_ro("const_size_bytes", &rt::FunctionAttributes::const_size_bytes)
      .def_ro("max_threads_per_block", &rt::FunctionAttributes::max_threads_per_block)
      .def_ro("max_dynamic_shared_size_bytes",
              &rt::FunctionAttributes::max_dynamic_shared_size_bytes)
      .def_ro("ptx_version", &rt::FunctionAttributes::ptx_version)
      .def_ro("binary_version", &rt::FunctionAttributes::binary_version);

  nb::class_<StreamObject>(m, "Stream")
      .def_prop_ro("handle", [](const StreamObject& s) { return s.handle; })
      .def("synchronize", [](StreamObject& s) { s.device->synchronize_stream(s.handle); },
           ReleaseGil());

  nb::class_<EventObject>(m, "Event")
      .def("record", [](EventObject& e, const StreamObject* stream) {
             e.device->record_event(e.handle, stream_handle(stream));
           }, "stream"_a = nb::none(), ReleaseGil())
      .def("synchronize", [](EventObject& e) { e.device->synchronize_event(e.handle); },
           ReleaseGil())
      .def("elapsed_ms", [](EventObject& start, EventObject& end) {
             return start.device->elapsed_ms(start.handle, end.handle);
           }, "end"_a, ReleaseGil(), "Milliseconds from this event to `end`.");

  nb::class_<ModuleObject>(m, "Module")
      .def("function", [](std::shared_ptr<ModuleObject> module, const std::string& name) {
             return FunctionObject{module, module->device->get_function(module->handle, name), name};
           }, "name"_a)
      .def("global_address", [](ModuleObject& module, const std::string& name) {
             return module.device->get_global(module.handle, name);
           }, "name"_a, "(address, size) of a module-scope variable.");

  nb::class_<FunctionObject>(m, "Function")
      .def_ro("name", &FunctionObject::name)
      .def("parameter_info", [](FunctionObject& f) {
             return f.module->device->parameter_info(f.handle);
           })
      .def("attributes", [](FunctionObject& f) {
             return f.module->device->function_attributes(f.handle);
           })
      .def("set_max_dynamic_shared_memory", [](FunctionObject& f, int bytes) {
             f.module->device->set_max_dynamic_shared_memory(f.handle, bytes);
           }, "bytes"_a)
      .def("max_active_blocks_per_multiprocessor", [](FunctionObject& f, int block_threads, size_t shared_bytes) {
             return f.module->device->max_active_blocks_per_multiprocessor(f.handle, block_threads, shared_bytes);
           }, "block_threads"_a, "shared_bytes"_a = 0,
           "Blocks of this size one multiprocessor holds at once (the driver's occupancy).")
      .def("launch", [](FunctionObject& f, std::tuple<unsigned, unsigned, unsigned> grid,
                        std::tuple<unsigned, unsigned, unsigned> block, ReadBuffer args,
                        unsigned shared_bytes, const StreamObject* stream,
                        std::tuple<unsigned, unsigned, unsigned> cluster, bool cooperative) {
             nb::gil_scoped_release release;
             f.module->device->launch(f.handle, to_dim3(grid), to_dim3(block), shared_bytes,
                                      stream_handle(stream), args.data(), args.nbytes(), to_dim3(cluster),
                                      cooperative);
           }, "grid"_a, "block"_a, "args"_a, "shared_bytes"_a = 0, "stream"_a = nb::none(),
           "cluster"_a = std::make_tuple(1u, 1u, 1u), "cooperative"_a = false);

  nb::class_<rt::Device>(m, "Device")
      .def_prop_ro("properties", &rt::Device::properties, nb::rv_policy::copy)
      .def("memory_info", &rt::Device::memory_info, ReleaseGil())
      .def("synchronize", &rt::Device::synchronize, ReleaseGil())
      .def("address_space", [](rt::Device& d, uint64_t base, uint64_t size) {
             nb::gil_scoped_release release;
             return new AddressSpaceObject(
                 std::make_unique<rt::AddressSpace>(d.mapping_backend(), base, size));
           }, "base"_a, "size"_a, nb::rv_policy::take_ownership)
      .def("copy_to_device", [](rt::Device& d, uint64_t dst, ReadBuffer src,
                                const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.copy_to_device_async(dst, src.data(), src.nbytes(), stream->handle);
             else d.copy_to_device(dst, src.data(), src.nbytes());
           }, "dst"_a, "src"_a, "stream"_a = nb::none())
      .def("copy_from_device", [](rt::Device& d, WriteBuffer dst, uint64_t src,
                                  const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.copy_from_device_async(dst.data(), src, dst.nbytes(), stream->handle);
             else d.copy_from_device(dst.data(), src, dst.nbytes());
           }, "dst"_a, "src"_a, "stream"_a = nb::none())
      .def("copy_device_to_device", [](rt::Device& d, uint64_t dst, uint64_t src,
                                       size_t bytes, const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.copy_device_to_device_async(dst, src, bytes, stream->handle);
             else d.copy_device_to_device(dst, src, bytes);
           }, "dst"_a, "src"_a, "bytes"_a, "stream"_a = nb::none())
      .def("fill", [](rt::Device& d, uint64_t dst, uint8_t value, size_t bytes,
                      const StreamObject* stream) {
             nb::gil_scoped_release release;
             if (stream) d.fill_async(dst, value, bytes, stream->handle);
             else d.fill(dst, value, bytes);
           }, "dst"_a, "value"_a, "bytes"_a, "stream"_a = nb::none())
      .def("pinned_buffer", [](std::shared_ptr<rt::Device> d, size_t bytes) {
             void* pointer = d->allocate_pinned(bytes);
             // The capsule owns the pinned memory (and keeps the device alive).
             auto* owner = new std::pair<std::shared_ptr<rt::Device>, void*>(d, pointer);
             nb::capsule capsule(owner, [](void* p) noexcept {
               auto* o = static_cast<std::pair<std::shared_ptr<rt::Device>, void*>*>(p);
               o->first->free_pinned(o->second);
               delete o;
             });
             size_t shape[1] = {bytes};
             return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(pointer, 1, shape, capsule);
           }, "bytes"_a, "A uint8 numpy array on page-locked host memory.")
      .def("load_module", [](std::shared_ptr<rt::Device> d, ReadBuffer image) {
             rt::ModuleHandle handle;
             {
               nb::gil_scoped_release release;
               handle = d->load_module(image.data(), image.nbytes());
             }
             return std::make_shared<ModuleObject>(d, handle);
           }, "image"_a, "Load PTX text or a cubin/fatbin image.")
      .def("create_stream", [](std::shared_ptr<rt::Device> d) {
             return std::make_shared<StreamObject>(d);
           })
      .def("create_event", [](std::shared_ptr<rt::Device> d) {
             return std::make_shared<EventObject>(d);
           });

  m.def("available_backends", &rt::available_backends);
  m.def("cuda_device_count", [] {
        const auto& d = rt::cuda::Driver::get();
        int count = 0;
        rt::cuda::check(d, d.cuDeviceGetCount(&count), "cuDeviceGetCount");
        return count;
      }, "CUDA devices this process sees (CUDA_VISIBLE_DEVICES applies).");
  m.def("cuda_can_access_peer", [](int ordinal, int peer) {
        const auto& d = rt::cuda::Driver::get();
        CUdevice a, b;
        rt::cuda::check(d, d.cuDeviceGet(&a, ordinal), "cuDeviceGet");
        rt::cuda::check(d, d.cuDeviceGet(&b, peer), "cuDeviceGet");
        int can = 0;
        rt::cuda::check(d, d.cuDeviceCanAccessPeer(&can, a, b), "cuDeviceCanAccessPeer");
        return can != 0;
      }, "ordinal"_a, "peer"_a, "Whether device `ordinal` can read and write memory of device `peer`.");
  m.def("open_device", &rt::open_device, "backend"_a, "ordinal"_a, ReleaseGil(),
        "Open a device (CUDA: retain the primary context of device `ordinal`).");

  nb::class_<DeviceOptions>(m, "InstanceDevices",
                            "Where an instance ran, for writers' add_instance: the GPU, its address "
                            "range, and the GPU of each region (-1: the instance's own).")
      .def(nb::init<int, uint64_t, uint64_t, std::vector<int>>(), "device"_a = -1, "vas_base"_a = 0,
           "vas_size"_a = 0, "regions"_a = std::vector<int>{});

  // The recorder's database writer, bound for conformance tests and tools.
  using RegionTuple = std::tuple<std::string, uint64_t, std::string, ReadBuffer, ReadBuffer>;
  auto make_info = [](std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                      uint32_t shared_mem, const nb::bytes& args, std::tuple<uint32_t, uint32_t, uint32_t> cluster) {
    rt::InstanceInfo inst;
    std::tie(inst.grid[0], inst.grid[1], inst.grid[2]) = grid;
    std::tie(inst.block[0], inst.block[1], inst.block[2]) = block;
    std::tie(inst.cluster[0], inst.cluster[1], inst.cluster[2]) = cluster;
    inst.shared_mem = shared_mem;
    inst.args.assign(args.c_str(), args.size());
    return inst;
  };
  nb::class_<rt::RecordingWriter>(m, "RecordingWriter")
      .def("__init__",
           [](rt::RecordingWriter* self, const std::string& root, uint64_t vas_base, uint64_t vas_size,
              const std::string& gpu_name, const std::string& compute_capability,
              const std::vector<std::string>& command_line, const std::string& epilogue_format,
              uint64_t chunk_size, int level) {
             new (self) rt::RecordingWriter(
                 root, recording_info(vas_base, vas_size, gpu_name, compute_capability, command_line),
                 epilogue_format, chunk_size, level);
           },
           "root"_a, "vas_base"_a, "vas_size"_a, "gpu_name"_a = "", "compute_capability"_a = "",
           "command_line"_a = std::vector<std::string>{}, "epilogue_format"_a = "diff",
           "chunk_size"_a = uint64_t(4) << 20, "level"_a = 1)
      .def("set_instance_attribute", &rt::RecordingWriter::set_instance_attribute, "static_hash"_a,
           "dynamic_hash"_a, "key"_a, "json_value"_a)
      .def("set_root_attribute", &rt::RecordingWriter::set_root_attribute, "key"_a, "json_value"_a)
      .def("add_kernel",
           [](rt::RecordingWriter& w, const std::string& static_hash, const std::string& name,
              const std::string& demangled, nb::bytes ir, const ParamTuples& params,
              const GlobalTuples& globals, const std::string& origin) {
             return w.add_kernel(kernel_info(static_hash, name, demangled, ir, params, globals, origin));
           },
           "static_hash"_a, "name"_a, "demangled"_a, "ir"_a, "params"_a, "globals"_a, "origin"_a = "")
      .def("add_instance",
           [make_info](rt::RecordingWriter& w, const std::string& static_hash, std::tuple<uint32_t, uint32_t, uint32_t> grid,
              std::tuple<uint32_t, uint32_t, uint32_t> block, uint32_t shared_mem, nb::bytes args,
              const std::vector<RegionTuple>& regions, const DeviceOptions& devices,
              std::tuple<uint32_t, uint32_t, uint32_t> cluster, bool cooperative) {
             rt::InstanceInfo inst = make_info(grid, block, shared_mem, args, cluster);
             inst.cooperative = cooperative;
             for (auto& [kind, address, symbol, before, after] : regions) {
               if (before.nbytes() != after.nbytes())
                 throw rt::Error("prologue and epilogue of a region differ in size");
               inst.regions.push_back({kind, address, before.nbytes(),
                                       static_cast<const uint8_t*>(before.data()),
                                       static_cast<const uint8_t*>(after.data()), symbol,
                                       devices.of_region(inst.regions.size())});
             }
             devices.apply(inst);
             nb::gil_scoped_release release;
             return w.add_instance(static_hash, inst);
           },
           "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "regions"_a,
           "devices"_a = DeviceOptions{}, "cluster"_a = std::make_tuple(1u, 1u, 1u), "cooperative"_a = false);
  // The snapshot pipeline with host memory as the "device" (see SnapshotWriterObject).
  using SpecTuple = std::tuple<std::string, uint64_t, uint64_t, std::string>;  // kind, address, size, symbol
  auto pointers = [](const std::vector<ReadBuffer>& buffers, const CaptureObject& capture) {
    if (buffers.size() != capture.sizes.size()) throw rt::Error("one buffer per region, in begin_instance's order");
    std::vector<uint64_t> out;
    for (size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].nbytes() != capture.sizes[i]) throw rt::Error("a buffer's size differs from its region's");
      out.push_back(reinterpret_cast<uint64_t>(buffers[i].data()));
    }
    return out;
  };
  nb::class_<CaptureObject>(m, "SnapshotCapture")
      .def_ro("dynamic_hash", &CaptureObject::dynamic_hash);
  nb::class_<SnapshotWriterObject>(m, "SnapshotWriter")
      .def("__init__",
           [](SnapshotWriterObject* self, const std::string& root, uint64_t vas_base, uint64_t vas_size,
              const std::string& gpu_name, const std::string& compute_capability,
              const std::vector<std::string>& command_line, const std::string& epilogue_format,
              uint64_t chunk_size, int level, uint64_t host_memory, unsigned threads) {
             new (self) SnapshotWriterObject(
                 root, recording_info(vas_base, vas_size, gpu_name, compute_capability, command_line),
                 epilogue_format, chunk_size, level, host_memory, threads);
           },
           "root"_a, "vas_base"_a, "vas_size"_a, "gpu_name"_a = "", "compute_capability"_a = "",
           "command_line"_a = std::vector<std::string>{}, "epilogue_format"_a = "diff",
           "chunk_size"_a = uint64_t(4) << 20, "level"_a = 1, "host_memory"_a = uint64_t(0), "threads"_a = 0u)
      .def("add_kernel",
           [](SnapshotWriterObject& w, const std::string& static_hash, const std::string& name,
              const std::string& demangled, nb::bytes ir, const ParamTuples& params,
              const GlobalTuples& globals, const std::string& origin) {
             return w.writer().add_kernel(kernel_info(static_hash, name, demangled, ir, params, globals, origin));
           },
           "static_hash"_a, "name"_a, "demangled"_a, "ir"_a, "params"_a, "globals"_a, "origin"_a = "")
      // Like RecordingWriter.add_instance, but returns once the bytes are staged: the
      // instance is committed in the background ((dynamic hash, captured now)).
      .def("add_instance",
           [make_info](SnapshotWriterObject& w, const std::string& static_hash,
                       std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                       uint32_t shared_mem, nb::bytes args, const std::vector<RegionTuple>& regions,
                       const DeviceOptions& devices, std::tuple<uint32_t, uint32_t, uint32_t> cluster) {
             rt::InstanceInfo inst = make_info(grid, block, shared_mem, args, cluster);
             devices.apply(inst);
             std::vector<rt::RegionSpec> specs;
             std::vector<uint64_t> before, after;
             for (auto& [kind, address, symbol, b, a] : regions) {
               if (b.nbytes() != a.nbytes()) throw rt::Error("prologue and epilogue of a region differ in size");
               specs.push_back({kind, address, b.nbytes(), symbol, devices.of_region(specs.size())});
               before.push_back(reinterpret_cast<uint64_t>(b.data()));
               after.push_back(reinterpret_cast<uint64_t>(a.data()));
             }
             nb::gil_scoped_release release;
             std::lock_guard<std::mutex> lock(w.capture_mutex());
             auto& p = w.pipeline();
             std::string dyn = rt::dynamic_hash(static_hash, inst);
             if (p.count_repeat(static_hash, dyn)) return std::make_pair(dyn, false);
             if (!w.writer().has_kernel(static_hash)) throw rt::Error("kernel " + static_hash + " is not stored: add_kernel first");
             if (p.count_earlier(static_hash, dyn)) return std::make_pair(dyn, false);
             auto start = std::chrono::steady_clock::now();
             auto snap = p.begin(static_hash, inst, specs);
             try {
               p.capture_prologue(*snap, before);
               p.capture_epilogue(*snap, after);
             } catch (...) {
               p.abandon(*snap);
               throw;
             }
             p.note_launch(since(start), 0, 0);
             return std::make_pair(dyn, true);
           },
           "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "regions"_a,
           "devices"_a = DeviceOptions{}, "cluster"_a = std::make_tuple(1u, 1u, 1u))
      // The steps one by one (begin, prologue, epilogue or abandon), as the recorder runs them.
      .def("begin_instance",
           [make_info](SnapshotWriterObject& w, const std::string& static_hash,
                       std::tuple<uint32_t, uint32_t, uint32_t> grid, std::tuple<uint32_t, uint32_t, uint32_t> block,
                       uint32_t shared_mem, nb::bytes args, const std::vector<SpecTuple>& regions,
                       std::tuple<uint32_t, uint32_t, uint32_t> cluster) {
             std::vector<rt::RegionSpec> specs;
             std::vector<uint64_t> sizes;
             for (auto& [kind, address, size, symbol] : regions) {
               specs.push_back({kind, address, size, symbol});
               sizes.push_back(size);
             }
             rt::InstanceInfo inst = make_info(grid, block, shared_mem, args, cluster);
             auto snap = w.pipeline().begin(static_hash, inst, specs);
             return CaptureObject{snap, w.pipeline().dynamic_hash_of(*snap), sizes};
           },
           "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "regions"_a,
           "cluster"_a = std::make_tuple(1u, 1u, 1u))
      .def("capture_prologue",
           [pointers](SnapshotWriterObject& w, CaptureObject& c, const std::vector<ReadBuffer>& buffers) {
             auto sources = pointers(buffers, c);
             nb::gil_scoped_release release;
             w.pipeline().capture_prologue(*c.instance, sources);
           })
      .def("capture_epilogue",
           [pointers](SnapshotWriterObject& w, CaptureObject& c, const std::vector<ReadBuffer>& buffers) {
             auto sources = pointers(buffers, c);
             nb::gil_scoped_release release;
             w.pipeline().capture_epilogue(*c.instance, sources);
           })
      .def("abandon", [](SnapshotWriterObject& w, CaptureObject& c) { w.pipeline().abandon(*c.instance); })
      .def("reserve", [](SnapshotWriterObject& w, uint64_t bytes) { w.pipeline().reserve(bytes); }, "bytes"_a,
           "Grow the staging memory toward `bytes` (at most the cap) in the background; returns at once.")
      .def("flush", [](SnapshotWriterObject& w) { w.pipeline().flush(); }, ReleaseGil())
      .def("close", &SnapshotWriterObject::close, ReleaseGil(),
           "Flush and stop the background threads (also done when the object is destroyed).")
      .def_prop_ro("uncommitted", [](SnapshotWriterObject& w) { return w.pipeline().uncommitted(); })
      .def_prop_ro("host_memory", [](SnapshotWriterObject& w) { return w.pipeline().host_memory(); })
      .def_prop_ro("threads", [](SnapshotWriterObject& w) { return w.pipeline().threads(); })
      .def("error", [](SnapshotWriterObject& w) { return w.pipeline().error(); })
      .def("stats_line", [](SnapshotWriterObject& w) { return w.pipeline().stats_line(); })
      .def("stats", [](SnapshotWriterObject& w) {
        auto s = w.pipeline().stats();
        nb::dict d;
        d["instances"] = s.instances; d["committed"] = s.committed; d["repeats"] = s.repeats;
        d["snapshot_bytes"] = s.snapshot_bytes; d["unchanged_bytes"] = s.unchanged_bytes;
        d["stored_bytes"] = s.stored_bytes;
        d["peak_staged_bytes"] = s.peak_staged_bytes; d["host_memory_bytes"] = s.host_memory_bytes;
        d["staging_bytes"] = s.staging_bytes; d["pinned_bytes"] = s.pinned_bytes;
        d["blocked_s"] = s.blocked_s; d["wait_s"] = s.wait_s; d["alloc_s"] = s.alloc_s;
        d["crc_s"] = s.crc_s; d["delta_s"] = s.delta_s; d["hash_s"] = s.hash_s; d["encode_s"] = s.encode_s;
        d["decode_s"] = s.decode_s; d["write_s"] = s.write_s; d["commit_s"] = s.commit_s; d["deduplicated_chunks"] = s.deduplicated_chunks;
        d["threads"] = s.threads;
        return d;
      })
      .def("install_crash_handler",
           [](SnapshotWriterObject& w, double wait_seconds) {
             rt::SnapshotPipeline::install_crash_handler(&w.pipeline(), wait_seconds);
           }, "wait_seconds"_a = 60.0,
           "On a fatal signal, commit the captured instances (waiting at most wait_seconds), then re-raise.");
  m.def("chunk_digest", [](nb::bytes data) {
        return rt::chunk_digest(reinterpret_cast<const uint8_t*>(data.c_str()), data.size());
      }, "data"_a, "The content store's name for a chunk's raw bytes (docs/format.md), 32 hex digits.");
  m.def("parse_size", &rt::parse_size, "text"_a, "Bytes of '64M', '8G', '123' (binary units); 0 if not a size.");
  m.def("default_host_memory", &rt::default_host_memory);

  m.def("dynamic_hash", [](const std::string& s, std::tuple<uint32_t, uint32_t, uint32_t> g,
                           std::tuple<uint32_t, uint32_t, uint32_t> b, uint32_t shm, nb::bytes args,
                           std::tuple<uint32_t, uint32_t, uint32_t> c, bool cooperative) {
    uint32_t grid[3] = {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
    uint32_t block[3] = {std::get<0>(b), std::get<1>(b), std::get<2>(b)};
    uint32_t cluster[3] = {std::get<0>(c), std::get<1>(c), std::get<2>(c)};
    return rt::dynamic_hash(s, grid, block, shm, std::string(args.c_str(), args.size()), cluster, cooperative);
  }, "static_hash"_a, "grid"_a, "block"_a, "shared_mem"_a, "args"_a, "cluster"_a = std::make_tuple(1u, 1u, 1u),
     "cooperative"_a = false);
}
